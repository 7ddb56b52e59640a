# gpupool remoting profile: gpupool's own libcuda.so.1 forwards the job's CUDA calls to
# the agents serving its leased GPUs. It reads GPUPOOL_GPUS, GPUPOOL_LEASE_TOKEN and
# GPUPOOL_LEASE_FILE, which spank_gpupool sets for every step whatever the profile.
#
# Rules: set|prepend|append|each|join NAME=TEMPLATE (see spank_gpupool(8), PROFILES).
# {lib_dir} is the plugstack.conf argument lib_dir (default: <plugin dir>/remoting, where
# the build puts libcuda.so.1 and the UCX module it loads).
#
# No UCX_* here: the transport is the job's choice, from the environment it is submitted
# with (`UCX_TLS=posix,cma,self sbatch ...`; an --export=NAME=VALUE list cannot carry it,
# as Slurm splits that list at commas). Unset, UCX picks what both ends share.
prepend LD_LIBRARY_PATH={lib_dir}

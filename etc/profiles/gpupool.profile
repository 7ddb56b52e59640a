# gpupool remoting profile: gpupool's own libcuda.so.1 forwards the job's CUDA calls to
# the agents serving its leased GPUs. It reads GPUPOOL_GPUS, GPUPOOL_LEASE_TOKEN and
# GPUPOOL_LEASE_FILE, which spank_gpupool sets for every step whatever the profile.
#
# Rules: set|prepend|append|each|join NAME=TEMPLATE (see spank_gpupool(8), PROFILES).
# {lib_dir} is the plugstack.conf argument lib_dir (default: <plugin dir>/remoting, where
# the build puts libcuda.so.1, the UCX module it loads and libnvidia-ml.so.1, the NVML
# library that shows the job's pool GPUs to nvidia-smi and pynvml: gpupool-nvml(7)).
#
# No UCX_* here: the transport is the job's choice, from the environment it is submitted
# with (`UCX_TLS=posix,cma,self sbatch ...`; an --export=NAME=VALUE list cannot carry it,
# as Slurm splits that list at commas). Unset, UCX picks what both ends share.
prepend LD_LIBRARY_PATH={lib_dir}
#
# Failover (gpupool-remote(7), FAILOVER): the library survives a failed GPU by default
# (GPUPOOL_FAILOVER=replay, a checkpoint at most every GPUPOOL_CHECKPOINT_INTERVAL=1 s,
# GPUPOOL_CHECKPOINT_MEM=4G of host memory per process, GPUPOOL_RECOVERY_DEADLINE=300 s to
# wait for a replacement). A site sets its own defaults here; `set` replaces what the job
# brought, so a site that lets users choose leaves a variable out. E.g.:
#   set GPUPOOL_CHECKPOINT_MEM=16G

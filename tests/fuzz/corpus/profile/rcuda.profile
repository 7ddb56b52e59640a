# rCUDA remoting profile: for sites that already run rCUDA servers on their GPU hosts and
# use gpupool for pooling only. rCUDA's client library reads how many remote GPUs the job
# has and, for each, "server:gpu" (the GPU host's address and the GPU's index there).
#
# {addr} is the address part of the agent endpoint gpupoold reports for the GPU, i.e. the
# GPU host as the compute nodes reach it; use {host} instead if your rCUDA servers are
# known by their inventory host names.
set RCUDA_DEVICE_COUNT={count}
each RCUDA_DEVICE_{i}={addr}:{index}
# Put rCUDA's libcudart first, e.g.:  prepend LD_LIBRARY_PATH=/opt/rCUDA/lib

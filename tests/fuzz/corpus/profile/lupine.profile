# SCUDA/LUPINE remoting profile: for sites that already run SCUDA/LUPINE servers, one per
# GPU, and use gpupool for pooling only. The client reads LUPINE_SERVER as a comma
# separated list of host:port, one per device, in device order.
#
# 14833 is SCUDA's default server port; change it to where your servers listen.
join LUPINE_SERVER={addr}:14833
# The client's libcuda.so.1 / libnvidia-ml.so.1, e.g.:  prepend LD_LIBRARY_PATH=/opt/lupine/lib

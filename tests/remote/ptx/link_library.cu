// Linked with link_main.cu by driver_api.cu's JIT link, as a library (nvcc -lib).
__device__ int offset_of(int i) { return 1000 + 7 * i; }

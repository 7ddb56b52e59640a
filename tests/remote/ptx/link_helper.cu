// Linked with link_main.cu by driver_api.cu's JIT link, as a host object (nvcc -dc).
__device__ int helper_calls = 0;
__device__ float factor = 3.0f;

__device__ float scaled(float x) { return x * factor + 0.5f; }

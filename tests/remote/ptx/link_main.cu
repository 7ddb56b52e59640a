// The JIT linker's several inputs (driver_api.cu): this unit, compiled with -rdc=true to
// PTX, calls a function of link_helper.cu (a host object from nvcc -dc) and one of
// link_library.cu (an archive from nvcc -lib), and reads the helper unit's __device__
// variable.
extern __device__ float scaled(float x);  // link_helper.cu
extern __device__ int offset_of(int i);   // link_library.cu
extern __device__ int helper_calls;       // link_helper.cu

extern "C" __global__ void linked_kernel(const float* in, float* out, int* offsets, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = scaled(in[i]);
  offsets[i] = offset_of(i);
  atomicAdd(&helper_calls, 1);
}

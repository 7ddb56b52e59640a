// The second translation unit of separate_compilation (see separate_compilation.cu).
#include <cstdio>

#include "../programs/check.h"

__device__ int hits;  // counted by both units' kernels
__constant__ float offsets[4] = {0.5f, 1.5f, 2.5f, 3.5f};
__device__ float Scale(float x) { return 2.0f * x + offsets[1]; }
// The same name as the other unit's own function, with another body.
static __device__ int Bump(int x) { return x + 200; }
__device__ int BumpInLib(int x) { return Bump(x); }
typedef int (*IntOp)(int);
__device__ int Triple(int x) { return 3 * x; }
__device__ int Square(int x) { return x * x; }
__device__ IntOp lib_ops[2] = {Triple, Square};
template <typename T>
__global__ void fill(T* out, T value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}
__global__ void lib_kernel(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = Bump(i);
  if (i == 0) printf("lib unit: %s\n", "lib");
  atomicAdd(&hits, 1);
}

void RunLibKernels(int* out, int n) {
  lib_kernel<<<(n + 127) / 128, 128>>>(out, n);
  CHECK(cudaGetLastError());
  fill<int><<<1, 32>>>(out + n, 7, 32);  // also instantiated in the other unit
  CHECK(cudaGetLastError());
}

// A program built as CMake's CUDA_SEPARABLE_COMPILATION builds one: two translation units
// compiled with nvcc -rdc=true and device-linked. Its linked image holds only SASS; the
// library ships the units' relocatable PTX, which the sim links as a driver JIT-links it.
// The units call each other's device functions, share a __device__ and a __constant__
// variable, each have a static function of the same name and string literals (renamed
// apart), instantiate the same template kernel, and one calls through the other's table
// of function pointers.
#include <cstdio>
#include <vector>

#include "../programs/check.h"

extern __device__ int hits;
extern __constant__ float offsets[4];
extern __device__ float Scale(float x);
extern __device__ int BumpInLib(int x);
typedef int (*IntOp)(int);
extern __device__ IntOp lib_ops[2];
void RunLibKernels(int* out, int n);

static __device__ int Bump(int x) { return x + 100; }
template <typename T>
__global__ void fill(T* out, T value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}
__global__ void main_kernel(float* values, int* bumps, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    values[i] = Scale(values[i]) + offsets[3];
    bumps[3 * i] = Bump(i);
    bumps[3 * i + 1] = BumpInLib(i);
    bumps[3 * i + 2] = lib_ops[i % 2](i);
  }
  if (i == 0) printf("main unit: %s\n", "main");
  atomicAdd(&hits, 1);
}

int main() {
  const int n = 300;
  std::vector<float> values(n);
  for (int i = 0; i < n; ++i) values[i] = static_cast<float>(i);
  float* d_values = nullptr;
  int *d_bumps = nullptr, *d_lib = nullptr;
  CHECK(cudaMalloc(&d_values, n * sizeof(float)));
  CHECK(cudaMalloc(&d_bumps, 3 * n * sizeof(int)));
  CHECK(cudaMalloc(&d_lib, (n + 32) * sizeof(int)));
  CHECK(cudaMemcpy(d_values, values.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  int zero = 0;
  CHECK(cudaMemcpyToSymbol(hits, &zero, sizeof(zero)));
  main_kernel<<<(n + 127) / 128, 128>>>(d_values, d_bumps, n);
  CHECK(cudaGetLastError());
  RunLibKernels(d_lib, n);
  fill<float><<<1, 32>>>(d_values + n - 32, -1.0f, 32);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<int> bumps(3 * n), lib(n + 32);
  CHECK(cudaMemcpy(values.data(), d_values, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(bumps.data(), d_bumps, bumps.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(lib.data(), d_lib, lib.size() * sizeof(int), cudaMemcpyDeviceToHost));
  int counted = 0;
  CHECK(cudaMemcpyFromSymbol(&counted, hits, sizeof(counted)));
  float host_offsets[4];
  CHECK(cudaMemcpyFromSymbol(host_offsets, offsets, sizeof(host_offsets)));
  EXPECT(host_offsets[3] == 3.5f);
  for (int i = 0; i < n; ++i) {
    const float want = i >= n - 32 ? -1.0f : 2.0f * i + 1.5f + 3.5f;
    if (values[i] != want) {
      std::fprintf(stderr, "values[%d] = %g, want %g\n", i, values[i], want);
      return 1;
    }
    EXPECT(bumps[3 * i] == i + 100);
    EXPECT(bumps[3 * i + 1] == i + 200);
    EXPECT(bumps[3 * i + 2] == (i % 2 ? i * i : 3 * i));
    EXPECT(lib[i] == i + 200);
  }
  for (int i = n; i < n + 32; ++i) EXPECT(lib[i] == 7);
  // Each kernel's threads: 3 blocks of 128 in both.
  EXPECT(counted == 2 * 3 * 128);
  std::printf("separate compilation: PASS\n");
  return 0;
}

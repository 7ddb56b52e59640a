// Error paths: a launch with a bad configuration, copies and frees with bad pointers, an
// unsupported call, and finally a kernel that faults (sticky, like on a real GPU).
#include "check.h"
#include "kernels.cuh"

int main() {
  const int n = 1024;
  float *a, *b, *c;
  CHECK(cudaMalloc(&a, n * sizeof(float)));
  CHECK(cudaMalloc(&b, n * sizeof(float)));
  CHECK(cudaMalloc(&c, n * sizeof(float)));

  // 2048 threads per block is over the limit: rejected at launch. (The replacement driver
  // answers CUDA_ERROR_INVALID_VALUE, as cuLaunchKernel documents, which the runtime reports
  // as cudaErrorInvalidValue; GPU drivers are known to yield cudaErrorInvalidConfiguration.)
  vecAdd<<<1, 2048>>>(a, b, c, n);
  cudaError_t launch = cudaGetLastError();
  std::printf("bad launch: %s\n", cudaGetErrorName(launch));
  EXPECT(launch == cudaErrorInvalidConfiguration || launch == cudaErrorInvalidValue);
  CHECK(cudaDeviceSynchronize());  // not sticky: the context still works

  float host[16] = {};
  cudaError_t copy = cudaMemcpy(reinterpret_cast<float*>(0x1000), host, sizeof(host),
                                cudaMemcpyHostToDevice);
  std::printf("bad copy: %s\n", cudaGetErrorName(copy));
  EXPECT(copy == cudaErrorInvalidValue);
  cudaError_t free_error = cudaFree(reinterpret_cast<void*>(0x1000));
  std::printf("bad free: %s\n", cudaGetErrorName(free_error));
  EXPECT(free_error == cudaErrorInvalidValue);
  cudaGetLastError();

  // Mapped (zero-copy) host memory cannot be remote: the device says so, and the call
  // fails cleanly. (Managed memory works on the sim: tests/remote/driver/managed_memory.)
  int can_map = -1;
  CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, 0));
  EXPECT(can_map == 0);
  void* mapped = nullptr;
  cudaError_t mapped_error = cudaHostAlloc(&mapped, 4096, cudaHostAllocMapped);
  std::printf("mapped: %s\n", cudaGetErrorName(mapped_error));
  EXPECT(mapped_error != cudaSuccess);
  cudaGetLastError();

  // The context is still healthy.
  vecAdd<<<(n + 255) / 256, 256>>>(a, b, c, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  // A kernel that writes far outside any allocation faults; the error shows at sync.
  vecAdd<<<(n + 255) / 256, 256>>>(a, b, c + (size_t{1} << 36), n);
  CHECK(cudaGetLastError());  // launching is fine; executing is not
  cudaError_t fault = cudaDeviceSynchronize();
  std::printf("fault: %s\n", cudaGetErrorName(fault));
  EXPECT(fault == cudaErrorIllegalAddress);
  EXPECT(cudaMemcpy(host, a, sizeof(host), cudaMemcpyDeviceToHost) == cudaErrorIllegalAddress);
  return 0;
}

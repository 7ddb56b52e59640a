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
  cudaError_t copy = cudaMemcpy(reinterpret_cast<float*>(0x1000), host, sizeof(host), cudaMemcpyHostToDevice);
  std::printf("bad copy: %s\n", cudaGetErrorName(copy));
  EXPECT(copy == cudaErrorInvalidValue);
  cudaError_t free_error = cudaFree(reinterpret_cast<void*>(0x1000));
  std::printf("bad free: %s\n", cudaGetErrorName(free_error));
  EXPECT(free_error == cudaErrorInvalidValue);
  cudaGetLastError();

  // The program's own memory registered mapped: kept coherent at CUDA calls on the sim
  // (tests/remote/driver/registered_memory); where the GPU's executor cannot place memory
  // at the program's addresses, refused cleanly.
  static char page[4096];
  cudaError_t mapped_error = cudaHostRegister(page, sizeof(page), cudaHostRegisterMapped);
  std::printf("mapped: %s\n", cudaGetErrorName(mapped_error));
  if (OnTheSim()) {
    EXPECT(mapped_error == cudaSuccess);
    CHECK(cudaHostUnregister(page));
  } else {
    EXPECT(mapped_error == cudaSuccess || mapped_error == cudaErrorNotSupported);
    if (mapped_error == cudaSuccess) CHECK(cudaHostUnregister(page));
  }
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

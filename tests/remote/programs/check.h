// Shared by the data-path test programs: CHECK(cuda call) prints the failing call and the
// CUDA error, then exits 1. Every program takes no arguments and exits 0 only on success,
// so the same binaries run directly against an agent and inside a Slurm job.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#define CHECK(call)                                                                                                    \
  do {                                                                                                                 \
    cudaError_t check_error_ = (call);                                                                                 \
    if (check_error_ != cudaSuccess) {                                                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call, cudaGetErrorString(check_error_), \
                   static_cast<int>(check_error_));                                                                    \
      std::exit(1);                                                                                                    \
    }                                                                                                                  \
  } while (0)

// LIBRARY_CHECK(call, ok, describe): CHECK for a CUDA library's own status type (cuBLAS,
// cuSPARSE, NVRTC, cuFFT): when `call` returns other than `ok`, prints the failing call and
// describe(status) (a string), then exits 1.
#define LIBRARY_CHECK(call, ok, describe)                                                                         \
  do {                                                                                                            \
    auto library_check_status_ = (call);                                                                          \
    if (library_check_status_ != (ok)) {                                                                          \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, describe(library_check_status_)); \
      std::exit(1);                                                                                               \
    }                                                                                                             \
  } while (0)

// CHECK_FREE(a, b, c): CHECK(cudaFree(a)), CHECK(cudaFree(b)), ... in that order, as a
// program ends; CHECK_FREE_HOST the same with cudaFreeHost.
inline void CheckEachFreed(const char* file, int line, const char* call, cudaError_t (*release)(void*),
                           std::initializer_list<void*> pointers) {
  for (void* pointer : pointers) {
    cudaError_t error = release(pointer);
    if (error != cudaSuccess) {
      std::fprintf(stderr, "%s:%d: %s(%p) failed: %s (%d)\n", file, line, call, pointer, cudaGetErrorString(error),
                   static_cast<int>(error));
      std::exit(1);
    }
  }
}
#define CHECK_FREE(...) CheckEachFreed(__FILE__, __LINE__, "cudaFree", cudaFree, {__VA_ARGS__})
#define CHECK_FREE_HOST(...) CheckEachFreed(__FILE__, __LINE__, "cudaFreeHost", cudaFreeHost, {__VA_ARGS__})

// The parameters of a graph's kernel node: `kernel` on `grid` blocks of `block` threads,
// no dynamic shared memory, `args` as a launch takes them.
inline cudaKernelNodeParams KernelNodeParams(const void* kernel, dim3 grid, dim3 block, void** args) {
  cudaKernelNodeParams params{};
  params.func = const_cast<void*>(kernel);
  params.gridDim = grid;
  params.blockDim = block;
  params.kernelParams = args;
  return params;
}

// GPUPOOL_EXPECT_SIM (run_with_server.sh sets it when the test server runs the sim): the
// GPU is the sim, so what only the sim does (a model chosen with --model, kernels it lacks)
// is checked too. Without it the program may be on a real GPU (scripts/test --gpu).
inline bool OnTheSim() { return std::getenv("GPUPOOL_EXPECT_SIM") != nullptr; }

// GPUPOOL_TEST_KEEP_GOING=1: a failed EXPECT is printed and the program goes on (it still
// exits 1), so that one run on a real GPU lists every expectation the GPU does not meet.
inline bool KeepGoingAfterExpect() {
  static const bool keep_going = std::getenv("GPUPOOL_TEST_KEEP_GOING") != nullptr;
  return keep_going;
}

inline void ExpectFailed(const char* file, int line, const char* condition) {
  std::fprintf(stderr, "%s:%d: expected %s\n", file, line, condition);
  if (!KeepGoingAfterExpect()) std::exit(1);
  static bool exit_code_set = false;
  if (!exit_code_set) {
    exit_code_set = true;
    std::atexit([] {
      std::fflush(nullptr);
      std::_Exit(1);
    });
  }
}

#define EXPECT(condition)                                           \
  do {                                                              \
    if (!(condition)) ExpectFailed(__FILE__, __LINE__, #condition); \
  } while (0)

// Device 0's properties, after printing its name and compute capability as the program's
// first line; on the sim, expects the model the test server was asked for (--model;
// GPUPOOL_EXPECT_MODEL from ctest) in the name.
inline cudaDeviceProp DescribeDeviceExpectingModel() {
  cudaDeviceProp properties;
  CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf("%s, compute capability %d.%d\n", properties.name, properties.major, properties.minor);
  const char* model = std::getenv("GPUPOOL_EXPECT_MODEL");
  if (OnTheSim() && model != nullptr) EXPECT(std::strstr(properties.name, model) != nullptr);
  return properties;
}

// On a GPU older than compute capability 9.0 (the sim's A100), a program built for sm_90
// only: its launch (`refused`, what cudaGetLastError said after it) must fail, leaving
// nothing sticky. Prints it and PASS; the program then exits 0.
inline void ExpectNoCodeForAnOlderGpu(const cudaDeviceProp& properties, cudaError_t refused) {
  std::printf("sm_90 code on %d.%d: %s\n", properties.major, properties.minor, cudaGetErrorName(refused));
  EXPECT(refused != cudaSuccess);
  CHECK(cudaDeviceSynchronize());
  std::printf("PASS\n");
}

// The last lines of a program that gathers its checks in `ok`: no launch left an error and
// the device is idle, then "NAME: PASS" or "NAME: FAIL"; returns the exit code.
inline int FinishProgram(const char* name, bool ok) {
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::printf("%s: %s\n", name, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

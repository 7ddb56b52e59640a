// Kernels compiled at run time with NVRTC, as the CUDA samples' nvrtc programs do it: CUDA
// C++ compiled for the GPU's own architecture (--gpu-architecture=sm_XX) into a cubin that
// cuModuleLoadData loads, a template kernel found through a name expression, the same
// source compiled to PTX (compute_XX), and a compile error with its log. On a remote sim GPU
// the cubin runs from the PTX NVRTC made with it (the NVRTC shim beside libcuda.so.1).
#include <cuda.h>
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../programs/check.h"
#include "driver_check.h"

#define NVRTC_CHECK(call) LIBRARY_CHECK(call, NVRTC_SUCCESS, nvrtcGetErrorString)

namespace {

const char* kSource = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
template <typename T, int Shift>
__global__ void shift_sum(const T* in, T* out) {
  __shared__ T partial[128];
  partial[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x] << Shift;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
)";

struct Compiled {
  std::vector<char> image;
  std::string shift_sum_name;
};

// Compiles kSource for `arch` ("sm_80": a cubin; "compute_80": PTX).
Compiled Compile(const std::string& arch) {
  nvrtcProgram program;
  NVRTC_CHECK(nvrtcCreateProgram(&program, kSource, "kernels.cu", 0, nullptr, nullptr));
  NVRTC_CHECK(nvrtcAddNameExpression(program, "shift_sum<long long, 3>"));
  std::string option = "--gpu-architecture=" + arch;
  const char* options[] = {option.c_str(), "--std=c++17"};
  nvrtcResult compiled = nvrtcCompileProgram(program, 2, options);
  if (compiled != NVRTC_SUCCESS) {
    size_t log_size = 0;
    nvrtcGetProgramLogSize(program, &log_size);
    std::string log(log_size, '\0');
    nvrtcGetProgramLog(program, log.data());
    std::fprintf(stderr, "nvrtc: %s\n%s\n", nvrtcGetErrorString(compiled), log.c_str());
    std::exit(1);
  }
  Compiled result;
  size_t size = 0;
  if (arch.rfind("sm_", 0) == 0) {
    NVRTC_CHECK(nvrtcGetCUBINSize(program, &size));
    result.image.resize(size);
    NVRTC_CHECK(nvrtcGetCUBIN(program, result.image.data()));
  } else {
    NVRTC_CHECK(nvrtcGetPTXSize(program, &size));
    result.image.resize(size);
    NVRTC_CHECK(nvrtcGetPTX(program, result.image.data()));
  }
  const char* lowered = nullptr;
  NVRTC_CHECK(nvrtcGetLoweredName(program, "shift_sum<long long, 3>", &lowered));
  result.shift_sum_name = lowered;  // valid until the program is destroyed
  NVRTC_CHECK(nvrtcDestroyProgram(&program));
  return result;
}

void RunKernels(const Compiled& compiled) {
  CUmodule module;
  // A copy of the image, as programs often keep it: the library finds it by its bytes.
  std::vector<char> copy = compiled.image;
  CU_CHECK(cuModuleLoadData(&module, copy.data()));
  CUfunction saxpy, shift_sum;
  CU_CHECK(cuModuleGetFunction(&saxpy, module, "saxpy"));
  CU_CHECK(cuModuleGetFunction(&shift_sum, module, compiled.shift_sum_name.c_str()));

  const int n = 5000;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 91) * 0.25f;
    y[i] = static_cast<float>(i % 13);
  }
  CUdeviceptr dx, dy;
  CU_CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  float a = 3.0f;
  int count = n;
  void* saxpy_args[] = {&a, &dx, &dy, &count};
  CU_CHECK(cuLaunchKernel(saxpy, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, saxpy_args, nullptr));
  std::vector<float> result(n);
  CU_CHECK(cuMemcpyDtoH(result.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; ++i) EXPECT(result[i] == a * x[i] + y[i]);

  const int blocks = 6;
  std::vector<long long> in(blocks * 128), sums(blocks);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<long long>(i) * 1000003 - 77;
  CUdeviceptr din, dsums;
  CU_CHECK(cuMemAlloc(&din, in.size() * sizeof(long long)));
  CU_CHECK(cuMemAlloc(&dsums, blocks * sizeof(long long)));
  CU_CHECK(cuMemcpyHtoD(din, in.data(), in.size() * sizeof(long long)));
  void* sum_args[] = {&din, &dsums};
  CU_CHECK(cuLaunchKernel(shift_sum, blocks, 1, 1, 128, 1, 1, 0, nullptr, sum_args, nullptr));
  CU_CHECK(cuMemcpyDtoH(sums.data(), dsums, blocks * sizeof(long long)));
  for (int b = 0; b < blocks; ++b) {
    long long expected = 0;
    for (int t = 0; t < 128; ++t) expected += in[b * 128 + t] << 3;
    EXPECT(sums[b] == expected);
  }
  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
  CU_CHECK(cuMemFree(din));
  CU_CHECK(cuMemFree(dsums));
  CU_CHECK(cuModuleUnload(module));
}

}  // namespace

int main() {
  CU_CHECK(cuInit(0));
  CUdevice device;
  CU_CHECK(cuDeviceGet(&device, 0));
  CUcontext context;
  CU_CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CU_CHECK(cuCtxSetCurrent(context));
  int major = 0, minor = 0;
  CU_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  CU_CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  int nvrtc_major = 0, nvrtc_minor = 0;
  NVRTC_CHECK(nvrtcVersion(&nvrtc_major, &nvrtc_minor));
  EXPECT(nvrtc_major >= 12);
  const std::string arch = std::to_string(major) + std::to_string(minor);

  RunKernels(Compile("sm_" + arch));       // a cubin, as the samples' helper makes
  RunKernels(Compile("compute_" + arch));  // PTX

  // A compile error comes back with its log, naming the problem.
  nvrtcProgram broken;
  NVRTC_CHECK(
      nvrtcCreateProgram(&broken, "__global__ void k() { undeclared_name = 1; }", "broken.cu", 0, nullptr, nullptr));
  EXPECT(nvrtcCompileProgram(broken, 0, nullptr) == NVRTC_ERROR_COMPILATION);
  size_t log_size = 0;
  NVRTC_CHECK(nvrtcGetProgramLogSize(broken, &log_size));
  std::string log(log_size, '\0');
  NVRTC_CHECK(nvrtcGetProgramLog(broken, log.data()));
  EXPECT(log.find("undeclared_name") != std::string::npos);
  NVRTC_CHECK(nvrtcDestroyProgram(&broken));

  CU_CHECK(cuDevicePrimaryCtxRelease(device));
  std::printf("PASS\n");
  return 0;
}

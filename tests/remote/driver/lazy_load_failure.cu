// A library (cuLibraryLoadData, loaded on a GPU at its first use, as the runtime and the
// math libraries load theirs) whose only code is PTX text for a newer GPU: its kernel's
// launches fail with CUDA_ERROR_INVALID_PTX, the JIT's refusal of a target newer than the GPU
// (driver 580 on an H100 answers so when the kernel is first asked for), and the remoting
// library says so once on stderr, naming the kernel, since libraries that launch kernels do
// not always look at the launch's error.
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "../programs/check.h"

namespace {

// PTX for compute capability 12.0 only: no GPU older than that can run it.
const char* kNewerPtx = R"(
.version 8.8
.target sm_120
.address_size 64
.visible .entry newer_only(.param .u64 out) {
  .reg .b64 %rd<2>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, 7;
  st.global.u32 [%rd1], %r1;
  ret;
}
)";

std::string ReadAll(std::FILE* file) {
  std::string text;
  std::rewind(file);
  char buffer[4096];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, got);
  return text;
}

}  // namespace

int main() {
  EXPECT(cuInit(0) == CUDA_SUCCESS);
  CUdevice device;
  EXPECT(cuDeviceGet(&device, 0) == CUDA_SUCCESS);
  int major = 0;
  EXPECT(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) == CUDA_SUCCESS);
  if (major >= 12) {
    std::printf("PASS (a compute capability %d GPU runs the kernel: nothing to check)\n", major);
    return 0;
  }
  CUcontext context;
  EXPECT(cuDevicePrimaryCtxRetain(&context, device) == CUDA_SUCCESS);
  EXPECT(cuCtxSetCurrent(context) == CUDA_SUCCESS);
  CUlibrary library;
  EXPECT(cuLibraryLoadData(&library, kNewerPtx, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  CUkernel kernel;
  EXPECT(cuLibraryGetKernel(&kernel, library, "newer_only") == CUDA_SUCCESS);
  CUdeviceptr out;
  EXPECT(cuMemAlloc(&out, 4) == CUDA_SUCCESS);
  EXPECT(cuMemsetD32(out, 0, 1) == CUDA_SUCCESS);

  // stderr into a file for the two launches.
  std::fflush(stderr);
  std::FILE* captured = std::tmpfile();
  EXPECT(captured != nullptr);
  const int saved = dup(fileno(stderr));
  EXPECT(dup2(fileno(captured), fileno(stderr)) >= 0);
  void* args[] = {&out};
  CUresult first = cuLaunchKernel(reinterpret_cast<CUfunction>(kernel), 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr);
  CUresult second = cuLaunchKernel(reinterpret_cast<CUfunction>(kernel), 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr);
  std::fflush(stderr);
  EXPECT(dup2(saved, fileno(stderr)) >= 0);
  close(saved);
  const std::string said = ReadAll(captured);
  std::fclose(captured);
  std::fprintf(stderr, "%s", said.c_str());

  EXPECT(first == CUDA_ERROR_INVALID_PTX);
  EXPECT(second == CUDA_ERROR_INVALID_PTX);
  const size_t at = said.find("kernel newer_only: its module cannot be loaded on GPU 0");
  EXPECT(at != std::string::npos);
  EXPECT(said.find("CUDA_ERROR_INVALID_PTX") != std::string::npos);
  EXPECT(said.find("kernel newer_only", at + 1) == std::string::npos);  // once
  // Nothing ran; the context goes on.
  unsigned value = 1;
  EXPECT(cuMemcpyDtoH(&value, out, 4) == CUDA_SUCCESS);
  EXPECT(value == 0);
  EXPECT(cuLibraryUnload(library) == CUDA_SUCCESS);
  EXPECT(cuMemFree(out) == CUDA_SUCCESS);
  std::printf("PASS\n");
  return 0;
}

// Built with `nvcc -cudart shared`: the runtime is libcudart.so.13 from the toolkit, and
// the driver it loads must be gpupool's libcuda.so.1. Runs a kernel and checks the result.
#include <dlfcn.h>

#include <vector>

#include "../programs/check.h"
#include "../programs/kernels.cuh"
#include "device_copies.h"

int main() {
  int runtime = 0;
  CHECK(cudaRuntimeGetVersion(&runtime));
  const int n = 100000;
  std::vector<float> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 2.0f * i;
  }
  float* da = ToDevice(a);
  float* db = ToDevice(b);
  float* dc = nullptr;
  CHECK(cudaMalloc(&dc, n * sizeof(float)));
  vecAdd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  const std::vector<float> c = ToHost(dc, n);
  for (int i = 0; i < n; ++i) EXPECT(c[i] == 3.0f * i);

  // Both libraries are loaded now; the driver is ours, the runtime the shared one.
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
  EXPECT(cudart != nullptr);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  EXPECT(driver != nullptr);
  EXPECT(dlsym(driver, "cuGpupoolRemotingLibrary") != nullptr);
  CHECK_FREE(da, db, dc);
  std::printf("cudart shared (runtime %d): ok\n", runtime);
  return 0;
}

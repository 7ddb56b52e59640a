// A hostile module, loaded through the driver API: declarations whose sizes wrap around
// (issue 36's cross-tenant write: a negative size, an initialiser meant to land outside
// the module's memory, and a huge array). Prints what the driver answered for each
// variant; the agent must refuse them or keep them inside this tenant's own process.
#include <cuda.h>

#include <cstdio>
#include <string>

int main() {
  if (cuInit(0) != CUDA_SUCCESS) return 2;
  CUdevice device;
  CUcontext context;
  if (cuDeviceGet(&device, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      cuCtxSetCurrent(context) != CUDA_SUCCESS) {
    return 2;
  }
  const std::string head = ".version 7.0\n.target sm_80\n.address_size 64\n";
  const std::string pay = ".global .align 8 .b8 pay[16] = {65,65,65,65,65,65,65,65,65,65,65,65,65,65,65,65};\n";
  const std::string variants[] = {
      head + ".global .align 8 .b8 pad[4096];\n" + pay + ".global .align 8 .b8 wrap[-4048];\n",
      head + ".global .align 8 .b8 pad[140737488355328];\n" + pay + ".global .align 8 .b8 wrap[-140737488355328];\n",
      head + ".global .align 8 .b8 huge[18446744073709551615];\n",
      // Issue 36's JIT abort: a shared array of 1 TiB used only as a branch label.
      head +
          ".visible .entry big()\n{\n  .shared .b8 big[1099511627776];\n"
          "  bra.uni big;\nbig:\n  ret;\n}\n",
  };
  int index = 0;
  for (const std::string& ptx : variants) {
    CUmodule module;
    CUresult loaded = cuModuleLoadData(&module, ptx.c_str());
    std::printf("tenant_module: variant %d: cuModuleLoadData = %d", index, static_cast<int>(loaded));
    if (loaded == CUDA_SUCCESS) {
      CUdeviceptr address = 0;
      size_t size = 0;
      CUresult got = cuModuleGetGlobal(&address, &size, module, "wrap");
      std::printf(", cuModuleGetGlobal(wrap) = %d size %zu", static_cast<int>(got), size);
      cuModuleUnload(module);
    }
    std::printf("\n");
    ++index;
  }
  std::fflush(stdout);
  return 0;
}

// Fatbin: finds the kernels in a CUDA module image and their parameter layouts.
//
// cuLaunchKernel hands the driver an array of pointers to the arguments with no sizes;
// a remoting driver must know each parameter's offset and size to pack them. On a GPU host
// cuFuncGetParamInfo answers; here we read them offline from the image: the ELF cubin's
// `.nv.info.<kernel>` section holds one EIATTR_KPARAM_INFO record per parameter.
//
// Accepted images (what cuModuleLoadData / cuLibraryLoadData receive):
//   - a fatbin wrapper (__fatBinC_Wrapper_t, magic 0x466243b1) pointing to a fatbin,
//   - a fatbin (magic 0xBA55ED50) with one or more ELF (and PTX) entries,
//   - a bare ELF cubin.
// Compressed fatbin entries are skipped (their layouts cannot be read without the codec);
// a kernel found in no readable entry is unknown and cannot be launched remotely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::client {

struct ParamSlot {
  uint32_t offset = 0;
  uint32_t size = 0;
};

struct KernelLayout {
  std::vector<ParamSlot> params;  // in parameter order
  uint32_t param_size = 0;        // bytes of the packed buffer
};

struct ModuleImage {
  const void* bytes = nullptr;   // what the server loads (fatbin or cubin)
  size_t size = 0;
  std::map<std::string, KernelLayout> kernels;  // by mangled name
};

// Parses an image given as an untyped pointer (its size is implied by its headers).
Result<ModuleImage> ParseModuleImage(const void* image);

// Parses one ELF cubin of `size` bytes, adding its kernels to *kernels.
Status ParseCubin(const uint8_t* elf, size_t size, std::map<std::string, KernelLayout>* kernels);

}  // namespace gpupool::client

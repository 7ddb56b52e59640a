// Between the NVRTC shim (nvrtc_shim.cc) and the remoting libcuda.so.1: the PTX of a cubin
// that NVRTC compiled in this process.
//
// Programs that compile CUDA C++ at run time with NVRTC for a real architecture
// (--gpu-architecture=sm_XX, as the CUDA samples' nvrtc helper does) hand the driver a
// cubin: SASS only, which the sim GPU cannot run, and from which no PTX can be recovered.
// NVRTC made PTX on the way, though. The shim, found before the real libnvrtc on a job's
// LD_LIBRARY_PATH, forwards every call to the real library and remembers the PTX of each
// cubin it hands out; the remoting library asks for it when it loads a SASS-only cubin.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// The symbol the shim exports and the remoting library looks up (dlsym, RTLD_DEFAULT).
#define GPUPOOL_NVRTC_PTX_FOR "gpupool_nvrtc_ptx_for"

// Copies into `buffer` (`capacity` bytes) the NUL-terminated PTX of the cubin of `size`
// bytes at `cubin`, if this process's NVRTC produced that cubin. Returns the bytes the PTX
// needs with its NUL (then copied if it fits), or 0 when the cubin is not one of NVRTC's.
typedef size_t (*GpupoolNvrtcPtxFor)(const void* cubin, size_t size, char* buffer, size_t capacity);

#ifdef __cplusplus
}
#endif

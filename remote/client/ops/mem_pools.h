// Stream-ordered memory pools (mem_pools.cc): what the allocation calls of api_memory.cc and
// graph_memory.cc share with them.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "remote/client/core/runtime.h"

namespace gpupool::client {

// Allocates `bytes` on `device`: in `preferred` (a stream's context, may be nullptr) or the
// current context when either is that device's, else in the device's primary context.
CUresult AllocateOnDevice(int device, Context* preferred, size_t bytes, CUdeviceptr* dptr);

// cuMemAllocAsync outside a capture: from the current pool of `device` (cuDeviceSetMemPool).
CUresult AllocateFromCurrentPool(int device, Context* preferred, size_t bytes, CUdeviceptr* dptr);

// cuMemFree of `dptr` (any thread): no longer counted in the pool it came from, if any.
void ForgetPoolAllocation(CUdeviceptr dptr);

// The pool `dptr` was allocated from (nullptr: none), for CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE.
CUmemoryPool PoolOf(CUdeviceptr dptr);

}  // namespace gpupool::client

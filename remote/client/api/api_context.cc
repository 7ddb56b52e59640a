// Driver API: contexts made by the program (cuCtxCreate/cuCtxDestroy), context identity and
// the profiler calls.
//
// A created context belongs to one device and shares that device's connection with the
// primary context; what it owns (allocations, streams, events made while it was current)
// is freed on the agent when it is destroyed. Contexts made here sit on the calling
// thread's context stack like a real driver's (runtime.h).
//
// The unversioned names (cuCtxCreate, cuCtxDestroy, cuCtxPushCurrent, cuCtxPopCurrent)
// are macros for their newest version in cuda.h; the older ABI versions are exported
// under their own names too, as a real libcuda.so.1 does, for programs linked long ago.
#include <cudaProfiler.h>

#include "remote/client/core/api_common.h"

#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent

using namespace gpupool::client;  // NOLINT

namespace {

CUresult CreateContext(CUcontext* result, unsigned flags, CUdevice ordinal) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (Runtime::Get().device(ordinal) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return CUDA_ERROR_INVALID_VALUE;
  // At most one scheduling policy.
  unsigned schedule = flags & CU_CTX_SCHED_MASK;
  if (schedule != 0 && (schedule & (schedule - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto* context = new Context();
  context->device = ordinal;
  context->flags = flags;
  PushContext(context);
  *result = reinterpret_cast<CUcontext>(context);
  LogDebug("cuCtxCreate: context %llu on GPU %d", static_cast<unsigned long long>(context->id), ordinal);
  return CUDA_SUCCESS;
}

CUresult DestroyContext(CUcontext handle) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  Context* context = AsContext(handle);
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (context->is_primary) {
    LogError(
        "cuCtxDestroy: a device's primary context is released with "
        "cuDevicePrimaryCtxRelease, not destroyed");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  // Current on this thread: popped, as by cuCtxPopCurrent.
  if (CurrentContext() == context) PopContext();
  std::map<void*, ContextStorageEntry> storage;
  {
    std::lock_guard<std::mutex> lock(context->storage_mu);
    storage.swap(context->storage);
  }
  for (auto& [key, entry] : storage) {
    if (entry.destructor) entry.destructor(handle, key, entry.value);
  }
  CUresult status = Runtime::Get().ReleaseContextResources(context);
  // Kept, marked destroyed: other threads may still have it on their stacks.
  context->magic = kDestroyedContextMagic;
  return status;
}

CUresult ExecutionAffinityUnsupported(const char* call) {
  return static_cast<CUresult>(ReportUnsupported(call, "execution affinity: a share of the GPU's SMs for a context"));
}

}  // namespace

// --- Create and destroy ------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxCreate(CUcontext* context, unsigned int flags, CUdevice device) {
  GPUPOOL_BODY({ return CreateContext(context, flags, device); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxCreate_v2(CUcontext* context, unsigned int flags, CUdevice device) {
  GPUPOOL_BODY({ return CreateContext(context, flags, device); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxCreate_v3(CUcontext* context, CUexecAffinityParam* params, int param_count,
                                                 unsigned int flags, CUdevice device) {
  GPUPOOL_BODY({
    if (param_count < 0 || (param_count > 0 && params == nullptr)) return CUDA_ERROR_INVALID_VALUE;
    if (param_count > 0) return ExecutionAffinityUnsupported("cuCtxCreate_v3");
    return CreateContext(context, flags, device);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxCreate_v4(CUcontext* context, CUctxCreateParams* params, unsigned int flags,
                                                 CUdevice device) {
  GPUPOOL_BODY({
    if (params != nullptr) {
      if (params->numExecAffinityParams < 0) return CUDA_ERROR_INVALID_VALUE;
      if (params->numExecAffinityParams > 0) return ExecutionAffinityUnsupported("cuCtxCreate_v4");
      if (params->cigParams != nullptr) {
        return static_cast<CUresult>(
            ReportUnsupported("cuCtxCreate_v4(cigParams)", "CUDA-in-graphics contexts need a local graphics API"));
      }
    }
    return CreateContext(context, flags, device);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxDestroy(CUcontext context) {
  GPUPOOL_BODY({ return DestroyContext(context); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxDestroy_v2(CUcontext context) {
  GPUPOOL_BODY({ return DestroyContext(context); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxPushCurrent(CUcontext context) { return cuCtxPushCurrent_v2(context); }

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxPopCurrent(CUcontext* context) { return cuCtxPopCurrent_v2(context); }

// --- Identity and settings -----------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxGetId(CUcontext handle, unsigned long long* id) {
  GPUPOOL_BODY({
    if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Context* context = handle == nullptr ? CurrentContext() : AsContext(handle);
    if (context == nullptr || context->magic != kContextMagic) return CUDA_ERROR_INVALID_CONTEXT;
    *id = context->id;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxGetSharedMemConfig(CUsharedconfig* config) {
  GPUPOOL_BODY({
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
    *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;  // what GPUs since Maxwell report
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxSetSharedMemConfig(CUsharedconfig config) {
  GPUPOOL_BODY({
    if (config < CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE || config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    int device = 0;
    return CurrentDevice(&device);  // a hint that GPUs since Maxwell ignore
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxResetPersistingL2Cache(void) {
  GPUPOOL_BODY({
    int device = 0;
    return CurrentDevice(&device);  // nothing persists in L2: the persisting size is 0
  });
}

// --- Profiler ------------------------------------------------------------------------------
// No profiler can attach to a remote GPU through this library; a real driver answers
// success to these when no profiler is attached, and so do we.

GPUPOOL_CUDA_API CUresult CUDAAPI cuProfilerInitialize(const char*, const char*, CUoutput_mode) {
  GPUPOOL_BODY({ return RequireInit(); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuProfilerStart(void) {
  GPUPOOL_BODY({
    int device = 0;
    return CurrentDevice(&device);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuProfilerStop(void) {
  GPUPOOL_BODY({
    int device = 0;
    return CurrentDevice(&device);
  });
}

// Driver API: initialisation, devices, primary contexts and the context stack.
#include <cstdio>
#include <cstring>

#include "common/latency_probe.h"
#include "remote/client/core/api_common.h"
#include "remote/client/core/device_attributes.h"

using namespace gpupool::client;  // NOLINT: the C entry points below live at global scope

namespace {

Device* GetDevice(CUdevice ordinal) { return Runtime::Get().device(ordinal); }

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuInit(unsigned int flags) {
  GPUPOOL_BODY({
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    return Runtime::Get().Init(flags);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDriverGetVersion(int* version) {
  GPUPOOL_BODY({
    if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *version = CUDA_VERSION;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetCount(int* count) {
  GPUPOOL_BODY({
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    *count = Runtime::Get().device_count();
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  GPUPOOL_BODY({
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (GetDevice(ordinal) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetName(char* name, int length, CUdevice device) {
  GPUPOOL_BODY({
    if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    std::snprintf(name, length, "%s", d->description().name);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
  GPUPOOL_BODY({
    if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = d->description().total_memory;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice device) {
  GPUPOOL_BODY({
    if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    *uuid = d->uuid_bytes;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  return cuDeviceGetUuid_v2(uuid, device);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  GPUPOOL_BODY({
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    return DeviceAttribute(*d, attribute, value);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceComputeCapability(int* major, int* minor, CUdevice device) {
  GPUPOOL_BODY({
    if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    ModelProperties properties = PropertiesOf(*d);
    *major = properties.cc_major;
    *minor = properties.cc_minor;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetPCIBusId(char* bus_id, int length, CUdevice device) {
  GPUPOOL_BODY({
    if (bus_id == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    std::snprintf(bus_id, length, "%04x:%02x:%02x.0", d->pci_domain, d->pci_bus, d->pci_device);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice* device, const char* bus_id) {
  GPUPOOL_BODY({
    if (device == nullptr || bus_id == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    unsigned domain = 0, bus = 0, slot = 0;
    if (std::sscanf(bus_id, "%x:%x:%x", &domain, &bus, &slot) != 3) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < Runtime::Get().device_count(); ++i) {
      Device* d = GetDevice(i);
      if (d->pci_domain == static_cast<int>(domain) && d->pci_bus == static_cast<int>(bus) &&
          d->pci_device == static_cast<int>(slot)) {
        *device = i;
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_INVALID_DEVICE;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceCanAccessPeer(int* can_access, CUdevice device, CUdevice peer) {
  GPUPOOL_BODY({
    if (can_access == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (GetDevice(device) == nullptr || GetDevice(peer) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    *can_access = 0;  // remote GPUs never map each other's memory
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attribute, CUdevice source,
                                                          CUdevice destination) {
  GPUPOOL_BODY({
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (GetDevice(source) == nullptr || GetDevice(destination) == nullptr) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    if (source == destination) return CUDA_ERROR_INVALID_DEVICE;  // as CUDA answers
    (void)attribute;
    *value = 0;  // no peer access, atomics or native peer arrays between remote GPUs
    return CUDA_SUCCESS;
  });
}

// --- Primary contexts --------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  GPUPOOL_BODY({
    if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    ++d->primary_references;
    *context = reinterpret_cast<CUcontext>(&d->primary);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    if (d->primary_references == 0) return CUDA_ERROR_INVALID_CONTEXT;
    --d->primary_references;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device) {
  return cuDevicePrimaryCtxRelease_v2(device);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
  GPUPOOL_BODY({
    if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    *flags = d->primary.flags;
    *active = d->primary_references > 0 ? 1 : 0;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice device, unsigned int flags) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    d->primary.flags = flags;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice device, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(device, flags);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice device) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Device* d = GetDevice(device);
    if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    // As on a GPU: the storage destructors run and the context's allocations, streams
    // and events are freed. (Modules stay loaded on the agent until the process exits.)
    std::map<void*, ContextStorageEntry> storage;
    {
      std::lock_guard<std::mutex> lock(d->primary.storage_mu);
      storage.swap(d->primary.storage);
    }
    for (auto& [key, entry] : storage) {
      if (entry.destructor) entry.destructor(reinterpret_cast<CUcontext>(&d->primary), key, entry.value);
    }
    CUresult status = Runtime::Get().ReleaseContextResources(&d->primary);
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    d->primary.flags = 0;
    static const Context defaults;
    for (size_t i = 0; i < CU_LIMIT_MAX; ++i) d->primary.limits[i] = defaults.limits[i];
    return status;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice device) {
  return cuDevicePrimaryCtxReset_v2(device);
}

// --- The context stack -------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext* context) {
  GPUPOOL_BODY({
    if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    *context = reinterpret_cast<CUcontext>(CurrentContext());
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext context) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (context != nullptr && AsContext(context) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    SetCurrentContext(AsContext(context));
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext context) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Context* c = AsContext(context);
    if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    PushContext(c);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* context) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (ContextStackEmpty()) return CUDA_ERROR_INVALID_CONTEXT;
    Context* popped = PopContext();
    if (context != nullptr) *context = reinterpret_cast<CUcontext>(popped);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  GPUPOOL_BODY({
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int ordinal = 0;
    if (CUresult status = CurrentDevice(&ordinal); status != CUDA_SUCCESS) return status;
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext context) {
  GPUPOOL_BODY({
    if (context == nullptr) return cuCtxGetDevice(device);
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Context* c = AsContext(context);
    if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->device;
    return CUDA_SUCCESS;
  });
}

namespace {

CUresult SynchronizeDevice(int device) {
  gpupool::dataplane::StreamArgs args{0, 0, 0};
  return Runtime::Get().Call(device, gpupool::dataplane::kOpContextSynchronize, &args, sizeof(args));
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxSynchronize(void) {
  GPUPOOL_BODY({
    int device = 0;
    if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
    return SynchronizeDevice(device);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext context) {
  GPUPOOL_PROBE_SCOPE(probe, "libcuda.cuCtxSynchronize");
  GPUPOOL_BODY({
    if (context == nullptr) return cuCtxSynchronize();
    Context* c = AsContext(context);
    if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    return SynchronizeDevice(c->device);
  });
}

// cuCtxRecordEvent (CUDA 12.5): `event` (of the same context) completes once all the work
// queued in the context so far has. The library waits for the device's work, as
// cuCtxSynchronize does, and records the event on the context's default stream, so it is
// complete at once: the same order, with the host waiting where a driver's would not.
GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxRecordEvent(CUcontext context, CUevent event) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Context* c = AsContext(context);
    if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    Event* e = AsEvent(event);
    if (e == nullptr || e->context != c) return CUDA_ERROR_INVALID_HANDLE;
    if (CUresult status = SynchronizeDevice(c->device); status != CUDA_SUCCESS) return status;
    PushContext(c);
    CUresult status = cuEventRecord(event, nullptr);
    PopContext();
    return status;
  });
}

// cuCtxWaitEvent (CUDA 12.5): work submitted to the context after the call waits for
// `event` (of any context). The library waits for the event on the host, so all of it
// starts after the event.
GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxWaitEvent(CUcontext context, CUevent event) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (AsContext(context) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (AsEvent(event) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    return cuEventSynchronize(event);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  GPUPOOL_BODY({
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Context* c = CurrentContext();
    if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    *flags = c->flags;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxSetFlags(unsigned int flags) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Context* c = CurrentContext();
    if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    c->flags = flags;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxGetApiVersion(CUcontext context, unsigned int* version) {
  GPUPOOL_BODY({
    if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Context* c = context == nullptr ? CurrentContext() : AsContext(context);
    if (c == nullptr || c->magic != kContextMagic) return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020;  // the context API version every modern context reports
    return CUDA_SUCCESS;
  });
}

namespace {

// The current context, or the error to answer.
CUresult CurrentLiveContext(Context** context) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  *context = CurrentContext();
  if (*context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if ((*context)->magic == kDestroyedContextMagic) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return CUDA_SUCCESS;
}

}  // namespace

// Limits are kept per context and answered as set; they only matter to kernels a GPU host
// runs (the agent's cuda backend applies its own defaults today).
GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxGetLimit(size_t* value, CUlimit limit) {
  GPUPOOL_BODY({
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Context* context = nullptr;
    if (CUresult status = CurrentLiveContext(&context); status != CUDA_SUCCESS) return status;
    switch (limit) {
      case CU_LIMIT_SHMEM_SIZE:
      case CU_LIMIT_CIG_ENABLED:
      case CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED:
        *value = 0;  // CUDA-in-graphics contexts do not exist here
        return CUDA_SUCCESS;
      default:
        if (limit < 0 || limit > CU_LIMIT_PERSISTING_L2_CACHE_SIZE) {
          return CUDA_ERROR_UNSUPPORTED_LIMIT;
        }
    }
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    *value = context->limits[limit];
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  GPUPOOL_BODY({
    Context* context = nullptr;
    if (CUresult status = CurrentLiveContext(&context); status != CUDA_SUCCESS) return status;
    switch (limit) {
      case CU_LIMIT_STACK_SIZE:
        // A real driver rounds the per-thread stack to 16 bytes.
        value = (value + 15) / 16 * 16;
        break;
      case CU_LIMIT_PRINTF_FIFO_SIZE:
      case CU_LIMIT_MALLOC_HEAP_SIZE:
      case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
      case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
        break;
      case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
        if (value > 128) return CUDA_ERROR_INVALID_VALUE;
        break;
      case CU_LIMIT_PERSISTING_L2_CACHE_SIZE:
        value = 0;  // no L2 set-aside on a remote GPU: reads back as 0
        break;
      default:
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    }
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    context->limits[limit] = value;
    return CUDA_SUCCESS;
  });
}

// The L1/shared preference: a hint on a remote GPU, kept per context and read back as set.
GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache* config) {
  GPUPOOL_BODY({
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Context* context = nullptr;
    if (CUresult status = CurrentLiveContext(&context); status != CUDA_SUCCESS) return status;
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    *config = context->cache_config;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config) {
  GPUPOOL_BODY({
    if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    Context* context = nullptr;
    if (CUresult status = CurrentLiveContext(&context); status != CUDA_SUCCESS) return status;
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    context->cache_config = config;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  GPUPOOL_BODY({
    int device = 0;
    if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
    if (least) *least = kLeastStreamPriority;
    if (greatest) *greatest = kGreatestStreamPriority;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  GPUPOOL_BODY({
    if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *mode = CU_MODULE_EAGER_LOADING;
    return CUDA_SUCCESS;
  });
}

// Marks this library as gpupool's replacement driver, so that gpupool-agentd's cuda
// executor refuses to load it as the GPU host's real driver.
GPUPOOL_CUDA_API int cuGpupoolRemotingLibrary(void) { return 1; }

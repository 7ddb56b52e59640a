// Driver API: stream-ordered memory pools, their calls (what a pool is here: ops/mem_pools.cc).
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/client/graph/graphs.h"
#include "remote/client/ops/mem_pools.h"

using namespace gpupool::client;  // NOLINT

// --- A device's pools ----------------------------------------------------------------------

namespace {

// The device a location names, for the CUDA 13 location-based pool calls.
CUresult LocationDevice(const CUmemLocation* location, CUmemAllocationType type, int* device) {
  if (location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return static_cast<CUresult>(ReportUnsupported("memory pools", "pools of host memory (only device pools are)"));
  }
  if (!ValidDevice(location->id)) return CUDA_ERROR_INVALID_DEVICE;
  *device = location->id;
  return CUDA_SUCCESS;
}

// cuDeviceGetDefaultMemPool and cuDeviceGetMemPool.
CUresult GetPool(CUmemoryPool* pool, CUdevice device, bool current) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(pools_mu);
  *pool = reinterpret_cast<CUmemoryPool>(current ? CurrentPoolLocked(device) : DefaultPoolLocked(device));
  return CUDA_SUCCESS;
}

// cuDeviceSetMemPool and cuMemSetMemPool.
CUresult SetCurrentPool(CUdevice device, CUmemoryPool handle) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(pools_mu);
  MemPool* pool = AsPool(handle);
  if (pool == nullptr || pool->device != device) return CUDA_ERROR_INVALID_VALUE;
  State().current_by_device[device] = pool;
  return CUDA_SUCCESS;
}

// CUDA 13's location forms: `call(device)` for the device `location` names.
template <typename Call>
CUresult AtLocation(const CUmemLocation* location, CUmemAllocationType type, Call call) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  int device = 0;
  if (CUresult status = LocationDevice(location, type, &device); status != CUDA_SUCCESS) {
    return status;
  }
  return call(device);
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  GPUPOOL_BODY({ return GetPool(pool, device, false); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice device) {
  GPUPOOL_BODY({ return GetPool(pool, device, true); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceSetMemPool(CUdevice device, CUmemoryPool handle) {
  GPUPOOL_BODY({ return SetCurrentPool(device, handle); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemGetDefaultMemPool(CUmemoryPool* pool, CUmemLocation* location,
                                                         CUmemAllocationType type) {
  GPUPOOL_BODY({ return AtLocation(location, type, [&](int device) { return GetPool(pool, device, false); }); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location,
                                                  CUmemAllocationType type) {
  GPUPOOL_BODY({ return AtLocation(location, type, [&](int device) { return GetPool(pool, device, true); }); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type,
                                                  CUmemoryPool pool) {
  GPUPOOL_BODY({ return AtLocation(location, type, [&](int device) { return SetCurrentPool(device, pool); }); });
}

// --- Pools ---------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (pool == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return static_cast<CUresult>(
          ReportUnsupported("cuMemPoolCreate", "pools of host memory (only device pools are)"));
    }
    if (!ValidDevice(props->location.id)) return CUDA_ERROR_INVALID_DEVICE;
    // The devices report no exportable handle types (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_-
    // HANDLE_TYPES is 0), so a pool asking for one is refused, as a GPU refuses an
    // unsupported type.
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_NOT_SUPPORTED;
    std::lock_guard<std::mutex> lock(pools_mu);
    MemPool* created = NewPoolLocked();
    created->device = props->location.id;
    created->props = *props;
    *pool = reinterpret_cast<CUmemoryPool>(created);
    return CUDA_SUCCESS;
  });
}

// A pool's allocations outlive it (they are freed as usual); the handle goes at once. A
// device's default pool cannot be destroyed; a device whose current pool this was goes back
// to its default pool.
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool handle) {
  GPUPOOL_BODY({
    std::lock_guard<std::mutex> lock(pools_mu);
    MemPool* pool = AsPool(handle);
    if (pool == nullptr || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
    auto& current = State().current_by_device;
    if (auto found = current.find(pool->device); found != current.end() && found->second == pool) {
      current.erase(found);
    }
    pool->magic = 0;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool handle, CUmemPool_attribute attribute,
                                                        void* value) {
  GPUPOOL_BODY({
    std::lock_guard<std::mutex> lock(pools_mu);
    MemPool* pool = AsPool(handle);
    if (pool == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (int* flag = ReuseFlag(pool, attribute); flag != nullptr) {
      *flag = *static_cast<const int*>(value) != 0;
      return CUDA_SUCCESS;
    }
    switch (attribute) {
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->release_threshold = *static_cast<const cuuint64_t*>(value);
        return CUDA_SUCCESS;
      // The high watermarks can be reset, to zero only (then they are the current figure).
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*static_cast<const cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
        (attribute == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? pool->used_high : pool->reserved_high) = pool->used;
        return CUDA_SUCCESS;
      default:
        return CUDA_ERROR_INVALID_VALUE;  // read-only, or unknown
    }
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool handle, CUmemPool_attribute attribute,
                                                        void* value) {
  GPUPOOL_BODY({
    std::lock_guard<std::mutex> lock(pools_mu);
    MemPool* pool = AsPool(handle);
    if (pool == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (const int* flag = ReuseFlag(pool, attribute); flag != nullptr) {
      *static_cast<int*>(value) = *flag;
      return CUDA_SUCCESS;
    }
    auto* figure = static_cast<cuuint64_t*>(value);
    switch (attribute) {
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *figure = pool->release_threshold;
        break;
      // No freed memory is kept: what is reserved is what is used.
      case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        *figure = pool->used;
        break;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *figure = pool->reserved_high;
        break;
      case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *figure = pool->used;
        break;
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *figure = pool->used_high;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool handle, size_t) {
  GPUPOOL_BODY({
    std::lock_guard<std::mutex> lock(pools_mu);
    return AsPool(handle) == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;  // none kept
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool handle, const CUmemAccessDesc* descriptors,
                                                     size_t count) {
  GPUPOOL_BODY({
    std::lock_guard<std::mutex> lock(pools_mu);
    MemPool* pool = AsPool(handle);
    if (pool == nullptr || (count > 0 && descriptors == nullptr)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; ++i) {
      const CUmemAccessDesc& access = descriptors[i];
      if (access.location.type != CU_MEM_LOCATION_TYPE_DEVICE || !ValidDevice(access.location.id) ||
          (access.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && access.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
           access.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      // The pool's own device keeps read-write access, as on a GPU.
      if (access.location.id == pool->device && access.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      if (access.location.id != pool->device && access.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
        return static_cast<CUresult>(
            ReportUnsupported("cuMemPoolSetAccess", "pool memory reachable from other GPUs (peer access)"));
      }
    }
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool handle,
                                                     CUmemLocation* location) {
  GPUPOOL_BODY({
    std::lock_guard<std::mutex> lock(pools_mu);
    MemPool* pool = AsPool(handle);
    if (pool == nullptr || flags == nullptr || location == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (location->type != CU_MEM_LOCATION_TYPE_DEVICE || !ValidDevice(location->id)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *flags = location->id == pool->device ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
  });
}

// --- Allocation ----------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool handle,
                                                          CUstream stream) {
  GPUPOOL_BODY({
    if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int stream_device = 0;
    if (CUresult status = ResolveDevice(stream, &stream_device, nullptr); status != CUDA_SUCCESS) {
      return status;
    }
    MemPool* pool = nullptr;
    {
      std::lock_guard<std::mutex> lock(pools_mu);
      pool = AsPool(handle);
      if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    }
    // On a capturing stream: a memory allocation node on the pool's device.
    CUresult captured = CUDA_SUCCESS;
    if (AnyCapture() && CaptureGraphAlloc(stream, pool->device, size, dptr, &captured)) {
      return captured;
    }
    Stream* s = AsStream(stream);
    return AllocateFrom(pool, s != nullptr ? s->context : nullptr, size, dptr);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                                               CUstream stream) {
  return cuMemAllocFromPoolAsync(dptr, size, pool, stream);
}

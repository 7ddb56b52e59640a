// Stream-ordered memory pools: the ledger (ops/mem_pools.h). The calls on pools are
// api/api_mem_pools.cc.
//
// The calls: cuDeviceGetDefaultMemPool, cuDeviceGetMemPool and
// cuDeviceSetMemPool (and CUDA 13's cuMemGetDefaultMemPool, cuMemGetMemPool and
// cuMemSetMemPool for device locations), cuMemPoolCreate and cuMemPoolDestroy, pool
// attributes, access and trimming, and cuMemAllocFromPoolAsync; cuMemAllocAsync allocates
// from the device's current pool.
//
// A pool here is a ledger, not a cache: each allocation from it is an ordinary allocation
// on the GPU (at an address of the library's choosing, so it stays the same on a
// replacement GPU), made at the call, which is before the stream reaches it, and freed by
// cuMemFreeAsync once the stream's earlier work is done, which is when CUDA would free it.
// So a pool keeps no freed memory for reuse: its reserved bytes are its used bytes, the
// release threshold is kept and read back but has nothing to hold, and cuMemPoolTrimTo has
// nothing to trim. A pool's maximum size (CUmemPoolProps::maxSize) is enforced
// (CUDA_ERROR_OUT_OF_MEMORY). Pools are on a device and not exportable (IPC is not
// supported: the devices report no handle types); memory of one GPU is not reachable from
// another (peer access is not supported), so access for another device can be set only to
// none.
#include "remote/client/ops/mem_pools.h"

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/client/ops/memory.h"

namespace gpupool::client {

std::mutex pools_mu;
Pools& State() {
  static auto* state = new Pools;
  return *state;
}

MemPool* NewPoolLocked() { return State().all.emplace_back(std::make_unique<MemPool>()).get(); }

MemPool* AsPool(CUmemoryPool handle) {
  auto* pool = reinterpret_cast<MemPool*>(handle);
  return pool != nullptr && pool->magic == kMemPoolMagic ? pool : nullptr;
}

bool ValidDevice(int device) { return device >= 0 && device < Runtime::Get().device_count(); }

// Under pools_mu.
MemPool* DefaultPoolLocked(int device) {
  MemPool*& pool = State().default_by_device[device];
  if (pool == nullptr) {
    pool = NewPoolLocked();
    pool->device = device;
    pool->is_default = true;
    pool->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pool->props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  }
  return pool;
}

MemPool* CurrentPoolLocked(int device) {
  auto found = State().current_by_device.find(device);
  return found != State().current_by_device.end() ? found->second : DefaultPoolLocked(device);
}

// The pool's reuse flag `attribute` (an int attribute), or nullptr for any other.
int* ReuseFlag(MemPool* pool, CUmemPool_attribute attribute) {
  switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      return &pool->reuse_follow_event_dependencies;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      return &pool->reuse_allow_opportunistic;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return &pool->reuse_allow_internal_dependencies;
    default:
      return nullptr;
  }
}

// Allocates from `pool` (checked) and counts the allocation in it. The bytes are counted
// before the GPU allocates them, so that two threads cannot both pass the pool's maximum.
CUresult AllocateFrom(MemPool* pool, Context* preferred, size_t bytes, CUdeviceptr* dptr) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  {
    std::lock_guard<std::mutex> lock(pools_mu);
    if (pool->props.maxSize != 0 && pool->used + bytes > pool->props.maxSize) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool->used += bytes;
    device = pool->device;
  }
  CUdeviceptr address = 0;
  CUresult status = AllocateOnDevice(device, preferred, bytes, &address);
  std::lock_guard<std::mutex> lock(pools_mu);
  if (status != CUDA_SUCCESS) {
    pool->used -= bytes;
    return status;
  }
  State().allocations[address] = {pool, bytes};
  if (pool->used > pool->used_high) pool->used_high = pool->used;
  if (pool->used > pool->reserved_high) pool->reserved_high = pool->used;
  *dptr = address;
  return CUDA_SUCCESS;
}

CUresult AllocateOnDevice(int device, Context* preferred, size_t bytes, CUdeviceptr* dptr) {
  Context* current = CurrentContext();
  Context* chosen = nullptr;
  if (preferred != nullptr && preferred->magic == kContextMagic && preferred->device == device) {
    chosen = preferred;
  } else if (current != nullptr && current->magic == kContextMagic && current->device == device) {
    chosen = current;
  } else {
    Device* owner = Runtime::Get().device(device);
    if (owner == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    chosen = &owner->primary;
  }
  // Guarded as the exported cuMemAlloc was: the context pushed is popped whatever happens.
  auto allocate = [&] { return Guard("cuMemAlloc_v2", [&] { return ops::AllocDeviceMemory(dptr, bytes); }); };
  if (chosen == current) return allocate();
  PushContext(chosen);
  CUresult status = allocate();
  PopContext();
  return status;
}

CUresult AllocateFromCurrentPool(int device, Context* preferred, size_t bytes, CUdeviceptr* dptr) {
  MemPool* pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(pools_mu);
    pool = CurrentPoolLocked(device);
  }
  return AllocateFrom(pool, preferred, bytes, dptr);
}

void ForgetPoolAllocation(CUdeviceptr dptr) {
  std::lock_guard<std::mutex> lock(pools_mu);
  auto found = State().allocations.find(dptr);
  if (found == State().allocations.end()) return;
  found->second.first->used -= found->second.second;
  State().allocations.erase(found);
}

CUmemoryPool PoolOf(CUdeviceptr dptr) {
  std::lock_guard<std::mutex> lock(pools_mu);
  auto found = State().allocations.find(dptr);
  if (found == State().allocations.end() || found->second.first->magic != kMemPoolMagic) {
    return nullptr;
  }
  return reinterpret_cast<CUmemoryPool>(found->second.first);
}

}  // namespace gpupool::client

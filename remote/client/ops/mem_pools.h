// Stream-ordered memory pools (ops/mem_pools.cc): the ledger of pools and of what was
// allocated from them, which the pool calls (api/api_mem_pools.cc), the allocation calls
// (api/api_memory.cc) and graph memory (graph/graph_memory.cc) share.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "remote/client/core/runtime.h"

namespace gpupool::client {

constexpr uint32_t kMemPoolMagic = 0x6d706c31;  // "mpl1"

struct MemPool {
  uint32_t magic = kMemPoolMagic;
  int device = 0;
  bool is_default = false;
  CUmemPoolProps props{};
  int reuse_follow_event_dependencies = 1;
  int reuse_allow_opportunistic = 1;
  int reuse_allow_internal_dependencies = 1;
  cuuint64_t release_threshold = 0;
  uint64_t used = 0, used_high = 0, reserved_high = 0;
};

extern std::mutex pools_mu;
// Guarded by pools_mu; never destroyed (allocations may be freed during exit). Pools are
// never deleted either (a destroyed one is only marked so): an allocation may outlive its
// pool, and a stale handle must be refused, not followed.
struct Pools {
  std::vector<std::unique_ptr<MemPool>> all;
  std::map<int, MemPool*> default_by_device;
  std::map<int, MemPool*> current_by_device;
  std::map<CUdeviceptr, std::pair<MemPool*, size_t>> allocations;  // by address
};
Pools& State();

// Under pools_mu: a new pool, kept for ever.
MemPool* NewPoolLocked();
// The pool a handle names, or nullptr.
MemPool* AsPool(CUmemoryPool handle);
bool ValidDevice(int device);
// Under pools_mu: the device's default pool (made on first use), and its current one.
MemPool* DefaultPoolLocked(int device);
MemPool* CurrentPoolLocked(int device);
// The pool's reuse flag `attribute` (an int attribute), or nullptr for any other.
int* ReuseFlag(MemPool* pool, CUmemPool_attribute attribute);
// Allocates from `pool` (checked) and counts the allocation in it.
CUresult AllocateFrom(MemPool* pool, Context* preferred, size_t bytes, CUdeviceptr* dptr);

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

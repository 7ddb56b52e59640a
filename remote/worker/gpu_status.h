// What a GPU's session worker and the agent's supervisor share in memory (memfds the
// supervisor makes, one pair per session worker).
//
// GpuState is the supervisor's word on the GPU (injected fault, health): the worker maps
// it read-only, and the memfd is sealed against new writable mappings (F_SEAL_FUTURE_WRITE),
// so a worker cannot change what later sessions of the GPU are told. GpuCounters is the
// worker's: its operation count (which an injected fail_after counts down), and since when
// its current operation runs and the progress it made (the supervisor's watchdog reads
// them). Nothing in GpuCounters is believed by the supervisor on its own: a stall it shows
// leads only to a health probe on a fresh session (session_broker.h), and a fail_after it
// says fired counts only while the supervisor itself has that fault injected.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/status.h"

namespace gpupool::worker {

struct GpuState {
  std::atomic<uint32_t> fault_mode{0};  // device::FaultMode
  std::atomic<uint32_t> failed{0};      // 1: FAILED (backend health or gpupoold's word)
  std::atomic<uint64_t> fail_after{0};  // kFailAfter: operations that still succeed
  std::atomic<uint32_t> generation{0};  // moves on every change (the worker re-reads)
  char reason[256] = {};                // why it failed (before `failed` is set)
};

struct GpuCounters {
  std::atomic<uint64_t> operations{0};    // BeforeOperation calls of this worker
  std::atomic<int64_t> busy_since_ns{0};  // steady_clock ns; 0: no operation running
  std::atomic<uint64_t> progress{0};      // operations finished, and kernel blocks run
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);

// A memfd of `size` bytes mapped read-write in this process (the supervisor's side).
struct SharedMapping {
  int fd = -1;
  void* address = nullptr;
  size_t size = 0;
};
Result<SharedMapping> CreateSharedMapping(const char* name, size_t size);
// Seals `fd` against new writable mappings (the supervisor, before passing GpuState on).
Status SealAgainstWriting(int fd);
// Maps a received memfd (`writable` false: read-only).
Result<void*> MapShared(int fd, size_t size, bool writable);
void Unmap(SharedMapping* mapping);

}  // namespace gpupool::worker

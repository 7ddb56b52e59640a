// The interpreter's private interface (remote/ptx/interp/): the limits of a launch, the per-worker LaunchState and the
// Warp (registers, PCs, memory windows), lane loops and value helpers that every instruction family's handlers use.
// Included only by interp/*.cc and the family headers beside it. Design notes: docs/ptx-engine.md.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <tuple>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "remote/protocol/protocol.h"
#include "remote/ptx/half_float.h"
#include "remote/ptx/ir/kernel.h"
#include "remote/ptx/launch.h"
#include "remote/ptx/memory.h"

namespace gpupool::sim {

namespace {

// The CUresult values a launch ends with: the protocol's (remote/protocol/protocol.h).
constexpr int32_t kSuccess = dataplane::kCuSuccess;
constexpr int32_t kInvalidValue = dataplane::kCuInvalidValue;
constexpr int32_t kIllegalAddress = dataplane::kCuIllegalAddress;
constexpr int32_t kOutOfResources = dataplane::kCuLaunchOutOfResources;
constexpr int32_t kLaunchTimeout = dataplane::kCuLaunchTimeout;  // cancelled (LaunchSpec::cancel)
constexpr int32_t kAssertFailed = dataplane::kCuAssert;
constexpr int32_t kLaunchFailed = dataplane::kCuLaunchFailed;
constexpr int32_t kCooperativeTooLarge = dataplane::kCuCooperativeLaunchTooLarge;

constexpr uint32_t kFullMask = 0xffffffffu;
// A cooperative launch holds every CTA's registers and memory at once: at most this many
// CTAs and bytes (the client refuses a grid larger than the model's SMs hold, well below;
// CooperativeRegisters keeps what occupancy admits within the bytes). The bytes fit a sim
// worker's memory beyond its GPU's (the agent's 4 GiB margin).
constexpr uint64_t kMaxCooperativeCtas = 1u << 16;
constexpr uint64_t kMaxCooperativeBytes = uint64_t{3} << 30;
// A warp runs at most this many instructions before the next warp of its CTA
// gets a turn, so that warps spinning on each other's shared-memory flags make
// progress.
constexpr uint64_t kWarpSlice = 1u << 14;
constexpr uint64_t kCooperativeWarpSlice = 1u << 8;
// A CTA that runs this many warp instructions without finishing may be waiting for other
// CTAs of its grid (a grid-wide barrier or flag of the program's own, which works on a GPU
// where they are resident together): its worker then makes the following CTAs resident
// beside it (RunResident), as many as a GPU of the model would hold.
constexpr uint64_t kResidentAfter = uint64_t{1} << 20;

// A .shared::cluster address: the offset in a block's shared memory, with the block's rank
// in its cluster plus one above it (0 there: the executing block, as in a .shared::cta
// address). A block has at most 228 KiB of shared memory and a cluster 16 blocks.
constexpr int kClusterRankShift = 24;
constexpr uint64_t kSharedOffsetMask = (uint64_t{1} << kClusterRankShift) - 1;
constexpr uint32_t kMaxClusterBlocks = dataplane::kMaxClusterBlocks;
// Warp::wait_id of a lane waiting at its cluster's barrier (barrier.cluster.wait).
constexpr uint8_t kClusterBarrierId = 16;

}  // namespace

struct LaunchState;

// The blocks of one cluster, resident together on one thread (the scheduler's RunClusters):
// what mapa and .shared::cluster addresses reach, by rank.
struct ClusterBlocks {
  std::vector<LaunchState*> blocks;
};

// ---- Execution state
// ---------------------------------------------------------------------

// One per worker, on cache lines of its own (the workers update theirs on every
// instruction).
struct alignas(64) LaunchState {
  const DecodedKernel* kernel = nullptr;
  const LaunchSpec* spec = nullptr;
  uint8_t* shared = nullptr;
  uint64_t shared_size = 0;
  uint8_t* local = nullptr;          // threads of the CTA * local_size
  uint64_t clock = 0;                // advances with every warp instruction
  uint64_t thread_instructions = 0;  // lanes executed, for the benchmark
  std::string printf;                // device printf text of this worker's CTAs
  uint64_t printf_dropped = 0;       // bytes of it dropped (AppendPrintf)
  // The CTA's 16 barriers (bar.sync/red/arrive ID{, COUNT}): lanes waiting at each, and
  // for a barrier given a thread count, the threads arrived and the count; bar.red's
  // accumulators. `active_barriers`: bit i when barrier i has waiting or arrived lanes.
  static constexpr int kBarriers = 16;
  uint32_t barrier_waiting[kBarriers] = {};
  uint32_t barrier_arrived[kBarriers] = {};
  uint32_t barrier_expected[kBarriers] = {};  // 0: every live thread of the CTA
  uint32_t active_barriers = 0;
  uint32_t reduce_count[kBarriers] = {};
  bool reduce_all[kBarriers] = {true, true, true, true, true, true, true, true,
                                true, true, true, true, true, true, true, true};
  bool reduce_any[kBarriers] = {};
  int32_t error = kSuccess;
  std::string detail;
  size_t range_hint = 0;
  uint32_t* range_hints = nullptr;  // per instruction: its last allocation (fast paths)
  uint32_t cta_linear = 0;
  uint32_t ctaid[3] = {0, 0, 0};
  uint64_t slice = kWarpSlice;  // warp instructions a warp runs before the next one's turn
  // Its cluster (null: a cluster of this one block), its rank there, and the lanes of its
  // warps waiting at the cluster's barrier.
  const ClusterBlocks* cluster = nullptr;
  uint32_t cluster_shape[3] = {1, 1, 1};  // ClusterShapeOf (launch.h)
  uint32_t cluster_rank = 0;
  uint32_t cluster_waiting = 0;
};

struct Warp {
  uint64_t* regs = nullptr;  // slot_count * 32
  LaunchState* launch = nullptr;
  uint32_t index = 0;        // warp index in its CTA
  uint32_t live = 0;         // lanes that have not exited
  uint32_t waiting = 0;      // lanes waiting at a barrier
  uint8_t wait_id[32] = {};  // the barrier each waiting lane waits at
  bool uniform = true;       // every live lane is at `pc`
  int32_t pc = 0;
  int32_t lane_pc[32] = {};
  // Forward progress for divergent lanes (independent thread scheduling, sm_70 on): the
  // lowest PC runs first, so lanes spinning in a loop on what other lanes of their warp
  // will do (an intra-warp lock) would run for ever. After kSpinLimit backward branches of
  // one group of lanes while other lanes were ready elsewhere, that group is `deferred`
  // for up to kDeferSteps steps, or until no other lane is ready or the others reach a
  // warp-synchronous instruction.
  // Lanes that arrived at the cluster's barrier (barrier.cluster.arrive) in its current
  // phase: cleared when the phase completes.
  uint32_t cluster_arrived = 0;
  uint32_t spin_mask = 0;  // the group whose backward branches `spin` counts
  uint32_t spin = 0;
  uint32_t deferred = 0;
  uint32_t defer_left = 0;
  // An mbarrier wait (test_wait, try_wait) found its phase incomplete, or a thread slept
  // (nanosleep): the warp's turn ends there, so that the CTA's other warps, which it waits
  // for, run now rather than after a slice of its spinning (cuda::barrier's wait loop, a
  // spin-wait's back-off).
  bool yield = false;
  // The last ordered load this warp ran (ld.volatile/.relaxed/.acquire/.cg: HOrderedLoad)
  // and a digest of what its lanes read: the same load reading the same again is a spin,
  // whose warp then yields as above.
  const Inst* spin_load = nullptr;
  uint64_t spin_value = 0;

  uint64_t* R(int32_t slot) { return regs + static_cast<size_t>(slot) * 32; }

  // Host address of `size` bytes at .shared::cluster address `address` (kClusterRankShift):
  // the shared memory of a block of the cluster; nullptr if stray.
  uint8_t* ClusterShared(uint64_t address, uint32_t size) {
    const uint64_t field = address >> kClusterRankShift;
    const uint64_t offset = address & kSharedOffsetMask;
    if (field == 0) return nullptr;  // the executing block's own, out of its bounds
    const uint64_t rank = field - 1;
    LaunchState* block = nullptr;
    if (launch->cluster == nullptr) {
      if (rank != 0) return nullptr;
      block = launch;
    } else {
      if (rank >= launch->cluster->blocks.size()) return nullptr;
      block = launch->cluster->blocks[rank];
    }
    if (offset > block->shared_size || size > block->shared_size - offset) return nullptr;
    return block->shared + offset;
  }

  uint8_t* LocalOf(int lane) {
    return launch->local + (static_cast<uint64_t>(index) * 32 + lane) * launch->kernel->local_size;
  }

  void Fault(uint64_t address, uint32_t size, const char* what) {
    if (launch->error != kSuccess) return;
    launch->error = kIllegalAddress;
    launch->detail = FaultText(what, size, address, launch->cta_linear, index);
  }

  // The allocation holding `address`, nullptr if none; *hint: the index of the last one
  // found (tried first, updated).
  const MemoryRange* RangeOf(uint64_t address, uint32_t* hint) {
    const std::vector<MemoryRange>& ranges = launch->spec->memory;
    if (*hint < ranges.size() && address - ranges[*hint].start < ranges[*hint].size) {
      return &ranges[*hint];
    }
    const MemoryRange* range = AllocationAtOrBelow(ranges, address);
    if (range == nullptr || address - range->start >= range->size) return nullptr;
    *hint = static_cast<uint32_t>(range - ranges.data());
    return range;
  }

  uint8_t* Global(uint64_t address, uint32_t size) {
    const std::vector<MemoryRange>& ranges = launch->spec->memory;
    size_t hint = launch->range_hint;
    // No sum that could wrap: an address near 2^64 in an allocation starting below `size`.
    if (hint < ranges.size() && address >= ranges[hint].start && size <= ranges[hint].size &&
        address - ranges[hint].start <= ranges[hint].size - size) {
      return reinterpret_cast<uint8_t*>(ranges[hint].host) + (address - ranges[hint].start);
    }
    const MemoryRange* range = AllocationAtOrBelow(ranges, address);
    if (range == nullptr) return nullptr;
    uint64_t offset = address - range->start;
    if (offset > range->size || size > range->size - offset) return nullptr;
    launch->range_hint = static_cast<size_t>(range - ranges.data());
    return reinterpret_cast<uint8_t*>(range->host) + offset;
  }

  // Host address of `size` bytes at `address` in `space` for `lane`; nullptr if
  // stray.
  uint8_t* Address(Space space, uint64_t address, uint32_t size, int lane) {
    switch (space) {
      case Space::kGlobal:
      case Space::kConst:
        return Global(address, size);
      case Space::kShared:
        address &= 0xffffffffffffull;
        if (address > launch->shared_size || size > launch->shared_size - address) {
          return ClusterShared(address, size);
        }
        return launch->shared + address;
      case Space::kLocal: {
        uint64_t local_size = launch->kernel->local_size;
        address &= 0xffffffffffffull;
        if (address > local_size || size > local_size - address) return nullptr;
        return LocalOf(lane) + address;
      }
      case Space::kParam: {
        address &= 0xffffffffffffull;
        size_t param_size = launch->spec->param_size;
        if (address > param_size || size > param_size - address) return nullptr;
        return const_cast<uint8_t*>(launch->spec->params) + address;
      }
      case Space::kGeneric:
        if (address >= kSharedWindow && address < kSharedWindow + kWindowSize) {
          return Address(Space::kShared, address - kSharedWindow, size, lane);
        }
        if (address >= kLocalWindow && address < kLocalWindow + kWindowSize) {
          return Address(Space::kLocal, address - kLocalWindow, size, lane);
        }
        if (address >= kParamWindow && address < kParamWindow + kWindowSize) {
          return Address(Space::kParam, address - kParamWindow, size, lane);
        }
        return Global(address, size);
    }
    return nullptr;
  }
};

namespace interp {

template <typename F>
inline void ForLanes(uint32_t mask, F&& f) {
  if (mask == kFullMask) {
    for (int lane = 0; lane < 32; ++lane) f(lane);
  } else {
    while (mask) {
      int lane = std::countr_zero(mask);
      mask &= mask - 1;
      f(lane);
    }
  }
}

// ForLanes for element-wise lane loops: each lane reads its own lane of the source slots
// and writes its own lane of the destination slot (which may be one of the sources, as a
// whole slot: slots never partly overlap), so no lane depends on another and the compiler
// may vectorise whole warps. Not for stores, atomics or anything that crosses lanes.
template <typename F>
inline void ForLanesIndependent(uint32_t mask, F&& f) {
  if (mask == kFullMask) {
#pragma GCC ivdep
    for (int lane = 0; lane < 32; ++lane) f(lane);
  } else {
    while (mask) {
      int lane = std::countr_zero(mask);
      mask &= mask - 1;
      f(lane);
    }
  }
}

// ---- Values
// ------------------------------------------------------------------------------

template <typename T>
inline T Get(uint64_t raw) {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<float>(static_cast<uint32_t>(raw));
  } else if constexpr (std::is_same_v<T, double>) {
    return std::bit_cast<double>(raw);
  } else {
    return static_cast<T>(raw);
  }
}

template <typename T>
inline uint64_t Put(T value) {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<uint32_t>(value);
  } else if constexpr (std::is_same_v<T, double>) {
    return std::bit_cast<uint64_t>(value);
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(value));
  } else {
    return static_cast<uint64_t>(value);
  }
}

template <typename T>
using Unsigned = std::make_unsigned_t<T>;

template <typename T>
inline T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
  } else {
    return a + b;
  }
}
template <typename T>
inline T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Unsigned<T>>(a) - static_cast<Unsigned<T>>(b));
  } else {
    return a - b;
  }
}
template <typename T>
inline T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::conditional_t<(sizeof(T) < 4), uint32_t, Unsigned<T>>;
    return static_cast<T>(static_cast<U>(static_cast<Unsigned<T>>(a)) * static_cast<U>(static_cast<Unsigned<T>>(b)));
  } else {
    return a * b;
  }
}

template <typename T>
struct Wider;
template <>
struct Wider<int16_t> {
  using type = int32_t;
};
template <>
struct Wider<uint16_t> {
  using type = uint32_t;
};
template <>
struct Wider<int32_t> {
  using type = int64_t;
};
template <>
struct Wider<uint32_t> {
  using type = uint64_t;
};
template <>
struct Wider<int64_t> {
  using type = __int128;
};
template <>
struct Wider<uint64_t> {
  using type = unsigned __int128;
};

template <typename T>
inline T MulHi(T a, T b) {
  using W = typename Wider<T>::type;
  return static_cast<T>((static_cast<W>(a) * static_cast<W>(b)) >> (8 * sizeof(T)));
}

// FlushF32 and Saturate01: remote/ptx/half_float.h (compiled code calls the same).

// A float operand under .ftz: a subnormal f32 input counts as a zero of its sign, as the
// GPU flushes inputs as well as results (a subnormal times 2^30 is 0 there).
template <typename T>
inline T FtzOperand(uint64_t raw, uint8_t flags) {
  T v = Get<T>(raw);
  if constexpr (std::is_same_v<T, float>) {
    if (flags & kFlagFtz) v = FlushF32(v);
  }
  return v;
}

// Float results with .ftz/.sat applied.
template <typename T>
inline T FixFloat(T v, uint8_t flags) {
  if constexpr (std::is_same_v<T, float>) {
    if (flags & kFlagFtz) v = FlushF32(v);
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (flags & kFlagSat) v = Saturate01(v);
  }
  return v;
}
}  // namespace interp

}  // namespace gpupool::sim

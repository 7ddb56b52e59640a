// The interpreter's scheduler: runs a warp (uniform and divergent lanes, barriers, forward
// progress), a CTA, the CTAs of a worker, resident and cooperative grids; RunInterpreted
// (interpreter.h) is its entry.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/interpreter.h"
#include "remote/ptx/interp/arithmetic.h"

namespace gpupool::sim::interp {
// Everything here is the scheduler's own: internal linkage, so that the compiler may inline
// the barrier release and warp steps into StepCta as it did when they were static in one
// file (as external functions, ReleaseBarrier alone took 39% of a barrier-heavy kernel's
// time, against 29% for StepCta with it inlined).
namespace {

void Materialize(Warp& w) {
  if (!w.uniform) return;
  for (int l = 0; l < 32; ++l) w.lane_pc[l] = w.pc;
  w.uniform = false;
}

void MoveLanes(Warp& w, uint32_t lanes, int32_t target) {
  if (lanes == 0) return;
  if (w.uniform && lanes == w.live) {
    w.pc = target;
    return;
  }
  Materialize(w);
  ForLanes(lanes, [&](int l) { w.lane_pc[l] = target; });
}

void TryReconverge(Warp& w) {
  if (w.uniform || w.live == 0) return;
  int first = std::countr_zero(w.live);
  int32_t pc = w.lane_pc[first];
  bool same = true;
  ForLanes(w.live, [&](int l) { same &= w.lane_pc[l] == pc; });
  if (same) {
    w.uniform = true;
    w.pc = pc;
    w.deferred = 0;
    w.spin = 0;
  }
}

// The lanes warp-synchronous instruction `in` waits for, run by `mask` (0: none).
uint32_t SyncLanes(Warp& w, const Inst& in, uint32_t mask) {
  if (in.collective == kSyncWarp) return kFullMask;
  if (in.collective != kSyncMaskB && in.collective != kSyncMaskE) return 0;
  const uint64_t* members = w.R(in.collective == kSyncMaskB ? in.b : in.e);
  uint32_t lanes = 0;
  ForLanes(mask, [&](int l) { lanes |= static_cast<uint32_t>(members[l]); });
  return lanes;
}

constexpr uint32_t kSpinLimit = 1024;
constexpr uint32_t kDeferSteps = 4096;

// Releases the lanes of `w` waiting at barrier `id` (every barrier: -1).
void ReleaseBarrier(Warp& w, const Inst* code, int id) {
  uint32_t waiting = 0;
  ForLanes(w.waiting, [&](int l) {
    if (id < 0 || w.wait_id[l] == id) waiting |= 1u << l;
  });
  w.waiting &= ~waiting;
  if (waiting == 0) return;
  // bar.red: each waiting lane receives the CTA-wide reduction.
  const LaunchState& launch = *w.launch;
  ForLanes(waiting, [&](int l) {
    const Inst& in = code[w.uniform ? w.pc : w.lane_pc[l]];
    if (in.mode == kBarrierNoReduction || in.d[0] < 0) return;
    int b = w.wait_id[l];
    w.R(in.d[0])[l] = in.mode == kBarrierReducePopc  ? launch.reduce_count[b]
                      : in.mode == kBarrierReduceAnd ? launch.reduce_all[b]
                                                     : launch.reduce_any[b];
  });
  if (w.uniform && waiting == w.live) {
    ++w.pc;
    return;
  }
  Materialize(w);
  ForLanes(waiting, [&](int l) { ++w.lane_pc[l]; });
  TryReconverge(w);
}

// Bit l: bit 0 of lane l of predicate slot `g` (all 32 lanes; the caller masks).
inline uint32_t PredicateBits(const uint64_t* g) {
#if defined(__SSE2__)
  uint32_t bits = 0;
  for (int l = 0; l < 32; l += 2) {
    __m128i v = _mm_slli_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + l)), 63);
    bits |= static_cast<uint32_t>(_mm_movemask_pd(_mm_castsi128_pd(v))) << l;
  }
  return bits;
#else
  uint32_t bits = 0;
  for (int l = 0; l < 32; ++l) bits |= static_cast<uint32_t>(g[l] & 1) << l;
  return bits;
#endif
}

// Runs `w` until every live lane waits at a barrier, all exited, the slice is
// used up, or the launch failed.
void RunWarp(Warp& w, const Inst* code) {
  LaunchState& launch = *w.launch;
  const uint64_t slice = launch.slice;
  for (uint64_t step = 0; step < slice; ++step) {
    if (w.uniform && w.waiting == 0 && w.live != 0) {
      // Uniform warp: every live lane at w.pc, none waiting. Straight-line instructions
      // and branches taken by all lanes stay here; anything else (a branch that splits
      // the warp, exit, barrier, trap) leaves for the general step below.
      const uint32_t mask = w.live;
      const uint64_t lanes = static_cast<uint64_t>(std::popcount(mask));
      int32_t pc = w.pc;
      for (; step < slice; ++step) {
        if (launch.error != kSuccess) {
          w.pc = pc;
          return;
        }
        const Inst& in = code[pc];
        uint32_t exec = mask;
        if (in.guard >= 0) {
          uint32_t bits = PredicateBits(w.R(in.guard)) & mask;
          exec = in.guard_negated ? (mask & ~bits) : bits;
        }
        if (in.flow == Flow::kNext) {
          ++launch.clock;
          launch.thread_instructions += exec == mask ? lanes : std::popcount(exec);
          if ((launch.clock & 0xffff) == 0 && launch.spec->progress != nullptr) {
            launch.spec->progress->fetch_add(1, std::memory_order_relaxed);
          }
          if (exec) in.run(w, in, exec);
          ++pc;
          if (w.yield) {  // an mbarrier wait that must wait: the other warps' turn
            w.yield = false;
            w.pc = pc;
            return;
          }
        } else if (in.flow == Flow::kBranch && (exec == mask || exec == 0)) {
          ++launch.clock;
          launch.thread_instructions += exec == mask ? lanes : 0;
          if ((launch.clock & 0xffff) == 0 && launch.spec->progress != nullptr) {
            launch.spec->progress->fetch_add(1, std::memory_order_relaxed);
          }
          pc = exec ? in.target : pc + 1;
        } else {
          break;
        }
      }
      w.pc = pc;
      if (step == slice) return;
    }
    uint32_t ready = w.live & ~w.waiting;
    if (ready == 0 || launch.error != kSuccess) return;
    int32_t pc;
    uint32_t mask;
    if (w.uniform) {
      pc = w.pc;
      mask = ready;
    } else {
      uint32_t candidates = ready & ~w.deferred;
      if (w.deferred != 0 && (candidates == 0 || --w.defer_left == 0)) {
        w.deferred = 0;
        candidates = ready;
      }
      pc = std::numeric_limits<int32_t>::max();
      ForLanes(candidates, [&](int l) { pc = std::min(pc, w.lane_pc[l]); });
      mask = 0;
      ForLanes(candidates, [&](int l) { mask |= static_cast<uint32_t>(w.lane_pc[l] == pc) << l; });
      if (w.deferred != 0 && (SyncLanes(w, code[pc], mask) & w.deferred) != 0) {
        // It waits for deferred lanes, as a GPU's .sync forms do: let them run first.
        w.deferred = 0;
        continue;
      }
      // The same for member lanes that are behind it at a higher address: a loop whose
      // back edge leads to a block placed before the loop's head sends the lanes that
      // skipped the body's last block around first, to a vote.sync or shfl.sync of the
      // next iteration that the lanes still in that block must reach too. Those lanes run
      // first, unless they wait at a warp-synchronous instruction of their own.
      if (const uint32_t behind = SyncLanes(w, code[pc], mask) & candidates & ~mask; behind != 0) {
        int32_t other = std::numeric_limits<int32_t>::max();
        ForLanes(behind, [&](int l) { other = std::min(other, w.lane_pc[l]); });
        uint32_t other_mask = 0;
        ForLanes(candidates, [&](int l) { other_mask |= static_cast<uint32_t>(w.lane_pc[l] == other) << l; });
        if ((SyncLanes(w, code[other], other_mask) & candidates & ~other_mask) == 0) {
          pc = other;
          mask = other_mask;
        }
      }
    }
    const Inst& in = code[pc];
    uint32_t exec = mask;
    if (in.guard >= 0) {
      uint32_t bits = PredicateBits(w.R(in.guard)) & mask;
      exec = in.guard_negated ? (mask & ~bits) : bits;
    }
    ++launch.clock;
    launch.thread_instructions += static_cast<uint64_t>(std::popcount(exec));
    // Progress for the agent's watchdog every 64 Ki warp instructions: one CTA of a
    // grid-stride loop can run for seconds, and is no hang.
    if ((launch.clock & 0xffff) == 0 && launch.spec->progress != nullptr) {
      launch.spec->progress->fetch_add(1, std::memory_order_relaxed);
    }
    switch (in.flow) {
      case Flow::kNext:
        if (exec) in.run(w, in, exec);
        MoveLanes(w, mask, pc + 1);
        break;
      case Flow::kBranch:
        if (exec != 0 && in.target <= pc && (ready & ~mask) != 0) {
          // A loop's backward branch while other lanes of the warp wait elsewhere.
          if (mask != w.spin_mask) {
            w.spin_mask = mask;
            w.spin = 0;
          }
          if (++w.spin >= kSpinLimit) {
            w.deferred = exec;
            w.defer_left = kDeferSteps;
            w.spin = 0;
          }
        }
        if (exec == mask) {
          MoveLanes(w, mask, in.target);
        } else {
          MoveLanes(w, exec, in.target);
          MoveLanes(w, mask & ~exec, pc + 1);
        }
        break;
      case Flow::kExit:
        w.live &= ~exec;
        MoveLanes(w, mask & ~exec, pc + 1);
        break;
      case Flow::kBarrier: {
        if (exec == 0) {
          MoveLanes(w, mask, pc + 1);
          break;
        }
        if (in.mode2 == kClusterArrive) {
          w.cluster_arrived |= exec;
          MoveLanes(w, mask, pc + 1);
          break;
        }
        if (in.mode2 == kClusterWait) {
          // Lanes whose arrival's phase has completed go on (ReleaseClusterBarrier cleared
          // their arrival); the others wait for it.
          const uint32_t waits = exec & w.cluster_arrived;
          ForLanes(waits, [&](int l) { w.wait_id[l] = kClusterBarrierId; });
          launch.cluster_waiting += __builtin_popcount(waits);
          w.waiting |= waits;
          MoveLanes(w, mask & ~waits, pc + 1);
          break;
        }
        // The barrier and count of the first lane (they must be the same in every lane).
        const int first = __builtin_ctz(exec);
        const int id = in.b >= 0 ? static_cast<int>(w.R(in.b)[first] & 15) : 0;
        const uint32_t count = in.c >= 0 ? static_cast<uint32_t>(w.R(in.c)[first]) : 0;
        // Threads arriving: the lanes, and a warp's missing lanes when it arrives whole
        // (a CTA's last, partial warp counts as a warp, as on a GPU).
        uint32_t threads = __builtin_popcount(exec);
        if (exec == w.live) threads += 32 - __builtin_popcount(w.live);
        launch.active_barriers |= 1u << id;
        launch.barrier_arrived[id] += threads;
        if (count != 0) launch.barrier_expected[id] = count;
        if (in.mode2 == kBarrierArrive) {  // bar.arrive: on without waiting
          MoveLanes(w, mask, pc + 1);
          break;
        }
        if (in.mode != kBarrierNoReduction) {
          const uint64_t* p = w.R(in.a);
          bool negate = in.flags & kFlagSigned;
          ForLanes(exec, [&](int l) {
            bool value = ((p[l] & 1) != 0) != negate;
            launch.reduce_count[id] += value;
            launch.reduce_all[id] = launch.reduce_all[id] && value;
            launch.reduce_any[id] = launch.reduce_any[id] || value;
          });
        }
        ForLanes(exec, [&](int l) { w.wait_id[l] = static_cast<uint8_t>(id); });
        launch.barrier_waiting[id] += __builtin_popcount(exec);
        w.waiting |= exec;
        MoveLanes(w, mask & ~exec, pc + 1);
        break;
      }
      case Flow::kTrap:
        if (exec) {
          switch (in.mode) {
            case kTrapBadFunction:
              launch.error = kIllegalAddress;
              launch.detail = "indirect call (PTX line " + std::to_string(in.line) +
                              ") to an address that is no device function of the module";
              break;
            case kTrapCallsTooDeep:
              launch.error = kLaunchFailed;
              launch.detail = CallsTooDeepDetail(in.line);
              break;
            default:
              launch.error = kLaunchFailed;
              launch.detail = "trap";
          }
          return;
        }
        MoveLanes(w, mask, pc + 1);
        break;
      case Flow::kAssert:
        if (exec) {
          in.run(w, in, exec);
          launch.error = kAssertFailed;
          launch.detail = "device assertion failed";
          return;
        }
        MoveLanes(w, mask, pc + 1);
        break;
    }
    if (!w.uniform) TryReconverge(w);
    if (w.yield) {  // an mbarrier wait that must wait: the other warps' turn
      w.yield = false;
      return;
    }
  }
}

// One CTA's resources: its shared and local memory, registers and warps. A worker reuses
// one for every CTA it runs; a cooperative launch keeps one per CTA.
struct CtaContext {
  std::vector<uint8_t> shared;
  std::vector<uint8_t> local;
  std::vector<uint64_t> registers;
  std::vector<Warp> warps;
  std::vector<uint32_t> range_hints;  // LaunchState::range_hints
};

// The CtaContext of the thread that calls RunKernel (the agent's GPU thread), kept from
// launch to launch while it holds at most kKeptScratchBytes (launch.h).

CtaContext* CallerContext() {
  thread_local CtaContext context;
  return &context;
}

void TrimCallerContext(CtaContext* context) {
  size_t held = context->shared.capacity() + context->local.capacity() +
                context->registers.capacity() * sizeof(uint64_t) + context->warps.capacity() * sizeof(Warp) +
                context->range_hints.capacity() * sizeof(uint32_t);
  if (held > kKeptScratchBytes) *context = CtaContext{};
}

// Makes `cta`'s memory and warps, with the registers that are the same in every CTA.
void PrepareCta(const DecodedKernel& kernel, const LaunchSpec& spec, LaunchState* state, CtaContext* cta) {
  const uint32_t threads = spec.block[0] * spec.block[1] * spec.block[2];
  const uint64_t shared_size = kernel.static_shared + spec.dynamic_shared;
  const uint32_t warps = (threads + 31) / 32;

  LaunchState& launch = *state;
  launch.kernel = &kernel;
  launch.spec = &spec;
  // Checked by RunKernel before the launch runs; a shape it refused never gets here.
  if (ClusterShapeOf(kernel, spec, launch.cluster_shape, nullptr) != kSuccess) {
    std::fill_n(launch.cluster_shape, 3, 1u);
  }
  const bool explicit_cluster =
      kernel.required_cluster[0] != 0 || spec.cluster[0] != 1 || spec.cluster[1] != 1 || spec.cluster[2] != 1;
  cta->range_hints.assign(kernel.code.size(), 0);
  launch.range_hints = cta->range_hints.data();
  cta->shared.assign(shared_size + 16, 0);
  launch.shared = cta->shared.data();
  launch.shared_size = shared_size;
  cta->local.assign(static_cast<size_t>(kernel.local_size) * warps * 32 + 16, 0);
  launch.local = cta->local.data();

  cta->registers.assign(static_cast<size_t>(kernel.slot_count) * 32 * warps, 0);
  cta->warps.assign(warps, Warp{});
  for (uint32_t i = 0; i < warps; ++i) {
    Warp& w = cta->warps[i];
    w.regs = cta->registers.data() + static_cast<size_t>(kernel.slot_count) * 32 * i;
    w.launch = &launch;
    w.index = i;
    auto fill = [&](int32_t slot, uint64_t value) {
      if (slot >= 0) std::fill_n(w.R(slot), 32, value);
    };
    for (const auto& [slot, value] : kernel.constants) fill(slot, value);
    for (int axis = 0; axis < 3; ++axis) {
      fill(kernel.ntid[axis], spec.block[axis]);
      fill(kernel.nctaid[axis], spec.grid[axis]);
    }
    for (int axis = 0; axis < 3; ++axis) {
      fill(kernel.nclusterid[axis], spec.grid[axis] / launch.cluster_shape[axis]);
      fill(kernel.cluster_nctaid[axis], launch.cluster_shape[axis]);
    }
    fill(kernel.cluster_nctarank,
         uint64_t{launch.cluster_shape[0]} * launch.cluster_shape[1] * launch.cluster_shape[2]);
    fill(kernel.is_explicit_cluster, explicit_cluster ? 1 : 0);
    fill(kernel.warpid, i);
    fill(kernel.nwarpid, 64);
    fill(kernel.nsmid, spec.sm_count);
    fill(kernel.gridid, 1);
    for (int n = 0; n < 32; ++n) fill(kernel.envreg[n], 0);
    fill(kernel.envreg[1], spec.grid_workspace >> 32);
    fill(kernel.envreg[2], spec.grid_workspace & 0xffffffffu);
    // Per-lane values, one slot at a time, and only for the slots the kernel has.
    auto fill_lanes = [&](int32_t slot, auto value_of_lane) {
      if (slot < 0) return;
      uint64_t* lanes = w.R(slot);
      for (uint32_t l = 0; l < 32; ++l) lanes[l] = value_of_lane(l);
    };
    if (kernel.tid[0] >= 0 || kernel.tid[1] >= 0 || kernel.tid[2] >= 0) {
      // Lane 0's coordinates, then counted up lane by lane (no division per lane).
      uint32_t tid[3][32];
      uint32_t coords[3] = {(i * 32) % spec.block[0], (i * 32 / spec.block[0]) % spec.block[1],
                            i * 32 / (spec.block[0] * spec.block[1])};
      for (int l = 0; l < 32; ++l) {
        for (int axis = 0; axis < 3; ++axis) tid[axis][l] = coords[axis];
        if (++coords[0] == spec.block[0]) {
          coords[0] = 0;
          if (++coords[1] == spec.block[1]) {
            coords[1] = 0;
            ++coords[2];
          }
        }
      }
      for (int axis = 0; axis < 3; ++axis) {
        fill_lanes(kernel.tid[axis], [&](uint32_t l) { return tid[axis][l]; });
      }
    }
    fill_lanes(kernel.laneid, [](uint32_t l) { return l; });
    fill_lanes(kernel.lanemask_eq, [](uint32_t l) { return 1u << l; });
    fill_lanes(kernel.lanemask_lt, [](uint32_t l) { return (1u << l) - 1; });
    fill_lanes(kernel.lanemask_le, [](uint32_t l) { return ((1u << l) - 1) | (1u << l); });
    fill_lanes(kernel.lanemask_gt, [](uint32_t l) { return ~(((1u << l) - 1) | (1u << l)); });
    fill_lanes(kernel.lanemask_ge, [](uint32_t l) { return ~((1u << l) - 1); });
    if (kernel.carry_slot >= 0) fill(kernel.carry_slot, 0);
    for (const Inst& in : kernel.prologue) in.run(w, in, kFullMask);
  }
}

// Sets `context` up to run CTA number `cta` (linear) from its first instruction.
void ResetBarrier(LaunchState& launch, int id) {
  launch.barrier_waiting[id] = launch.barrier_arrived[id] = launch.barrier_expected[id] = 0;
  launch.reduce_count[id] = 0;
  launch.reduce_all[id] = true;
  launch.reduce_any[id] = false;
}

void StartCta(const DecodedKernel& kernel, const LaunchSpec& spec, uint64_t cta, LaunchState* state,
              CtaContext* context) {
  LaunchState& launch = *state;
  const uint32_t threads = spec.block[0] * spec.block[1] * spec.block[2];
  launch.ctaid[0] = static_cast<uint32_t>(cta % spec.grid[0]);
  launch.ctaid[1] = static_cast<uint32_t>((cta / spec.grid[0]) % spec.grid[1]);
  launch.ctaid[2] = static_cast<uint32_t>(cta / (uint64_t{spec.grid[0]} * spec.grid[1]));
  launch.cta_linear = static_cast<uint32_t>(cta);
  if (launch.shared_size) std::memset(launch.shared, 0, launch.shared_size);
  for (int id = 0; id < LaunchState::kBarriers; ++id) ResetBarrier(launch, id);
  launch.active_barriers = 0;
  launch.cluster_waiting = 0;
  // Its place in its cluster: %clusterid, %cluster_ctaid and %cluster_ctarank.
  const uint32_t* shape = launch.cluster_shape;
  uint32_t clusterid[3], cluster_ctaid[3];
  for (int axis = 0; axis < 3; ++axis) {
    clusterid[axis] = launch.ctaid[axis] / shape[axis];
    cluster_ctaid[axis] = launch.ctaid[axis] % shape[axis];
  }
  launch.cluster_rank = cluster_ctaid[0] + shape[0] * (cluster_ctaid[1] + shape[1] * cluster_ctaid[2]);
  for (uint32_t i = 0; i < context->warps.size(); ++i) {
    Warp& w = context->warps[i];
    uint32_t lanes = std::min<uint32_t>(32, threads - i * 32);
    w.live = lanes == 32 ? kFullMask : ((1u << lanes) - 1);
    w.waiting = 0;
    w.uniform = true;
    w.pc = 0;
    w.spin_mask = w.spin = w.deferred = w.defer_left = 0;
    w.yield = false;
    w.spin_load = nullptr;
    w.cluster_arrived = 0;
    for (int axis = 0; axis < 3; ++axis) {
      if (kernel.ctaid[axis] >= 0) std::fill_n(w.R(kernel.ctaid[axis]), 32, launch.ctaid[axis]);
      if (kernel.clusterid[axis] >= 0) std::fill_n(w.R(kernel.clusterid[axis]), 32, clusterid[axis]);
      if (kernel.cluster_ctaid[axis] >= 0) std::fill_n(w.R(kernel.cluster_ctaid[axis]), 32, cluster_ctaid[axis]);
    }
    if (kernel.cluster_ctarank >= 0) std::fill_n(w.R(kernel.cluster_ctarank), 32, launch.cluster_rank);
    if (kernel.smid >= 0) std::fill_n(w.R(kernel.smid), 32, cta % spec.sm_count);
  }
}

// Releases every barrier that is complete: a barrier given a thread count once that many
// threads arrived (bar.sync and bar.red wait, bar.arrive does not), a barrier without one
// once every live lane of the CTA waits there. True if any was.
bool ReleaseBarriers(CtaContext* context, LaunchState* state, const Inst* code) {
  LaunchState& launch = *state;
  uint32_t live = 0;
  for (const Warp& w : context->warps) live += __builtin_popcount(w.live);
  bool released = false;
  for (uint32_t active = launch.active_barriers; active != 0; active &= active - 1) {
    const int id = __builtin_ctz(active);
    const uint32_t expected = launch.barrier_expected[id];
    bool complete = expected != 0 ? launch.barrier_arrived[id] >= expected : launch.barrier_waiting[id] >= live;
    if (!complete) continue;
    for (Warp& w : context->warps) ReleaseBarrier(w, code, id);
    ResetBarrier(launch, id);
    launch.active_barriers &= ~(1u << id);
    released = true;
  }
  return released;
}

// One block of a cluster: its warps and state.
struct ClusterMember {
  CtaContext* context;
  LaunchState* state;
};

// Completes the phase of the cluster's barrier once every running thread of the cluster
// has arrived (barrier.cluster.arrive; threads that exited count no more): the lanes
// waiting at it go on, and every lane's arrival is cleared for the next phase. True if it
// did.
bool ReleaseClusterBarrier(std::span<const ClusterMember> members, const Inst* code) {
  for (const ClusterMember& member : members) {
    for (const Warp& w : member.context->warps) {
      if ((w.live & ~w.cluster_arrived) != 0) return false;
    }
  }
  for (const ClusterMember& member : members) {
    for (Warp& w : member.context->warps) {
      w.cluster_arrived = 0;
      ReleaseBarrier(w, code, kClusterBarrierId);
    }
    member.state->cluster_waiting = 0;
  }
  return true;
}

// Why a CTA whose every live thread waits at a barrier can go no further: its coordinates
// and, for each barrier waited at, the threads waiting and what it needs.
std::string DeadlockDetail(const CtaContext& context, const LaunchState& launch) {
  uint32_t live = 0;
  for (const Warp& w : context.warps) live += __builtin_popcount(w.live);
  std::string text = "deadlock: every running thread of block (" + std::to_string(launch.ctaid[0]) + "," +
                     std::to_string(launch.ctaid[1]) + "," + std::to_string(launch.ctaid[2]) +
                     ") waits at a barrier that cannot complete (";
  bool first = true;
  for (uint32_t active = launch.active_barriers; active != 0; active &= active - 1) {
    const int id = __builtin_ctz(active);
    if (launch.barrier_waiting[id] == 0) continue;
    if (!first) text += "; ";
    first = false;
    text += "barrier " + std::to_string(id) + ": " + std::to_string(launch.barrier_waiting[id]) + " threads waiting, ";
    text += launch.barrier_expected[id] != 0
                ? std::to_string(launch.barrier_arrived[id]) + " of the " +
                      std::to_string(launch.barrier_expected[id]) + " its count names arrived"
                : "all " + std::to_string(live) + " running threads needed";
  }
  if (launch.cluster_waiting != 0) {
    if (!first) text += "; ";
    text += "the cluster's barrier: " + std::to_string(launch.cluster_waiting) +
            " threads waiting, every running thread of the cluster needed";
  }
  return text + ")";
}

// One round of a CTA: each warp with lanes ready runs for a slice; a barrier that is
// complete is released. False once every warp has exited (or on an error).
bool StepCta(CtaContext* context, LaunchState* state, const Inst* code) {
  LaunchState& launch = *state;
  // A round is a bounded number of warp instructions (a slice per warp): a cancelled
  // launch ends here, however long its kernel would run.
  if (launch.spec->cancel != nullptr && launch.spec->cancel->load(std::memory_order_relaxed)) {
    launch.error = kLaunchTimeout;
    launch.detail = kCancelledDetail;
    return false;
  }
  bool any_live = false;
  bool any_ready = false;
  for (Warp& w : context->warps) {
    if (w.live & ~w.waiting) RunWarp(w, code);
    if (launch.error != kSuccess) return false;
    any_live |= w.live != 0;
    any_ready |= (w.live & ~w.waiting) != 0;
  }
  if (!any_live) return false;
  bool released = launch.active_barriers != 0 && ReleaseBarriers(context, state, code);
  if (launch.cluster_waiting != 0 && launch.cluster == nullptr) {
    // A cluster of this one block.
    const ClusterMember self{context, state};
    released |= ReleaseClusterBarrier(std::span(&self, 1), code);
  }
  // Threads waiting at the barrier of a cluster of several blocks wait for the others:
  // RunClusters tells a deadlock there.
  if (!released && !any_ready && (launch.cluster == nullptr || launch.cluster_waiting == 0)) {
    // Every live lane waits, at barriers that cannot complete (counts that the waiting
    // threads do not reach, or threads split over two barriers): a GPU would hang until
    // the job's time ran out. Nothing outside the CTA can release a barrier of its own, so
    // this is the tenant's deadlock, told apart for certain: the launch fails naming it
    // (releasing the threads instead would run on with wrong answers).
    launch.error = kLaunchFailed;
    launch.detail = DeadlockDetail(*context, launch);
    return false;
  }
  return true;
}

// What another state of the worker's CTAs leaves in *state: its printf text, instruction
// counts and, if it is of a lower CTA than *state's, its error.
void MergeInto(LaunchState* state, const LaunchState& other) {
  AppendPrintf(&state->printf, other.printf, &state->printf_dropped);
  state->printf_dropped += other.printf_dropped;
  state->thread_instructions += other.thread_instructions;
  if (other.error != kSuccess && (state->error == kSuccess || other.cta_linear < state->cta_linear)) {
    state->error = other.error;
    state->detail = other.detail;
    state->cta_linear = other.cta_linear;
  }
}

// How many CTAs of this launch one worker keeps resident once a CTA seems to wait for
// others: its share of what the GPU holds at once (blocks per SM by threads and shared
// memory, as on sm_80 and later: 2048 threads, 32 blocks, 228 KiB), within the memory a
// cooperative launch may take.
uint64_t ResidentPerWorker(const DecodedKernel& kernel, const LaunchSpec& spec, uint32_t workers) {
  const uint64_t threads = uint64_t{spec.block[0]} * spec.block[1] * spec.block[2];
  const uint64_t warps = (threads + 31) / 32;
  const uint64_t shared = kernel.static_shared + spec.dynamic_shared;
  uint64_t per_sm = std::min<uint64_t>(32, std::max<uint64_t>(1, 2048 / (warps * 32)));
  if (shared > 0) per_sm = std::min<uint64_t>(per_sm, std::max<uint64_t>(1, 228 * 1024 / shared));
  // What PrepareCta allocates for one: registers, local and shared memory, range hints.
  const uint64_t per_cta = warps * 32 * (uint64_t{kernel.slot_count} * 8 + kernel.local_size) + shared +
                           kernel.code.size() * sizeof(uint32_t) + 4096;
  uint64_t resident = uint64_t{std::max(spec.sm_count, 1u)} * per_sm;
  resident = std::min(resident, std::max<uint64_t>(1, kMaxCooperativeBytes / per_cta));
  return std::max<uint64_t>(1, (resident + workers - 1) / workers);
}

// Runs the worker's CTAs from `cta` on (cta, cta + stride, ...) with several resident at
// once, taking turns with short slices: `cta` itself is under way in *state and *context;
// the others get states and contexts of their own. The resident CTAs double, up to what a
// GPU of the model holds (ResidentPerWorker), each time they together run
// kResidentAfter warp instructions per CTA with none finishing: CTAs waiting for others
// soon have them resident, while long CTAs that do finish stay few (their memory, and
// the slices' switching, cost little). Their printf text, instruction counts and first
// error end up in *state.
void RunResident(const DecodedKernel& kernel, const LaunchSpec& spec, uint64_t cta, uint64_t stride, uint32_t workers,
                 std::atomic<bool>* stop, LaunchState* state, CtaContext* context) {
  const Inst* code = kernel.code.data();
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  const uint64_t limit = ResidentPerWorker(kernel, spec, workers);
  struct Slot {
    LaunchState* state;
    CtaContext* context;
    bool running;
  };
  std::vector<std::unique_ptr<LaunchState>> own_states;
  std::vector<std::unique_ptr<CtaContext>> own_contexts;
  state->slice = kCooperativeWarpSlice;
  std::vector<Slot> slots{{state, context, true}};
  uint64_t next = cta + stride;
  auto start_next = [&](Slot& slot) {
    if (next >= ctas || stop->load(std::memory_order_relaxed)) return false;
    if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
    StartCta(kernel, spec, next, slot.state, slot.context);
    next += stride;
    return true;
  };
  auto instructions = [&] {
    uint64_t total = 0;
    for (const Slot& slot : slots) total += slot.state->clock;
    return total;
  };
  uint64_t wanted = 2;
  uint64_t epoch_start = instructions();
  bool finished_in_epoch = false;
  for (bool any = true; any;) {
    while (slots.size() < std::min(wanted, limit) && next < ctas) {
      own_states.push_back(std::make_unique<LaunchState>());
      own_contexts.push_back(std::make_unique<CtaContext>());
      own_states.back()->slice = kCooperativeWarpSlice;
      PrepareCta(kernel, spec, own_states.back().get(), own_contexts.back().get());
      slots.push_back({own_states.back().get(), own_contexts.back().get(), false});
      slots.back().running = start_next(slots.back());
    }
    // Short turns while CTAs share the thread; a CTA left alone runs as RunCtas runs it.
    size_t running = 0;
    for (const Slot& slot : slots) running += slot.running;
    any = false;
    for (Slot& slot : slots) {
      if (!slot.running) continue;
      any = true;
      slot.state->slice = running > 1 ? kCooperativeWarpSlice : kWarpSlice;
      if (StepCta(slot.context, slot.state, code)) continue;
      finished_in_epoch = true;
      if (slot.state->error != kSuccess) {
        stop->store(true);
        slot.running = false;
        continue;
      }
      slot.running = start_next(slot);
    }
    // Another worker failed: its CTAs will never arrive; the waiting ones are abandoned.
    if (stop->load(std::memory_order_relaxed)) break;
    if (const uint64_t now = instructions(); now - epoch_start > kResidentAfter * slots.size()) {
      if (!finished_in_epoch) wanted = std::min(limit, wanted * 2);
      epoch_start = now;
      finished_in_epoch = false;
    }
  }
  for (size_t i = 1; i < slots.size(); ++i) MergeInto(state, *slots[i].state);
}

// Runs CTAs first, first + stride, ... of the launch into *state (one worker thread of
// `workers`), one at a time until one seems to wait for others (RunResident).
void RunCtas(const DecodedKernel& kernel, const LaunchSpec& spec, uint64_t first, uint64_t stride,
             std::atomic<bool>* stop, LaunchState* state, CtaContext* cta_context) {
  CtaContext& context = *cta_context;
  PrepareCta(kernel, spec, state, &context);
  const Inst* code = kernel.code.data();
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  for (uint64_t cta = first; cta < ctas; cta += stride) {
    if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
    if (stop->load(std::memory_order_relaxed)) break;
    StartCta(kernel, spec, cta, state, &context);
    const uint64_t started = state->clock;
    while (StepCta(&context, state, code)) {
      if (state->clock - started > kResidentAfter && cta + stride < ctas) {
        RunResident(kernel, spec, cta, stride, static_cast<uint32_t>(stride), stop, state, &context);
        return;
      }
    }
    if (state->error != kSuccess) {
      stop->store(true);
      break;
    }
  }
}

// A cooperative launch: every CTA resident at once, each with a state of its own, taking
// rounds on this thread until all have exited. A CTA spinning on memory that another
// will write (grid.sync()) uses its slice and lets the others run.
void RunCooperative(const DecodedKernel& kernel, const LaunchSpec& spec, std::vector<LaunchState>* states) {
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  states->resize(ctas);
  std::vector<CtaContext> contexts(ctas);
  for (uint64_t cta = 0; cta < ctas; ++cta) {
    // Short turns: a warp waiting for the other CTAs spins until its turn ends.
    (*states)[cta].slice = kCooperativeWarpSlice;
    PrepareCta(kernel, spec, &(*states)[cta], &contexts[cta]);
    StartCta(kernel, spec, cta, &(*states)[cta], &contexts[cta]);
  }
  const Inst* code = kernel.code.data();
  std::vector<bool> running(ctas, true);
  for (uint64_t left = ctas; left > 0;) {
    for (uint64_t cta = 0; cta < ctas; ++cta) {
      if (!running[cta]) continue;
      if (!StepCta(&contexts[cta], &(*states)[cta], code)) {
        if ((*states)[cta].error != kSuccess) return;
        running[cta] = false;
        --left;
        if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
}

// Why a cluster's blocks can go no further: every running thread of it waits, at the
// cluster's barrier or at barriers of its block, and nothing can release them.
std::string ClusterDeadlockDetail(std::span<const ClusterMember> members) {
  uint32_t waiting = 0, at_blocks = 0;
  for (const ClusterMember& member : members) {
    waiting += member.state->cluster_waiting;
    for (const Warp& w : member.context->warps) at_blocks += __builtin_popcount(w.waiting);
  }
  at_blocks -= waiting;
  const LaunchState& first = *members.front().state;
  return "deadlock: every running thread of the cluster of block (" + std::to_string(first.ctaid[0]) + "," +
         std::to_string(first.ctaid[1]) + "," + std::to_string(first.ctaid[2]) + ") waits (" + std::to_string(waiting) +
         " at the cluster's barrier, " + std::to_string(at_blocks) +
         " at barriers of their block) and none can complete";
}

// Runs the clusters first, first + stride, ... of the launch (one worker thread of
// `stride`), each with its blocks resident together on this thread, taking short turns: a
// block may wait at the cluster's barrier for the others, or spin on what they write into
// its shared memory. The blocks' printf text, instruction counts and first error end up in
// *state.
void RunClusters(const DecodedKernel& kernel, const LaunchSpec& spec, uint64_t first, uint64_t stride,
                 std::atomic<bool>* stop, LaunchState* state) {
  uint32_t shape[3];
  if (ClusterShapeOf(kernel, spec, shape, nullptr) != kSuccess) return;  // RunKernel refused it
  const uint32_t blocks = shape[0] * shape[1] * shape[2];
  const uint32_t clusters_of[3] = {spec.grid[0] / shape[0], spec.grid[1] / shape[1], spec.grid[2] / shape[2]};
  const uint64_t clusters = uint64_t{clusters_of[0]} * clusters_of[1] * clusters_of[2];
  std::vector<LaunchState> states(blocks);
  std::vector<CtaContext> contexts(blocks);
  std::vector<ClusterMember> members;
  ClusterBlocks cluster;
  for (uint32_t rank = 0; rank < blocks; ++rank) {
    states[rank].slice = kCooperativeWarpSlice;
    PrepareCta(kernel, spec, &states[rank], &contexts[rank]);
    states[rank].cluster = &cluster;
    cluster.blocks.push_back(&states[rank]);
    members.push_back({&contexts[rank], &states[rank]});
  }
  const Inst* code = kernel.code.data();
  std::vector<bool> running(blocks);
  for (uint64_t c = first; c < clusters && !stop->load(std::memory_order_relaxed); c += stride) {
    const uint64_t at[3] = {c % clusters_of[0], (c / clusters_of[0]) % clusters_of[1],
                            c / (uint64_t{clusters_of[0]} * clusters_of[1])};
    for (uint32_t rank = 0; rank < blocks; ++rank) {
      const uint64_t ctaid[3] = {at[0] * shape[0] + rank % shape[0], at[1] * shape[1] + (rank / shape[0]) % shape[1],
                                 at[2] * shape[2] + rank / (shape[0] * shape[1])};
      const uint64_t cta = ctaid[0] + spec.grid[0] * (ctaid[1] + uint64_t{spec.grid[1]} * ctaid[2]);
      if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
      StartCta(kernel, spec, cta, &states[rank], &contexts[rank]);
      running[rank] = true;
    }
    // Rounds until every block has exited. Two rounds in a row in which no warp ran an
    // instruction and the cluster's barrier did not complete: a deadlock (a round after a
    // block's own barrier completes runs its threads).
    for (int idle_rounds = 0;;) {
      bool any = false, ran = false;
      for (uint32_t rank = 0; rank < blocks; ++rank) {
        if (!running[rank]) continue;
        const uint64_t before = states[rank].clock;
        if (!StepCta(&contexts[rank], &states[rank], code)) {
          running[rank] = false;
          if (states[rank].error != kSuccess) {
            stop->store(true);
            break;
          }
          continue;
        }
        any = true;
        ran |= states[rank].clock != before;
      }
      if (!any || stop->load(std::memory_order_relaxed)) break;
      bool waiting = false;
      for (const LaunchState& block : states) waiting |= block.cluster_waiting != 0;
      if (waiting && ReleaseClusterBarrier(members, code)) ran = true;
      idle_rounds = ran ? 0 : idle_rounds + 1;
      if (idle_rounds == 2) {
        states[0].error = kLaunchFailed;
        states[0].detail = ClusterDeadlockDetail(members);
        stop->store(true);
        break;
      }
    }
  }
  for (const LaunchState& block : states) MergeInto(state, block);
}

}  // namespace
}  // namespace gpupool::sim::interp

namespace gpupool::sim {

// The interpreter tier's entry runs its scheduler (interp::RunCtas, RunCooperative).
using namespace interp;

uint64_t CooperativeCtaBytes(const DecodedKernel& kernel, uint32_t threads, uint64_t shared_size) {
  const uint64_t warps = (uint64_t{threads} + 31) / 32;
  return warps * 32 * (uint64_t{kernel.slot_count} * 8 + kernel.local_size) + shared_size + sizeof(LaunchState);
}

uint64_t CooperativeBytesLimit() { return kMaxCooperativeBytes; }

uint32_t CooperativeRegisters(const DecodedKernel& kernel, uint32_t sm_count) {
  // What a multiprocessor may hold of a cooperative grid in host memory: its share of the
  // budget, a quarter kept back for the compiled tier's own bookkeeping (its warp slots and
  // resume points), less the most shared memory and block states occupancy lets it hold (the
  // largest shared memory of any model, 228 KiB, and 32 blocks).
  constexpr uint64_t kMostSharedPerMultiprocessor = 228 * 1024, kMostBlocksPerMultiprocessor = 32;
  constexpr uint64_t kRegistersPerMultiprocessor = 65536, kMostThreadsPerMultiprocessor = 2048;
  // At most 64: a block of 1024 threads stays launchable (64 x 1024 = a block's registers),
  // as it is on the sim whatever the kernel. A grid that needs more is refused at launch.
  constexpr uint64_t kMostRegisters = 64;
  const uint64_t per_thread = uint64_t{kernel.slot_count} * 8 + kernel.local_size;
  const uint64_t budget = kMaxCooperativeBytes / 4 * 3 / std::max<uint64_t>(sm_count, 1);
  const uint64_t fixed = kMostSharedPerMultiprocessor + kMostBlocksPerMultiprocessor * sizeof(LaunchState);
  if (budget <= fixed) return kMostRegisters;
  const uint64_t threads = (budget - fixed) / std::max<uint64_t>(per_thread, 1);
  if (threads >= kMostThreadsPerMultiprocessor) return 0;
  // Registers are allocated per warp in units of 256 (8 a thread): a multiple of 8 whose
  // register file holds at most `threads` threads.
  uint64_t registers =
      (kRegistersPerMultiprocessor + std::max<uint64_t>(threads, 1) - 1) / std::max<uint64_t>(threads, 1);
  registers = (registers + 7) / 8 * 8;
  return static_cast<uint32_t>(std::min(registers, kMostRegisters));
}

int32_t RunInterpreted(const DecodedKernel& kernel, const LaunchSpec& spec, uint32_t workers) {
  const uint32_t threads = spec.block[0] * spec.block[1] * spec.block[2];
  const uint64_t shared_size = kernel.static_shared + spec.dynamic_shared;
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  std::vector<LaunchState> cooperative_states;
  LaunchState worker_states[kMaxWorkers];
  std::span<LaunchState> states;
  if (spec.cooperative) {
    // All CTAs at once: their registers, local and shared memory together must fit.
    const uint64_t per_cta = CooperativeCtaBytes(kernel, threads, shared_size);
    if (ctas > kMaxCooperativeCtas || per_cta * ctas > kMaxCooperativeBytes) {
      if (spec.error_detail) {
        *spec.error_detail =
            "a cooperative launch of " + std::to_string(ctas) + " blocks does not fit the sim GPU at once";
      }
      return kCooperativeTooLarge;
    }
    RunCooperative(kernel, spec, &cooperative_states);
    states = cooperative_states;
  } else if (uint32_t shape[3];
             ClusterShapeOf(kernel, spec, shape, nullptr) == kSuccess && shape[0] * shape[1] * shape[2] > 1) {
    std::atomic<bool> stop{false};
    const uint64_t clusters = ctas / (shape[0] * shape[1] * shape[2]);
    const uint32_t cluster_workers = clusters >= workers ? workers : 1;
    states = std::span<LaunchState>(worker_states, cluster_workers);
    RunOnWorkers(cluster_workers, [&](uint32_t worker, bool) {
      try {
        RunClusters(kernel, spec, worker, cluster_workers, &stop, &states[worker]);
      } catch (const std::exception&) {
        states[worker].error = kOutOfResources;
        states[worker].detail = "the launch ran out of host memory";
        states[worker].cta_linear = 0;
        stop.store(true);
      }
    });
  } else {
    std::atomic<bool> stop{false};
    states = std::span<LaunchState>(worker_states, workers);
    // No exception leaves a worker (a helper thread's would end the process): a worker
    // that runs out of host memory fails the launch.
    auto run = [&](uint32_t worker, CtaContext* context) {
      try {
        RunCtas(kernel, spec, worker, workers, &stop, &states[worker], context);
      } catch (const std::exception&) {
        *context = CtaContext{};
        states[worker].error = kOutOfResources;
        states[worker].detail = "the launch ran out of host memory";
        states[worker].cta_linear = 0;
        stop.store(true);
      }
    };
    // Workers on the calling thread reuse its kept context (CallerContext); the others
    // have their own.
    CtaContext* caller_context = CallerContext();
    RunOnWorkers(workers, [&](uint32_t worker, bool on_calling_thread) {
      if (on_calling_thread) {
        run(worker, caller_context);
      } else {
        CtaContext context;
        run(worker, &context);
      }
    });
    TrimCallerContext(caller_context);
  }
  FirstFailure failure;
  for (LaunchState& state : states) {
    if (spec.printf_out != nullptr) {
      uint64_t dropped = state.printf_dropped;
      AppendPrintf(spec.printf_out, state.printf, &dropped);
      if (spec.printf_dropped != nullptr) *spec.printf_dropped += dropped;
    }
    if (spec.thread_instructions) *spec.thread_instructions += state.thread_instructions;
    if (failure.Offer(state.error, state.cta_linear) && spec.error_detail) {
      *spec.error_detail = state.detail;
    }
  }
  return failure.error();
}

}  // namespace gpupool::sim

// The interpreter's Warp-level operations: shfl, vote, match, redux, activemask, and the
// clock, fence and no-op handlers. Private interface: warp_ops.h and internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/warp_ops.h"

namespace gpupool::sim::interp {

// shfl.sync.mode.b32 d[|p], a, b, c, membermask (mode: ShflMode)
void HShfl(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  uint64_t* p = in.d[1] >= 0 ? w.R(in.d[1]) : nullptr;
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  uint64_t source[32];
  std::memcpy(source, a, sizeof(source));
  ForLanes(mask, [&](int lane) {
    uint32_t bval = b[lane] & 0x1f;
    uint32_t cval = c[lane] & 0x1f;
    uint32_t segmask = (c[lane] >> 8) & 0x1f;
    int max_lane = static_cast<int>((lane & segmask) | (cval & ~segmask));
    int min_lane = static_cast<int>(lane & segmask);
    int j = lane;
    bool ok = false;
    switch (in.mode) {
      case kShflUp:
        j = lane - static_cast<int>(bval);
        ok = j >= max_lane;
        break;  // up
      case kShflDown:
        j = lane + static_cast<int>(bval);
        ok = j <= max_lane;
        break;  // down
      case kShflBfly:
        j = lane ^ static_cast<int>(bval);
        ok = j <= max_lane;
        break;  // bfly
      default:
        j = min_lane | static_cast<int>(bval & ~segmask);
        ok = j <= max_lane;
        break;  // idx
    }
    if (!ok || j < 0 || j > 31) j = lane;
    d[lane] = source[j];
    if (p) p[lane] = ok;
  });
}

// The lanes each lane's vote/match/redux.sync takes part with: its membermask (slot
// in.b) among the lanes executing. Lanes of a warp that run converged may name different
// groups: a cooperative_groups labeled_partition or a tiled partition of a coalesced
// group. Calls `each(group, lanes)` once per distinct group with the lanes naming it.
template <typename Each>
void ForMemberGroups(Warp& w, const Inst& in, uint32_t mask, Each each) {
  if (in.b < 0) {
    each(mask, mask);
    return;
  }
  const uint64_t* members = w.R(in.b);
  uint32_t left = mask;
  while (left != 0) {
    const uint32_t group = static_cast<uint32_t>(members[std::countr_zero(left)]) & mask;
    uint32_t lanes = 0;
    ForLanes(left, [&](int l) {
      if ((static_cast<uint32_t>(members[l]) & mask) == group) lanes |= 1u << l;
    });
    each(group, lanes);
    left &= ~lanes;
  }
}

// vote.sync.{all,any,uni,ballot} d, a, membermask: mode VoteMode;
// flag: !a. Over the lanes of each lane's membermask (a ballot has 0 for the others).
void HVote(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  bool negate = in.flags & kFlagSigned;
  uint32_t ballot = 0;
  ForLanes(mask, [&](int l) { ballot |= static_cast<uint32_t>(((a[l] & 1) != 0) != negate) << l; });
  ForMemberGroups(w, in, mask, [&](uint32_t group, uint32_t lanes) {
    const uint32_t votes = ballot & group;
    uint64_t r;
    switch (in.mode) {
      case kVoteAll:
        r = votes == group;
        break;
      case kVoteAny:
        r = votes != 0;
        break;
      case kVoteUni:
        r = votes == 0 || votes == group;
        break;
      default:
        r = votes;
        break;
    }
    ForLanes(lanes, [&](int l) { d[l] = r; });
  });
}

// match.any/all.sync.b32/b64 d[|p], a, membermask: among each lane's membermask.
void HMatch(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  uint64_t* p = in.d[1] >= 0 ? w.R(in.d[1]) : nullptr;
  const uint64_t* a = w.R(in.a);
  uint64_t keep = in.width == 8 ? ~0ull : 0xffffffffull;
  uint64_t values[32];
  ForLanes(mask, [&](int l) { values[l] = a[l] & keep; });
  ForMemberGroups(w, in, mask, [&](uint32_t group, uint32_t lanes) {
    bool all_same = true;
    uint32_t first = group ? static_cast<uint32_t>(std::countr_zero(group)) : 0;
    ForLanes(group, [&](int l) { all_same &= values[l] == values[first]; });
    ForLanes(lanes, [&](int l) {
      if (in.mode == kMatchAny) {
        uint32_t same = 0;
        ForLanes(group, [&](int k) { same |= static_cast<uint32_t>(values[k] == values[l]) << k; });
        d[l] = same;
      } else {
        d[l] = all_same ? group : 0;
        if (p) p[l] = all_same;
      }
    });
  });
}

// redux.sync (sm_80): every lane gets the reduction over the lanes of its membermask of the
// 32-bit values: mode the operation (ReduxOp); mode2 1: signed min/max.
void HRedux(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForMemberGroups(w, in, mask, [&](uint32_t group, uint32_t lanes) {
    uint32_t acc = in.mode == kReduxMin   ? (in.mode2 ? 0x7fffffffu : 0xffffffffu)
                   : in.mode == kReduxMax ? (in.mode2 ? 0x80000000u : 0u)
                   : in.mode == kReduxAnd ? 0xffffffffu
                                          : 0u;
    ForLanes(group, [&](int l) {
      uint32_t v = static_cast<uint32_t>(a[l]);
      switch (in.mode) {
        case kReduxAdd:
          acc += v;
          break;
        case kReduxMin:
          acc = in.mode2 ? static_cast<uint32_t>(std::min(static_cast<int32_t>(acc), static_cast<int32_t>(v)))
                         : std::min(acc, v);
          break;
        case kReduxMax:
          acc = in.mode2 ? static_cast<uint32_t>(std::max(static_cast<int32_t>(acc), static_cast<int32_t>(v)))
                         : std::max(acc, v);
          break;
        case kReduxAnd:
          acc &= v;
          break;
        case kReduxOr:
          acc |= v;
          break;
        default:
          acc ^= v;
          break;
      }
    });
    ForLanes(lanes, [&](int l) { d[l] = acc; });
  });
}

// elect.sync d|p, membermask (d[0] may be absent: the sink).
void HElect(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = in.d[0] >= 0 ? w.R(in.d[0]) : nullptr;
  uint64_t* p = w.R(in.d[1]);
  ForMemberGroups(w, in, mask, [&](uint32_t group, uint32_t lanes) {
    const int leader = std::countr_zero(group);
    ForLanes(lanes, [&](int l) {
      if (d) d[l] = static_cast<uint64_t>(leader);
      p[l] = l == leader;
    });
  });
}

void HActivemask(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  ForLanes(mask, [&](int l) { d[l] = mask; });
}

// mode: the register (ClockRegister).
void HClock(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  uint64_t value;
  if (in.mode == kClock || in.mode == kClock64) {
    value = w.launch->clock * 4;  // about 4 cycles per warp instruction
    if (in.mode == kClock) value &= 0xffffffffu;
  } else {
    value = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    if (in.mode == kGlobalTimerLo) value &= 0xffffffffu;
    if (in.mode == kGlobalTimerHi) value >>= 32;
  }
  ForLanes(mask, [&](int l) { d[l] = value; });
}

void HNop(Warp&, const Inst&, uint32_t) {}

// nanosleep: nothing to sleep for here, but a thread that sleeps is waiting for others (a
// spin-wait's back-off, libcu++'s atomic waits): its warp's turn ends (Warp::yield), so
// that the CTA's other warps run rather than the spin for the rest of a slice.
void HNanosleep(Warp& w, const Inst&, uint32_t) { w.yield = true; }

// fence.sc beyond the CTA: CTAs on the two worker threads see memory in x86-64's order,
// where a store may wait in the store buffer past a later load; a sequentially consistent
// fence (MFENCE) keeps them in program order, as the PTX memory model asks (a CTA that
// stores its flag, fences and reads the other's must not miss it while the other misses
// its own). Acquire and release orders x86-64 gives without a fence.
void HFenceSc(Warp&, const Inst&, uint32_t) { std::atomic_thread_fence(std::memory_order_seq_cst); }

void HZero(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  ForLanes(mask, [&](int l) { d[l] = 0; });
}

}  // namespace gpupool::sim::interp

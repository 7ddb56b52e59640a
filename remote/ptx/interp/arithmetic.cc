// The interpreter's integer, floating-point and bit arithmetic: add ... mad, min/max,
// setp/set/selp/slct, bfe/bfi, prmt, shf, lop3, popc/clz/bfind, cvta and isspacep. Private
// interface: arithmetic.h and internal.h.
#include "remote/ptx/bits.h"
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/arithmetic.h"

namespace gpupool::sim::interp {

#if defined(__x86_64__)
bool HostHasFma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

void HSelp(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanesIndependent(mask, [&](int l) { d[l] = (c[l] & 1) ? a[l] : b[l]; });
}

// slct.dtype.s32/f32 d, a, b, c: a when c >= 0.
void HSlct(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    bool pick_a = in.mode == kSlctF32 ? Get<float>(c[l]) >= 0.0f : Get<int32_t>(c[l]) >= 0;
    d[l] = pick_a ? a[l] : b[l];
  });
}

void HTestp(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForLanes(mask, [&](int l) {
    double v = in.width == 8 ? Get<double>(a[l]) : static_cast<double>(Get<float>(a[l]));
    int cls = in.width == 8 ? std::fpclassify(Get<double>(a[l])) : std::fpclassify(Get<float>(a[l]));
    bool r = false;
    switch (in.mode) {
      case kTestpFinite:
        r = std::isfinite(v);
        break;
      case kTestpInfinite:
        r = std::isinf(v);
        break;
      case kTestpNumber:
        r = !std::isnan(v);
        break;
      case kTestpNotANumber:
        r = std::isnan(v);
        break;
      case kTestpNormal:
        r = cls == FP_NORMAL;
        break;
      case kTestpSubnormal:
        r = cls == FP_SUBNORMAL;
        break;
    }
    d[l] = r;
  });
}

void HPrmt(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    uint64_t bytes = (static_cast<uint64_t>(static_cast<uint32_t>(b[l])) << 32) | static_cast<uint32_t>(a[l]);
    uint32_t selector = static_cast<uint32_t>(c[l]);
    uint32_t r = 0;
    if (in.mode == kPrmtDefault) {
      for (int i = 0; i < 4; ++i) {
        uint32_t s = (selector >> (4 * i)) & 0xf;
        uint32_t byte = (bytes >> (8 * (s & 7))) & 0xff;
        if (s & 8) byte = (byte & 0x80) ? 0xff : 0;
        r |= byte << (8 * i);
      }
    } else {
      // f4e, b4e, rc8, ecl, ecr, rc16
      uint32_t s = selector & 3;
      uint8_t bs[8];
      for (int i = 0; i < 8; ++i) bs[i] = (bytes >> (8 * i)) & 0xff;
      uint8_t out[4];
      switch (in.mode) {
        case kPrmtF4e:
          for (int i = 0; i < 4; ++i) out[i] = bs[(s + i) & 7];
          break;  // f4e
        case kPrmtB4e:
          for (int i = 0; i < 4; ++i) out[i] = bs[(s - i + 8) & 7];
          break;  // b4e
        case kPrmtRc8:
          for (int i = 0; i < 4; ++i) out[i] = bs[s];
          break;  // rc8
        case kPrmtEcl:
          // Edge clamp left: d's bytes 3 2 1 0 from 3 2 1 0, 3 2 1 1, 3 2 2 2, 3 3 3 3
          // (the PTX ISA's table).
          for (int i = 0; i < 4; ++i) out[i] = bs[std::max<uint32_t>(i, s)];
          break;
        case kPrmtEcr:
          // Edge clamp right: from 0 0 0 0, 1 1 1 0, 2 2 1 0, 3 2 1 0.
          for (int i = 0; i < 4; ++i) out[i] = bs[std::min<uint32_t>(i, s)];
          break;
        default:
          for (int i = 0; i < 4; ++i) out[i] = bs[(s & 1) * 2 + (i & 1)];
          break;  // rc16
      }
      r = out[0] | (out[1] << 8) | (out[2] << 16) | (static_cast<uint32_t>(out[3]) << 24);
    }
    d[l] = r;
  });
}

// shf.l/.r .wrap/.clamp.b32 d, a, b, c: funnel shift of b:a by c.
void HShf(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    uint64_t both = (static_cast<uint64_t>(static_cast<uint32_t>(b[l])) << 32) | static_cast<uint32_t>(a[l]);
    uint32_t n = static_cast<uint32_t>(c[l]);
    n = (in.mode2 == kShiftWrap) ? (n & 31) : std::min<uint32_t>(n, 32);
    d[l] = in.mode == kShfLeft ? static_cast<uint32_t>((both << n) >> 32) : static_cast<uint32_t>(both >> n);
  });
}

// fns.b32 d, mask, base, offset (__fns): FindNthSet (remote/ptx/bits.h), which compiled
// code calls too.
void HFns(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    d[l] = FindNthSet(static_cast<uint32_t>(a[l]), static_cast<uint32_t>(b[l]), static_cast<int32_t>(c[l]));
  });
}

// bmsk.{clamp,wrap}.b32 d, a, b: a mask of b bits from bit a (mode kShiftClamp; wrap takes
// a and b modulo 32), as the PTX ISA defines it: cut at bit 31, 0 when a >= 32 (clamp)
// or b is 0, all bits from a up when b >= 32 (clamp).
void HBmsk(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const bool clamp = in.mode == kShiftClamp;
  ForLanes(mask, [&](int l) {
    const uint32_t position = static_cast<uint32_t>(a[l]), width = static_cast<uint32_t>(b[l]);
    const uint32_t a1 = position & 0x1f, b1 = width & 0x1f, sum = a1 + b1;
    uint32_t mask0 = ~0u << a1;
    uint32_t mask1 = sum >= 32 ? 0 : ~0u << sum;
    bool overflow = sum >= 32;
    if (clamp && position >= 32) {
      mask0 = 0;
      overflow = true;
    }
    if (clamp && width >= 32) overflow = true;
    if (overflow) {
      mask1 = 0;
    } else if (b1 == 0) {
      mask1 = ~0u;
    }
    d[l] = mask0 & ~mask1;
  });
}

// lop3.b32 d, a, b, c, immLut
void HLop3(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  const uint64_t* e = w.R(in.e);
  ForLanes(mask, [&](int l) {
    uint32_t x = a[l], y = b[l], z = c[l], lut = e[l] & 0xff, r = 0;
    for (int i = 0; i < 8; ++i) {
      if (!((lut >> i) & 1)) continue;
      uint32_t term = ((i & 4) ? x : ~x) & ((i & 2) ? y : ~y) & ((i & 1) ? z : ~z);
      r |= term;
    }
    d[l] = r;
  });
}

// mov.b64 d, {a, b} (pack) and mov.b64 {a, b}, d (unpack): in.width = element
// bytes.
void HPack(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  int bits = in.width * 8;
  uint64_t element_mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
  const int32_t sources[4] = {in.a, in.b, in.c, in.e};
  ForLanes(mask, [&](int l) {
    uint64_t r = 0;
    for (int i = 0; i < in.vec; ++i) r |= (w.R(sources[i])[l] & element_mask) << (bits * i);
    d[l] = r;
  });
}
void HUnpack(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  int bits = in.width * 8;
  uint64_t element_mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
  ForLanes(mask, [&](int l) {
    uint64_t v = a[l];
    for (int i = 0; i < in.vec; ++i) {
      if (in.d[i] >= 0) w.R(in.d[i])[l] = (v >> (bits * i)) & element_mask;
    }
  });
}

// cvta / cvta.to: mode kCvtaToGeneric (add the window) or kCvtaToSpace (subtract it).
void HCvta(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  uint64_t window = static_cast<uint64_t>(in.offset);
  uint64_t keep = in.width == 4 ? 0xffffffffull : ~0ull;
  if (in.mode == kCvtaToGeneric) {
    ForLanesIndependent(mask, [&](int l) { d[l] = (a[l] & keep) + window; });
  } else {
    ForLanesIndependent(mask, [&](int l) { d[l] = (a[l] - window) & keep; });
  }
}

// isspacep.space p, a (Inst::mode: the space; mode2 1 for .shared::cta, whose addresses
// are the executing block's own).
void HIsspacep(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t own_field = uint64_t{w.launch->cluster_rank} + 1;
  ForLanes(mask, [&](int l) {
    uint64_t v = a[l];
    bool shared = v >= kSharedWindow && v < kSharedWindow + kWindowSize;
    if (shared && in.mode2 == 1) {
      const uint64_t field = (v - kSharedWindow) >> kClusterRankShift;
      shared = field == 0 || field == own_field;
    }
    bool local = v >= kLocalWindow && v < kLocalWindow + kWindowSize;
    bool param = v >= kParamWindow && v < kParamWindow + kWindowSize;
    switch (static_cast<Space>(in.mode)) {
      case Space::kShared:
        d[l] = shared;
        break;
      case Space::kLocal:
        d[l] = local;
        break;
      case Space::kParam:
        d[l] = param;
        break;
      default:
        d[l] = !shared && !local && !param;
        break;
    }
  });
}

// mapa{.shared::cluster}.type d, a, rank: the address of the variable at `a` (the
// executing block's shared memory) in the block of that rank in the cluster. Inst::offset:
// the window (kSharedWindow for generic addresses, 0 for .shared::cluster ones); width 4 or 8.
void HMapa(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* rank = w.R(in.b);
  const uint64_t window = static_cast<uint64_t>(in.offset);
  const uint64_t keep = in.width == 4 ? 0xffffffffull : ~0ull;
  ForLanesIndependent(mask, [&](int l) {
    const uint64_t offset = (a[l] - window) & kSharedOffsetMask;
    // A rank outside the cluster gives an address no block has: using it faults.
    const uint64_t field = std::min<uint64_t>(static_cast<uint32_t>(rank[l]), kMaxClusterBlocks) + 1;
    d[l] = (window + (field << kClusterRankShift) + offset) & keep;
  });
}

// getctarank{.shared::cluster}.u32 d, a: the rank in the cluster of the block whose shared
// memory holds `a` (Inst::offset: the window, as HMapa).
void HGetctarank(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t window = static_cast<uint64_t>(in.offset);
  const uint64_t own = w.launch->cluster_rank;
  ForLanesIndependent(mask, [&](int l) {
    const uint64_t field = ((a[l] - window) >> kClusterRankShift) & 0x1f;
    d[l] = field == 0 ? own : field - 1;
  });
}

}  // namespace gpupool::sim::interp

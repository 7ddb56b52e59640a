// What of handler_tables.cc the other files of interp/ use (private to interp/).
// Templates: instantiated where the decoder names them.
#pragma once

#include <string_view>

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/arithmetic.h"
#include "remote/ptx/interp/memory.h"

namespace gpupool::sim::interp {

enum Ty : uint8_t {
  kU8,
  kU16,
  kU32,
  kU64,
  kS8,
  kS16,
  kS32,
  kS64,
  kF16,
  kF32,
  kF64,
  kPred,
  kF16x2,  // two halves in a .b32
  kBF16,
  kBF16x2,
  kNoType
};

// The interpreter's type of a type suffix (front/types.h's table; .bN as .uN); kNoType for
// a word that is none.
Ty ParseType(std::string_view suffix);
int TySize(Ty t);
bool TySigned(Ty t);
bool TyFloat(Ty t);
bool TyHalf(Ty t);

template <template <typename> class H>
Handler ByIntType(Ty t) {
  switch (t) {
    case kU8:
      return &H<uint8_t>::run;
    case kU16:
      return &H<uint16_t>::run;
    case kU32:
      return &H<uint32_t>::run;
    case kU64:
      return &H<uint64_t>::run;
    case kS8:
      return &H<int8_t>::run;
    case kS16:
      return &H<int16_t>::run;
    case kS32:
      return &H<int32_t>::run;
    case kS64:
      return &H<int64_t>::run;
    case kPred:
      return &H<uint8_t>::run;
    default:
      return nullptr;
  }
}
template <template <typename> class H>
Handler ByType(Ty t) {
  if (t == kF32) return &H<float>::run;
  if (t == kF64) return &H<double>::run;
  return ByIntType<H>(t);
}

#define GPUPOOL_WRAP_BIN(NAME, OP)                                                     \
  template <typename T>                                                                \
  struct NAME {                                                                        \
    static void run(Warp& w, const Inst& in, uint32_t m) { HBinary<T, OP>(w, in, m); } \
  };
GPUPOOL_WRAP_BIN(WAdd, kAdd)
GPUPOOL_WRAP_BIN(WSub, kSub)
GPUPOOL_WRAP_BIN(WMul, kMul)
GPUPOOL_WRAP_BIN(WMulHi, kMulHi)
GPUPOOL_WRAP_BIN(WDiv, kDiv)
GPUPOOL_WRAP_BIN(WRem, kRem)
GPUPOOL_WRAP_BIN(WMin, kMin)
GPUPOOL_WRAP_BIN(WMax, kMax)

// add, sub, mul, fma, div, sqrt and rcp on f32/f64 with .rz, .rm or .rp (__fadd_rz,
// __dmul_ru, __fdiv_rd, __fsqrt_ru...): the round-to-nearest handler (DecodedKernel::
// inner[in.aux]) run with the host's rounding mode set to kMode, then set back. The
// handler reads its operands after fesetround and stores its results before the second
// call (opaque calls that may touch memory), so the host operations fall in between.
template <int kMode>
void HDirectedRounding(Warp& w, const Inst& in, uint32_t mask) {
  const int saved = std::fegetround();
  std::fesetround(kMode);
  w.launch->kernel->inner[in.aux](w, in, mask);
  std::fesetround(saved);
}

void HByteDot(Warp& w, const Inst& in, uint32_t mask);
// vadd, vsub, vabsdiff, vmin, vmax, vshl, vshr (VideoOp): the PTX ISA's semantics, in
// wider integers than the operands, then .sat and the secondary operation with c.
void HVideo(Warp& w, const Inst& in, uint32_t mask);

// min.NaN.f32 / max.NaN.f32: the canonical NaN when an operand is NaN, else min or max.
template <bool kIsMax>
void HMinMaxNaN(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  ForLanes(mask, [&](int l) {
    const float x = Get<float>(a[l]), y = Get<float>(b[l]);
    if (std::isnan(x) || std::isnan(y)) {
      d[l] = 0x7fffffffu;
      return;
    }
    d[l] = Put<float>(FixFloat(PtxMinMax<float, kIsMax>(x, y, true), in.flags));
  });
}
GPUPOOL_WRAP_BIN(WAnd, kAnd)
GPUPOOL_WRAP_BIN(WOr, kOr)
GPUPOOL_WRAP_BIN(WXor, kXor)
GPUPOOL_WRAP_BIN(WShl, kShl)
GPUPOOL_WRAP_BIN(WShr, kShr)
GPUPOOL_WRAP_BIN(WCopysign, kCopysign)
GPUPOOL_WRAP_BIN(WMul24, kMul24)
GPUPOOL_WRAP_BIN(WMul24Hi, kMul24Hi)
#undef GPUPOOL_WRAP_BIN

#define GPUPOOL_WRAP_UN(NAME, OP)                                                     \
  template <typename T>                                                               \
  struct NAME {                                                                       \
    static void run(Warp& w, const Inst& in, uint32_t m) { HUnary<T, OP>(w, in, m); } \
  };
GPUPOOL_WRAP_UN(WMov, kMov)
GPUPOOL_WRAP_UN(WNeg, kNeg)
GPUPOOL_WRAP_UN(WAbs, kAbs)
GPUPOOL_WRAP_UN(WNot, kNot)
GPUPOOL_WRAP_UN(WCnot, kCnot)
GPUPOOL_WRAP_UN(WBrev, kBrev)
GPUPOOL_WRAP_UN(WSqrt, kSqrt)
GPUPOOL_WRAP_UN(WRsqrt, kRsqrt)
GPUPOOL_WRAP_UN(WRcp, kRcp)
GPUPOOL_WRAP_UN(WSin, kSin)
GPUPOOL_WRAP_UN(WCos, kCos)
GPUPOOL_WRAP_UN(WLg2, kLg2)
GPUPOOL_WRAP_UN(WEx2, kEx2)
GPUPOOL_WRAP_UN(WTanh, kTanh)
#undef GPUPOOL_WRAP_UN

#define GPUPOOL_WRAP(NAME, FN)                                                \
  template <typename T>                                                       \
  struct NAME {                                                               \
    static void run(Warp& w, const Inst& in, uint32_t m) { FN<T>(w, in, m); } \
  };
GPUPOOL_WRAP(WSetp, HSetp)
GPUPOOL_WRAP(WSet, HSet)
GPUPOOL_WRAP(WAtom, HAtom)
GPUPOOL_WRAP(WBfe, HBfe)
GPUPOOL_WRAP(WBfi, HBfi)
GPUPOOL_WRAP(WSad, HSad)
GPUPOOL_WRAP(WCarry, HCarry)
GPUPOOL_WRAP(WMad24, HMad24)
#undef GPUPOOL_WRAP
template <typename T>
struct WMadLo {
  static void run(Warp& w, const Inst& in, uint32_t m) { HMad<T, 0>(w, in, m); }
};
template <typename T>
struct WMadHi {
  static void run(Warp& w, const Inst& in, uint32_t m) {
    if constexpr (sizeof(T) >= 2)
      HMad<T, 1>(w, in, m);
    else
      HMad<T, 0>(w, in, m);
  }
};
template <typename T>
struct WFma {
  static void run(Warp& w, const Inst& in, uint32_t m) {
    if constexpr (std::is_floating_point_v<T>)
      HMad<T, 2>(w, in, m);
    else
      HMad<T, 0>(w, in, m);
  }
};
template <typename T>
struct WMulWide {
  static void run(Warp& w, const Inst& in, uint32_t m) {
    if constexpr (sizeof(T) == 2 || sizeof(T) == 4) HMulWide<T>(w, in, m);
  }
};
template <typename T>
struct WPopc {
  static void run(Warp& w, const Inst& in, uint32_t m) { HCount<T, kPopc>(w, in, m); }
};
template <typename T>
struct WClz {
  static void run(Warp& w, const Inst& in, uint32_t m) { HCount<T, kClz>(w, in, m); }
};
template <typename T>
struct WBfind {
  static void run(Warp& w, const Inst& in, uint32_t m) { HCount<T, kBfind>(w, in, m); }
};
template <typename T>
struct WBfindShift {
  static void run(Warp& w, const Inst& in, uint32_t m) { HCount<T, kBfindShift>(w, in, m); }
};
template <typename T>
struct WNotPred {
  static void run(Warp& w, const Inst& in, uint32_t m) { HUnary<T, kNotPred>(w, in, m); }
};

}  // namespace gpupool::sim::interp

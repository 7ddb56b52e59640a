// What of arithmetic.cc the other files of interp/ use (private to interp/). The templated
// handlers, which the decoder's tables (handler_tables.h) instantiate by type.
#pragma once

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/min_max.h"

namespace gpupool::sim::interp {

enum BinOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kMulHi,
  kDiv,
  kRem,
  kMin,
  kMax,
  kAnd,
  kOr,
  kXor,
  kShl,
  kShr,
  kAddSat,
  kSubSat,
  kCopysign,
  kMul24,
  kMul24Hi,
};

template <typename T, BinOp op>
inline T Binary(T a, T b) {
  if constexpr (op == kAdd) return WrapAdd(a, b);
  if constexpr (op == kSub) return WrapSub(a, b);
  if constexpr (op == kMul) return WrapMul(a, b);
  if constexpr (op == kMulHi) {
    if constexpr (std::is_integral_v<T> && sizeof(T) >= 2) return MulHi(a, b);
    return a;
  }
  if constexpr (op == kDiv) {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return static_cast<T>(-1);
      if constexpr (std::is_signed_v<T>) {
        if (a == std::numeric_limits<T>::min() && b == -1) return a;
      }
      return static_cast<T>(a / b);
    } else {
      return a / b;
    }
  }
  if constexpr (op == kRem) {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return a;
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return 0;
      }
      return static_cast<T>(a % b);
    } else {
      return std::fmod(a, b);
    }
  }
  if constexpr (op == kMin) {
    if constexpr (std::is_floating_point_v<T>) return PtxMinMax<T, false>(a, b, false);
    return std::min(a, b);
  }
  if constexpr (op == kMax) {
    if constexpr (std::is_floating_point_v<T>) return PtxMinMax<T, true>(a, b, false);
    return std::max(a, b);
  }
  if constexpr (std::is_integral_v<T>) {
    if constexpr (op == kAnd) return a & b;
    if constexpr (op == kOr) return a | b;
    if constexpr (op == kXor) return a ^ b;
    if constexpr (op == kShl) {
      Unsigned<T> shift = static_cast<Unsigned<T>>(b);
      if (shift >= 8 * sizeof(T)) return 0;
      return static_cast<T>(static_cast<Unsigned<T>>(a) << shift);
    }
    if constexpr (op == kShr) {
      Unsigned<T> shift = static_cast<Unsigned<T>>(b);
      if (shift >= 8 * sizeof(T)) return std::is_signed_v<T> && a < 0 ? T(-1) : T(0);
      return static_cast<T>(a >> shift);
    }
    if constexpr (op == kAddSat || op == kSubSat) {
      int64_t wide = op == kAddSat ? int64_t{a} + int64_t{b} : int64_t{a} - int64_t{b};
      wide = std::clamp<int64_t>(wide, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
      return static_cast<T>(wide);
    }
    if constexpr (op == kMul24 || op == kMul24Hi) {
      int64_t x = std::is_signed_v<T> ? (static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(a) << 8)) >> 8)
                                      : static_cast<int64_t>(static_cast<uint32_t>(a) & 0xffffff);
      int64_t y = std::is_signed_v<T> ? (static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(b) << 8)) >> 8)
                                      : static_cast<int64_t>(static_cast<uint32_t>(b) & 0xffffff);
      int64_t p = x * y;
      return static_cast<T>(op == kMul24 ? p : (p >> 16));
    }
  } else {
    if constexpr (op == kCopysign) return std::copysign(b, a);
  }
  return a;
}

template <typename T, BinOp op>
void HBinary(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  if (in.flags & (kFlagFtz | kFlagSat)) {
    ForLanesIndependent(mask, [&](int l) {
      d[l] = Put<T>(FixFloat<T>(Binary<T, op>(FtzOperand<T>(a[l], in.flags), FtzOperand<T>(b[l], in.flags)), in.flags));
    });
  } else {
    ForLanesIndependent(mask, [&](int l) { d[l] = Put<T>(Binary<T, op>(Get<T>(a[l]), Get<T>(b[l]))); });
  }
}

// mul.wide / mad.wide: T inputs, twice-as-wide result.
template <typename T>
void HMulWide(Warp& w, const Inst& in, uint32_t mask) {
  using W = typename Wider<T>::type;
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  ForLanesIndependent(mask, [&](int l) {
    W p = static_cast<W>(Get<T>(a[l])) * static_cast<W>(Get<T>(b[l]));
    uint64_t r = Put<W>(p);
    if (c) r += c[l];
    d[l] = r;
  });
}

// Integer add/sub/mad with the carry flag (.cc in, addc/subc/madc out).
template <typename T>
void HCarry(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  uint64_t* cc = w.R(w.launch->kernel->carry_slot);
  using U = Unsigned<T>;
  constexpr int kBits = 8 * sizeof(U);
  ForLanes(mask, [&](int l) {
    unsigned __int128 x = static_cast<U>(a[l]);
    unsigned __int128 y = static_cast<U>(b[l]);
    unsigned __int128 carry_in = (in.flags & kFlagCarryIn) ? (cc[l] & 1) : 0;
    unsigned __int128 r;
    if (in.mode == kCarryAdd) {
      r = x + y + carry_in;
    } else if (in.mode == kCarrySub) {  // a - b - borrow
      r = x - y - carry_in;
    } else {  // mad.lo / mad.hi with carry
      unsigned __int128 p = x * y;
      if (in.mode == kCarryMadHi) p >>= kBits;
      p &= (static_cast<unsigned __int128>(1) << kBits) - 1;
      r = p + static_cast<U>(c[l]) + carry_in;
    }
    d[l] = Put<T>(static_cast<T>(static_cast<U>(r)));
    if (in.flags & kFlagCarryOut) cc[l] = static_cast<uint64_t>((r >> kBits) & 1);
  });
}

enum UnOp : uint8_t {
  kMov,
  kNeg,
  kAbs,
  kNot,
  kCnot,
  kPopc,
  kClz,
  kBrev,
  kSqrt,
  kRsqrt,
  kRcp,
  kSin,
  kCos,
  kLg2,
  kEx2,
  kTanh,
  kBfind,
  kBfindShift,
  kNotPred,
};

template <typename T, UnOp op>
inline T Unary(T a) {
  if constexpr (op == kMov) return a;
  if constexpr (op == kNeg) {
    if constexpr (std::is_integral_v<T>) return WrapSub<T>(T(0), a);
    return -a;
  }
  if constexpr (op == kAbs) {
    if constexpr (std::is_integral_v<T>) return a < 0 ? WrapSub<T>(T(0), a) : a;
    return std::fabs(a);
  }
  if constexpr (std::is_integral_v<T>) {
    using U = Unsigned<T>;
    U u = static_cast<U>(a);
    if constexpr (op == kNot) return static_cast<T>(~u);
    if constexpr (op == kNotPred) return static_cast<T>(u ^ 1);
    if constexpr (op == kCnot) return u == 0 ? T(1) : T(0);
    if constexpr (op == kPopc) return static_cast<T>(std::popcount(u));
    if constexpr (op == kClz) return static_cast<T>(std::countl_zero(u));
    if constexpr (op == kBrev) {
      U r = 0;
      for (size_t i = 0; i < 8 * sizeof(U); ++i) r |= ((u >> i) & 1) << (8 * sizeof(U) - 1 - i);
      return static_cast<T>(r);
    }
    if constexpr (op == kBfind || op == kBfindShift) {
      U v = u;
      if constexpr (std::is_signed_v<T>) {
        if (a < 0) v = ~u;
      }
      if (v == 0) return static_cast<T>(-1);
      int msb = static_cast<int>(8 * sizeof(U)) - 1 - std::countl_zero(v);
      return static_cast<T>(op == kBfind ? msb : static_cast<int>(8 * sizeof(U)) - 1 - msb);
    }
  } else {
    if constexpr (op == kSqrt) return std::sqrt(a);
    if constexpr (op == kRsqrt) return T(1) / std::sqrt(a);
    if constexpr (op == kRcp) return T(1) / a;
    if constexpr (op == kSin) return std::sin(a);
    if constexpr (op == kCos) return std::cos(a);
    if constexpr (op == kLg2) return std::log2(a);
    if constexpr (op == kEx2) return std::exp2(a);
    if constexpr (op == kTanh) return std::tanh(a);
  }
  return a;
}

template <typename T, UnOp op>
void HUnary(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  if (in.flags & (kFlagFtz | kFlagSat)) {
    ForLanesIndependent(
        mask, [&](int l) { d[l] = Put<T>(FixFloat<T>(Unary<T, op>(FtzOperand<T>(a[l], in.flags)), in.flags)); });
  } else {
    ForLanesIndependent(mask, [&](int l) { d[l] = Put<T>(Unary<T, op>(Get<T>(a[l]))); });
  }
}

// Integer popc/clz/bfind always write a .u32.
template <typename T, UnOp op>
void HCount(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForLanesIndependent(mask, [&](int l) { d[l] = static_cast<uint32_t>(Unary<T, op>(Get<T>(a[l]))); });
}

// mad.lo / fma / mad (float).
template <typename T,
          int kind>  // 0: lo, 1: hi, 2: float fma, 3: hi .sat? (unused)
void HMad(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanesIndependent(mask, [&](int l) {
    T x = FtzOperand<T>(a[l], in.flags), y = FtzOperand<T>(b[l], in.flags), z = FtzOperand<T>(c[l], in.flags);
    T r;
    if constexpr (kind == 0)
      r = WrapAdd(WrapMul(x, y), z);
    else if constexpr (kind == 1)
      r = WrapAdd(MulHi(x, y), z);
    else
      r = FixFloat<T>(std::fma(x, y, z), in.flags);
    d[l] = Put<T>(r);
  });
}

#if defined(__x86_64__)
// fma.f32/f64 compiled for AVX2+FMA, chosen at decode time when the host has them:
// libm's fma is a call per lane; the result is the same (one rounding either way).
template <typename T>
__attribute__((target("avx2,fma"))) void HFmaHw(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  auto fma = [](T x, T y, T z) {
    if constexpr (std::is_same_v<T, float>) {
      return __builtin_fmaf(x, y, z);
    } else {
      return __builtin_fma(x, y, z);
    }
  };
  if (in.flags & (kFlagFtz | kFlagSat)) {
    ForLanesIndependent(mask, [&](int l) {
      d[l] = Put<T>(FixFloat<T>(
          fma(FtzOperand<T>(a[l], in.flags), FtzOperand<T>(b[l], in.flags), FtzOperand<T>(c[l], in.flags)), in.flags));
    });
  } else {
    ForLanesIndependent(mask, [&](int l) { d[l] = Put<T>(fma(Get<T>(a[l]), Get<T>(b[l]), Get<T>(c[l]))); });
  }
}

bool HostHasFma();
#endif

template <typename T>
void HMad24(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    T p = in.mode == kMad24Hi ? Binary<T, kMul24Hi>(Get<T>(a[l]), Get<T>(b[l]))
                              : Binary<T, kMul24>(Get<T>(a[l]), Get<T>(b[l]));
    d[l] = Put<T>(WrapAdd(p, Get<T>(c[l])));
  });
}

template <typename T>
void HSad(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    T x = Get<T>(a[l]), y = Get<T>(b[l]);
    T diff = x > y ? WrapSub(x, y) : WrapSub(y, x);
    d[l] = Put<T>(WrapAdd(diff, Get<T>(c[l])));
  });
}

template <typename T>
inline bool Compare(uint8_t cmp, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    bool unordered = std::isnan(a) || std::isnan(b);
    switch (cmp) {
      case kEq:
        return !unordered && a == b;
      case kNe:
        return !unordered && a != b;
      case kLt:
        return !unordered && a < b;
      case kLe:
        return !unordered && a <= b;
      case kGt:
        return !unordered && a > b;
      case kGe:
        return !unordered && a >= b;
      case kEqu:
        return unordered || a == b;
      case kNeu:
        return unordered || a != b;
      case kLtu:
        return unordered || a < b;
      case kLeu:
        return unordered || a <= b;
      case kGtu:
        return unordered || a > b;
      case kGeu:
        return unordered || a >= b;
      case kNum:
        return !unordered;
      case kNan:
        return unordered;
    }
    return false;
  } else {
    switch (cmp) {
      case kEq:
        return a == b;
      case kNe:
        return a != b;
      case kLt:
        return a < b;
      case kLe:
        return a <= b;
      case kGt:
        return a > b;
      case kGe:
        return a >= b;
    }
    return false;
  }
}

// setp / set: mode = the comparison (Cmp), mode2 = how it combines with c (BoolOp).
template <typename T>
void HSetp(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  uint64_t* q = in.d[1] >= 0 ? w.R(in.d[1]) : nullptr;
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  bool negate_c = in.flags & kFlagSigned;  // reused: the bool operand is !%p
  ForLanes(mask, [&](int l) {
    bool t = Compare<T>(in.mode, FtzOperand<T>(a[l], in.flags), FtzOperand<T>(b[l], in.flags));
    bool f = !t;
    if (c) {
      bool p = (c[l] & 1) != negate_c;
      switch (in.mode2) {
        case kBoolAnd:
          t = t && p;
          f = f && p;
          break;
        case kBoolOr:
          t = t || p;
          f = f || p;
          break;
        case kBoolXor:
          t = t != p;
          f = f != p;
          break;
      }
    }
    d[l] = t;
    if (q) q[l] = f;
  });
}

// setp without a predicate operand (no .and/.or/.xor): the comparison is a template
// parameter, so the lane loop has no switch. kFtz: setp.ftz.f32 (inputs flushed).
template <typename T, Cmp kCmp, bool kFtz = false>
void HSetpPlain(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  auto operand = [](uint64_t raw) {
    if constexpr (kFtz) {
      return FlushF32(Get<float>(raw));
    } else {
      return Get<T>(raw);
    }
  };
  if (in.d[1] >= 0) {
    uint64_t* q = w.R(in.d[1]);
    ForLanesIndependent(mask, [&](int l) {
      bool t = Compare<T>(kCmp, operand(a[l]), operand(b[l]));
      d[l] = t;
      q[l] = !t;
    });
  } else {
    ForLanesIndependent(mask, [&](int l) { d[l] = Compare<T>(kCmp, operand(a[l]), operand(b[l])); });
  }
}

template <typename T>
struct WSetpPlain {
  static Handler For(uint8_t cmp, bool ftz = false) {
    if constexpr (std::is_same_v<T, float>) {
      if (ftz) {
        switch (cmp) {
          case kEq:
            return &HSetpPlain<T, kEq, true>;
          case kNe:
            return &HSetpPlain<T, kNe, true>;
          case kLt:
            return &HSetpPlain<T, kLt, true>;
          case kLe:
            return &HSetpPlain<T, kLe, true>;
          case kGt:
            return &HSetpPlain<T, kGt, true>;
          case kGe:
            return &HSetpPlain<T, kGe, true>;
        }
        return nullptr;
      }
    }
    switch (cmp) {
      case kEq:
        return &HSetpPlain<T, kEq>;
      case kNe:
        return &HSetpPlain<T, kNe>;
      case kLt:
        return &HSetpPlain<T, kLt>;
      case kLe:
        return &HSetpPlain<T, kLe>;
      case kGt:
        return &HSetpPlain<T, kGt>;
      case kGe:
        return &HSetpPlain<T, kGe>;
    }
    return nullptr;
  }
};

// setp's and set's BoolOp (1 and, 2 or, 3 xor) of comparison t with predicate c.
inline bool CombineWithPredicate(bool t, uint8_t bool_op, bool c) {
  switch (bool_op) {
    case kBoolAnd:
      return t && c;
    case kBoolOr:
      return t || c;
    case kBoolXor:
      return t != c;
  }
  return t;
}

// set.cmp{.boolop}.dtype.stype d, a, b{, {!}c}: when true, all ones, or 1.0 as f32, f16 or
// bf16 (bits 0-1 of mode2: SetTrue); else 0.
template <typename T>
void HSet(Warp& w, const Inst& in, uint32_t mask) {
  // By SetTrue: all ones, 1.0f, f16 1.0, bf16 1.0.
  static constexpr uint32_t kTrue[4] = {0xffffffffu, 0x3f800000u, 0x3c00u, 0x3f80u};
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  const uint32_t if_true = kTrue[in.mode2 & 3];
  const uint8_t bool_op = in.mode2 >> 2;
  const bool negate_c = in.flags & kFlagSigned;
  ForLanes(mask, [&](int l) {
    bool t = Compare<T>(in.mode, FtzOperand<T>(a[l], in.flags), FtzOperand<T>(b[l], in.flags));
    if (c != nullptr) t = CombineWithPredicate(t, bool_op, (c[l] != 0) != negate_c);
    d[l] = t ? if_true : 0;
  });
}

void HSelp(Warp& w, const Inst& in, uint32_t mask);
void HSlct(Warp& w, const Inst& in, uint32_t mask);
void HTestp(Warp& w, const Inst& in, uint32_t mask);

template <typename T>
void HBfe(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  using U = Unsigned<T>;
  constexpr uint32_t kBits = 8 * sizeof(U);
  ForLanes(mask, [&](int l) {
    U value = static_cast<U>(a[l]);
    uint32_t pos = static_cast<uint8_t>(b[l]);
    uint32_t len = static_cast<uint8_t>(c[l]);
    bool sign = false;
    if constexpr (std::is_signed_v<T>) {
      uint32_t top = std::min(pos + len, kBits) - 1;
      sign = len != 0 && ((value >> std::min(top, kBits - 1)) & 1);
    }
    U r = 0;
    for (uint32_t i = 0; i < kBits; ++i) {
      bool bit = i < len && pos + i < kBits ? ((value >> (pos + i)) & 1) : sign;
      if (i >= len) bit = sign;
      r |= static_cast<U>(bit) << i;
    }
    d[l] = Put<T>(static_cast<T>(r));
  });
}

template <typename T>
void HBfi(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  const uint64_t* e = w.R(in.e);
  using U = Unsigned<T>;
  constexpr uint32_t kBits = 8 * sizeof(U);
  ForLanes(mask, [&](int l) {
    U insert = static_cast<U>(a[l]);
    U r = static_cast<U>(b[l]);
    uint32_t pos = static_cast<uint8_t>(c[l]);
    uint32_t len = static_cast<uint8_t>(e[l]);
    for (uint32_t i = 0; i < len && pos + i < kBits; ++i) {
      U bit = static_cast<U>(1) << (pos + i);
      r = (r & ~bit) | (((insert >> i) & 1) ? bit : 0);
    }
    d[l] = Put<T>(static_cast<T>(r));
  });
}

void HPrmt(Warp& w, const Inst& in, uint32_t mask);
void HShf(Warp& w, const Inst& in, uint32_t mask);
void HFns(Warp& w, const Inst& in, uint32_t mask);
void HBmsk(Warp& w, const Inst& in, uint32_t mask);
void HLop3(Warp& w, const Inst& in, uint32_t mask);
void HPack(Warp& w, const Inst& in, uint32_t mask);
void HUnpack(Warp& w, const Inst& in, uint32_t mask);
void HCvta(Warp& w, const Inst& in, uint32_t mask);
void HIsspacep(Warp& w, const Inst& in, uint32_t mask);
void HMapa(Warp& w, const Inst& in, uint32_t mask);
void HGetctarank(Warp& w, const Inst& in, uint32_t mask);

}  // namespace gpupool::sim::interp

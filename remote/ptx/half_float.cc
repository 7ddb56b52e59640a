#include "remote/ptx/half_float.h"

#include <bit>
#include <cfenv>
#include <climits>

#include "remote/ptx/ir/kernel.h"
#include "remote/ptx/min_max.h"
#include "remote/ptx/rounding.h"

namespace gpupool::sim {

uint16_t FloatToHalf(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exponent = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mantissa ? 0x200 : 0));
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

uint8_t FloatToFp8(float value, Fp8Format format, bool relu) {
  const bool e4m3 = format == Fp8Format::kE4M3;
  const int mantissa_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const uint8_t largest = e4m3 ? 0x7e : 0x7b;  // 448, 57344
  if (std::isnan(value)) return 0x7f;
  if (relu && std::signbit(value)) return 0;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (std::isinf(magnitude)) return sign | largest;
  // Below the smallest normal (2^(1 - bias)) the step is the subnormals' 2^(1 - bias - m);
  // above, 2^(e - m) for the value's exponent e. Counting steps from 0 (subnormal) or from
  // 2^e (normal), nearest with ties to even (the host's rounding, nearest by default): the
  // divisions are by powers of two, exact.
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1)
  exponent -= 1;                     // magnitude in [2^exponent, 2^(exponent + 1))
  uint32_t bits = 0;
  if (magnitude == 0 || exponent < 1 - bias) {
    // A subnormal: a count of 2^(1 - bias - m) steps; 2^m of them is the smallest normal,
    // whose encoding is that count too.
    bits = static_cast<uint32_t>(std::nearbyint(std::ldexp(magnitude, bias - 1 + mantissa_bits)));
  } else {
    double steps = std::nearbyint(std::ldexp(magnitude, mantissa_bits - exponent));  // in [2^m, 2^(m+1)]
    if (steps == std::ldexp(1.0, mantissa_bits + 1)) {
      steps /= 2;
      ++exponent;
    }
    const int field = exponent + bias;
    if (field > (1 << (7 - mantissa_bits)) - 1) return sign | largest;
    bits = (static_cast<uint32_t>(field) << mantissa_bits) | (static_cast<uint32_t>(steps) - (1u << mantissa_bits));
  }
  // Past the largest finite (E4M3's NaN encoding, E5M2's infinities): .satfinite.
  if (bits > largest) bits = largest;
  return static_cast<uint8_t>(sign | bits);
}

uint16_t Fp8ToHalf(uint8_t value, Fp8Format format, bool relu) {
  const bool e4m3 = format == Fp8Format::kE4M3;
  const uint8_t magnitude = value & 0x7f;
  const bool nan = e4m3 ? magnitude == 0x7f : magnitude > 0x7c;
  if (nan) return 0x7fff;
  const bool negative = (value & 0x80) != 0;
  if (relu && negative) return 0;
  if (!e4m3) return static_cast<uint16_t>(value << 8);  // E5M2 is f16's upper byte
  const int field = magnitude >> 3, mantissa = magnitude & 7;
  const double number = field == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, field - 10);
  return FloatToHalf(static_cast<float>(negative ? -number : number));
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t x;
  if (exponent == 0) {
    if (mantissa == 0) {
      x = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while (!(mantissa & 0x400));
      x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ff) << 13);
    }
  } else if (exponent == 31) {
    x = sign | 0x7f800000 | (mantissa << 13);
  } else {
    x = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(x);
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>(std::isnan(f) ? ((x >> 16) | 0x40) : ((x + 0x7fff + ((x >> 16) & 1)) >> 16));
}

// As __float2half_rz and __float2bfloat16_rd compile: the nearest value, moved one step
// when it lies on the wrong side of f. Stepping a 16-bit pattern by one moves its magnitude
// by one unit in the last place, from the largest finite value to infinity and from
// infinity back.
uint16_t FloatToHalfDirected(float f, CvtRounding rounding, bool bf16) {
  uint16_t h = bf16 ? FloatToBFloat16(f) : FloatToHalf(f);
  if (std::isnan(f)) return h;
  const float back = bf16 ? std::bit_cast<float>(static_cast<uint32_t>(h) << 16) : HalfToFloat(h);
  const bool negative = h & 0x8000;
  const bool above = back > f, below = back < f;
  if ((rounding == kCvtRoundZero && std::fabs(back) > std::fabs(f)) ||
      (rounding == kCvtRoundDown && above && !negative) || (rounding == kCvtRoundUp && below && negative)) {
    --h;  // towards zero
  } else if ((rounding == kCvtRoundDown && above && negative) || (rounding == kCvtRoundUp && below && !negative)) {
    ++h;  // away from zero
  }
  return h;
}

float HalfBitsToFloat(uint16_t bits, bool bf16) {
  return bf16 ? std::bit_cast<float>(static_cast<uint32_t>(bits) << 16) : HalfToFloat(bits);
}

uint16_t FloatToHalfBits(float value, bool bf16) { return bf16 ? FloatToBFloat16(value) : FloatToHalf(value); }

namespace {

constexpr uint16_t kCanonicalHalfNaN = 0x7fff;  // f16 and bf16 alike

}  // namespace

uint32_t HalfLane(uint8_t op, uint8_t flags, uint8_t halves, uint8_t bf16, uint32_t a, uint32_t b, uint32_t c) {
  // .ftz (of f16: bf16 arithmetic has none) flushes subnormal operands and results to a
  // zero of their sign, as the PTX ISA says of add.ftz.f16 and the rest.
  const bool ftz = (flags & kFlagFtz) && !bf16;
  auto flush = [&](uint16_t h) { return ftz && (h & 0x7c00) == 0 ? static_cast<uint16_t>(h & 0x8000) : h; };
  uint32_t result = 0;
  for (int k = 0; k < halves; ++k) {
    auto half = [&](uint32_t r) { return HalfBitsToFloat(flush(static_cast<uint16_t>(r >> (16 * k))), bf16 != 0); };
    const float x = half(a);
    const float y = half(b);
    const bool nan_operand = std::isnan(x) || std::isnan(y);
    float r = 0;
    switch (op) {
      case kHalfAdd:
        r = x + y;
        break;
      case kHalfSub:
        r = x - y;
        break;
      case kHalfMul:
        r = x * y;
        break;
      case kHalfFma:
        r = std::fma(x, y, half(c));
        break;
      case kHalfNeg:
        r = -x;
        break;
      case kHalfAbs:
        r = std::fabs(x);
        break;
      case kHalfMin:
      case kHalfMax:
        // Two NaNs give the canonical NaN (below); one gives the other operand.
        r = op == kHalfMin ? PtxMinMax<float, false>(x, y, false) : PtxMinMax<float, true>(x, y, false);
        if (std::isnan(x) && std::isnan(y)) {
          result |= uint32_t{kCanonicalHalfNaN} << (16 * k);
          continue;
        }
        break;
      case kHalfTanh:
        r = std::tanh(x);  // tanh.approx: exact, then rounded
        break;
      case kHalfEx2:
        r = std::exp2(x);  // ex2.approx
        break;
    }
    if ((flags & kFlagNaNOperand) && nan_operand) {
      result |= uint32_t{kCanonicalHalfNaN} << (16 * k);
      continue;
    }
    if (flags & kFlagRelu) {
      if (std::isnan(r)) {
        result |= uint32_t{kCanonicalHalfNaN} << (16 * k);
        continue;
      }
      if (r < 0) r = 0;
    }
    if (flags & kFlagSat) r = Saturate01(r);
    result |= static_cast<uint32_t>(flush(FloatToHalfBits(r, bf16 != 0))) << (16 * k);
  }
  return result;
}

uint64_t ConvertLane(uint64_t raw, uint8_t to, uint8_t from, uint8_t rounding_mode, uint8_t flags) {
  const int dkind = CvtKindOf(to), dsize = CvtBytesOf(to);
  const int skind = CvtKindOf(from), ssize = CvtBytesOf(from);
  const auto rounding = static_cast<CvtRounding>(rounding_mode);
  const bool sat = flags & kFlagSat;
  const bool directed = ConvertIsDirected(to, rounding_mode);
  // Read the source.
  const bool is_float = skind == kKindF || skind == kKindB;  // kKindB: bf16
  double fv = 0;
  int64_t sv = 0;
  uint64_t uv = 0;
  if (is_float) {
    if (ssize == 2 && skind == kKindB) {
      fv = std::bit_cast<float>(static_cast<uint32_t>(raw & 0xffff) << 16);
    } else if (ssize == 2) {
      fv = HalfToFloat(static_cast<uint16_t>(raw));
    } else if (ssize == 4) {
      fv = std::bit_cast<float>(static_cast<uint32_t>(raw));
    } else {
      fv = std::bit_cast<double>(raw);
    }
    if ((flags & kFlagFtz) && ssize == 4) fv = FlushF32(static_cast<float>(fv));
  } else if (skind == kKindS) {
    const int shift = 64 - 8 * ssize;
    sv = static_cast<int64_t>(raw << shift) >> shift;
  } else {
    uv = ssize == 8 ? raw : (raw & ((1ull << (8 * ssize)) - 1));
  }
  uint64_t out = 0;
  if (dkind == kKindF || dkind == kKindB) {
    double r;
    if (is_float) {
      r = fv;
      if (rounding >= kCvtRoundNearestInteger) r = RoundTo(r, rounding);
    } else {
      r = skind == kKindS ? static_cast<double>(sv) : static_cast<double>(uv);
    }
    if (dsize == 8) {
      if (sat) r = Saturate01(r);
      return std::bit_cast<uint64_t>(r);
    }
    float f;
    if (!is_float && ssize == 8) {
      f = skind == kKindS ? static_cast<float>(sv) : static_cast<float>(uv);
    } else {
      f = static_cast<float>(r);
    }
    if (dsize == 4) {
      if (flags & kFlagFtz) f = FlushF32(f);
      if (sat) f = Saturate01(f);
      return std::bit_cast<uint32_t>(f);
    }
    if (sat) f = Saturate01(f);
    if (directed) return FloatToHalfDirected(f, rounding, dkind == kKindB);
    return dkind == kKindB ? FloatToBFloat16(f) : FloatToHalf(f);
  }
  // Integer destination (sizes 1..8), saturating from floats and when .sat.
  const int bits = 8 * dsize;
  if (is_float) {
    const double r = std::isnan(fv) ? 0.0 : RoundTo(fv, rounding);
    if (dkind == kKindS) {
      const double lo = -std::ldexp(1.0, bits - 1), hi = std::ldexp(1.0, bits - 1) - 1;
      const int64_t v = r <= lo   ? static_cast<int64_t>(lo)
                        : r >= hi ? (bits == 64 ? INT64_MAX : static_cast<int64_t>(hi))
                                  : static_cast<int64_t>(r);
      out = static_cast<uint64_t>(v);
    } else {
      const double hi = std::ldexp(1.0, bits) - 1;
      out = r <= 0 ? 0 : r >= hi ? (bits == 64 ? UINT64_MAX : static_cast<uint64_t>(hi)) : static_cast<uint64_t>(r);
    }
  } else if (sat) {
    if (dkind == kKindS) {
      const int64_t lo = bits == 64 ? INT64_MIN : -(int64_t{1} << (bits - 1));
      const int64_t hi = bits == 64 ? INT64_MAX : (int64_t{1} << (bits - 1)) - 1;
      if (skind == kKindS) {
        out = static_cast<uint64_t>(std::clamp(sv, lo, hi));
      } else {
        out = static_cast<uint64_t>(uv > static_cast<uint64_t>(hi) ? hi : static_cast<int64_t>(uv));
      }
    } else {
      const uint64_t hi = bits == 64 ? UINT64_MAX : (uint64_t{1} << bits) - 1;
      if (skind == kKindS) {
        out = sv < 0 ? 0 : std::min<uint64_t>(static_cast<uint64_t>(sv), hi);
      } else {
        out = std::min(uv, hi);
      }
    }
  } else {
    out = skind == kKindS ? static_cast<uint64_t>(sv) : uv;
  }
  // Sign-extended for signed destinations, else zero-extended.
  if (bits < 64) {
    if (dkind == kKindS) {
      const int shift = 64 - bits;
      out = static_cast<uint64_t>(static_cast<int64_t>(out << shift) >> shift);
    } else {
      out &= (1ull << bits) - 1;
    }
  }
  return out;
}

// The rounding mode is set around the call, as HCvt sets it around its lanes; the operands
// are read and the result written through volatile copies so that the compiler moves no
// conversion out of the mode (as rounding.cc's InRounding).
uint64_t ConvertLaneInRounding(uint64_t raw, uint8_t to, uint8_t from, uint8_t rounding, uint8_t flags) {
  if (!ConvertIsDirected(to, rounding)) return ConvertLane(raw, to, from, rounding, flags);
  const int saved = std::fegetround();
  std::fesetround(rounding == kCvtRoundZero ? FE_TOWARDZERO : rounding == kCvtRoundDown ? FE_DOWNWARD : FE_UPWARD);
  volatile uint64_t value = raw;
  volatile uint64_t result = ConvertLane(value, to, from, rounding, flags);
  std::fesetround(saved);
  return result;
}

uint32_t HalfAtomic(uint8_t* p, uint8_t op, uint8_t size, uint8_t format, uint32_t v, uint32_t c) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  uint32_t* word = reinterpret_cast<uint32_t*>(at & ~uintptr_t{3});
  const int shift = static_cast<int>((at & 3) * 8);
  const uint32_t keep = size == 4 ? 0u : ~(0xffffu << shift);
  const bool bf16 = format == kHalfBF16, bits = format == kHalfBits;
  const int halves = size / 2;
  uint32_t old_word = __atomic_load_n(word, __ATOMIC_RELAXED);
  uint32_t old_value;
  while (true) {
    old_value = size == 4 ? old_word : (old_word >> shift) & 0xffffu;
    uint32_t result = 0;
    if (bits) {
      result = op == kAtomCas ? (old_value == (v & 0xffffu) ? c & 0xffffu : old_value) : v & 0xffffu;
    } else {
      for (int h = 0; h < halves; ++h) {
        float x = HalfBitsToFloat(static_cast<uint16_t>(old_value >> (16 * h)), bf16);
        float y = HalfBitsToFloat(static_cast<uint16_t>(v >> (16 * h)), bf16);
        // min and max as PTX orders them (min_max.h: -0 below +0), not the C library's.
        float r = op == kAtomAdd   ? x + y
                  : op == kAtomMin ? PtxMinMax<float, false>(x, y, false)
                  : op == kAtomMax ? PtxMinMax<float, true>(x, y, false)
                                   : y;
        result |= static_cast<uint32_t>(FloatToHalfBits(r, bf16)) << (16 * h);
      }
    }
    uint32_t new_word = size == 4 ? result : (old_word & keep) | (result << shift);
    if (__atomic_compare_exchange_n(word, &old_word, new_word, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) break;
  }
  return old_value;
}

}  // namespace gpupool::sim

// The interpreter's cvt between every pair of types, with PTX's rounding modes, saturation
// and flush-to-zero. Private interface: conversions.h and internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/conversions.h"
#include "remote/ptx/rounding.h"

namespace gpupool::sim::interp {

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

// bf16 nearest to f, ties to even; a NaN stays a (quiet) NaN.
uint16_t FloatToBFloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>(std::isnan(f) ? ((x >> 16) | 0x40) : ((x + 0x7fff + ((x >> 16) & 1)) >> 16));
}

// f to f16 or bf16 with .rz, .rm or .rp (CvtRounding), as __float2half_rz and
// __float2bfloat16_rd compile: the nearest value, moved one step when it lies on the wrong
// side of f. Stepping a 16-bit pattern by one moves its magnitude by one unit in the last
// place, from the largest finite value to infinity and from infinity back.
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

// cvt: mode = the destination (CvtOperand: kind and bytes), mode2 = the source, width =
// the rounding (CvtRounding), flags.
void HCvt(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  int dkind = CvtKindOf(in.mode), dsize = CvtBytesOf(in.mode);
  int skind = CvtKindOf(in.mode2), ssize = CvtBytesOf(in.mode2);
  const auto rounding = static_cast<CvtRounding>(in.width);
  bool sat = in.flags & kFlagSat;
  // .rz/.rm/.rp into a float type (__int2float_rz, __ll2double_rd, __double2float_ru,
  // __float2half_rz...): the host converts in that rounding mode, set around the lanes
  // (the loads come after the first call and the stores before the second, as in
  // HDirectedRounding). Rounding in one direction twice (to double or float, then to a
  // half) gives the same as rounding once.
  const bool directed = (dkind == kKindF || dkind == kKindB) && rounding >= kCvtRoundZero && rounding <= kCvtRoundUp;
  const int saved_rounding = std::fegetround();
  if (directed) {
    std::fesetround(rounding == kCvtRoundZero ? FE_TOWARDZERO : rounding == kCvtRoundDown ? FE_DOWNWARD : FE_UPWARD);
  }
  ForLanes(mask, [&](int l) {
    uint64_t raw = a[l];
    // Read the source.
    bool is_float = skind == kKindF || skind == kKindB;  // kKindB: bf16
    double fv = 0;
    int64_t sv = 0;
    uint64_t uv = 0;
    if (is_float) {
      if (ssize == 2 && skind == kKindB)
        fv = std::bit_cast<float>(static_cast<uint32_t>(raw & 0xffff) << 16);
      else if (ssize == 2)
        fv = HalfToFloat(static_cast<uint16_t>(raw));
      else if (ssize == 4)
        fv = Get<float>(raw);
      else
        fv = Get<double>(raw);
      if ((in.flags & kFlagFtz) && ssize == 4) fv = FlushF32(static_cast<float>(fv));
    } else if (skind == kKindS) {
      int shift = 64 - 8 * ssize;
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
        out = Put<double>(r);
      } else if (dsize == 4) {
        float f;
        if (!is_float && ssize == 8) {
          f = skind == kKindS ? static_cast<float>(sv) : static_cast<float>(uv);
        } else {
          f = static_cast<float>(r);
        }
        if (in.flags & kFlagFtz) f = FlushF32(f);
        if (sat) f = Saturate01(f);
        out = Put<float>(f);
      } else {
        float f;
        if (!is_float && ssize == 8) {
          f = skind == kKindS ? static_cast<float>(sv) : static_cast<float>(uv);
        } else {
          f = static_cast<float>(r);
        }
        if (sat) f = Saturate01(f);
        if (directed) {
          out = FloatToHalfDirected(f, rounding, dkind == kKindB);
        } else {
          out = dkind == kKindB ? FloatToBFloat16(f) : FloatToHalf(f);
        }
      }
    } else {
      // Integer destination (sizes 1..8), saturating from floats and when .sat.
      int bits = 8 * dsize;
      if (is_float) {
        double r = std::isnan(fv) ? 0.0 : RoundTo(fv, rounding);
        if (dkind == kKindS) {
          double lo = -std::ldexp(1.0, bits - 1), hi = std::ldexp(1.0, bits - 1) - 1;
          int64_t v = r <= lo   ? static_cast<int64_t>(lo)
                      : r >= hi ? (bits == 64 ? INT64_MAX : static_cast<int64_t>(hi))
                                : static_cast<int64_t>(r);
          out = static_cast<uint64_t>(v);
        } else {
          double hi = std::ldexp(1.0, bits) - 1;
          uint64_t v = r <= 0    ? 0
                       : r >= hi ? (bits == 64 ? UINT64_MAX : static_cast<uint64_t>(hi))
                                 : static_cast<uint64_t>(r);
          out = v;
        }
      } else if (sat) {
        if (dkind == kKindS) {
          int64_t lo = bits == 64 ? INT64_MIN : -(int64_t{1} << (bits - 1));
          int64_t hi = bits == 64 ? INT64_MAX : (int64_t{1} << (bits - 1)) - 1;
          if (skind == kKindS)
            out = static_cast<uint64_t>(std::clamp(sv, lo, hi));
          else
            out = static_cast<uint64_t>(uv > static_cast<uint64_t>(hi) ? hi : static_cast<int64_t>(uv));
        } else {
          uint64_t hi = bits == 64 ? UINT64_MAX : (uint64_t{1} << bits) - 1;
          if (skind == kKindS)
            out = sv < 0 ? 0 : std::min<uint64_t>(static_cast<uint64_t>(sv), hi);
          else
            out = std::min(uv, hi);
        }
      } else {
        out = skind == kKindS ? static_cast<uint64_t>(sv) : uv;
      }
      // Store sign-extended for signed destinations, else zero-extended.
      if (bits < 64) {
        if (dkind == kKindS) {
          int shift = 64 - bits;
          out = static_cast<uint64_t>(static_cast<int64_t>(out << shift) >> shift);
        } else {
          out &= (1ull << bits) - 1;
        }
      }
    }
    d[l] = out;
  });
  if (directed) std::fesetround(saved_rounding);
}

// cvt between integer types without .sat: truncate or extend the source (S) to the
// destination (D), stored sign- or zero-extended as HCvt does.
template <typename S, typename D>
void HCvtInt(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForLanesIndependent(mask, [&](int l) { d[l] = Put<D>(static_cast<D>(static_cast<S>(a[l]))); });
}

template <typename S>
Handler CvtIntTo(int kind, int size) {
  bool is_signed = kind == kKindS;
  switch (size) {
    case 1:
      return is_signed ? &HCvtInt<S, int8_t> : &HCvtInt<S, uint8_t>;
    case 2:
      return is_signed ? &HCvtInt<S, int16_t> : &HCvtInt<S, uint16_t>;
    case 4:
      return is_signed ? &HCvtInt<S, int32_t> : &HCvtInt<S, uint32_t>;
    case 8:
      return is_signed ? &HCvtInt<S, int64_t> : &HCvtInt<S, uint64_t>;
  }
  return nullptr;
}

// CvtIntTo of a source integer of U's size, signed or not.
template <typename U>
Handler CvtIntFrom(bool is_signed, int kind, int size) {
  return is_signed ? CvtIntTo<std::make_signed_t<U>>(kind, size) : CvtIntTo<U>(kind, size);
}

// The handler of a decoded cvt: HCvtInt for integer-to-integer without .sat, else HCvt.
Handler CvtHandler(const Inst& in) {
  int dkind = CvtKindOf(in.mode), dsize = CvtBytesOf(in.mode);
  int skind = CvtKindOf(in.mode2), ssize = CvtBytesOf(in.mode2);
  bool ints = (dkind == kKindS || dkind == kKindU) && (skind == kKindS || skind == kKindU);
  if (!ints || (in.flags & kFlagSat)) return &HCvt;
  Handler h = nullptr;
  bool is_signed = skind == kKindS;
  switch (ssize) {
    case 1:
      h = CvtIntFrom<uint8_t>(is_signed, dkind, dsize);
      break;
    case 2:
      h = CvtIntFrom<uint16_t>(is_signed, dkind, dsize);
      break;
    case 4:
      h = CvtIntFrom<uint32_t>(is_signed, dkind, dsize);
      break;
    case 8:
      h = CvtIntFrom<uint64_t>(is_signed, dkind, dsize);
      break;
  }
  return h != nullptr ? h : &HCvt;
}

}  // namespace gpupool::sim::interp

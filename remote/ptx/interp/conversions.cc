// The interpreter's cvt between every pair of types, with PTX's rounding modes, saturation
// and flush-to-zero. Private interface: conversions.h and internal.h.
#include <bit>

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/conversions.h"
#include "remote/ptx/half_float.h"

namespace gpupool::sim::interp {

// cvt: mode = the destination (CvtOperand: kind and bytes), mode2 = the source, width =
// the rounding (CvtRounding), flags; each lane converted by ConvertLane (half_float.h),
// which compiled code calls too.
void HCvt(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const auto rounding = static_cast<CvtRounding>(in.width);
  // .rz/.rm/.rp into a float type (__int2float_rz, __ll2double_rd, __double2float_ru,
  // __float2half_rz...): the host converts in that rounding mode, set around the lanes
  // (ConvertLane, a call the compiler moves no access across). Rounding in one direction
  // twice (to double or float, then to a half) gives the same as rounding once.
  const bool directed = ConvertIsDirected(in.mode, in.width);
  const int saved_rounding = std::fegetround();
  if (directed) {
    std::fesetround(rounding == kCvtRoundZero ? FE_TOWARDZERO : rounding == kCvtRoundDown ? FE_DOWNWARD : FE_UPWARD);
  }
  ForLanes(mask, [&](int l) { d[l] = ConvertLane(a[l], in.mode, in.mode2, in.width, in.flags); });
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

void HCvtFp8(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const auto format = static_cast<Fp8Format>(in.mode2);
  const bool relu = (in.flags & kFlagRelu) != 0;
  auto fp8 = [&](float value) -> uint64_t { return FloatToFp8(value, format, relu); };
  switch (in.mode) {
    case kFp8FromFloats: {
      const uint64_t* b = w.R(in.b);
      ForLanes(mask, [&](int l) {
        d[l] = fp8(std::bit_cast<float>(static_cast<uint32_t>(a[l]))) << 8 |
               fp8(std::bit_cast<float>(static_cast<uint32_t>(b[l])));
      });
      break;
    }
    case kFp8FromHalves:
      ForLanes(mask, [&](int l) {
        d[l] = fp8(HalfToFloat(static_cast<uint16_t>(a[l] >> 16))) << 8 | fp8(HalfToFloat(static_cast<uint16_t>(a[l])));
      });
      break;
    default:
      ForLanes(mask, [&](int l) {
        d[l] = uint64_t{Fp8ToHalf(static_cast<uint8_t>(a[l] >> 8), format, relu)} << 16 |
               Fp8ToHalf(static_cast<uint8_t>(a[l]), format, relu);
      });
  }
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

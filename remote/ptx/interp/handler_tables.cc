// The decoder's handler tables: PTX types (Ty, from the front end's type table), handlers
// chosen by type (ByType, ByIntType), and the wrappers that give each operation and type
// one function.
// Private interface: handler_tables.h and internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/handler_tables.h"

#include <algorithm>

#include "remote/ptx/front/types.h"

namespace gpupool::sim::interp {

Ty ParseType(std::string_view suffix) {
  const PtxType t = ParsePtxType(suffix);
  auto by_width = [&](Ty t8, Ty t16, Ty t32, Ty t64) {
    switch (t.bits) {
      case 8:
        return t8;
      case 16:
        return t16;
      case 32:
        return t32;
      default:
        return t64;
    }
  };
  switch (t.kind) {
    case PtxKind::kSigned:
      return by_width(kS8, kS16, kS32, kS64);
    case PtxKind::kUnsigned:
    case PtxKind::kBits:  // untyped bits compute as unsigned
      return by_width(kU8, kU16, kU32, kU64);
    case PtxKind::kFloat:
      return t.bits == 32 ? kF32 : kF64;
    case PtxKind::kHalf:
      return t.elements == 2 ? kF16x2 : kF16;
    case PtxKind::kBFloat:
      return t.elements == 2 ? kBF16x2 : kBF16;
    case PtxKind::kPred:
      return kPred;
    case PtxKind::kNone:
      return kNoType;
  }
  return kNoType;
}
int TySize(Ty t) {
  switch (t) {
    case kU8:
    case kS8:
      return 1;
    case kU16:
    case kS16:
    case kF16:
    case kBF16:
      return 2;
    case kF16x2:
    case kBF16x2:
      return 4;
    case kU32:
    case kS32:
    case kF32:
      return 4;
    case kPred:
      return 1;
    case kNoType:
      return 0;
    default:
      return 8;
  }
}
bool TySigned(Ty t) { return t == kS8 || t == kS16 || t == kS32 || t == kS64; }
bool TyFloat(Ty t) { return t == kF16 || t == kF32 || t == kF64 || t == kBF16; }
bool TyHalf(Ty t) { return t == kF16 || t == kF16x2 || t == kBF16 || t == kBF16x2; }

// Integer dot products and SIMD absolute differences on bytes (sm_61 __dp4a, __dp2a_lo/hi;
// __vabsdiffu4 and __vsads4 through vabsdiff4, __vsadu2 through vabsdiff2). mode (ByteDotOp):
// dp4a, dp2a.lo, dp2a.hi, vabsdiff4 (per-byte |a - b| in d's bytes), vabsdiff4.add (c +
// their sum), vabsdiff2 (per-halfword, in d's halves), vabsdiff2.add; mode2:
// kByteDotSignedA a's elements signed, kByteDotSignedB b's, kByteDotSaturate .sat into a signed d (an element over its
// signed maximum, 127 or 32767, becomes that maximum).
void HByteDot(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  const bool a_signed = in.mode2 & kByteDotSignedA, b_signed = in.mode2 & kByteDotSignedB,
             saturate = in.mode2 & kByteDotSaturate;
  auto element = [](uint32_t word, int index, int bits, bool is_signed) -> int32_t {
    uint32_t v = (word >> (index * bits)) & ((1u << bits) - 1);
    if (is_signed && (v >> (bits - 1))) return static_cast<int32_t>(v) - (1 << bits);
    return static_cast<int32_t>(v);
  };
  ForLanes(mask, [&](int l) {
    const uint32_t x = static_cast<uint32_t>(a[l]), y = static_cast<uint32_t>(b[l]);
    uint32_t acc = static_cast<uint32_t>(c[l]);
    switch (in.mode) {
      case kDp4a:
        for (int i = 0; i < 4; ++i)
          acc += static_cast<uint32_t>(element(x, i, 8, a_signed) * element(y, i, 8, b_signed));
        break;
      case kDp2aLo:
      case kDp2aHi:
        for (int i = 0; i < 2; ++i) {
          acc += static_cast<uint32_t>(element(x, i, 16, a_signed) *
                                       element(y, i + (in.mode == kDp2aHi ? 2 : 0), 8, b_signed));
        }
        break;
      case kVabsdiff4:
        acc = 0;
        for (int i = 0; i < 4; ++i) {
          int32_t diff = std::abs(element(x, i, 8, a_signed) - element(y, i, 8, b_signed));
          if (saturate) diff = std::min(diff, 127);
          acc |= static_cast<uint32_t>(diff & 0xff) << (8 * i);
        }
        break;
      case kVabsdiff4Add:
        for (int i = 0; i < 4; ++i)
          acc += static_cast<uint32_t>(std::abs(element(x, i, 8, a_signed) - element(y, i, 8, b_signed)));
        break;
      case kVabsdiff2:
        acc = 0;
        for (int i = 0; i < 2; ++i) {
          int32_t diff = std::abs(element(x, i, 16, a_signed) - element(y, i, 16, b_signed));
          if (saturate) diff = std::min(diff, 32767);
          acc |= static_cast<uint32_t>(diff & 0xffff) << (16 * i);
        }
        break;
      case kVabsdiff2Add:
        for (int i = 0; i < 2; ++i)
          acc += static_cast<uint32_t>(std::abs(element(x, i, 16, a_signed) - element(y, i, 16, b_signed)));
        break;
    }
    d[l] = acc;
  });
}

void HVideo(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  using Wide = __int128;
  // partSelectSignExtend: the word, or a byte or half-word of it, sign- or zero-extended.
  auto select = [](uint32_t word, uint32_t selector, bool is_signed) -> Wide {
    if (selector == kVideoWord) return is_signed ? Wide{static_cast<int32_t>(word)} : Wide{word};
    if (selector >= kVideoH0) {
      const uint16_t half = static_cast<uint16_t>(word >> (16 * (selector - kVideoH0)));
      return is_signed ? Wide{static_cast<int16_t>(half)} : Wide{half};
    }
    const uint8_t byte = static_cast<uint8_t>(word >> (8 * (selector - kVideoB0)));
    return is_signed ? Wide{static_cast<int8_t>(byte)} : Wide{byte};
  };
  const bool d_signed = in.width & kVideoSignedD;
  const Wide low = d_signed ? Wide{INT32_MIN} : Wide{0}, high = d_signed ? Wide{INT32_MAX} : Wide{UINT32_MAX};
  ForLanes(mask, [&](int l) {
    const Wide ta = select(static_cast<uint32_t>(a[l]), in.aux & 0xf, in.width & kVideoSignedA);
    Wide tb = select(static_cast<uint32_t>(b[l]), in.aux >> 4, in.width & kVideoSignedB);
    Wide tmp = 0;
    switch (in.mode) {
      case kVideoAdd:
        tmp = ta + tb;
        break;
      case kVideoSub:
        tmp = ta - tb;
        break;
      case kVideoAbsdiff:
        tmp = ta > tb ? ta - tb : tb - ta;
        break;
      case kVideoMin:
        tmp = std::min(ta, tb);
        break;
      case kVideoMax:
        tmp = std::max(ta, tb);
        break;
      default:  // shifts: b is unsigned, at most 32 (.clamp) or taken modulo 32 (.wrap)
        tb = (in.width & kVideoClamp) ? std::min<Wide>(tb, 32) : (tb & 0x1f);
        // (a product, not <<, for a negative ta; an arithmetic shift right for one)
        tmp = in.mode == kVideoShl ? ta * (Wide{1} << static_cast<int>(tb)) : ta >> static_cast<int>(tb);
    }
    if (in.flags & kFlagSat) tmp = std::clamp(tmp, low, high);
    if (c != nullptr && in.mode2 != kVideoNone) {
      const uint32_t word = static_cast<uint32_t>(c[l]);
      const Wide tc = d_signed ? Wide{static_cast<int32_t>(word)} : Wide{word};
      tmp = in.mode2 == kVideoThenAdd ? tmp + tc : in.mode2 == kVideoThenMin ? std::min(tmp, tc) : std::max(tmp, tc);
    }
    d[l] = static_cast<uint32_t>(static_cast<unsigned __int128>(tmp));
  });
}

}  // namespace gpupool::sim::interp

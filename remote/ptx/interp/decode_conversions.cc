// The decoder (decoder.h): moves and conversions.
#include "remote/ptx/interp/decoder.h"

#include "remote/ptx/front/special_registers.h"
#include "remote/ptx/interp/conversions.h"
#include "remote/ptx/interp/warp_ops.h"
#include "remote/ptx/interp/wmma.h"

namespace gpupool::sim::interp {

namespace {

// The clock or timer special register `name` is, which mov reads with HClock (Inst::mode);
// false for any other name.
bool ClockOf(const std::string& name, ClockRegister* clock) {
  switch (DecodeSpecialRegister(name).reg) {
    case SpecialRegister::kClock:
      *clock = kClock;
      return true;
    case SpecialRegister::kClock64:
      *clock = kClock64;
      return true;
    case SpecialRegister::kGlobaltimer:
      *clock = kGlobalTimer;
      return true;
    case SpecialRegister::kGlobaltimerLo:
      *clock = kGlobalTimerLo;
      return true;
    case SpecialRegister::kGlobaltimerHi:
      *clock = kGlobalTimerHi;
      return true;
    default:
      return false;
  }
}

}  // namespace

// mov (values, packing, clocks) and cvt.
Status Decoder::DecodeConversion(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  [[maybe_unused]] const std::string& op = parts[0];
  if (op == "mov") {
    GPUPOOL_RETURN_IF_ERROR(Need(d, 2));
    if (ClockRegister clock; ops[1].kind == RawOperand::kName && ClockOf(ops[1].name, &clock)) {
      GPUPOOL_DST(0);
      inst.mode = clock;
      return Append(inst, &HClock);
    }
    if (ops[1].kind == RawOperand::kVector) {  // pack
      GPUPOOL_DST(0);
      inst.vec = static_cast<uint8_t>(ops[1].items.size());
      if (inst.vec < 2 || inst.vec > 4) return BadType(d);
      inst.width = static_cast<uint8_t>(TySize(type) / inst.vec);
      int32_t* sources[4] = {&inst.a, &inst.b, &inst.c, &inst.e};
      for (size_t i = 0; i < ops[1].items.size(); ++i) {
        auto slot = Source(frame, ops[1].items[i], kNoType, s.line);
        if (!slot.ok()) return slot.status();
        *sources[i] = *slot;
      }
      return Append(inst, &HPack);
    }
    if (ops[0].kind == RawOperand::kVector) {  // unpack
      inst.vec = static_cast<uint8_t>(ops[0].items.size());
      if (inst.vec < 2 || inst.vec > 4) return BadType(d);
      inst.width = static_cast<uint8_t>(TySize(type) / inst.vec);
      for (size_t i = 0; i < ops[0].items.size(); ++i) {
        auto slot = Dest(frame, ops[0].items[i], s.line);
        if (!slot.ok()) return slot.status();
        inst.d[i] = *slot;
      }
      GPUPOOL_SRC(a, 1, type);
      return Append(inst, &HUnpack);
    }
    GPUPOOL_DST(0);
    GPUPOOL_SRC(a, 1, type);
    inst.pure = true;
    return Append(inst, &WMov<uint64_t>::run);
  }

  if (op == "cvt" && parts.size() > 2 && std::find(parts.begin(), parts.end(), "tf32") != parts.end()) {
    // cvt.{rna,rn,rz}{.satfinite}.tf32.f32 (sm_80: wmma::__float_to_tf32).
    GPUPOOL_RETURN_IF_ERROR(Need(d, 2));
    if (types.size() != 1 || types[0] != kF32 || parts[parts.size() - 2] != "tf32") {
      return BadType(d);
    }
    inst.mode = mods.count("rna")  ? kTf32RoundAway
                : mods.count("rn") ? kTf32RoundNearest
                : mods.count("rz") ? kTf32RoundZero
                                   : kTf32NoRounding;
    if (inst.mode == kTf32NoRounding) {
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": cvt to tf32 needs .rna, .rn or .rz");
    }
    GPUPOOL_DST(0);
    GPUPOOL_SRC(a, 1, kF32);
    inst.pure = true;
    return Append(inst, &HCvtTf32);
  }
  if (op == "cvt" && (mods.count("e4m3x2") || mods.count("e5m2x2"))) {
    // sm_89's 8-bit floats, two to a .b16 (the type parts in order: the destination's, the
    // source's): cvt.rn.satfinite{.relu}.f8x2.f32 d, a, b (a into the upper byte);
    // cvt.rn.satfinite{.relu}.f8x2.f16x2 d, a; cvt.rn{.relu}.f16x2.f8x2 d, a.
    const std::string format = mods.count("e4m3x2") ? "e4m3x2" : "e5m2x2";
    const auto at = std::find(parts.begin(), parts.end(), format) - parts.begin();
    const bool to_fp8 = at == static_cast<std::ptrdiff_t>(parts.size()) - 2;
    const bool from_f32 = to_fp8 && types.size() == 1 && types[0] == kF32;
    const bool from_halves = to_fp8 && types.size() == 1 && parts.back() == "f16x2";
    const bool to_halves = !to_fp8 && at == static_cast<std::ptrdiff_t>(parts.size()) - 1 && parts[at - 1] == "f16x2";
    if (!from_f32 && !from_halves && !to_halves) return BadType(d);
    if (!mods.count("rn") || (to_fp8 && !mods.count("satfinite")) || (to_halves && mods.count("satfinite"))) {
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + s.opcode +
                                     ": a conversion of 8-bit floats takes .rn" +
                                     (to_fp8 ? " and .satfinite" : " and no .satfinite"));
    }
    GPUPOOL_RETURN_IF_ERROR(Need(d, from_f32 ? 3 : 2));
    GPUPOOL_DST(0);
    GPUPOOL_SRC(a, 1, from_f32 ? kF32 : kU32);
    if (from_f32) GPUPOOL_SRC(b, 2, kF32);
    inst.mode = from_f32 ? kFp8FromFloats : from_halves ? kFp8FromHalves : kFp8ToHalves;
    inst.mode2 = static_cast<uint8_t>(format == "e4m3x2" ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
    if (mods.count("relu")) inst.flags |= kFlagRelu;
    inst.pure = true;
    return Append(inst, &HCvtFp8);
  }
  if (op == "cvt") {
    GPUPOOL_RETURN_IF_ERROR(Need(d, 2));
    if (types.size() < 2) return BadType(d);
    Ty dst = types[types.size() - 2], source = types.back();
    auto kind = [](Ty t) -> CvtKind {
      if (t == kBF16) return kKindB;
      if (TyFloat(t)) return kKindF;
      if (TySigned(t)) return kKindS;
      return kKindU;
    };
    CvtRounding rounding = kCvtRoundNearest;
    if (mods.count("rz")) rounding = kCvtRoundZero;
    if (mods.count("rm")) rounding = kCvtRoundDown;
    if (mods.count("rp")) rounding = kCvtRoundUp;
    if (mods.count("rni")) rounding = kCvtRoundNearestInteger;
    if (mods.count("rzi")) rounding = kCvtRoundZeroInteger;
    if (mods.count("rmi")) rounding = kCvtRoundDownInteger;
    if (mods.count("rpi")) rounding = kCvtRoundUpInteger;
    if ((dst == kF16x2 || dst == kBF16x2) && source == kF32 && ops.size() == 3) {
      // cvt.f16x2.f32 d, a, b (sm_80, as __floats2half2_rn compiles): d's upper half is
      // a converted, its lower half b. Two conversions into slots of their own, then a
      // pack.
      if (mods.count("relu") || mods.count("satfinite")) {
        return Refuse("cvt." + std::string(mods.count("relu") ? "relu" : "satfinite") +
                          " to a packed type is not supported by the sim GPU",
                      s.line, inst);
      }
      const Ty half = dst == kF16x2 ? kF16 : kBF16;
      int32_t halves[2];  // lower, upper
      for (int i = 0; i < 2; ++i) {
        Inst part = inst;
        halves[i] = NewSlot();
        part.d[0] = halves[i];
        auto value = Source(frame, ops[i == 0 ? 2 : 1], source, s.line);
        if (!value.ok()) return value.status();
        part.a = *value;
        part.mode = CvtOperand(kind(half), TySize(half));
        part.mode2 = CvtOperand(kind(source), TySize(source));
        part.width = rounding;
        part.run = CvtHandler(part);
        part.pure = true;
        k_->code.push_back(part);
      }
      GPUPOOL_DST(0);
      inst.a = halves[0];
      inst.b = halves[1];
      inst.vec = 2;
      inst.width = 2;
      return Append(inst, &HPack);
    }
    if (ops[0].kind == RawOperand::kVector || ops[1].kind == RawOperand::kVector) {
      return Refuse("packed conversions (cvt with vectors) are not supported", s.line, inst);
    }
    GPUPOOL_DST(0);
    GPUPOOL_SRC(a, 1, source);
    inst.mode = CvtOperand(kind(dst), TySize(dst));
    inst.mode2 = CvtOperand(kind(source), TySize(source));
    // Float -> integer without an explicit mode rounds toward zero (as C
    // does).
    if (TyFloat(source) && !TyFloat(dst) && rounding < kCvtRoundNearestInteger) {
      rounding = rounding == kCvtRoundNearest ? kCvtRoundZeroInteger
                                              : static_cast<CvtRounding>(rounding + kCvtRoundNearestInteger);
    }
    inst.width = rounding;
    inst.pure = true;
    return Append(inst, CvtHandler(inst));
  }
  return DecodeArithmetic(d);  // not reached: each of the family's opcodes returns above
}

}  // namespace gpupool::sim::interp

// 16-bit floats and cvt forms computed by the interpreter's own lane functions
// (emitter.h): f16/bf16 arithmetic and cvt to and from f16/bf16, or from a float to an
// integer narrower than 32 bits, call half_float.h's HalfLane and ConvertLane through their
// addresses (lane by lane in vector code), so that each result is the interpreter's bit for
// bit; setp of halves compares their exact values in float, inline; cvt to tf32 is inline
// integer arithmetic, as the interpreter's HCvtTf32.
#include <algorithm>

#include "remote/ptx/half_float.h"
#include "remote/ptx/ir/kernel.h"
#include "remote/ptx/jit/emitter.h"

namespace gpupool::sim::jit {

namespace {

// CvtOperand of a type, as the interpreter's decoder encodes it.
uint8_t CvtOperandOf(PtxType t) {
  const uint32_t bytes = t.bits / t.elements / 8;
  const CvtKind kind = t.kind == PtxKind::kBFloat                              ? kKindB
                       : t.kind == PtxKind::kHalf || t.kind == PtxKind::kFloat ? kKindF
                       : t.kind == PtxKind::kSigned                            ? kKindS
                                                                               : kKindU;
  return CvtOperand(kind, static_cast<int>(bytes));
}

bool IsHalf(PtxType t) { return t.kind == PtxKind::kHalf || t.kind == PtxKind::kBFloat; }

}  // namespace

bool NeedsLaneConversion(PtxType to, PtxType from) {
  if (IsHalf(to) || IsHalf(from)) return true;
  return to.is_int() && from.kind == PtxKind::kFloat && to.bits < 32;
}

// The exact value of 16-bit floats (f16 or bf16 bits, i16) as f32, as HalfBitsToFloat:
// bf16 is the top half of an f32; an f16's exponent is rebased, a subnormal is its
// fraction times 2^-24 (exact), and infinity and NaN keep their payload.
llvm::Value* Emitter::HalfToF32(llvm::Value* bits16, bool bf16) {
  llvm::Type* i32 = Lanes(i32_);
  llvm::Type* f32 = Lanes(b_.getFloatTy());
  llvm::Value* h = b_.CreateZExt(bits16, i32);
  if (bf16) return b_.CreateBitCast(b_.CreateShl(h, Int(32, 16)), f32);
  llvm::Value* sign = b_.CreateShl(b_.CreateAnd(h, Int(32, 0x8000)), Int(32, 16));
  llvm::Value* exponent = b_.CreateAnd(h, Int(32, 0x7c00));
  llvm::Value* fraction = b_.CreateAnd(h, Int(32, 0x3ff));
  llvm::Value* normal = b_.CreateAdd(b_.CreateShl(b_.CreateAnd(h, Int(32, 0x7fff)), Int(32, 13)), Int(32, 112u << 23));
  llvm::Value* special = b_.CreateOr(Int(32, 0x7f800000), b_.CreateShl(fraction, Int(32, 13)));
  llvm::Value* small = b_.CreateFMul(b_.CreateUIToFP(fraction, f32), llvm::ConstantFP::get(f32, std::ldexp(1.0, -24)));
  llvm::Value* magnitude =
      b_.CreateSelect(b_.CreateICmpEQ(exponent, Int(32, 0)), b_.CreateBitCast(small, i32),
                      b_.CreateSelect(b_.CreateICmpEQ(exponent, Int(32, 0x7c00)), special, normal));
  return b_.CreateBitCast(b_.CreateOr(sign, magnitude), f32);
}

// Half k (0: the low 16 bits) of `packed`, a register of t's bits, as a float.
llvm::Value* Emitter::HalfOf(llvm::Value* packed, PtxType t, uint32_t k) {
  llvm::Value* bits16 = b_.CreateTrunc(b_.CreateLShr(packed, Int(t.bits, 16 * k)), Lanes(b_.getInt16Ty()));
  return HalfToF32(bits16, t.kind == PtxKind::kBFloat);
}

// setp.cmp.{f16,bf16}{x2} p|q, a, b as the interpreter's HHalfCompare without a BoolOp:
// each half's comparison of the exact values (float's, as its Compare<float>); of .x2 the
// lower half's to p and the upper's to q, of one half the comparison to p and its negation
// to q.
bool Emitter::HalfSetp(const RawStatement& s, const std::vector<std::string_view>& q, PtxType t, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  if (q.size() != 1 || o.size() != 3 || o[0].kind != RawOperand::kName) {
    return (*why = "a form of setp on halves the tier does not take", false);
  }
  if (t.elements == 2 && o[0].pair.empty()) return (*why = "setp of .x2 with one predicate", false);
  const Type bits{Kind::kBits, t.bits};
  llvm::Value* a = Source(o[1], bits, why);
  llvm::Value* c = Source(o[2], bits, why);
  if (!a || !c) return false;
  llvm::Value* lower = FloatCompare(q[0], HalfOf(a, t, 0), HalfOf(c, t, 0), why);
  if (lower == nullptr) return false;
  llvm::Value* upper = nullptr;
  if (t.elements == 2) {
    upper = FloatCompare(q[0], HalfOf(a, t, 1), HalfOf(c, t, 1), why);
  } else {
    upper = b_.CreateNot(lower);
  }
  RawOperand p = o[0];
  p.pair.clear();
  const Type pred{Kind::kPred, 1};
  if (!Dest(p, lower, pred, why)) return false;
  if (o[0].pair.empty() || o[0].pair == "_") return true;
  RawOperand second = p;
  second.name = o[0].pair;
  return Dest(second, upper, pred, why);
}

// set.cmp.dtype.{f16,bf16}{x2} d, a, b as HHalfCompare without a BoolOp: each half's
// comparison as HalfSetp's; a true one writes, as the destination type says, 1.0 in its
// half (f16, bf16), all ones in its half (an integer type: all 32 bits of one half's), or
// 1.0f for any (f32); a false one 0.
bool Emitter::HalfSet(const RawStatement& s, const std::vector<std::string_view>& q, PtxType t, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  if (q.size() != 2 || o.size() != 3) return (*why = "a form of set on halves the tier does not take", false);
  const PtxType to = ParsePtxType(q[1]);
  const Type bits{Kind::kBits, t.bits};
  llvm::Value* a = Source(o[1], bits, why);
  llvm::Value* c = Source(o[2], bits, why);
  if (!a || !c) return false;
  llvm::Value* r = Int(32, 0);
  llvm::Value* any = Int(1, 0);
  for (uint32_t k = 0; k < t.elements; ++k) {
    llvm::Value* truth = FloatCompare(q[0], HalfOf(a, t, k), HalfOf(c, t, k), why);
    if (truth == nullptr) return false;
    any = b_.CreateOr(any, truth);
    uint64_t when_true = 0;
    if (to.kind == PtxKind::kHalf) {
      when_true = uint64_t{0x3c00} << (16 * k);
    } else if (to.kind == PtxKind::kBFloat) {
      when_true = uint64_t{0x3f80} << (16 * k);
    } else if (to.is_int() && to.elements == 1) {
      when_true = t.elements == 2 ? uint64_t{0xffff} << (16 * k) : 0xffffffff;
    } else if (!(to.kind == PtxKind::kFloat && to.bits == 32)) {
      return (*why = "a destination type of set the tier does not take", false);
    }
    r = b_.CreateOr(r, b_.CreateSelect(truth, Int(32, when_true), Int(32, 0)));
  }
  if (to.kind == PtxKind::kFloat) r = b_.CreateSelect(any, Int(32, 0x3f800000), Int(32, 0));
  // The interpreter's slot holds the 32 bits; a narrower register keeps its low ones.
  if (o[0].kind != RawOperand::kName) return (*why = "a destination it does not take", false);
  const uint32_t width = std::min<uint32_t>(32, StorageBits(o[0].name));
  const Type out{Kind::kBits, width};
  return Dest(o[0], b_.CreateTrunc(r, LlvmType(out)), out, why);
}

// add, sub, mul, fma/mad, neg, abs, min, max, tanh.approx, ex2.approx of .f16, .bf16 and
// their pairs, with .rn (the only rounding), .ftz, .sat, .relu and min/max's .NaN, as the
// interpreter decodes them (HalfInstruction): one call of HalfLane a lane.
bool Emitter::HalfArithmetic(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q,
                             PtxType t, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  static const std::map<std::string_view, std::pair<HalfOp, size_t>> kOps = {
      {"add", {kHalfAdd, 2}}, {"sub", {kHalfSub, 2}},   {"mul", {kHalfMul, 2}}, {"fma", {kHalfFma, 3}},
      {"mad", {kHalfFma, 3}}, {"neg", {kHalfNeg, 1}},   {"abs", {kHalfAbs, 1}}, {"min", {kHalfMin, 2}},
      {"max", {kHalfMax, 2}}, {"tanh", {kHalfTanh, 1}}, {"ex2", {kHalfEx2, 1}}};
  auto it = kOps.find(op);
  if (it == kOps.end() || o.size() != it->second.second + 1) {
    return (*why = "a half-precision instruction the tier does not take", false);
  }
  const bool approx_op = op == "tanh" || op == "ex2";
  uint8_t flags = 0;
  for (std::string_view qual : q) {
    if (qual == "rn" && !approx_op) {
      // round to nearest: HalfLane's only rounding
    } else if (qual == "approx" && approx_op) {
    } else if (qual == "ftz") {
      flags |= kFlagFtz;
    } else if (qual == "sat") {
      flags |= kFlagSat;
    } else if (qual == "relu") {
      flags |= kFlagRelu;
    } else if (qual == "NaN" && (op == "min" || op == "max")) {
      flags |= kFlagNaNOperand;
    } else {
      return (*why = "qualifier ." + std::string(qual) + " on halves", false);
    }
  }
  const Type bits{Kind::kBits, t.bits};
  std::vector<llvm::Value*> args = {b_.getInt8(it->second.first), b_.getInt8(flags),
                                    b_.getInt8(static_cast<uint8_t>(t.elements)),
                                    b_.getInt8(t.kind == PtxKind::kBFloat ? 1 : 0)};
  for (size_t i = 1; i <= 3; ++i) {
    llvm::Value* v = Int(32, 0);
    if (i < o.size()) {
      v = Source(o[i], bits, why);
      if (v == nullptr) return false;
      v = b_.CreateZExt(v, Lanes(i32_));
    }
    args.push_back(v);
  }
  llvm::Value* r = CallHost(reinterpret_cast<uint64_t>(&HalfLane), Lanes(i32_), args);
  return Dest(o[0], b_.CreateTrunc(r, LlvmType(bits)), bits, why);
}

// cvt forms ConvertLane computes (NeedsLaneConversion, and those Cvt does not emit inline),
// as the interpreter decodes them:
// the rounding, .ftz and .sat; a float to an integer rounds .rzi where PTX gives no integer
// rounding. cvt.f16x2.f32 d, a, b (and bf16x2) converts a to d's upper half and b to its
// lower. ConvertLaneInRounding sets a directed rounding's host mode around the lane, as
// HCvt sets it around its lanes.
bool Emitter::LaneConversion(const RawStatement& s, const std::vector<std::string_view>& parts, PtxType to,
                             PtxType from, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  CvtRounding rounding = kCvtRoundNearest;
  uint8_t flags = 0;
  static const std::map<std::string_view, CvtRounding> kRoundings = {{"rn", kCvtRoundNearest},
                                                                     {"rz", kCvtRoundZero},
                                                                     {"rm", kCvtRoundDown},
                                                                     {"rp", kCvtRoundUp},
                                                                     {"rni", kCvtRoundNearestInteger},
                                                                     {"rzi", kCvtRoundZeroInteger},
                                                                     {"rmi", kCvtRoundDownInteger},
                                                                     {"rpi", kCvtRoundUpInteger}};
  for (size_t i = 1; i + 2 < parts.size(); ++i) {
    if (auto it = kRoundings.find(parts[i]); it != kRoundings.end()) {
      rounding = it->second;
    } else if (parts[i] == "ftz") {
      flags |= kFlagFtz;
    } else if (parts[i] == "sat") {
      flags |= kFlagSat;
    } else {
      return (*why = "qualifier ." + std::string(parts[i]), false);
    }
  }
  const bool float_from = from.kind == PtxKind::kFloat || IsHalf(from);
  const bool float_to = to.kind == PtxKind::kFloat || IsHalf(to);
  if (float_from && !float_to && rounding < kCvtRoundNearestInteger) {
    rounding = static_cast<CvtRounding>(rounding + kCvtRoundNearestInteger);
  }
  const bool pair = to.elements == 2;
  if (from.elements != 1 || o.size() != (pair ? 3u : 2u) || (pair && from.kind != PtxKind::kFloat)) {
    return (*why = "form", false);
  }
  const PtxType element{to.kind, to.bits / to.elements, 1};
  const uint8_t to_operand = CvtOperandOf(element), from_operand = CvtOperandOf(from);
  auto convert = [&](const RawOperand& source) -> llvm::Value* {
    llvm::Value* raw = Source(source, Type{Kind::kBits, from.bits}, why);
    if (raw == nullptr) return nullptr;
    return CallHost(reinterpret_cast<uint64_t>(&ConvertLaneInRounding), I64(),
                    {b_.CreateZExt(raw, I64()), b_.getInt8(to_operand), b_.getInt8(from_operand), b_.getInt8(rounding),
                     b_.getInt8(flags)});
  };
  if (pair) {
    llvm::Value* upper = convert(o[1]);
    llvm::Value* lower = convert(o[2]);
    if (!upper || !lower) return false;
    llvm::Value* r = b_.CreateOr(b_.CreateShl(upper, Int(64, 16)), lower);
    const Type bits{Kind::kBits, 32};
    return Dest(o[0], b_.CreateTrunc(r, LlvmType(bits)), bits, why);
  }
  llvm::Value* r = convert(o[1]);
  if (r == nullptr) return false;
  // A signed integer comes back sign-extended: Dest extends it again as its type says.
  const Type type{to.is_int() ? to.kind : Kind::kBits, to.bits};
  return Dest(o[0], b_.CreateTrunc(r, LlvmType(type)), type, why);
}

// cvt.{rna,rn,rz}.tf32.f32 as the interpreter's HCvtTf32: the f32's bits rounded to 10
// fraction bits (ties away, to even, or toward zero) unless infinite or NaN, the low 13
// bits cleared but a NaN's. .satfinite (which the interpreter does not honour) is refused.
bool Emitter::ConvertTf32(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  if (parts.size() != 4 || parts[2] != "tf32" || parts[3] != "f32" || o.size() != 2) {
    return (*why = "a form of cvt to tf32 the tier does not take", false);
  }
  const std::string_view rounding = parts[1];
  if (rounding != "rna" && rounding != "rn" && rounding != "rz") return (*why = "rounding of tf32", false);
  const Type u32{Kind::kBits, 32};
  llvm::Value* x = Source(o[1], u32, why);
  if (x == nullptr) return false;
  auto all_ones_exponent = [&](llvm::Value* v) {
    return b_.CreateICmpEQ(b_.CreateAnd(v, Int(32, 0x7f800000)), Int(32, 0x7f800000));
  };
  if (rounding != "rz") {
    llvm::Value* add = rounding == "rna"
                           ? Int(32, 0x1000)
                           : b_.CreateAdd(Int(32, 0xfff), b_.CreateAnd(b_.CreateLShr(x, Int(32, 13)), Int(32, 1)));
    x = b_.CreateSelect(all_ones_exponent(x), x, b_.CreateAdd(x, add));
  }
  llvm::Value* nan =
      b_.CreateAnd(all_ones_exponent(x), b_.CreateICmpNE(b_.CreateAnd(x, Int(32, 0x7fffff)), Int(32, 0)));
  llvm::Value* r = b_.CreateSelect(nan, x, b_.CreateAnd(x, Int(32, ~uint64_t{0x1fff})));
  return Dest(o[0], r, u32, why);
}

}  // namespace gpupool::sim::jit

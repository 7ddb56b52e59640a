// setp, cvt, and integer and float arithmetic (emitter.h).
#include <llvm/IR/Intrinsics.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "remote/ptx/bits.h"
#include "remote/ptx/rounding.h"
#include "remote/ptx/jit/emitter.h"

namespace gpupool::sim::jit {

bool Emitter::Setp(const RawStatement& s, const std::vector<std::string_view>& q, Type t, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  // setp.cmp{.ftz}{.and,.or,.xor}.type p{|q}, a, b{, {!}c}: .ftz (of f32) compares the
  // operands flushed, as the interpreter's HSetp reads them (FtzOperand); with a BoolOp,
  // p = (a cmp b) op c and q = !(a cmp b) op c.
  bool ftz = false;
  std::string_view bool_op;
  for (size_t i = 1; i < q.size(); ++i) {
    if (q[i] == "ftz" && t.kind == Kind::kFloat && !ftz) {
      ftz = true;
    } else if ((q[i] == "and" || q[i] == "or" || q[i] == "xor") && bool_op.empty()) {
      bool_op = q[i];
    } else {
      return (*why = "a form of setp the tier does not take", false);
    }
  }
  if (!t.ok() || t.kind == Kind::kPred || q.empty() || o.size() != (bool_op.empty() ? 3u : 4u) ||
      o[0].kind != RawOperand::kName) {
    *why = "a form of setp the tier does not take";
    return false;
  }
  llvm::Value* a = Source(o[1], t, why);
  llvm::Value* c = Source(o[2], t, why);
  if (!a || !c) return false;
  if (ftz) {
    a = FloatOperand(a, t);
    c = FloatOperand(c, t);
  }
  const std::string_view cmp = q[0];
  llvm::Value* r = nullptr;
  if (t.kind == Kind::kFloat) {
    r = FloatCompare(cmp, a, c, why);
    if (r == nullptr) return false;
  } else {
    using P = llvm::CmpInst::Predicate;
    const bool sign = t.kind == Kind::kSigned;
    std::map<std::string_view, P> kInt = {{"eq", P::ICMP_EQ},
                                          {"ne", P::ICMP_NE},
                                          {"lt", sign ? P::ICMP_SLT : P::ICMP_ULT},
                                          {"le", sign ? P::ICMP_SLE : P::ICMP_ULE},
                                          {"gt", sign ? P::ICMP_SGT : P::ICMP_UGT},
                                          {"ge", sign ? P::ICMP_SGE : P::ICMP_UGE},
                                          {"lo", P::ICMP_ULT},
                                          {"ls", P::ICMP_ULE},
                                          {"hi", P::ICMP_UGT},
                                          {"hs", P::ICMP_UGE}};
    auto it = kInt.find(cmp);
    if (it == kInt.end()) return (*why = "comparison ." + std::string(cmp), false);
    r = b_.CreateICmp(it->second, a, c);
  }
  const Type pred{Kind::kPred, 1};
  llvm::Value* other = b_.CreateNot(r);  // q's
  if (!bool_op.empty()) {
    RawOperand plain = o[3];
    plain.negated = false;
    llvm::Value* with = Source(plain, pred, why);
    if (with == nullptr) return false;
    if (o[3].negated) with = b_.CreateNot(with);
    auto combine = [&](llvm::Value* v) {
      return bool_op == "and" ? b_.CreateAnd(v, with) : bool_op == "or" ? b_.CreateOr(v, with) : b_.CreateXor(v, with);
    };
    r = combine(r);
    other = combine(other);
  }
  RawOperand first = o[0];
  first.pair.clear();
  if (!Dest(first, r, pred, why)) return false;
  if (o[0].pair.empty() || o[0].pair == "_") return true;
  RawOperand second = first;
  second.name = o[0].pair;
  return Dest(second, other, pred, why);
}

// a `cmp` c of floats (setp's comparisons), as the interpreter's Compare<T>: ordered
// comparisons false on a NaN, the unordered ones (.equ ...) true; nullptr for another.
llvm::Value* Emitter::FloatCompare(std::string_view cmp, llvm::Value* a, llvm::Value* c, std::string* why) {
  using P = llvm::CmpInst::Predicate;
  static const std::map<std::string_view, P> kFloat = {
      {"eq", P::FCMP_OEQ},  {"ne", P::FCMP_ONE},  {"lt", P::FCMP_OLT},  {"le", P::FCMP_OLE},  {"gt", P::FCMP_OGT},
      {"ge", P::FCMP_OGE},  {"equ", P::FCMP_UEQ}, {"neu", P::FCMP_UNE}, {"ltu", P::FCMP_ULT}, {"leu", P::FCMP_ULE},
      {"gtu", P::FCMP_UGT}, {"geu", P::FCMP_UGE}, {"num", P::FCMP_ORD}, {"nan", P::FCMP_UNO}};
  auto it = kFloat.find(cmp);
  if (it == kFloat.end()) return (*why = "comparison ." + std::string(cmp), nullptr);
  return b_.CreateFCmp(it->second, a, c);
}

bool Emitter::Cvt(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  if (parts.size() >= 3 && parts[parts.size() - 2] == "tf32") return ConvertTf32(s, parts, why);
  if (parts.size() >= 3 && NeedsLaneConversion(ParsePtxType(parts[parts.size() - 2]), ParsePtxType(parts.back()))) {
    return LaneConversion(s, parts, ParsePtxType(parts[parts.size() - 2]), ParsePtxType(parts.back()), why);
  }
  if (parts.size() < 3 || o.size() != 2) return (*why = "form", false);
  const Type to = TypeOf(parts[parts.size() - 2]);
  const Type from = TypeOf(parts.back());
  if (!to.ok() || !from.ok() || to.kind == Kind::kPred || from.kind == Kind::kPred) {
    return (*why = "types", false);
  }
  std::string_view rounding;
  bool ftz = false, sat = false;
  for (size_t i = 1; i + 2 < parts.size(); ++i) {
    std::string_view qual = parts[i];
    if (qual == "rn" || qual == "rz" || qual == "rm" || qual == "rp" || qual == "rni" || qual == "rzi" ||
        qual == "rmi" || qual == "rpi") {
      rounding = qual;
    } else if (qual == "ftz") {
      ftz = true;
    } else if (qual == "sat") {
      sat = true;
    } else {
      return (*why = "qualifier ." + std::string(qual), false);
    }
  }
  // The forms emitted inline below: integers without a rounding or .ftz (nor .sat of
  // untyped bits), integers to floats in a float rounding, floats to integers in an integer
  // rounding. The others the interpreter takes (cvt.rz.s32.f32 as .rzi, cvt.ftz.s32.s16,
  // cvt.sat.u32.b16...) are computed by its own ConvertLane (emit_half.cc).
  const bool integer_rounding = rounding == "rni" || rounding == "rzi" || rounding == "rmi" || rounding == "rpi";
  const bool inline_form =
      to.is_int() && from.is_int()
          ? rounding.empty() && !ftz && !(sat && (to.kind == Kind::kBits || from.kind == Kind::kBits))
      : from.is_int() ? !integer_rounding
      : to.is_int()   ? integer_rounding
                      : true;
  if (!inline_form) {
    return LaneConversion(s, parts, ParsePtxType(parts[parts.size() - 2]), ParsePtxType(parts.back()), why);
  }
  // .rz, .rm and .rp into a float: the interpreter's HCvt converts with the host's rounding
  // mode set; compiled code calls the same conversion (rounding.h) where it is inexact.
  const CvtRounding directed = rounding == "rz"   ? kCvtRoundZero
                               : rounding == "rm" ? kCvtRoundDown
                               : rounding == "rp" ? kCvtRoundUp
                                                  : kCvtRoundNearest;
  llvm::Value* a = Source(o[1], from, why);
  if (a == nullptr) return false;
  llvm::Value* r = nullptr;
  if (to.is_int() && from.is_int()) {
    if (!rounding.empty()) return (*why = "rounding of an integer conversion", false);
    if (ftz) return (*why = ".ftz on an integer conversion", false);
    // Integer to integer: truncate or extend by the source's signedness, then the
    // destination register holds the value as `to` says; with .sat clamped to the
    // destination's range first, as the interpreter's HCvt clamps.
    const bool from_signed = from.kind == Kind::kSigned;
    if (sat && to.kind != Kind::kBits && from.kind != Kind::kBits) {
      // The source's value in 64 bits, and the destination's bounds there.
      llvm::Value* v = from_signed ? b_.CreateSExtOrTrunc(a, I64()) : b_.CreateZExtOrTrunc(a, I64());
      const bool to_signed = to.kind == Kind::kSigned;
      const uint64_t high = ~uint64_t{0} >> (64 - to.bits + (to_signed ? 1 : 0));
      if (from_signed) {
        const uint64_t low = to_signed ? ~uint64_t{0} << (to.bits - 1) : 0;
        v = b_.CreateSelect(b_.CreateICmpSLT(v, Int(64, low)), Int(64, low), v);
      }
      // At or above the low bound: an unsigned destination's bound compares unsigned.
      llvm::Value* over =
          to_signed && from_signed ? b_.CreateICmpSGT(v, Int(64, high)) : b_.CreateICmpUGT(v, Int(64, high));
      r = b_.CreateTrunc(b_.CreateSelect(over, Int(64, high), v), LlvmType(to));
    } else if (sat) {
      return (*why = "a saturating conversion of bits", false);
    } else {
      r = from_signed ? b_.CreateSExtOrTrunc(a, LlvmType(to)) : b_.CreateZExtOrTrunc(a, LlvmType(to));
    }
  } else if (to.kind == Kind::kFloat && from.is_int()) {
    // Round-to-nearest is what sitofp/uitofp do (.rn is then required by PTX unless
    // exact); an integer of up to 32 bits is exact in a double, so to f64 in any rounding.
    if (!rounding.empty() && rounding != "rn" && directed == kCvtRoundNearest) {
      return (*why = "rounding ." + std::string(rounding), false);
    }
    const bool from_signed = from.kind == Kind::kSigned;
    auto convert = [&](Type type) {
      return from_signed ? b_.CreateSIToFP(a, LlvmType(type)) : b_.CreateUIToFP(a, LlvmType(type));
    };
    const Type f64{Kind::kFloat, 64};
    if (directed == kCvtRoundNearest || (to.bits == 64 && from.bits <= 32)) {
      r = convert(to);
    } else if (from.bits <= 32) {
      r = CallHost(reinterpret_cast<uint64_t>(&DirectedToF32), LlvmType(to), {convert(f64), b_.getInt8(directed)});
    } else if (to.bits == 32) {
      r = CallHost(
          from_signed ? reinterpret_cast<uint64_t>(&DirectedS64ToF32) : reinterpret_cast<uint64_t>(&DirectedU64ToF32),
          LlvmType(to), {a, b_.getInt8(directed)});
    } else {
      r = CallHost(
          from_signed ? reinterpret_cast<uint64_t>(&DirectedS64ToF64) : reinterpret_cast<uint64_t>(&DirectedU64ToF64),
          LlvmType(to), {a, b_.getInt8(directed)});
    }
    r = FloatResult(r, to, ftz, sat);
  } else if (to.is_int() && from.kind == Kind::kFloat) {
    // Rounded to an integer in double as the interpreter rounds, then saturating, NaN to 0,
    // as PTX says (the fptosi.sat intrinsics do exactly that, as the interpreter's clamps);
    // .ftz flushes an f32 source first (a subnormal .rpi is then 0, not 1).
    if (ftz) a = FloatOperand(a, from);
    llvm::Value* whole = RoundToInteger(a, from, rounding);
    if (whole == nullptr) return (*why = "rounding ." + std::string(rounding), false);
    auto id = to.kind == Kind::kSigned ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat;
    r = b_.CreateIntrinsic(id, {LlvmType(to), LlvmType(Type{Kind::kFloat, 64})}, {whole});
  } else {
    // Float to float, as the interpreter's HCvt: an f32 source flushed under .ftz, then
    // rounded to an integer (.rni...) or not, converted, the f32 result flushed under .ftz
    // and saturated under .sat.
    if (ftz) a = FloatOperand(a, from);
    if (llvm::Value* whole = RoundToInteger(a, from, rounding); whole != nullptr) {
      // Rounded in double as the interpreter rounds (floorf compiles to cvt.rmi.f32.f32),
      // then converted to the destination (round to nearest, as its static_cast).
      r = to.bits == 64 ? whole : b_.CreateFPTrunc(whole, LlvmType(to));
    } else if (to.bits > from.bits) {
      r = b_.CreateFPExt(a, LlvmType(to));  // exact, in any rounding
    } else if (to.bits < from.bits) {
      if (directed != kCvtRoundNearest) {
        r = CallHost(reinterpret_cast<uint64_t>(&DirectedToF32), LlvmType(to), {a, b_.getInt8(directed)});
      } else {
        r = b_.CreateFPTrunc(a, LlvmType(to));  // .rn, or none: the interpreter's nearest
      }
    } else if (to.bits == 32) {
      // f32 to f32 (cvt.sat.f32.f32 is __saturatef): exact, but the interpreter takes the
      // value through a double, which quiets a signalling NaN. Set its quiet bit on the bits
      // (LLVM would fold an fpext and fptrunc back into nothing).
      llvm::Type* bits = LlvmType(Type{Kind::kBits, 32});
      llvm::Value* quiet = b_.CreateBitCast(b_.CreateOr(b_.CreateBitCast(a, bits), Int(32, 0x00400000)), LlvmType(to));
      r = b_.CreateSelect(b_.CreateFCmpUNO(a, a), quiet, a);
    } else {
      r = a;  // f64 to f64: the interpreter's value as read
    }
    r = FloatResult(r, to, ftz, sat);
  }
  return Dest(o[0], r, to, why);
}

// Calls the host function at `address` (of C linkage types: the LLVM types of `args` and
// `result`; an i8 argument zero-extended, as the C++ ABI passes a uint8_t) through its
// address, so that LLVM neither folds nor replaces it; in vector code once per lane, an
// argument of vector type giving each call its lane's element.
llvm::Value* Emitter::CallHostOnce(uint64_t address, llvm::Type* result, const std::vector<llvm::Value*>& args) {
  std::vector<llvm::Type*> types;
  for (llvm::Value* v : args) types.push_back(v->getType());
  auto* type = llvm::FunctionType::get(result, types, false);
  llvm::CallInst* c = b_.CreateCall(type, llvm::ConstantExpr::getIntToPtr(b_.getInt64(address), ptr_), args);
  for (size_t i = 0; i < args.size(); ++i) {
    if (types[i]->isIntegerTy(8)) c->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::ZExt);
  }
  return c;
}

llvm::Value* Emitter::CallHost(uint64_t address, llvm::Type* result, const std::vector<llvm::Value*>& args) {
  llvm::Type* scalar_result = result->getScalarType();
  auto call = [&](const std::vector<llvm::Value*>& values) { return CallHostOnce(address, scalar_result, values); };
  if (!lanes_) return call(args);
  llvm::Value* r = llvm::Constant::getNullValue(Lanes(scalar_result));
  for (uint32_t k = 0; k < lanes_; ++k) {
    std::vector<llvm::Value*> lane;
    for (llvm::Value* v : args)
      lane.push_back(v->getType()->isVectorTy() ? b_.CreateExtractElement(v, uint64_t{k}) : v);
    r = b_.CreateInsertElement(r, call(lane), uint64_t{k});
  }
  return r;
}

// Float `a` (of `from`) rounded to an integer as cvt's `rounding` says (.rni, .rzi, .rmi,
// .rpi), as a double; nullptr for another rounding. The interpreter's own RoundTo on the
// value widened to double (which quiets a float's signalling NaN), called through its
// address: how it rounds is compiled code's choice (a double's signalling NaN comes out
// quieted or not), which LLVM's intrinsics need not share, and LLVM neither folds nor
// replaces the call. Vector code calls it lane by lane.
llvm::Value* Emitter::RoundToInteger(llvm::Value* a, Type from, std::string_view rounding) {
  CvtRounding mode;
  if (rounding == "rni") {
    mode = kCvtRoundNearestInteger;
  } else if (rounding == "rzi") {
    mode = kCvtRoundZeroInteger;
  } else if (rounding == "rmi") {
    mode = kCvtRoundDownInteger;
  } else if (rounding == "rpi") {
    mode = kCvtRoundUpInteger;
  } else {
    return nullptr;
  }
  llvm::Type* f64 = b_.getDoubleTy();
  if (from.bits != 64) a = b_.CreateFPExt(a, Lanes(f64));
  using Function = double (*)(double, CvtRounding);
  const Function function = &RoundTo;
  auto* type = llvm::FunctionType::get(f64, {f64, b_.getInt8Ty()}, false);
  llvm::Value* callee = llvm::ConstantExpr::getIntToPtr(b_.getInt64(reinterpret_cast<uint64_t>(function)), ptr_);
  auto call = [&](llvm::Value* v) {
    llvm::CallInst* c = b_.CreateCall(type, callee, {v, b_.getInt8(mode)});
    c->addParamAttr(1, llvm::Attribute::ZExt);  // a uint8_t argument, as the C++ ABI passes it
    return c;
  };
  if (!lanes_) return call(a);
  llvm::Value* r = llvm::Constant::getNullValue(Lanes(f64));
  for (uint32_t k = 0; k < lanes_; ++k) {
    r = b_.CreateInsertElement(r, call(b_.CreateExtractElement(a, uint64_t{k})), uint64_t{k});
  }
  return r;
}

bool Emitter::Integer(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
                      std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  auto src = [&](int i, Type type) { return Source(o[i], type, why); };
  auto done = [&](llvm::Value* v, Type type) { return v != nullptr && Dest(o[0], v, type, why); };
  const bool sign = t.kind == Kind::kSigned;
  if (op == "addc" || op == "subc" || op == "madc" ||
      ((op == "add" || op == "sub" || op == "mad") && std::find(q.begin(), q.end(), "cc") != q.end())) {
    return Carry(s, op, q, t, why);
  }
  if (op == "mul24" || op == "mad24") return Mul24(s, op, q, t, why);
  if ((op == "add" || op == "sub") && q.empty() && o.size() == 3) {
    llvm::Value* a = src(1, t);
    llvm::Value* c = src(2, t);
    if (!a || !c) return false;
    return done(op == "add" ? b_.CreateAdd(a, c) : b_.CreateSub(a, c), t);
  }
  if ((op == "and" || op == "or" || op == "xor") && q.empty() && o.size() == 3) {
    llvm::Value* a = src(1, t);
    llvm::Value* c = src(2, t);
    if (!a || !c) return false;
    return done(op == "and" ? b_.CreateAnd(a, c) : op == "or" ? b_.CreateOr(a, c) : b_.CreateXor(a, c), t);
  }
  if (op == "not" && q.empty() && o.size() == 2) {
    llvm::Value* a = src(1, t);
    return a != nullptr && done(b_.CreateNot(a), t);
  }
  if (t.kind == Kind::kPred) return (*why = "form", false);
  if ((op == "neg" || op == "abs") && q.empty() && o.size() == 2 && t.kind == Kind::kSigned) {
    llvm::Value* a = src(1, t);
    if (!a) return false;
    if (op == "neg") return done(b_.CreateNeg(a), t);
    return done(b_.CreateSelect(b_.CreateICmpSLT(a, Int(t.bits, 0)), b_.CreateNeg(a), a), t);
  }
  if ((op == "min" || op == "max") && q.empty() && o.size() == 3 && t.kind != Kind::kBits) {
    llvm::Value* a = src(1, t);
    llvm::Value* c = src(2, t);
    if (!a || !c) return false;
    llvm::Value* less = sign ? b_.CreateICmpSLT(a, c) : b_.CreateICmpULT(a, c);
    return done(op == "min" ? b_.CreateSelect(less, a, c) : b_.CreateSelect(less, c, a), t);
  }
  if ((op == "shl" || op == "shr") && q.empty() && o.size() == 3) {
    // The shift amount is a u32; amounts past the width clamp to it (PTX).
    llvm::Value* a = src(1, t);
    llvm::Value* n = src(2, Type{Kind::kUnsigned, 32});
    if (!a || !n) return false;
    llvm::Value* wide = b_.CreateICmpUGE(n, Int(32, t.bits));
    llvm::Value* amount = b_.CreateZExtOrTrunc(b_.CreateSelect(wide, Int(32, t.bits - 1), n), LlvmType(t));
    llvm::Value* r;
    if (op == "shl") {
      r = b_.CreateSelect(wide, Int(t.bits, 0), b_.CreateShl(a, amount));
    } else if (sign) {
      r = b_.CreateAShr(a, amount);  // past the width: the sign fills it, as a shift by N-1
    } else {
      r = b_.CreateSelect(wide, Int(t.bits, 0), b_.CreateLShr(a, amount));
    }
    return done(r, t);
  }
  // div / rem of .u and .s types, as the interpreter's (interp/arithmetic.h, Binary): by
  // zero, div gives all ones and rem the dividend; signed by -1, div the negation (the
  // minimum stays itself) and rem 0. The host division runs on a divisor that is neither 0
  // nor, signed, -1 (no trap, no LLVM poison), and its result is chosen only where that
  // divisor is the operand.
  if ((op == "div" || op == "rem") && q.empty() && o.size() == 3 && t.kind != Kind::kBits) {
    llvm::Value* a = src(1, t);
    llvm::Value* c = src(2, t);
    if (!a || !c) return false;
    llvm::Value* zero = b_.CreateICmpEQ(c, Int(t.bits, 0));
    llvm::Value* minus_one = sign ? b_.CreateICmpEQ(c, Int(t.bits, ~uint64_t{0})) : nullptr;
    llvm::Value* odd = sign ? b_.CreateOr(zero, minus_one) : zero;
    llvm::Value* divisor = b_.CreateSelect(odd, Int(t.bits, 1), c);
    llvm::Value* r;
    if (op == "div") {
      r = sign ? b_.CreateSDiv(a, divisor) : b_.CreateUDiv(a, divisor);
      if (sign) r = b_.CreateSelect(minus_one, b_.CreateSub(Int(t.bits, 0), a), r);
      r = b_.CreateSelect(zero, Int(t.bits, ~uint64_t{0}), r);
    } else {
      r = sign ? b_.CreateSRem(a, divisor) : b_.CreateURem(a, divisor);
      if (sign) r = b_.CreateSelect(minus_one, Int(t.bits, 0), r);
      r = b_.CreateSelect(zero, a, r);
    }
    return done(r, t);
  }
  // mul.lo / mad.lo (any int type), mul.wide / mad.wide (16 and 32 bits), mul.hi / mad.hi.
  if ((op == "mul" || op == "mad") && q.size() == 1 && o.size() == (op == "mul" ? 3u : 4u)) {
    llvm::Value* a = src(1, t);
    llvm::Value* c = src(2, t);
    if (!a || !c) return false;
    // mad adds its third operand, of the product's type (nullptr when it cannot be read).
    auto plus_addend = [&](llvm::Value* product, Type type) -> llvm::Value* {
      if (op != "mad") return product;
      llvm::Value* e = src(3, type);
      return e ? b_.CreateAdd(product, e) : nullptr;
    };
    // The operands at twice their width, extended by the type's signedness.
    const Type wide{t.kind, t.bits * 2};
    auto widen = [&](llvm::Value* v) {
      return sign ? b_.CreateSExt(v, LlvmType(wide)) : b_.CreateZExt(v, LlvmType(wide));
    };
    if (q[0] == "lo") return done(plus_addend(b_.CreateMul(a, c), t), t);
    if (q[0] == "wide" && t.bits <= 32) return done(plus_addend(b_.CreateMul(widen(a), widen(c)), wide), wide);
    if (q[0] == "hi") {
      llvm::Value* high = b_.CreateLShr(b_.CreateMul(widen(a), widen(c)), Int(wide.bits, t.bits));
      return done(plus_addend(b_.CreateTrunc(high, LlvmType(t)), t), t);
    }
  }
  // popc, clz (a .u32 count, as the interpreter's HCount) and brev of .b32/.b64.
  if ((op == "popc" || op == "clz" || op == "brev") && q.empty() && o.size() == 2 && t.bits >= 32) {
    llvm::Value* a = src(1, t);
    if (!a) return false;
    if (op == "brev") return done(b_.CreateIntrinsic(llvm::Intrinsic::bitreverse, {LlvmType(t)}, {a}), t);
    // ctlz of 0 is the width (its second operand false: no poison).
    llvm::Value* n = op == "popc" ? b_.CreateIntrinsic(llvm::Intrinsic::ctpop, {LlvmType(t)}, {a})
                                  : b_.CreateIntrinsic(llvm::Intrinsic::ctlz, {LlvmType(t)}, {a, b_.getFalse()});
    const Type count{Kind::kUnsigned, 32};
    return done(b_.CreateZExtOrTrunc(n, LlvmType(count)), count);
  }
  // bfi.b32/.b64 d, a, b, pos, len: b with the len low bits of a at pos, as the interpreter's
  // HBfi: pos and len are the low 8 bits of their .u32 operands, and bits past the width
  // are not written. Shift amounts are chosen below the width (no LLVM poison).
  if (op == "bfi" && q.empty() && o.size() == 5 && t.bits >= 32) {
    const Type u32{Kind::kUnsigned, 32};
    llvm::Value* a = src(1, t);
    llvm::Value* c = src(2, t);
    llvm::Value* position = src(3, u32);
    llvm::Value* length = src(4, u32);
    if (!a || !c || !position || !length) return false;
    auto byte = [&](llvm::Value* v) { return b_.CreateZExtOrTrunc(b_.CreateAnd(v, Int(32, 0xff)), LlvmType(t)); };
    llvm::Value* pos = byte(position);
    llvm::Value* len = byte(length);
    llvm::Value* inside = b_.CreateICmpULT(pos, Int(t.bits, t.bits));
    llvm::Value* at = b_.CreateSelect(inside, pos, Int(t.bits, 0));
    llvm::Value* room = b_.CreateSub(Int(t.bits, t.bits), at);
    llvm::Value* n = b_.CreateSelect(inside, b_.CreateSelect(b_.CreateICmpULT(len, room), len, room), Int(t.bits, 0));
    llvm::Value* whole = b_.CreateICmpUGE(n, Int(t.bits, t.bits));
    llvm::Value* low =
        b_.CreateSub(b_.CreateShl(Int(t.bits, 1), b_.CreateSelect(whole, Int(t.bits, 0), n)), Int(t.bits, 1));
    llvm::Value* field = b_.CreateShl(b_.CreateSelect(whole, Int(t.bits, ~uint64_t{0}), low), at);
    llvm::Value* r = b_.CreateOr(b_.CreateAnd(c, b_.CreateNot(field)), b_.CreateAnd(b_.CreateShl(a, at), field));
    return done(r, t);
  }
  // bmsk.clamp/.wrap.b32 d, a, b: as the interpreter's HBmsk, step by step.
  if (op == "bmsk" && q.size() == 1 && (q[0] == "clamp" || q[0] == "wrap") && o.size() == 3 && t.bits == 32) {
    llvm::Value* position = src(1, t);
    llvm::Value* width = src(2, t);
    if (!position || !width) return false;
    llvm::Value* ones = Int(32, ~uint64_t{0});
    llvm::Value* a1 = b_.CreateAnd(position, Int(32, 0x1f));
    llvm::Value* b1 = b_.CreateAnd(width, Int(32, 0x1f));
    llvm::Value* sum = b_.CreateAdd(a1, b1);
    llvm::Value* mask0 = b_.CreateShl(ones, a1);
    llvm::Value* mask1 = b_.CreateShl(ones, b_.CreateAnd(sum, Int(32, 0x1f)));  // chosen below sum >= 32
    llvm::Value* overflow = b_.CreateICmpUGE(sum, Int(32, 32));
    if (q[0] == "clamp") {
      llvm::Value* far = b_.CreateICmpUGE(position, Int(32, 32));
      mask0 = b_.CreateSelect(far, Int(32, 0), mask0);
      overflow = b_.CreateOr(overflow, b_.CreateOr(far, b_.CreateICmpUGE(width, Int(32, 32))));
    }
    mask1 = b_.CreateSelect(overflow, Int(32, 0), b_.CreateSelect(b_.CreateICmpEQ(b1, Int(32, 0)), ones, mask1));
    return done(b_.CreateAnd(mask0, b_.CreateNot(mask1)), t);
  }
  // shf.l/.r .wrap/.clamp.b32 d, a, b, c: the funnel shift of b:a as the interpreter's HShf,
  // the amount (at most 32) below the 64 bits shifted.
  if (op == "shf" && q.size() == 2 && (q[0] == "l" || q[0] == "r") && (q[1] == "wrap" || q[1] == "clamp") &&
      o.size() == 4 && t.bits == 32) {
    const Type u32{Kind::kUnsigned, 32};
    llvm::Value* a = src(1, u32);
    llvm::Value* c = src(2, u32);
    llvm::Value* amount = src(3, u32);
    if (!a || !c || !amount) return false;
    llvm::Type* i64 = LlvmType(Type{Kind::kUnsigned, 64});
    llvm::Value* both = b_.CreateOr(b_.CreateShl(b_.CreateZExt(c, i64), Int(64, 32)), b_.CreateZExt(a, i64));
    llvm::Value* n = q[1] == "wrap" ? b_.CreateAnd(amount, Int(32, 31))
                                    : b_.CreateSelect(b_.CreateICmpULT(amount, Int(32, 32)), amount, Int(32, 32));
    n = b_.CreateZExt(n, i64);
    llvm::Value* r = q[0] == "l" ? b_.CreateLShr(b_.CreateShl(both, n), Int(64, 32)) : b_.CreateLShr(both, n);
    return done(b_.CreateTrunc(r, LlvmType(u32)), t);
  }
  // fns.b32 d, mask, base, offset: the interpreter's own FindNthSet (remote/ptx/bits.h),
  // called through its address lane by lane.
  if (op == "fns" && q.empty() && o.size() == 4 && t.bits == 32) {
    const Type u32{Kind::kUnsigned, 32};
    llvm::Value* bits = src(1, u32);
    llvm::Value* base = src(2, u32);
    llvm::Value* offset = src(3, u32);
    if (!bits || !base || !offset) return false;
    using Function = uint32_t (*)(uint32_t, uint32_t, int32_t);
    const Function function = &FindNthSet;
    llvm::Type* i32 = b_.getInt32Ty();
    auto* type = llvm::FunctionType::get(i32, {i32, i32, i32}, false);
    llvm::Value* callee = llvm::ConstantExpr::getIntToPtr(b_.getInt64(reinterpret_cast<uint64_t>(function)), ptr_);
    auto call = [&](llvm::Value* x, llvm::Value* y, llvm::Value* z) {
      llvm::CallInst* c = b_.CreateCall(type, callee, {x, y, z});
      c->addParamAttr(2, llvm::Attribute::SExt);  // an int32_t argument
      return c;
    };
    if (!lanes_) return done(call(bits, base, offset), u32);
    llvm::Value* r = Int(32, 0);
    for (uint32_t k = 0; k < lanes_; ++k) {
      auto lane = [&](llvm::Value* v) { return b_.CreateExtractElement(v, uint64_t{k}); };
      r = b_.CreateInsertElement(r, call(lane(bits), lane(base), lane(offset)), uint64_t{k});
    }
    return done(r, u32);
  }
  if (op == "lop3" || op == "bfe" || op == "bfind") return BitField(s, op, q, t, why);
  // sad d, a, b, c: c plus |a - b|, wrapping at the width, as the interpreter's HSad.
  if (op == "sad" && q.empty() && o.size() == 4 && t.kind != Kind::kBits) {
    llvm::Value* a = src(1, t);
    llvm::Value* c = src(2, t);
    llvm::Value* e = src(3, t);
    if (!a || !c || !e) return false;
    llvm::Value* greater = sign ? b_.CreateICmpSGT(a, c) : b_.CreateICmpUGT(a, c);
    return done(b_.CreateAdd(b_.CreateSelect(greater, b_.CreateSub(a, c), b_.CreateSub(c, a)), e), t);
  }
  // dp4a.atype.btype d, a, b, c: c plus the products of a's and b's four bytes; dp2a.lo/.hi:
  // c plus the products of a's two 16-bit halves and b's bytes 0 and 1 (.lo) or 2 and 3
  // (.hi). Each element is signed or not as its type says; the sum wraps at 32 bits, as the
  // interpreter's HByteDot adds.
  if ((op == "dp4a" || op == "dp2a") && o.size() == 4 && t.bits == 32 && t.kind != Kind::kBits) {
    const bool pair = op == "dp2a";
    const size_t n = pair ? 2 : 1;
    if (q.size() != n || (pair && q[0] != "lo" && q[0] != "hi")) return (*why = "a form of " + std::string(op), false);
    const Type a_type = TypeOf(q[n - 1]);
    if (a_type.bits != 32 || (a_type.kind != Kind::kSigned && a_type.kind != Kind::kUnsigned)) {
      return (*why = "a form of " + std::string(op), false);
    }
    const Type u32{Kind::kUnsigned, 32};
    llvm::Value* a = src(1, u32);
    llvm::Value* c = src(2, u32);
    llvm::Value* e = src(3, u32);
    if (!a || !c || !e) return false;
    llvm::Type* i32 = LlvmType(u32);
    // Element `index` of `bits` bits of `word`, as a 32-bit integer.
    auto element = [&](llvm::Value* word, uint32_t index, uint32_t bits, bool is_signed) {
      llvm::Value* v = b_.CreateTrunc(b_.CreateLShr(word, Int(32, index * bits)), Lanes(b_.getIntNTy(bits)));
      return is_signed ? b_.CreateSExt(v, i32) : b_.CreateZExt(v, i32);
    };
    const bool a_signed = a_type.kind == Kind::kSigned, b_signed = t.kind == Kind::kSigned;
    llvm::Value* r = e;
    for (uint32_t i = 0; i < (pair ? 2u : 4u); ++i) {
      llvm::Value* x = pair ? element(a, i, 16, a_signed) : element(a, i, 8, a_signed);
      llvm::Value* y = element(c, pair && q[0] == "hi" ? i + 2 : i, 8, b_signed);
      r = b_.CreateAdd(r, b_.CreateMul(x, y));
    }
    return done(r, t);
  }
  *why = "an integer instruction the tier does not take";
  return false;
}

// prmt, lop3, bfe and bfind, as the interpreter's HPrmt, HLop3, HBfe and HCount compute
// them: every shift amount is chosen below the width (no LLVM poison), so that vector code
// computes each lane as scalar code does.
bool Emitter::BitField(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
                       std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  const Type u32{Kind::kUnsigned, 32};
  auto src = [&](int i, Type type) { return Source(o[i], type, why); };
  auto done = [&](llvm::Value* v, Type type) { return Dest(o[0], v, type, why); };
  // prmt.b32{.mode} d, a, b, c: four bytes of the eight of b:a (a the low ones), each
  // picked by c: by its own nibble (the default; a nibble's bit 3 replicates the byte's
  // sign), or by c's low 2 bits through the mode's table.
  if (op == "prmt" && q.size() <= 1 && o.size() == 4 && t.kind == Kind::kBits && t.bits == 32) {
    llvm::Value* a = src(1, u32);
    llvm::Value* c = src(2, u32);
    llvm::Value* selector = src(3, u32);
    if (!a || !c || !selector) return false;
    llvm::Type* i64 = LlvmType(Type{Kind::kUnsigned, 64});
    llvm::Value* bytes = b_.CreateOr(b_.CreateShl(b_.CreateZExt(c, i64), Int(64, 32)), b_.CreateZExt(a, i64));
    // The source byte (0..7) of d's byte i, as a u32, and whether to replicate its sign.
    std::function<llvm::Value*(uint32_t)> index;
    llvm::Value* s2 = b_.CreateAnd(selector, Int(32, 3));
    auto low = [&](llvm::Value* v) { return b_.CreateAnd(v, Int(32, 7)); };
    if (q.empty()) {
      index = [&](uint32_t i) { return low(b_.CreateLShr(selector, Int(32, 4 * i))); };
    } else if (q[0] == "f4e") {
      index = [&](uint32_t i) { return low(b_.CreateAdd(s2, Int(32, i))); };
    } else if (q[0] == "b4e") {
      index = [&](uint32_t i) { return low(b_.CreateSub(b_.CreateAdd(s2, Int(32, 8)), Int(32, i))); };
    } else if (q[0] == "rc8") {
      index = [&](uint32_t) { return s2; };
    } else if (q[0] == "ecl" || q[0] == "ecr") {
      // ecl: byte i from max(i, s), so the top bytes stay; ecr: from min(i, s).
      const bool left = q[0] == "ecl";
      index = [&, left](uint32_t i) {
        llvm::Value* above = b_.CreateICmpUGT(s2, Int(32, i));
        return left ? b_.CreateSelect(above, s2, Int(32, i)) : b_.CreateSelect(above, Int(32, i), s2);
      };
    } else if (q[0] == "rc16") {
      index = [&](uint32_t i) {
        return b_.CreateOr(b_.CreateShl(b_.CreateAnd(s2, Int(32, 1)), Int(32, 1)), Int(32, i & 1));
      };
    } else {
      return (*why = "prmt mode ." + std::string(q[0]), false);
    }
    llvm::Value* r = Int(32, 0);
    for (uint32_t i = 0; i < 4; ++i) {
      llvm::Value* at = b_.CreateShl(b_.CreateZExt(index(i), i64), Int(64, 3));
      llvm::Value* byte = b_.CreateAnd(b_.CreateTrunc(b_.CreateLShr(bytes, at), LlvmType(u32)), Int(32, 0xff));
      if (q.empty()) {
        llvm::Value* sign_mode = b_.CreateICmpNE(b_.CreateAnd(selector, Int(32, uint64_t{8} << (4 * i))), Int(32, 0));
        llvm::Value* negative = b_.CreateICmpNE(b_.CreateAnd(byte, Int(32, 0x80)), Int(32, 0));
        byte = b_.CreateSelect(sign_mode, b_.CreateSelect(negative, Int(32, 0xff), Int(32, 0)), byte);
      }
      r = b_.CreateOr(r, b_.CreateShl(byte, Int(32, 8 * i)));
    }
    return done(r, u32);
  }
  // lop3.b32 d, a, b, c, lut: the union of the minterms whose bit the lut's low 8 bits set
  // (bit i: a if i & 4, b if i & 2, c if i & 1, each else complemented).
  if (op == "lop3" && q.empty() && o.size() == 5 && t.bits == 32) {
    llvm::Value* a = src(1, u32);
    llvm::Value* c = src(2, u32);
    llvm::Value* e = src(3, u32);
    llvm::Value* lut = src(4, u32);
    if (!a || !c || !e || !lut) return false;
    llvm::Value* r = Int(32, 0);
    for (uint32_t i = 0; i < 8; ++i) {
      llvm::Value* term = b_.CreateAnd(b_.CreateAnd((i & 4) ? a : b_.CreateNot(a), (i & 2) ? c : b_.CreateNot(c)),
                                       (i & 1) ? e : b_.CreateNot(e));
      // All ones where the lut's bit i is set.
      llvm::Value* chosen = b_.CreateSub(Int(32, 0), b_.CreateAnd(b_.CreateLShr(lut, Int(32, i)), Int(32, 1)));
      r = b_.CreateOr(r, b_.CreateAnd(term, chosen));
    }
    return done(r, t);
  }
  // bfe.{u32,s32,u64,s64} d, a, pos, len: the n = min(len, width - pos) bits of a from pos
  // (none when pos is past the width), the bits above them the sign bit: for .s types
  // a's bit min(pos + len - 1, width - 1) when len is not 0, else 0. pos and len are the
  // low 8 bits of their .u32 operands.
  if (op == "bfe" && q.empty() && o.size() == 4 && t.bits >= 32 && t.kind != Kind::kBits) {
    const uint32_t w = t.bits;
    llvm::Value* a = src(1, t);
    llvm::Value* position = src(2, u32);
    llvm::Value* length = src(3, u32);
    if (!a || !position || !length) return false;
    auto byte = [&](llvm::Value* v) { return b_.CreateZExtOrTrunc(b_.CreateAnd(v, Int(32, 0xff)), LlvmType(t)); };
    llvm::Value* pos = byte(position);
    llvm::Value* len = byte(length);
    llvm::Value* inside = b_.CreateICmpULT(pos, Int(w, w));
    llvm::Value* room = b_.CreateSub(Int(w, w), b_.CreateSelect(inside, pos, Int(w, w)));
    llvm::Value* n = b_.CreateSelect(b_.CreateICmpULT(len, room), len, room);
    llvm::Value* whole = b_.CreateICmpUGE(n, Int(w, w));
    llvm::Value* ones = Int(w, ~uint64_t{0});
    llvm::Value* mask = b_.CreateSelect(
        whole, ones, b_.CreateSub(b_.CreateShl(Int(w, 1), b_.CreateSelect(whole, Int(w, 0), n)), Int(w, 1)));
    llvm::Value* field = b_.CreateAnd(b_.CreateLShr(a, b_.CreateSelect(inside, pos, Int(w, 0))), mask);
    field = b_.CreateSelect(inside, field, Int(w, 0));
    if (t.kind == Kind::kSigned) {
      llvm::Value* end = b_.CreateAdd(pos, len);  // at most 510: no wrap
      llvm::Value* top = b_.CreateSub(b_.CreateSelect(b_.CreateICmpULT(end, Int(w, w)), end, Int(w, w)), Int(w, 1));
      llvm::Value* bit = b_.CreateTrunc(b_.CreateLShr(a, b_.CreateAnd(top, Int(w, w - 1))), Lanes(i1_));
      llvm::Value* sign = b_.CreateAnd(bit, b_.CreateICmpNE(len, Int(w, 0)));
      field = b_.CreateOr(field, b_.CreateSelect(sign, b_.CreateNot(mask), Int(w, 0)));
    }
    return done(field, t);
  }
  // bfind{.shiftamt}.{u32,s32,u64,s64} d, a: the position of a's most significant bit (for
  // a negative .s value, of its most significant 0), or with .shiftamt the left shift that
  // brings it to the top; 0xffffffff when there is none. A .u32.
  if (op == "bfind" && (q.empty() || (q.size() == 1 && q[0] == "shiftamt")) && o.size() == 2 && t.bits >= 32 &&
      t.kind != Kind::kBits) {
    const uint32_t w = t.bits;
    llvm::Value* a = src(1, t);
    if (!a) return false;
    llvm::Value* v = a;
    if (t.kind == Kind::kSigned) v = b_.CreateSelect(b_.CreateICmpSLT(a, Int(w, 0)), b_.CreateNot(a), a);
    llvm::Value* zeros = b_.CreateIntrinsic(llvm::Intrinsic::ctlz, {LlvmType(t)}, {v, b_.getFalse()});
    llvm::Value* r = q.empty() ? b_.CreateSub(Int(w, w - 1), zeros) : zeros;
    r = b_.CreateSelect(b_.CreateICmpEQ(v, Int(w, 0)), Int(w, ~uint64_t{0}), r);
    return done(b_.CreateTrunc(r, LlvmType(u32)), u32);
  }
  return (*why = "a form of " + std::string(op) + " the tier does not take", false);
}

// vabsdiff4 and vabsdiff2 .dtype.atype.btype{.sat}{.add} d, a, b, c (the types and
// qualifiers in `parts`, after the opcode), as the interpreter's HByteDot: the absolute
// differences of a's and b's bytes (halves), each element signed or not as its type says;
// without .add each in its own byte (half) of d, with .sat (of an .s32 d) at most 127
// (32767); with .add c plus their sum, wrapping at 32 bits. No selectors or masks on the
// operands (the decoder refuses them).
bool Emitter::AbsoluteDifferences(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  std::vector<Type> types;
  bool sat = false, add = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const Type type = TypeOf(parts[i]);
    if (type.ok()) {
      if (type.bits != 32 || (type.kind != Kind::kSigned && type.kind != Kind::kUnsigned)) {
        return (*why = "types", false);
      }
      types.push_back(type);
    } else if (parts[i] == "sat") {
      sat = true;
    } else if (parts[i] == "add") {
      add = true;
    } else {
      return (*why = "qualifier ." + std::string(parts[i]), false);
    }
  }
  if (types.size() != 3 || o.size() != 4) return (*why = "form", false);
  const Type u32{Kind::kUnsigned, 32};
  llvm::Value* a = Source(o[1], u32, why);
  llvm::Value* c = Source(o[2], u32, why);
  llvm::Value* e = Source(o[3], u32, why);
  if (!a || !c || !e) return false;
  const uint32_t bits = parts[0] == "vabsdiff4" ? 8 : 16;
  const bool a_signed = types[1].kind == Kind::kSigned, b_signed = types[2].kind == Kind::kSigned;
  const bool saturate = sat && types[0].kind == Kind::kSigned;
  llvm::Type* i32 = LlvmType(u32);
  auto element = [&](llvm::Value* word, uint32_t index, bool is_signed) {
    llvm::Value* v = b_.CreateTrunc(b_.CreateLShr(word, Int(32, index * bits)), Lanes(b_.getIntNTy(bits)));
    return is_signed ? b_.CreateSExt(v, i32) : b_.CreateZExt(v, i32);
  };
  llvm::Value* r = add ? e : Int(32, 0);
  for (uint32_t i = 0; i < 32 / bits; ++i) {
    llvm::Value* difference = b_.CreateSub(element(a, i, a_signed), element(c, i, b_signed));
    // |difference|: it lies within +-65535, so negating it does not wrap.
    difference = b_.CreateSelect(b_.CreateICmpSLT(difference, Int(32, 0)), b_.CreateNeg(difference), difference);
    if (add) {
      r = b_.CreateAdd(r, difference);
      continue;
    }
    if (saturate) {
      llvm::Value* most = Int(32, bits == 8 ? 127 : 32767);
      difference = b_.CreateSelect(b_.CreateICmpSGT(difference, most), most, difference);
    }
    const uint64_t field = bits == 8 ? 0xff : 0xffff;
    r = b_.CreateOr(r, b_.CreateShl(b_.CreateAnd(difference, Int(32, field)), Int(32, i * bits)));
  }
  return Dest(o[0], r, types[0], why);
}

bool Emitter::Float(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
                    std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  if (op == "sin" || op == "cos" || op == "lg2" || op == "ex2" || op == "tanh") return HostFunction(s, op, q, t, why);
  // Round-to-nearest, which is what IEEE arithmetic on the host does; .ftz and .sat as the
  // interpreter applies them (FloatOperand, FloatResult). .approx and .full compute as the
  // interpreter's handlers do: exactly rounded. A directed rounding (.rz, .rm, .rp) of
  // add, sub, mul, fma, div, sqrt and rcp calls the interpreter's operation in that
  // rounding (DirectedF32/F64, rounding.h), lane by lane in vector code.
  bool rn = false, approx = false, ftz = false, sat = false, nan = false;
  CvtRounding directed = kCvtRoundNearest;
  for (std::string_view qual : q) {
    if (qual == "rz" || qual == "rm" || qual == "rp") {
      if (directed != kCvtRoundNearest) return (*why = "two roundings", false);
      directed = qual == "rz" ? kCvtRoundZero : qual == "rm" ? kCvtRoundDown : kCvtRoundUp;
    } else if (qual == "rn") {
      rn = true;
    } else if (qual == "approx" || qual == "full") {
      approx = true;
    } else if (qual == "ftz") {
      ftz = true;
    } else if (qual == "sat") {
      sat = true;
    } else if (qual == "NaN" && (op == "min" || op == "max") && t.bits == 32) {
      nan = true;
    } else {
      return (*why = "qualifier ." + std::string(qual), false);
    }
  }
  // min{.ftz}{.NaN}.f32, max likewise, and min/max.f64 of two operands: the PTX ISA's choice
  // as the interpreter's PtxMinMax (min_max.h) makes it, in selects: a NaN operand gives
  // the other; both, or either with .NaN, the canonical NaN; else the lesser (greater),
  // -0 below +0. Under .ftz the operands are flushed (not with .NaN, as the interpreter's
  // HMinMaxNaN: the same choice) and the result.
  if ((op == "min" || op == "max") && o.size() == 3 && !rn && !approx && !sat && directed == kCvtRoundNearest) {
    const bool max = op == "max";
    llvm::Value* a = Source(o[1], t, why);
    llvm::Value* c = Source(o[2], t, why);
    if (!a || !c) return false;
    if (ftz && !nan) {
      a = FloatOperand(a, t);
      c = FloatOperand(c, t);
    }
    llvm::Type* bits = LlvmType(Type{Kind::kBits, t.bits});
    const uint64_t sign = uint64_t{1} << (t.bits - 1);
    llvm::Value* a_negative =
        b_.CreateICmpNE(b_.CreateAnd(b_.CreateBitCast(a, bits), Int(t.bits, sign)), Int(t.bits, 0));
    llvm::Value* beyond = max ? b_.CreateFCmpOGT(a, c) : b_.CreateFCmpOLT(a, c);
    // Equal (or +0 and -0): a where its sign is the one that wins, -0 for min.
    llvm::Value* zero_wins = max ? b_.CreateNot(a_negative) : a_negative;
    llvm::Value* pick_a = b_.CreateOr(beyond, b_.CreateAnd(b_.CreateFCmpOEQ(a, c), zero_wins));
    llvm::Value* a_nan = b_.CreateFCmpUNO(a, a);
    llvm::Value* c_nan = b_.CreateFCmpUNO(c, c);
    llvm::Value* r = b_.CreateSelect(pick_a, a, c);
    r = b_.CreateSelect(c_nan, a, r);
    r = b_.CreateSelect(a_nan, c, r);
    llvm::Value* canonical = b_.CreateBitCast(Int(t.bits, ~sign), LlvmType(t));
    llvm::Value* to_canonical = nan ? b_.CreateOr(a_nan, c_nan) : b_.CreateAnd(a_nan, c_nan);
    r = b_.CreateSelect(to_canonical, canonical, r);
    return Dest(o[0], FloatResult(r, t, ftz, false), t, why);
  }
  if (nan) return (*why = "qualifier .NaN", false);
  auto src = [&](int i) {
    llvm::Value* v = Source(o[i], t, why);
    return v != nullptr && ftz ? FloatOperand(v, t) : v;
  };
  auto done = [&](llvm::Value* v) { return v != nullptr && Dest(o[0], FloatResult(v, t, ftz, sat), t, why); };
  if (directed != kCvtRoundNearest) {
    static const std::map<std::string_view, std::pair<DirectedOp, size_t>> kDirected = {
        {"add", {kDirectedAdd, 3}},   {"sub", {kDirectedSub, 3}}, {"mul", {kDirectedMul, 3}},
        {"fma", {kDirectedFma, 4}},   {"mad", {kDirectedFma, 4}}, {"div", {kDirectedDiv, 3}},
        {"sqrt", {kDirectedSqrt, 2}}, {"rcp", {kDirectedRcp, 2}}};
    auto it = kDirected.find(op);
    if (it == kDirected.end() || o.size() != it->second.second || rn || approx) {
      return (*why = "a directed rounding of this form", false);
    }
    std::vector<llvm::Value*> args = {b_.getInt8(it->second.first), b_.getInt8(directed)};
    for (size_t i = 1; i < 4; ++i) {
      llvm::Value* v = i < o.size() ? src(static_cast<int>(i)) : llvm::ConstantFP::get(LlvmType(t), 0.0);
      if (v == nullptr) return false;
      args.push_back(v);
    }
    const uint64_t function =
        t.bits == 32 ? reinterpret_cast<uint64_t>(&DirectedF32) : reinterpret_cast<uint64_t>(&DirectedF64);
    return done(CallHost(function, LlvmType(t), args));
  }
  if ((op == "add" || op == "sub" || op == "mul" || op == "div") && o.size() == 3) {
    // div.approx and div.full of f32 are a/b in the interpreter (interp/arithmetic.h,
    // Binary), as div.rn; add/sub/mul take no .approx.
    if (op == "div" && !rn && !approx) return (*why = "div without a rounding", false);
    if (op != "div" && approx) return (*why = "qualifier .approx", false);
    llvm::Value* a = src(1);
    llvm::Value* c = src(2);
    if (!a || !c) return false;
    // An unrounded add/sub/mul may be fused with a later one by ptxas; .rn forbids it.
    // Both run here as separate IEEE operations, as the interpreter runs them.
    if (op == "add") return done(b_.CreateFAdd(a, c));
    if (op == "sub") return done(b_.CreateFSub(a, c));
    if (op == "mul") return done(b_.CreateFMul(a, c));
    return done(b_.CreateFDiv(a, c));
  }
  if ((op == "fma" || op == "mad") && o.size() == 4 && rn && !approx) {
    llvm::Value* a = src(1);
    llvm::Value* c = src(2);
    llvm::Value* e = src(3);
    if (!a || !c || !e) return false;
    return done(b_.CreateIntrinsic(llvm::Intrinsic::fma, {LlvmType(t)}, {a, c, e}));
  }
  if ((op == "neg" || op == "abs") && o.size() == 2 && !rn && !approx && !sat) {
    llvm::Value* a = src(1);
    if (!a) return false;
    if (op == "neg") return done(b_.CreateFNeg(a));
    return done(b_.CreateIntrinsic(llvm::Intrinsic::fabs, {LlvmType(t)}, {a}));
  }
  // copysign: the sign of a on b, bits alone, as std::copysign.
  if (op == "copysign" && o.size() == 3 && q.empty()) {
    llvm::Value* a = src(1);
    llvm::Value* c = src(2);
    if (!a || !c) return false;
    llvm::Type* bits = LlvmType(Type{Kind::kBits, t.bits});
    const uint64_t sign = uint64_t{1} << (t.bits - 1);
    llvm::Value* r = b_.CreateOr(b_.CreateAnd(b_.CreateBitCast(c, bits), Int(t.bits, ~sign)),
                                 b_.CreateAnd(b_.CreateBitCast(a, bits), Int(t.bits, sign)));
    return done(b_.CreateBitCast(r, LlvmType(t)));
  }
  // sqrt (.rn or .approx), rsqrt.approx and rcp (.rn or .approx): the interpreter's
  // std::sqrt(a), T(1) / std::sqrt(a) and T(1) / a (interp/arithmetic.h, Unary), each an
  // exactly rounded IEEE operation, as LLVM's sqrt and fdiv are.
  if ((op == "sqrt" || op == "rsqrt" || op == "rcp") && o.size() == 2 && (rn || approx) && !sat) {
    if (op == "rsqrt" && !approx) return (*why = "rsqrt without .approx", false);
    llvm::Value* a = src(1);
    if (!a) return false;
    llvm::Value* one = llvm::ConstantFP::get(LlvmType(t), 1.0);
    if (op == "rcp") return done(b_.CreateFDiv(one, a));
    llvm::Value* root = b_.CreateIntrinsic(llvm::Intrinsic::sqrt, {LlvmType(t)}, {a});
    return done(op == "sqrt" ? root : b_.CreateFDiv(one, root));
  }
  *why = "a float instruction the tier does not take";
  return false;
}

// A float operand under .ftz, as the interpreter's FtzOperand: a subnormal f32 is a zero of
// its sign (chosen on its bits: NaNs and all else pass unchanged); f64 is not flushed.
llvm::Value* Emitter::FloatOperand(llvm::Value* v, Type t) {
  if (t.bits != 32) return v;
  llvm::Type* i32 = LlvmType(Type{Kind::kBits, 32});
  llvm::Value* bits = b_.CreateBitCast(v, i32);
  llvm::Value* zero_exponent = b_.CreateICmpEQ(b_.CreateAnd(bits, Int(32, 0x7f800000)), Int(32, 0));
  llvm::Value* fraction = b_.CreateICmpNE(b_.CreateAnd(bits, Int(32, 0x007fffff)), Int(32, 0));
  llvm::Value* sign_only = b_.CreateBitCast(b_.CreateAnd(bits, Int(32, 0x80000000)), LlvmType(t));
  return b_.CreateSelect(b_.CreateAnd(zero_exponent, fraction), sign_only, v);
}

// A float result with .ftz (flushed as an operand) and .sat as the interpreter's FixFloat:
// Saturate01 is min(1, max(0, v)) as std::min/max compare, NaN and -0 to +0.
llvm::Value* Emitter::FloatResult(llvm::Value* v, Type t, bool ftz, bool sat) {
  if (ftz) v = FloatOperand(v, t);
  if (!sat) return v;
  llvm::Value* zero = llvm::ConstantFP::get(LlvmType(t), 0.0);
  llvm::Value* one = llvm::ConstantFP::get(LlvmType(t), 1.0);
  llvm::Value* low = b_.CreateSelect(b_.CreateFCmpOLT(zero, v), v, zero);
  return b_.CreateSelect(b_.CreateFCmpOLT(low, one), low, one);
}

// mov of a vector of 2 or 4 elements to one register (pack) or of one register to its
// elements (unpack), the first element the lowest bits, as the interpreter's HPack and
// HUnpack: an element is the low bits of its register or constant, and an unpacked one is
// written zero-extended (`_` takes nothing). Registers narrower than an element are left to
// the interpreter (it reads their 64-bit slot).
bool Emitter::MovPair(const std::vector<RawOperand>& o, Type t, std::string* why) {
  const bool pack = o[1].kind == RawOperand::kVector;
  const RawOperand& items = pack ? o[1] : o[0];
  const uint32_t n = static_cast<uint32_t>(items.items.size());
  if ((pack && o[0].kind == RawOperand::kVector) || (n != 2 && n != 4) || t.kind == Kind::kPred || t.bits % n != 0) {
    return (*why = "a vector mov the tier does not take", false);
  }
  const Type whole{Kind::kBits, t.bits};
  const Type element{Kind::kBits, t.bits / n};
  if (pack) {
    llvm::Value* r = Int(t.bits, 0);
    for (uint32_t i = 0; i < n; ++i) {
      llvm::Value* v = Source(items.items[i], element, why);
      if (v == nullptr) return false;
      r = b_.CreateOr(r, b_.CreateShl(b_.CreateZExt(v, LlvmType(whole)), Int(t.bits, uint64_t{element.bits} * i)));
    }
    return Dest(o[0], r, whole, why);
  }
  llvm::Value* v = Source(o[1], whole, why);
  if (v == nullptr) return false;
  for (uint32_t i = 0; i < n; ++i) {
    if (items.items[i].kind == RawOperand::kName && items.items[i].name == "_") continue;
    llvm::Value* part = b_.CreateTrunc(b_.CreateLShr(v, Int(t.bits, uint64_t{element.bits} * i)), LlvmType(element));
    if (!Dest(items.items[i], part, element, why)) return false;
  }
  return true;
}

// sin, cos, lg2, ex2, tanh .approx(.ftz).f32: the C library's function the interpreter
// runs (interp/arithmetic.h, Unary: std::sin of a float is sinf...), called through its
// address, so that LLVM neither folds it (its constant folding computes in double) nor
// replaces it, and the result is the interpreter's bit for bit; under .ftz on and to values
// flushed as its FtzOperand and FixFloat flush them. Vector code calls it lane by lane.
bool Emitter::HostFunction(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
                           std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  const bool ftz = q.size() == 2 && q[1] == "ftz";
  if (q.empty() || q[0] != "approx" || q.size() != (ftz ? 2u : 1u) || t.kind != Kind::kFloat || t.bits != 32 ||
      o.size() != 2) {
    return (*why = "a form the tier does not take", false);
  }
  using Function = float (*)(float);
  const Function function = op == "sin"   ? static_cast<Function>(&::sinf)
                            : op == "cos" ? static_cast<Function>(&::cosf)
                            : op == "lg2" ? static_cast<Function>(&::log2f)
                            : op == "ex2" ? static_cast<Function>(&::exp2f)
                                          : static_cast<Function>(&::tanhf);
  llvm::Value* a = Source(o[1], t, why);
  if (a == nullptr) return false;
  if (ftz) a = FloatOperand(a, t);
  llvm::Type* f32 = b_.getFloatTy();
  auto* type = llvm::FunctionType::get(f32, {f32}, false);
  llvm::Value* callee = llvm::ConstantExpr::getIntToPtr(b_.getInt64(reinterpret_cast<uint64_t>(function)), ptr_);
  llvm::Value* r;
  if (!lanes_) {
    r = b_.CreateCall(type, callee, {a});
  } else {
    r = llvm::Constant::getNullValue(LlvmType(t));
    for (uint32_t k = 0; k < lanes_; ++k) {
      r = b_.CreateInsertElement(r, b_.CreateCall(type, callee, {b_.CreateExtractElement(a, uint64_t{k})}),
                                 uint64_t{k});
    }
  }
  return Dest(o[0], FloatResult(r, t, ftz, false), t, why);
}

}  // namespace gpupool::sim::jit

// Integer arithmetic with the carry flag (add.cc, addc, sub.cc, subc, mad.cc, madc) and
// the 24-bit multiplies (mul24, mad24) (emitter.h), as the interpreter's HCarry, HMad24 and
// Binary<kMul24...> compute them.
#include "remote/ptx/jit/emitter.h"

namespace gpupool::sim::jit {

// The carry flag: a register of each thread (its CC.CF) under a name no PTX register can
// have, 0 at the thread's start as the interpreter's carry slot is at the launch's.
const char* const kCarryFlag = "%cc.flag";

bool UsesCarry(const RawStatement& s) {
  const std::string_view opcode = s.opcode;
  const std::string_view op = opcode.substr(0, opcode.find('.'));
  return op == "addc" || op == "subc" || op == "madc" || opcode.find(".cc.") != std::string_view::npos;
}

bool ReadsCarry(const RawStatement& s) {
  const std::string_view opcode = s.opcode;
  const std::string_view op = opcode.substr(0, opcode.find('.'));
  return op == "addc" || op == "subc" || op == "madc";
}

bool WritesCarry(const RawStatement& s) { return std::string_view(s.opcode).find(".cc.") != std::string_view::npos; }

// add.cc, addc{.cc}, sub.cc, subc{.cc} (a + b + CF, a - b - CF), mad{.lo,.hi}.cc and
// madc{.lo,.hi}{.cc} (the low or high half of a * b, plus c and CF) of 32 and 64 bits:
// computed unsigned in twice the width, the result its low half and the carry out (of .cc)
// the next bit, as HCarry takes it from 128 bits (a borrow of sub sets it: the difference
// wraps below zero there).
bool Emitter::Carry(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
                    std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  const bool mad = op == "mad" || op == "madc";
  const bool carry_in = op == "addc" || op == "subc" || op == "madc";
  bool carry_out = false, hi = false, lo = false;
  for (std::string_view qual : q) {
    if (qual == "cc") {
      carry_out = true;
    } else if (qual == "hi" && mad) {
      hi = true;
    } else if (qual == "lo" && mad) {
      lo = true;
    } else {
      return (*why = "qualifier ." + std::string(qual) + " with a carry", false);
    }
  }
  if (!t.is_int() || (t.bits != 32 && t.bits != 64) || o.size() != (mad ? 4u : 3u) || (mad && hi == lo)) {
    return (*why = "a form with a carry the tier does not take", false);
  }
  const uint32_t bits = t.bits;
  llvm::Type* wide = Lanes(b_.getIntNTy(2 * bits));
  const Type unsigned_type{Kind::kUnsigned, bits};
  auto operand = [&](size_t i) -> llvm::Value* {
    llvm::Value* v = Source(o[i], unsigned_type, why);
    return v == nullptr ? nullptr : b_.CreateZExt(v, wide);
  };
  llvm::Value* a = operand(1);
  llvm::Value* c = operand(2);
  llvm::Value* e = mad ? operand(3) : nullptr;
  if (!a || !c || (mad && !e)) return false;
  RawOperand flag;
  flag.kind = RawOperand::kName;
  flag.name = kCarryFlag;
  const Type flag_type{Kind::kBits, 64};
  llvm::Value* cf = llvm::Constant::getNullValue(wide);
  if (carry_in) {
    llvm::Value* v = Source(flag, flag_type, why);
    if (v == nullptr) return false;
    cf = b_.CreateZExtOrTrunc(b_.CreateAnd(v, Int(64, 1)), wide);
  }
  llvm::Value* r;
  if (op == "add" || op == "addc") {
    r = b_.CreateAdd(b_.CreateAdd(a, c), cf);
  } else if (op == "sub" || op == "subc") {
    r = b_.CreateSub(b_.CreateSub(a, c), cf);
  } else {
    llvm::Value* product = b_.CreateMul(a, c);  // exact in twice the width
    if (hi) product = b_.CreateLShr(product, llvm::ConstantInt::get(wide, bits));
    product = b_.CreateAnd(product, llvm::ConstantInt::get(wide, llvm::APInt::getLowBitsSet(2 * bits, bits)));
    r = b_.CreateAdd(b_.CreateAdd(product, e), cf);
  }
  llvm::Value* result = b_.CreateTrunc(r, LlvmType(unsigned_type));
  if (carry_out) {
    llvm::Value* out =
        b_.CreateAnd(b_.CreateLShr(r, llvm::ConstantInt::get(wide, bits)), llvm::ConstantInt::get(wide, 1));
    if (!Dest(flag, b_.CreateZExtOrTrunc(out, I64()), flag_type, why)) return false;
  }
  return Dest(o[0], result, t, why);
}

// mul24{.lo,.hi} and mad24{.lo,.hi} of .u32 and .s32 (not .sat, which the interpreter
// refuses): the low 24 bits of a and b, zero- or sign-extended, multiplied exactly in 64
// bits; .lo keeps the product's low 32 bits, .hi bits 16-47; mad24 adds c, wrapping.
bool Emitter::Mul24(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
                    std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  const bool mad = op == "mad24";
  if (q.size() != 1 || (q[0] != "lo" && q[0] != "hi") || t.bits != 32 ||
      (t.kind != Kind::kSigned && t.kind != Kind::kUnsigned) || o.size() != (mad ? 4u : 3u)) {
    return (*why = "a 24-bit form the tier does not take", false);
  }
  const bool sign = t.kind == Kind::kSigned;
  llvm::Type* i64 = I64();
  llvm::Type* i24 = Lanes(b_.getIntNTy(24));
  auto operand = [&](size_t i) -> llvm::Value* {
    llvm::Value* v = Source(o[i], t, why);
    if (v == nullptr) return nullptr;
    v = b_.CreateTrunc(v, i24);
    return sign ? b_.CreateSExt(v, i64) : b_.CreateZExt(v, i64);
  };
  llvm::Value* a = operand(1);
  llvm::Value* c = operand(2);
  if (!a || !c) return false;
  llvm::Value* product = b_.CreateMul(a, c);
  if (q[0] == "hi") product = b_.CreateAShr(product, Int(64, 16));
  llvm::Value* r = b_.CreateTrunc(product, LlvmType(t));
  if (mad) {
    llvm::Value* e = Source(o[3], t, why);
    if (e == nullptr) return false;
    r = b_.CreateAdd(r, e);
  }
  return Dest(o[0], r, t, why);
}

}  // namespace gpupool::sim::jit

// Registers, types, special registers and an instruction's operands (emitter.h): an
// instruction reads a register as its type (truncating) and writes the value extended to
// the register's width as its type says, as the interpreter keeps them.
#include <cstring>

#include "remote/ptx/jit/emitter.h"

namespace gpupool::sim::jit {

Type TypeOf(std::string_view suffix) {
  const PtxType type = ParsePtxType(suffix);
  return type.kind == PtxKind::kHalf || type.kind == PtxKind::kBFloat ? PtxType{} : type;
}

bool IsCacheHint(std::string_view q) {
  return q == "ca" || q == "cg" || q == "cs" || q == "lu" || q == "nc" || q == "wb" || q == "wt";
}

bool IsOrderingQualifier(std::string_view q) {
  return q == "volatile" || q == "relaxed" || q == "acquire" || q == "release" || q == "cv" || q == "cta" ||
         q == "cluster" || q == "gpu" || q == "sys";
}

// The shared offset of symbol `name`, or -1 when it is no .shared variable the decoder
// placed: an extern one (dynamic shared memory) starts after the static ones, as the
// decoder places it.
int64_t Emitter::SharedSymbol(const std::string& name) const {
  if (shared_dynamic_.count(name)) return static_cast<int64_t>(shared_size_);
  auto it = shared_offsets_.find(name);
  return it == shared_offsets_.end() ? -1 : static_cast<int64_t>(it->second);
}

// The local offset of symbol `name`, or -1 when it is no .local variable of the kernel.
int64_t Emitter::LocalSymbol(const std::string& name) const {
  auto it = local_offsets_.find(name);
  return it == local_offsets_.end() ? -1 : static_cast<int64_t>(it->second);
}

// Whether `name` is a module variable or function (the decoder's symbol of global space,
// SharedLayout::globals), and its device address.
bool Emitter::GlobalSymbol(const std::string& name, uint64_t* address) const {
  auto it = globals_.find(name);
  if (it == globals_.end()) return false;
  *address = it->second;
  return true;
}

// A register's width as declared (64 for one used undeclared, as inline asm may).
uint32_t Emitter::StorageBits(const std::string& name) {
  auto it = entry_.register_bits.find(name);
  if (it == entry_.register_bits.end()) {
    const size_t at = name.rfind('@');
    if (at != std::string::npos) it = entry_.register_bits.find(name.substr(0, at));
  }
  return it == entry_.register_bits.end() ? 64 : it->second;
}

// A register: a stack slot of its declared width (i1 for a predicate, i32 for .b32...),
// so that 32-bit work stays 32-bit (half the vector registers in vector code).
llvm::AllocaInst* Emitter::Register(const std::string& name) {
  auto it = registers_.find(name);
  if (it != registers_.end()) return it->second;
  llvm::IRBuilder<> at(alloca_point_);
  llvm::Type* type = StorageType(name);
  llvm::AllocaInst* slot = at.CreateAlloca(type, nullptr, name);
  at.CreateStore(llvm::Constant::getNullValue(type), slot);
  registers_[name] = slot;
  return slot;
}

llvm::Type* Emitter::ScalarType(Type t) {
  if (t.kind == Kind::kPred) return i1_;
  if (t.kind == Kind::kFloat) return t.bits == 32 ? b_.getFloatTy() : b_.getDoubleTy();
  return b_.getIntNTy(t.bits);
}

// <0, 1, 2, ...> times `step`, 64-bit.
llvm::Value* Emitter::Steps(uint64_t step) {
  std::vector<llvm::Constant*> steps;
  for (uint32_t k = 0; k < lanes_; ++k) steps.push_back(b_.getInt64(k * step));
  return llvm::ConstantVector::get(steps);
}

llvm::Value* Emitter::LaneNumbers() {
  std::vector<llvm::Constant*> lanes;
  for (uint32_t k = 0; k < lanes_; ++k) lanes.push_back(b_.getInt32(k));
  return llvm::ConstantVector::get(lanes);
}

llvm::Type* Emitter::LlvmType(Type t) {
  if (t.kind == Kind::kPred) return Lanes(i1_);
  if (t.kind == Kind::kFloat) return Lanes(t.bits == 32 ? b_.getFloatTy() : b_.getDoubleTy());
  return Lanes(b_.getIntNTy(t.bits));
}

// A register's value (its declared width) -> a value of type t; nullptr when t is wider
// than the register (PTX allows only narrower or equal types).
llvm::Value* Emitter::FromStorage(llvm::Value* bits, uint32_t width, Type t) {
  if (t.kind == Kind::kPred) {
    return width == 1 ? bits : b_.CreateICmpNE(bits, Int(width, 0));
  }
  if (width == 1 || t.bits > width) return nullptr;
  if (t.bits < width) bits = b_.CreateTrunc(bits, Lanes(b_.getIntNTy(t.bits)));
  if (t.kind == Kind::kFloat) bits = b_.CreateBitCast(bits, LlvmType(t));
  return bits;
}

// A value of type t -> a register of `width` bits (signed types sign-extended, as the
// interpreter keeps them); nullptr when t is wider.
llvm::Value* Emitter::ToStorage(llvm::Value* v, Type t, uint32_t width) {
  if (t.kind == Kind::kPred) return width == 1 ? v : b_.CreateZExt(v, Lanes(b_.getIntNTy(width)));
  if (width == 1 || t.bits > width) return nullptr;
  if (t.kind == Kind::kFloat) v = b_.CreateBitCast(v, Lanes(b_.getIntNTy(t.bits)));
  if (t.bits == width) return v;
  llvm::Type* type = Lanes(b_.getIntNTy(width));
  return t.kind == Kind::kSigned ? b_.CreateSExt(v, type) : b_.CreateZExt(v, type);
}

// Special registers this tier knows: %tid, %ntid, %ctaid, %nctaid, %smid, %nsmid, and
// those of the thread's place in its warp (u32), with the interpreter's values: a CTA's
// warp w holds its threads 32w ... 32w + 31 in linear order (x fastest), %warpid is w,
// %nwarpid 64.
llvm::Value* Emitter::Special(const std::string& name) {
  const SpecialRegisterName special = DecodeSpecialRegister(name);
  const uint32_t axis = special.index;
  // The thread's linear index in its CTA (vector code: its lanes', x, x + 1, ..., which
  // share a row since a row's extent is a multiple of the lanes), and its lane.
  auto linear = [&] {
    llvm::Value* index = Splat(ThreadIndex());
    return lanes_ ? b_.CreateAdd(index, LaneNumbers()) : index;
  };
  auto lane = [&] { return b_.CreateAnd(linear(), Int(32, 31)); };
  auto bit = [&] { return b_.CreateShl(Int(32, 1), lane()); };
  switch (special.reg) {
    case SpecialRegister::kLaneid:
      return lane();
    case SpecialRegister::kWarpid:
      return b_.CreateLShr(linear(), Int(32, 5));
    case SpecialRegister::kNwarpid:
      return Int(32, 64);
    case SpecialRegister::kLanemaskEq:
      return bit();
    case SpecialRegister::kLanemaskLt:
      return b_.CreateSub(bit(), Int(32, 1));
    case SpecialRegister::kLanemaskLe:
      return b_.CreateOr(b_.CreateSub(bit(), Int(32, 1)), bit());
    case SpecialRegister::kLanemaskGt:
      return b_.CreateNot(b_.CreateOr(b_.CreateSub(bit(), Int(32, 1)), bit()));
    case SpecialRegister::kLanemaskGe:
      return b_.CreateNot(b_.CreateSub(bit(), Int(32, 1)));
    case SpecialRegister::kTid: {
      llvm::Value* tid = Splat(b_.CreateLoad(i32_, tid_slot_[axis]));
      if (lanes_ && axis == 0) tid = b_.CreateAdd(tid, LaneNumbers());  // lanes are x, x+1, ...
      return tid;
    }
    case SpecialRegister::kNtid:
      return Splat(ntid_[axis]);
    case SpecialRegister::kCtaid:
      return Splat(ctaid_[axis]);
    case SpecialRegister::kNctaid:
      return Splat(nctaid_[axis]);
    case SpecialRegister::kNsmid:
      return Splat(b_.CreateLoad(i32_, Field(kOffSmCount)));
    case SpecialRegister::kEnvreg: {
      // %envreg1 and %envreg2: the cooperative grid's workspace, high and low; the rest 0.
      if (axis != 1 && axis != 2) return Int(32, 0);
      llvm::Value* workspace = b_.CreateLoad(i64_, Field(kOffGridWorkspace));
      if (axis == 1) workspace = b_.CreateLShr(workspace, 32);
      return Splat(b_.CreateTrunc(workspace, i32_));
    }
    case SpecialRegister::kSmid: {
      // The CTA's linear index (x fastest, below 2^64) modulo the SMs, as the interpreter's
      // StartCta: the same whichever worker runs the CTA.
      auto wide = [&](llvm::Value* v) { return b_.CreateZExt(v, i64_); };
      llvm::Value* cta =
          b_.CreateAdd(wide(ctaid_[0]),
                       b_.CreateMul(wide(nctaid_[0]),
                                    b_.CreateAdd(wide(ctaid_[1]), b_.CreateMul(wide(nctaid_[1]), wide(ctaid_[2])))));
      llvm::Value* sms = wide(b_.CreateLoad(i32_, Field(kOffSmCount)));
      return Splat(b_.CreateTrunc(b_.CreateURem(cta, sms), i32_));
    }
    default:
      return nullptr;
  }
}

// A source operand as type t; nullptr with *why when the tier does not take it.
llvm::Value* Emitter::Source(const RawOperand& op, Type t, std::string* why) {
  switch (op.kind) {
    case RawOperand::kName: {
      if (IsSpecialRegisterName(op.name)) {
        llvm::Value* v = Special(op.name);
        if (v == nullptr) {
          *why = "it reads " + op.name;
          return nullptr;
        }
        if (!t.is_int()) {
          *why = "it reads " + op.name + " as a non-integer";
          return nullptr;
        }
        return b_.CreateZExtOrTrunc(v, LlvmType(t));
      }
      if (!op.name.empty() && !NamesRegister(op.name) && !op.negated && t.is_int()) {
        // A .shared variable's name: its offset in the CTA's shared memory.
        if (int64_t offset = SharedSymbol(op.name); offset >= 0) {
          return Int(t.bits, static_cast<uint64_t>(offset));
        }
        // A .local variable's: its offset in the thread's local memory (the decoder's value
        // of the symbol; cvta.local makes it generic).
        if (int64_t offset = LocalSymbol(op.name); offset >= 0) {
          return Int(t.bits, static_cast<uint64_t>(offset));
        }
        // A module variable's or function's: its device address, a constant of the load
        // (the decoder's, SharedLayout::globals), cvta.global making it generic as it is.
        if (uint64_t address; GlobalSymbol(op.name, &address)) return Int(t.bits, address);
        // A kernel parameter's: its offset in the parameters (the decoder's value of the
        // symbol), which ld.param through a register reads (ParamAddress).
        if (auto it = params_.find(op.name); it != params_.end()) return Int(t.bits, it->second.offset);
      }
      if (op.name.empty() || !NamesRegister(op.name) || op.negated) {
        *why = "it names " + (op.name.empty() ? std::string("an operand") : op.name);
        return nullptr;
      }
      llvm::Value* v = FromStorage(LoadRegister(op.name), StorageBits(op.name), t);
      if (v == nullptr) *why = "it reads " + op.name + " as a type wider than the register";
      return v;
    }
    case RawOperand::kInt:
      if (t.kind == Kind::kFloat) {
        // An integer literal of a float instruction holds the value, as ptxas reads it.
        double value = static_cast<double>(static_cast<int64_t>(op.bits));
        return llvm::ConstantFP::get(LlvmType(t), value);
      }
      if (t.kind == Kind::kPred) return Int(1, op.bits != 0);
      return Int(t.bits, op.bits);
    case RawOperand::kF32: {
      float f;
      uint32_t bits = static_cast<uint32_t>(op.bits);
      std::memcpy(&f, &bits, 4);
      if (t.kind == Kind::kFloat) return llvm::ConstantFP::get(LlvmType(t), static_cast<double>(f));
      if (t.is_int() && t.bits == 32) return Int(32, bits);
      break;
    }
    case RawOperand::kF64: {
      double d;
      std::memcpy(&d, &op.bits, 8);
      if (t.kind == Kind::kFloat) {
        if (t.bits == 64) return llvm::ConstantFP::get(LlvmType(t), d);
        return llvm::ConstantFP::get(LlvmType(t), static_cast<double>(static_cast<float>(d)));
      }
      if (t.is_int() && t.bits == 64) return Int(64, op.bits);
      break;
    }
    default:
      break;
  }
  *why = "an operand it does not take";
  return nullptr;
}

bool Emitter::Dest(const RawOperand& op, llvm::Value* v, Type t, std::string* why) {
  if (op.kind != RawOperand::kName || op.name.empty() || !NamesRegister(op.name) || IsSpecialRegisterName(op.name) ||
      !op.pair.empty()) {
    *why = "a destination it does not take";
    return false;
  }
  llvm::Value* bits = ToStorage(v, t, StorageBits(op.name));
  if (bits == nullptr) {
    *why = "it writes " + op.name + " with a type wider than the register";
    return false;
  }
  llvm::AllocaInst* slot = Register(op.name);
  // Lanes outside the mask keep their value; where no lane that does not run needs it
  // (free_writes_), only those its guard leaves out: no select (and no old value kept live
  // in a host register) for the temporaries of straight code.
  if (lanes_ && !free_writes_.count(op.name)) {
    bits = b_.CreateSelect(Mask(), bits, b_.CreateLoad(StorageType(op.name), slot));
  } else if (lanes_ && op_guard_ != nullptr) {
    bits = b_.CreateSelect(op_guard_, bits, b_.CreateLoad(StorageType(op.name), slot));
  }
  b_.CreateStore(bits, slot);
  // A register shuffles read: its lane's shadow too (emit_warp.cc).
  if (auto it = shadow_index_.find(op.name); it != shadow_index_.end()) {
    b_.CreateStore(b_.CreateZExt(bits, i64_), ShadowOf(it->second));
  }
  return true;
}

}  // namespace gpupool::sim::jit

// Texture and surface instructions (emitter.h): tex, tld4, txq, suld.b, sust.b and suq of
// scalar code, each a call of TextureLane (run.cc), which runs the interpreter's own code
// for one lane (texture::RunLane) over the launch's bounds-checked memory: the handle, the
// descriptor it names and the coordinates come from the job, and are checked there as the
// interpreter checks them. The forms and operands the tier takes are the decoder's
// (interp/decode_memory.cc, Decoder::Texture); vector code refuses them.
#include <llvm/IR/MDBuilder.h>

#include <string>
#include <vector>

#include "remote/ptx/interp/texture.h"
#include "remote/ptx/jit/emitter.h"

namespace gpupool::sim::jit {

bool Emitter::Texture(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  if (lanes_) return (*why = "a texture or surface instruction in vector code", false);
  // The interpreter's forms: what its decoder refuses, the tier refuses.
  texture::Op op;
  if (!texture::ParseOpcode(std::vector<std::string>(parts.begin(), parts.end()), &op, why)) return false;
  const std::vector<RawOperand>& o = s.operands;
  const bool store = op.kind == texture::Kind::kSust;
  const bool query = op.kind == texture::Kind::kTxq || op.kind == texture::Kind::kSuq;
  if (o.size() != 2) return (*why = "operands", false);
  const RawOperand& address = o[store ? 0 : 1];
  const RawOperand& data = o[store ? 1 : 0];
  // The handle: a 64-bit register (the interpreter reads its whole slot, which a narrower
  // register's may hold more of than the tier keeps); not a .texref name or a sampler.
  if (address.kind != RawOperand::kAddress || address.name.empty() || address.name[0] != '%' ||
      IsSpecialRegisterName(address.name) || address.bits != 0 || address.items.size() != (query ? 0u : 1u) ||
      StorageBits(address.name) != 64) {
    return (*why = "a handle operand the tier does not take", false);
  }
  // The coordinates: registers of at least 32 bits, of which the interpreter reads the low
  // 32 (an f32's bits, or an s32).
  std::vector<RawOperand> coordinates;
  if (!query) {
    const RawOperand& items = address.items[0];
    coordinates = items.kind == RawOperand::kVector ? items.items : std::vector<RawOperand>{items};
    if (static_cast<int>(coordinates.size()) != texture::CoordinateCount(op)) {
      return (*why = "the number of coordinates", false);
    }
  }
  const std::vector<RawOperand> values = data.kind == RawOperand::kVector ? data.items : std::vector<RawOperand>{data};
  const size_t expected = query ? 1 : (op.kind == texture::Kind::kSuld || store) ? op.vec : 4;
  if (values.size() != expected) return (*why = "the number of values", false);
  auto is_register = [&](const RawOperand& r) {
    return r.kind == RawOperand::kName && !r.name.empty() && r.name[0] == '%' && !IsSpecialRegisterName(r.name) &&
           !r.negated && r.pair.empty();
  };
  auto is_sink = [](const RawOperand& r) { return r.kind == RawOperand::kName && r.name == "_"; };

  llvm::IRBuilder<> at(alloca_point_);
  llvm::Type* words = llvm::ArrayType::get(i64_, 4);
  llvm::AllocaInst* coords_slot = at.CreateAlloca(words);
  llvm::AllocaInst* values_slot = at.CreateAlloca(words);
  auto word = [&](llvm::AllocaInst* slot, int i) { return b_.CreateConstGEP2_32(words, slot, 0, i); };
  for (int i = 0; i < 4; ++i) {
    llvm::Value* v = b_.getInt64(0);
    if (i < static_cast<int>(coordinates.size())) {
      if (!is_register(coordinates[i])) return (*why = "a coordinate the tier does not take", false);
      llvm::Value* low = Source(coordinates[i], Type{Kind::kBits, 32}, why);
      if (low == nullptr) return false;
      v = b_.CreateZExt(low, i64_);
    }
    b_.CreateStore(v, word(coords_slot, i));
  }
  for (int i = 0; i < 4; ++i) {
    llvm::Value* v = b_.getInt64(0);
    // sust: the low `width` bytes of each value's register are stored.
    if (store && i < static_cast<int>(values.size())) {
      if (!is_register(values[i])) return (*why = "a value the tier does not take", false);
      llvm::Value* element = Source(values[i], Type{Kind::kBits, 8u * op.width}, why);
      if (element == nullptr) return false;
      v = b_.CreateZExt(element, i64_);
    }
    b_.CreateStore(v, word(values_slot, i));
  }
  RawOperand handle_register;
  handle_register.kind = RawOperand::kName;
  handle_register.name = address.name;
  llvm::Value* handle = Source(handle_register, Type{Kind::kBits, 64}, why);
  if (handle == nullptr) return false;

  auto* type = llvm::FunctionType::get(i32_, {ptr_, i32_, i64_, ptr_, ptr_}, false);
  llvm::Value* callee = llvm::ConstantExpr::getIntToPtr(b_.getInt64(reinterpret_cast<uint64_t>(&TextureLane)), ptr_);
  llvm::Value* failed = b_.CreateCall(
      type, callee, {context_, b_.getInt32(texture::Pack(op)), handle, word(coords_slot, 0), word(values_slot, 0)});
  auto* fault = llvm::BasicBlock::Create(ctx_, "texture_fault", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "texture_ok", fn_);
  b_.CreateCondBr(b_.CreateICmpNE(failed, b_.getInt32(0)), fault, join,
                  llvm::MDBuilder(ctx_).createBranchWeights(1, 1000));
  // TextureLane set the fault's address, size and name; the thread is this one.
  b_.SetInsertPoint(fault);
  b_.CreateStore(ThreadIndex(), Field(kOffFaultThread));
  FlushCount();
  b_.CreateRet(b_.getInt32(kIllegalAddress));
  b_.SetInsertPoint(join);
  if (store) return true;
  // The destinations, in order, as the interpreter writes them (a sink `_` takes nothing):
  // each register keeps the low bits of its declared width.
  for (size_t i = 0; i < values.size(); ++i) {
    if (is_sink(values[i])) continue;
    if (!is_register(values[i])) return (*why = "a destination the tier does not take", false);
    const uint32_t bits = StorageBits(values[i].name);
    if (bits == 1) return (*why = "a predicate destination", false);
    llvm::Value* v = b_.CreateLoad(i64_, word(values_slot, static_cast<int>(i)));
    if (!Dest(values[i], b_.CreateTrunc(v, b_.getIntNTy(bits)), Type{Kind::kBits, bits}, why)) return false;
  }
  return true;
}

}  // namespace gpupool::sim::jit

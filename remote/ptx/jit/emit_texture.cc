// Texture and surface instructions (emitter.h): tex, tld4, txq, suld.b, sust.b and suq,
// each thread's a call of TextureLane (run.cc), which runs the interpreter's own code
// for one lane (texture::RunLane) over the launch's bounds-checked memory: the handle, the
// descriptor it names and the coordinates come from the job, and are checked there as the
// interpreter checks them. The forms and operands the tier takes are the decoder's
// (interp/decode_memory.cc, Decoder::Texture); vector code calls it lane by lane.
#include <llvm/IR/MDBuilder.h>

#include <string>
#include <vector>

#include "remote/ptx/texture.h"
#include "remote/ptx/jit/emitter.h"

namespace gpupool::sim::jit {

bool Emitter::Texture(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
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
  if (address.kind != RawOperand::kAddress || address.name.empty() || !NamesRegister(address.name) ||
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
    return r.kind == RawOperand::kName && !r.name.empty() && NamesRegister(r.name) && !IsSpecialRegisterName(r.name) &&
           !r.negated && r.pair.empty();
  };
  auto is_sink = [](const RawOperand& r) { return r.kind == RawOperand::kName && r.name == "_"; };

  // The inputs, zero-extended to 64 bits (vectors of the lanes in vector code).
  std::vector<llvm::Value*> inputs[2] = {std::vector<llvm::Value*>(4), std::vector<llvm::Value*>(4)};
  for (size_t i = 0; i < coordinates.size(); ++i) {
    if (!is_register(coordinates[i])) return (*why = "a coordinate the tier does not take", false);
    llvm::Value* low = Source(coordinates[i], Type{Kind::kBits, 32}, why);
    if (low == nullptr) return false;
    inputs[0][i] = b_.CreateZExt(low, I64());
  }
  // sust: the low `width` bytes of each value's register are stored.
  for (size_t i = 0; store && i < values.size(); ++i) {
    if (!is_register(values[i])) return (*why = "a value the tier does not take", false);
    llvm::Value* element = Source(values[i], Type{Kind::kBits, 8u * op.width}, why);
    if (element == nullptr) return false;
    inputs[1][i] = b_.CreateZExt(element, I64());
  }
  RawOperand handle_register;
  handle_register.kind = RawOperand::kName;
  handle_register.name = address.name;
  llvm::Value* handle = Source(handle_register, Type{Kind::kBits, 64}, why);
  if (handle == nullptr) return false;
  for (size_t i = 0; !store && i < values.size(); ++i) {
    if (is_sink(values[i])) continue;
    if (!is_register(values[i])) return (*why = "a destination the tier does not take", false);
    if (StorageBits(values[i].name) == 1) return (*why = "a predicate destination", false);
  }

  llvm::IRBuilder<> at(alloca_point_);
  llvm::Type* words = llvm::ArrayType::get(i64_, 4);
  llvm::AllocaInst* slots[2] = {at.CreateAlloca(words), at.CreateAlloca(words)};  // coordinates, values
  auto word = [&](llvm::AllocaInst* slot, int i) { return b_.CreateConstGEP2_32(words, slot, 0, i); };
  // The results of the lanes (vector code): one vector per value.
  std::vector<llvm::AllocaInst*> results(4, nullptr);
  if (lanes_ && !store) {
    for (int i = 0; i < 4; ++i) {
      results[i] = at.CreateAlloca(I64());
      b_.CreateStore(llvm::Constant::getNullValue(I64()), results[i]);
    }
  }
  auto* type = llvm::FunctionType::get(i32_, {ptr_, i32_, i64_, ptr_, ptr_}, false);
  llvm::Value* callee = llvm::ConstantExpr::getIntToPtr(b_.getInt64(reinterpret_cast<uint64_t>(&TextureLane)), ptr_);
  // One thread's instruction (lane k of vector code): its inputs into the slots, the call,
  // and on a fault the end of the launch (TextureLane set the fault's address, size and
  // name; the thread is this one).
  auto lane = [&](uint32_t k) {
    auto pick = [&](llvm::Value* v) { return lanes_ ? b_.CreateExtractElement(v, uint64_t{k}) : v; };
    for (int slot = 0; slot < 2; ++slot) {
      for (int i = 0; i < 4; ++i) {
        b_.CreateStore(inputs[slot][i] ? pick(inputs[slot][i]) : b_.getInt64(0), word(slots[slot], i));
      }
    }
    llvm::Value* failed = b_.CreateCall(
        type, callee, {context_, b_.getInt32(texture::Pack(op)), pick(handle), word(slots[0], 0), word(slots[1], 0)});
    auto* fault = llvm::BasicBlock::Create(ctx_, "texture_fault", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "texture_ok", fn_);
    b_.CreateCondBr(b_.CreateICmpNE(failed, b_.getInt32(0)), fault, join,
                    llvm::MDBuilder(ctx_).createBranchWeights(1, 1000));
    b_.SetInsertPoint(fault);
    b_.CreateStore(b_.CreateAdd(ThreadIndex(), b_.getInt32(k)), Field(kOffFaultThread));
    FlushCount();
    b_.CreateRet(b_.getInt32(kIllegalAddress));
    b_.SetInsertPoint(join);
    for (int i = 0; lanes_ && !store && i < 4; ++i) {
      llvm::Value* v = b_.CreateLoad(i64_, word(slots[1], i));
      b_.CreateStore(b_.CreateInsertElement(b_.CreateLoad(I64(), results[i]), v, uint64_t{k}), results[i]);
    }
  };
  if (!lanes_) {
    lane(0);
  } else {
    // Vector code: each running lane in lane order, as scalar code runs its threads.
    llvm::Value* mask = Mask();
    for (uint32_t k = 0; k < lanes_; ++k) {
      auto* run = llvm::BasicBlock::Create(ctx_, "texture_lane", fn_);
      auto* next = llvm::BasicBlock::Create(ctx_, "texture_next", fn_);
      b_.CreateCondBr(b_.CreateExtractElement(mask, uint64_t{k}), run, next);
      b_.SetInsertPoint(run);
      lane(k);
      b_.CreateBr(next);
      b_.SetInsertPoint(next);
    }
  }
  if (store) return true;
  // The destinations, in order, as the interpreter writes them (a sink `_` takes nothing):
  // each register keeps the low bits of its declared width.
  for (size_t i = 0; i < values.size(); ++i) {
    if (is_sink(values[i])) continue;
    const uint32_t bits = StorageBits(values[i].name);
    llvm::Value* v =
        lanes_ ? b_.CreateLoad(I64(), results[i]) : b_.CreateLoad(i64_, word(slots[1], static_cast<int>(i)));
    if (!Dest(values[i], b_.CreateTrunc(v, Lanes(b_.getIntNTy(bits))), Type{Kind::kBits, bits}, why)) return false;
  }
  return true;
}

}  // namespace gpupool::sim::jit

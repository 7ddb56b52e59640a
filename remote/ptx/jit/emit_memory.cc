// Memory (emitter.h): each global access checks its address against the allocation it last
// hit (a per-instruction hint, one compare) and calls back into the engine (Translate,
// run.cc) otherwise; shared accesses are checked against the CTA's shared size (static and
// the launch's dynamic bytes), local ones against the thread's local size: no address
// reaches memory unchecked. Vector accesses
// (ld/st .v2/.v4), atomics, cp.async, and vector code's loads and stores.
#include <llvm/IR/MDBuilder.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "remote/ptx/half_float.h"
#include "remote/ptx/jit/emitter.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim::jit {

std::vector<BackEdge> BackEdges(const RawFunction& entry) {
  std::map<std::string, size_t> label_at;  // a label: the index of the instruction after it
  size_t at = 0;
  for (const RawStatement& s : entry.body) {
    if (s.kind == RawStatement::kLabel) label_at[s.opcode] = at;
    if (s.kind == RawStatement::kInstruction) ++at;
  }
  std::vector<BackEdge> edges;
  at = 0;
  for (const RawStatement& s : entry.body) {
    if (s.kind != RawStatement::kInstruction) continue;
    if (s.opcode.rfind("bra", 0) == 0 && s.operands.size() == 1) {
      auto label = label_at.find(s.operands[0].name);
      if (label != label_at.end() && label->second <= at) edges.push_back({label->first, label->second, at});
    }
    ++at;
  }
  return edges;
}

bool InsideLoop(const RawFunction& entry, size_t index) {
  for (const BackEdge& edge : BackEdges(entry)) {
    if (edge.head <= index && index <= edge.branch) return true;
  }
  return false;
}

Emitter::LaneLoop Emitter::OpenLaneLoop(const std::string& name, llvm::Value* mask, llvm::Value* initial) {
  LaneLoop loop;
  llvm::BasicBlock* entered = b_.GetInsertBlock();
  loop.head = llvm::BasicBlock::Create(ctx_, name + "_head", fn_);
  auto* lane = llvm::BasicBlock::Create(ctx_, name, fn_);
  loop.next = llvm::BasicBlock::Create(ctx_, name + "_next", fn_);
  loop.done = llvm::BasicBlock::Create(ctx_, name + "s_done", fn_);
  b_.CreateBr(loop.head);
  b_.SetInsertPoint(loop.head);
  loop.k = b_.CreatePHI(i32_, 2);
  loop.k->addIncoming(b_.getInt32(0), entered);
  if (initial != nullptr) {
    loop.carried = b_.CreatePHI(initial->getType(), 2);
    loop.carried->addIncoming(initial, entered);
  }
  b_.CreateCondBr(b_.CreateExtractElement(mask, loop.k), lane, loop.next);
  b_.SetInsertPoint(lane);
  return loop;
}

llvm::Value* Emitter::CloseLaneLoop(const LaneLoop& loop, llvm::Value* carried_out, llvm::BasicBlock* ran) {
  b_.SetInsertPoint(loop.next);
  llvm::PHINode* merged = nullptr;
  if (loop.carried != nullptr) {
    merged = b_.CreatePHI(loop.carried->getType(), 2);
    merged->addIncoming(loop.carried, loop.head);
    merged->addIncoming(carried_out, ran);
    loop.carried->addIncoming(merged, loop.next);
  }
  llvm::Value* k_next = b_.CreateAdd(loop.k, b_.getInt32(1));
  loop.k->addIncoming(k_next, loop.next);
  b_.CreateCondBr(b_.CreateICmpULT(k_next, b_.getInt32(lanes_)), loop.head, loop.done);
  b_.SetInsertPoint(loop.done);
  return merged;
}

// Ends the launch with CUDA_ERROR_ILLEGAL_ADDRESS for `access` at `address`.
void Emitter::Fault(llvm::Value* address, uint32_t access, llvm::Value* lane) {
  b_.CreateStore(address, Field(kOffFaultAddress));
  b_.CreateStore(b_.getInt32(access), Field(kOffFaultAccess));
  llvm::Value* thread = ThreadIndex();
  if (lane != nullptr) thread = b_.CreateAdd(thread, lane);
  b_.CreateStore(thread, Field(kOffFaultThread));
  FlushCount();
  b_.CreateRet(b_.getInt32(kIllegalAddress));
}

// The host address of an access of `size` bytes at `offset` in the CTA's shared memory
// (the low 48 bits of a window address, as the interpreter takes them); a fault past it,
// naming `device`: the address as the instruction made it, as the interpreter names it
// (a .shared address as it is, a generic one in the window).
llvm::Value* Emitter::CheckedShared(llvm::Value* offset, llvm::Value* device, uint32_t size, const char* what) {
  // The launch's size (static and dynamic bytes, at most kMaxSharedBytes: no wrap), as the
  // interpreter checks against it.
  return CheckedWithin(offset, device, shared_bytes_, shared_arg_, size, what, "shared");
}

// The host address `base + offset` of an access of `size` bytes at `offset` (its low 48
// bits, as the interpreter takes them) in a space of `bytes` bytes, known only when the
// kernel runs and below 2^32 (no wrap): offset + size <= bytes, as the interpreter checks;
// a fault past it naming `device`, the address as the instruction made it.
llvm::Value* Emitter::CheckedWithin(llvm::Value* offset, llvm::Value* device, llvm::Value* bytes, llvm::Value* base,
                                    uint32_t size, const char* what, const char* space) {
  const uint32_t access = static_cast<uint32_t>(accesses_->size());
  accesses_->push_back({size, what});
  offset = b_.CreateAnd(offset, b_.getInt64(0xffffffffffffull));
  llvm::Value* limit =
      b_.CreateSelect(b_.CreateICmpUGE(bytes, b_.getInt64(size)),
                      b_.CreateAdd(b_.CreateSub(bytes, b_.getInt64(size)), b_.getInt64(1)), b_.getInt64(0));
  auto* fault = llvm::BasicBlock::Create(ctx_, std::string(space) + "_fault", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, std::string(space) + "_ok", fn_);
  b_.CreateCondBr(b_.CreateICmpULT(offset, limit), join, fault, llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
  b_.SetInsertPoint(fault);
  Fault(device, access);
  b_.SetInsertPoint(join);
  return b_.CreateGEP(b_.getInt8Ty(), base, offset);
}

// The host address of an access of `size` bytes at `offset` in this thread's local memory
// (the low 48 bits of a window address, as the interpreter takes them): its slice of the
// CTA's (Context::local, local_size_ bytes per thread, by its index in the CTA), and no
// other thread's; a fault past it, naming `device` (the address as the instruction made it,
// as the interpreter names it).
llvm::Value* Emitter::CheckedLocal(llvm::Value* offset, llvm::Value* device, uint32_t size, const char* what) {
  const uint32_t access = static_cast<uint32_t>(accesses_->size());
  accesses_->push_back({size, what});
  offset = b_.CreateAnd(offset, b_.getInt64(0xffffffffffffull));
  // offset + size <= local_size_, as the interpreter checks (both known here: a constant).
  const uint64_t limit = local_size_ >= size ? local_size_ - size + 1 : 0;
  auto* fault = llvm::BasicBlock::Create(ctx_, "local_fault", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "local_ok", fn_);
  b_.CreateCondBr(b_.CreateICmpULT(offset, b_.getInt64(limit)), join, fault,
                  llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
  b_.SetInsertPoint(fault);
  Fault(device, access);
  b_.SetInsertPoint(join);
  llvm::Value* slice = b_.CreateMul(b_.CreateZExt(ThreadIndex(), i64_), b_.getInt64(local_size_));
  return b_.CreateGEP(b_.getInt8Ty(), local_arg_, b_.CreateAdd(slice, offset));
}

// A new global access of `size` bytes: its number (its hint's) and stack slots holding
// the hint for the CTA (registers, once promoted: a store of the kernel's cannot change
// them), loaded at its start and again after each slow path.
uint32_t Emitter::NewAccess(uint32_t size, const char* what) {
  const uint32_t access = static_cast<uint32_t>(accesses_->size());
  accesses_->push_back({size, what});
  llvm::IRBuilder<> at(alloca_point_);
  llvm::Value* hints = at.CreateLoad(ptr_, FieldAt(at, kOffHints));
  llvm::Value* hint = at.CreateConstGEP1_64(at.getInt8Ty(), hints, uint64_t{access} * sizeof(Hint));
  std::array<llvm::AllocaInst*, 3>& slots = hint_slots_[access];
  for (int i = 0; i < 3; ++i) {
    slots[i] = at.CreateAlloca(i64_);
    at.CreateStore(at.CreateLoad(i64_, at.CreateConstGEP1_64(at.getInt8Ty(), hint, 8 * i)), slots[i]);
  }
  return access;
}

// The host address of global access `access` (NewAccess) of one thread (lane `lane` of the
// vector code) at `address`, checked; a stray one ends the launch.
llvm::Value* Emitter::Checked(llvm::Value* address, uint32_t size, const char* what) {
  return CheckedAccess(address, NewAccess(size, what), nullptr);
}

llvm::Value* Emitter::CheckedAccess(llvm::Value* address, uint32_t access, llvm::Value* lane) {
  const std::array<llvm::AllocaInst*, 3>& slots = hint_slots_.at(access);
  llvm::Value* start = b_.CreateLoad(i64_, slots[0]);
  llvm::Value* limit = b_.CreateLoad(i64_, slots[1]);
  llvm::Value* delta = b_.CreateLoad(i64_, slots[2]);
  llvm::Value* hit = b_.CreateICmpULT(b_.CreateSub(address, start), limit);
  llvm::BasicBlock* before = b_.GetInsertBlock();
  auto* slow = llvm::BasicBlock::Create(ctx_, "slow", fn_);
  auto* fault = llvm::BasicBlock::Create(ctx_, "fault", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "join", fn_);
  llvm::Value* fast = b_.CreateIntToPtr(b_.CreateAdd(address, delta), ptr_);
  b_.CreateCondBr(hit, join, slow, llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
  b_.SetInsertPoint(slow);
  auto* translate_type = llvm::FunctionType::get(ptr_, {ptr_, i32_, i64_}, false);
  llvm::Value* translate = b_.CreateLoad(ptr_, Field(kOffTranslate));
  llvm::Value* found = b_.CreateCall(translate_type, translate, {context_, b_.getInt32(access), address});
  auto* reload = llvm::BasicBlock::Create(ctx_, "reload", fn_);
  b_.CreateCondBr(b_.CreateIsNull(found), fault, reload);
  b_.SetInsertPoint(reload);
  {
    llvm::Value* hints = b_.CreateLoad(ptr_, Field(kOffHints));
    llvm::Value* hint = b_.CreateConstGEP1_64(b_.getInt8Ty(), hints, uint64_t{access} * sizeof(Hint));
    for (int i = 0; i < 3; ++i) {
      b_.CreateStore(b_.CreateLoad(i64_, b_.CreateConstGEP1_64(b_.getInt8Ty(), hint, 8 * i)), slots[i]);
    }
  }
  b_.CreateBr(join);
  b_.SetInsertPoint(fault);
  Fault(address, access, lane);
  b_.SetInsertPoint(join);
  llvm::PHINode* host = b_.CreatePHI(ptr_, 2);
  host->addIncoming(fast, before);
  host->addIncoming(found, reload);
  return host;
}

// The host address of an access of `size` bytes through address operand `address` in
// `space` (global, shared, local or generic), checked; nullptr with *why when the tier does not
// take the operand.
llvm::Value* Emitter::Address(const RawOperand& address, std::string_view space, uint32_t size, const char* what,
                              std::string* why) {
  llvm::Value* base = nullptr;
  if (address.name.empty()) {
    *why = "an absolute address";
    return nullptr;
  }
  if (!NamesRegister(address.name)) {
    // [symbol+offset]: a .shared (.local) variable, as an offset (.shared, .local) or its
    // window address (generic), as the interpreter resolves it.
    const int64_t shared = SharedSymbol(address.name), local = LocalSymbol(address.name);
    uint64_t global = 0;
    if (shared >= 0 && (space == "shared" || space == "generic")) {
      base = b_.getInt64(static_cast<uint64_t>(shared) + (space == "shared" ? 0 : kSharedWindow));
    } else if (local >= 0 && (space == "local" || space == "generic")) {
      base = b_.getInt64(static_cast<uint64_t>(local) + (space == "local" ? 0 : kLocalWindow));
    } else if (shared < 0 && local < 0 && GlobalSymbol(address.name, &global) &&
               (space == "global" || space == "generic")) {
      // A module variable (.global or .const: ld.const is a global access here): its
      // device address, checked below as any global address is, as the interpreter checks
      // [name+offset] (a constant address, then Global).
      base = b_.getInt64(global);
    } else {
      *why = "an access to " + address.name;
      return nullptr;
    }
  } else {
    if (IsSpecialRegisterName(address.name)) {
      *why = "an address in " + address.name;
      return nullptr;
    }
    base = LoadRegister64(address.name);
  }
  llvm::Value* at = b_.CreateAdd(base, b_.getInt64(address.bits));
  return Host(at, space, size, what);
}

llvm::Value* Emitter::Host(llvm::Value* at, std::string_view space, uint32_t size, const char* what) {
  if (space == "shared") return CheckedShared(at, at, size, what);
  if (space == "local") return CheckedLocal(at, at, size, what);
  const bool local = local_size_ > 0;
  if (space == "global" || (!has_shared_ && !local)) return Checked(at, size, what);
  // Generic: the shared window, the local window (of a kernel with local memory) or global
  // memory, as the interpreter tells them apart (an address in another window finds no
  // allocation).
  auto* join = llvm::BasicBlock::Create(ctx_, "generic", fn_);
  std::vector<std::pair<llvm::Value*, llvm::BasicBlock*>> hosts;
  auto window = [&](uint64_t start, bool is_local) {
    llvm::Value* offset = b_.CreateSub(at, b_.getInt64(start));
    auto* inside = llvm::BasicBlock::Create(ctx_, is_local ? "generic_local" : "generic_shared", fn_);
    auto* outside = llvm::BasicBlock::Create(ctx_, "generic_other", fn_);
    b_.CreateCondBr(b_.CreateICmpULT(offset, b_.getInt64(kWindowSize)), inside, outside);
    b_.SetInsertPoint(inside);
    llvm::Value* host = is_local ? CheckedLocal(offset, at, size, what) : CheckedShared(offset, at, size, what);
    hosts.emplace_back(host, b_.GetInsertBlock());
    b_.CreateBr(join);
    b_.SetInsertPoint(outside);
  };
  if (has_shared_) window(kSharedWindow, false);
  if (local) window(kLocalWindow, true);
  llvm::Value* global_host = Checked(at, size, what);
  hosts.emplace_back(global_host, b_.GetInsertBlock());
  b_.CreateBr(join);
  b_.SetInsertPoint(join);
  llvm::PHINode* host = b_.CreatePHI(ptr_, static_cast<unsigned>(hosts.size()));
  for (auto& [value, block] : hosts) host->addIncoming(value, block);
  return host;
}

// The host address of a load of `size` bytes at [param+offset], checked now: its bounds are
// known at compile time; or at [register+offset] in scalar code (a parameter's address,
// mov of its name, and an offset: nvcc's for a by-value array indexed at run time),
// checked as the interpreter checks it (Address, Space::kParam): the low 48 bits within the
// launch's parameter bytes (Context::param_size), a fault naming the address as made.
// nullptr with *why for a store, another base or bytes outside the parameter.
llvm::Value* Emitter::ParamAddress(const RawOperand& address, uint32_t size, bool load, std::string* why) {
  if (load && !address.name.empty() && NamesRegister(address.name) && !IsSpecialRegisterName(address.name)) {
    if (lanes_) return (*why = "a .param access through a register in vector code", nullptr);
    llvm::Value* at = b_.CreateAdd(LoadRegister64(address.name), b_.getInt64(address.bits));
    // Within the launch's parameter bytes (below 2^32).
    return CheckedWithin(at, at, b_.CreateLoad(i64_, Field(kOffParamSize)), params_arg_, size, "load", "param");
  }
  auto it = params_.find(address.name);
  if (!load || it == params_.end()) return (*why = "a .param access it does not take", nullptr);
  const int64_t off = static_cast<int64_t>(address.bits);
  if (off < 0 || static_cast<uint64_t>(off) + size > it->second.size || it->second.offset + off + size > param_size_) {
    return (*why = "a .param access outside the parameter", nullptr);
  }
  return b_.CreateConstGEP1_64(b_.getInt8Ty(), params_arg_, it->second.offset + off);
}

// ld/st.v2/.v4 {a, b, ...}: one access of all the elements' bytes, checked once as the
// interpreter checks it (HLoad/HStore: a stray one faults naming the whole size at the first
// element's address), then element by element into or from the registers (`_` reads
// nothing). Parameters here in scalar and in vector code; in vector code the other spaces
// go to VectorLanesAccess.
// An `ordered` one (.relaxed, .volatile, .acquire, .release, .cg: what another CTA may
// watch or publish, as CUB's look-back publishes {status, value} with one st.relaxed.v2)
// is one host access, as the interpreter makes it and a GPU makes a thread's vector access:
// volatile, so that the optimiser cannot split it into its elements (it did: a load whose
// elements are only extracted became one load per element, and a poller saw new statuses
// with old values). So in vector code (VectorLanesAccess) are its accesses of all lanes at
// once or of each lane: a lane's elements lie inside one of their pieces.
bool Emitter::VectorAccess(const RawOperand& address, std::string_view space, Type t, uint32_t vec, bool load,
                           bool ordered, const RawOperand& value, std::string* why) {
  if (value.kind != RawOperand::kVector || value.items.size() != vec) return (*why = "vector operand", false);
  const uint32_t width = t.bits / 8;
  auto sink = [](const RawOperand& item) { return item.kind == RawOperand::kName && item.name == "_"; };
  if (space == "param") {
    llvm::Value* at = ParamAddress(address, width * vec, load, why);
    if (at == nullptr) return false;
    for (uint32_t i = 0; i < vec; ++i) {
      if (sink(value.items[i])) continue;
      llvm::Value* element = b_.CreateConstGEP1_64(b_.getInt8Ty(), at, uint64_t{i} * width);
      llvm::Value* v = Splat(b_.CreateAlignedLoad(ScalarType(t), element, llvm::MaybeAlign(1)));
      if (!Dest(value.items[i], v, t, why)) return false;
    }
    return true;
  }
  if (lanes_) return VectorLanesAccess(address, space, t, vec, load, ordered, value, why);
  llvm::Type* type = llvm::FixedVectorType::get(ScalarType(t), vec);
  llvm::Value* stored = llvm::Constant::getNullValue(type);
  if (!load) {
    for (uint32_t i = 0; i < vec; ++i) {
      llvm::Value* v = Source(value.items[i], t, why);
      if (v == nullptr) return false;
      stored = b_.CreateInsertElement(stored, v, uint64_t{i});
    }
  }
  llvm::Value* host = Address(address, space, width * vec, load ? "load" : "store", why);
  if (host == nullptr) return false;
  if (!load) {
    b_.CreateAlignedStore(stored, host, llvm::MaybeAlign(1), ordered);
    return true;
  }
  llvm::Value* loaded = b_.CreateAlignedLoad(type, host, llvm::MaybeAlign(1), ordered);
  for (uint32_t i = 0; i < vec; ++i) {
    if (sink(value.items[i])) continue;
    if (!Dest(value.items[i], b_.CreateExtractElement(loaded, uint64_t{i}), t, why)) return false;
  }
  return true;
}

// Whether vector code's access of `space` takes `address`: of global memory, a register or
// a module variable (SharedLayout::globals) that names no shared or local variable; of
// shared memory, a register or a .shared variable.
bool Emitter::LanesAddressable(const RawOperand& address, std::string_view space) const {
  if (address.name.empty()) return false;
  if (space == "shared") {
    // A register's offsets, or a .shared variable's.
    return NamesRegister(address.name) ? !IsSpecialRegisterName(address.name) : SharedSymbol(address.name) >= 0;
  }
  // A generic address of a kernel with shared memory may be in the shared window: left to
  // scalar code, which tells the windows apart.
  if (space != "global" && has_shared_) return false;
  if (NamesRegister(address.name)) return !IsSpecialRegisterName(address.name);
  uint64_t global = 0;
  return SharedSymbol(address.name) < 0 && LocalSymbol(address.name) < 0 && GlobalSymbol(address.name, &global);
}

// The split every global access of vector code makes: the lanes' addresses (a register
// plus the instruction's offset), a new access of `bytes` per lane, and a branch to `each`
// unless all 8 lanes run at consecutive accesses inside the allocation this access hit
// last (its hint): the first and the last lane inside it, so every lane between is (the
// allocation ends below 2^48: first + 7 * bytes cannot wrap into it); with `uniform_ok`,
// a register's lanes that all run at one address inside it go to `broadcast` (one load
// for all). The builder is left in the whole-lanes block, whose host address is `host`.
Emitter::LanesSplit Emitter::SplitLanes(const RawOperand& address, uint32_t bytes, bool load, bool uniform_ok) {
  LanesSplit split;
  // A module variable's address is every lane's: with `uniform_ok` (a load of one element
  // a lane), lanes that all run inside the allocation this access hit last read it once
  // (the whole-lanes block then loads one element for all).
  split.uniform = uniform_ok && !NamesRegister(address.name);
  // A register's lanes, or a module variable's address in every lane (then, but for a
  // uniform load, the lanes run one by one, each checked as scalar code checks it).
  llvm::Value* base = nullptr;
  if (uint64_t global = 0; !NamesRegister(address.name) && GlobalSymbol(address.name, &global)) {
    base = Int(64, global);
  } else {
    base = LoadRegister64(address.name);
  }
  split.addresses = b_.CreateAdd(base, Int(64, address.bits));
  split.access = NewAccess(bytes, load ? "load" : "store");
  const std::array<llvm::AllocaInst*, 3>& slots = hint_slots_.at(split.access);
  llvm::Value* start = b_.CreateLoad(i64_, slots[0]);
  llvm::Value* limit = b_.CreateLoad(i64_, slots[1]);
  llvm::Value* delta = b_.CreateLoad(i64_, slots[2]);
  // Adding the offset keeps the lanes' differences: the register's own lanes are compared,
  // once for every access through it (LLVM merges the comparisons), and where they are
  // consecutive the last lane's address is the first's + 7 x bytes (one address for all
  // where it is a variable's): no lane but the first is taken out of the vector.
  llvm::Value* first = b_.CreateAdd(b_.CreateExtractElement(base, uint64_t{0}), b_.getInt64(address.bits));
  llvm::Value* last = split.uniform ? first : b_.CreateAdd(first, b_.getInt64(uint64_t{bytes} * (lanes_ - 1)));
  llvm::Value* consecutive = split.uniform ? static_cast<llvm::Value*>(b_.getTrue()) : LanesConsecutive(base, bytes);
  split.mask = Mask();
  llvm::Value* all = b_.CreateAndReduce(split.mask);
  llvm::Value* fast =
      b_.CreateAnd(b_.CreateAnd(consecutive, all), b_.CreateAnd(b_.CreateICmpULT(b_.CreateSub(first, start), limit),
                                                                b_.CreateICmpULT(b_.CreateSub(last, start), limit)));
  auto* whole = llvm::BasicBlock::Create(ctx_, "vector_whole", fn_);
  split.each = llvm::BasicBlock::Create(ctx_, "vector_lanes", fn_);
  split.join = llvm::BasicBlock::Create(ctx_, "vector_join", fn_);
  llvm::BasicBlock* otherwise = split.each;
  if (uniform_ok && !split.uniform) {
    // A load whose lanes all run at one address inside that allocation (an element every
    // lane of a row reads): one load for all of them.
    otherwise = llvm::BasicBlock::Create(ctx_, "vector_same", fn_);
    split.broadcast = llvm::BasicBlock::Create(ctx_, "vector_broadcast", fn_);
  }
  b_.CreateCondBr(fast, whole, otherwise, llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
  if (split.broadcast != nullptr) {
    b_.SetInsertPoint(otherwise);
    llvm::Value* same = b_.CreateAnd(LanesConsecutive(base, 0), all);  // (the register's lanes, once)
    b_.CreateCondBr(b_.CreateAnd(same, b_.CreateICmpULT(b_.CreateSub(first, start), limit)), split.broadcast,
                    split.each);
    b_.SetInsertPoint(split.broadcast);
    split.broadcast_host = b_.CreateIntToPtr(b_.CreateAdd(first, delta), ptr_);
  }
  b_.SetInsertPoint(whole);
  split.host = b_.CreateIntToPtr(b_.CreateAdd(first, delta), ptr_);
  return split;
}

// SplitLanes of a .shared access (a register's offsets, or a .shared variable's in every
// lane): the lanes' offsets are the low 48 bits of their addresses, as the interpreter
// takes them; the whole-lanes block when all 8 lanes run at consecutive offsets whose first
// and last access lie inside the CTA's shared bytes (static and dynamic), `broadcast` (with
// `uniform_ok`) when they all run at one offset inside them, else each lane checked on
// its own (LaneHost).
Emitter::LanesSplit Emitter::SplitSharedLanes(const RawOperand& address, uint32_t bytes, bool load, bool uniform_ok) {
  LanesSplit split;
  split.shared = true;
  split.uniform = uniform_ok && !NamesRegister(address.name);
  llvm::Value* base = NamesRegister(address.name) ? LoadRegister64(address.name)
                                                  : Int(64, static_cast<uint64_t>(SharedSymbol(address.name)));
  split.addresses = b_.CreateAdd(base, Int(64, address.bits));
  split.access = static_cast<uint32_t>(accesses_->size());
  accesses_->push_back({bytes, load ? "load" : "store"});
  // offset + bytes <= the CTA's shared bytes (below 2^32: no wrap), as the interpreter checks.
  llvm::Value* limit =
      b_.CreateSelect(b_.CreateICmpUGE(shared_bytes_, b_.getInt64(bytes)),
                      b_.CreateAdd(b_.CreateSub(shared_bytes_, b_.getInt64(bytes)), b_.getInt64(1)), b_.getInt64(0));
  llvm::Value* first = b_.CreateAnd(b_.CreateAdd(b_.CreateExtractElement(base, uint64_t{0}), b_.getInt64(address.bits)),
                                    b_.getInt64(0xffffffffffffull));
  // The register's lanes compared (as SplitLanes): with the first offset below the shared
  // bytes (below 2^32), the 48-bit offsets of consecutive addresses do not wrap either, so
  // the last lane's is the first's + 7 x bytes.
  llvm::Value* last = split.uniform ? first : b_.CreateAdd(first, b_.getInt64(uint64_t{bytes} * (lanes_ - 1)));
  llvm::Value* consecutive = split.uniform ? static_cast<llvm::Value*>(b_.getTrue()) : LanesConsecutive(base, bytes);
  split.mask = Mask();
  llvm::Value* all = b_.CreateAndReduce(split.mask);
  llvm::Value* fast = b_.CreateAnd(b_.CreateAnd(consecutive, all),
                                   b_.CreateAnd(b_.CreateICmpULT(first, limit), b_.CreateICmpULT(last, limit)));
  auto* whole = llvm::BasicBlock::Create(ctx_, "shared_whole", fn_);
  split.each = llvm::BasicBlock::Create(ctx_, "shared_lanes", fn_);
  split.join = llvm::BasicBlock::Create(ctx_, "shared_join", fn_);
  llvm::BasicBlock* otherwise = split.each;
  if (uniform_ok && !split.uniform) {
    // A load whose lanes all run at one offset inside the shared bytes (a tile's element
    // every lane of a row reads, as a tiled matrix multiply's ta[ty][k]): one load for all.
    otherwise = llvm::BasicBlock::Create(ctx_, "shared_same", fn_);
    split.broadcast = llvm::BasicBlock::Create(ctx_, "shared_broadcast", fn_);
  }
  b_.CreateCondBr(fast, whole, otherwise, llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
  if (split.broadcast != nullptr) {
    b_.SetInsertPoint(otherwise);
    llvm::Value* same = b_.CreateAnd(LanesConsecutive(base, 0), all);  // (the register's lanes, once)
    b_.CreateCondBr(b_.CreateAnd(same, b_.CreateICmpULT(first, limit)), split.broadcast, split.each);
    b_.SetInsertPoint(split.broadcast);
    split.broadcast_host = b_.CreateGEP(b_.getInt8Ty(), shared_arg_, first);
  }
  b_.SetInsertPoint(whole);
  split.host = b_.CreateGEP(b_.getInt8Ty(), shared_arg_, first);
  return split;
}

// Whether lane k of `addresses` (64-bit) is lane 0's + k x `bytes`, in every lane (with
// `bytes` 0: whether all lanes hold one address). Asked of a register's lanes before an
// instruction's offset is added, which keeps both, so that every access through the
// register shares one comparison.
llvm::Value* Emitter::LanesConsecutive(llvm::Value* addresses, uint64_t bytes) {
  llvm::Value* first = b_.CreateExtractElement(addresses, uint64_t{0});
  return b_.CreateAndReduce(b_.CreateICmpEQ(addresses, b_.CreateAdd(Splat(first), Steps(bytes))));
}

// The host address of lane `lane`'s access at `address` (one lane of `split`), checked as
// scalar code checks it: a stray one ends the launch naming the lane's own thread.
llvm::Value* Emitter::LaneHost(const LanesSplit& split, llvm::Value* address, llvm::Value* lane) {
  if (!split.shared) return CheckedAccess(address, split.access, lane);
  const uint32_t size = (*accesses_)[split.access].size;
  llvm::Value* offset = b_.CreateAnd(address, b_.getInt64(0xffffffffffffull));
  llvm::Value* limit =
      b_.CreateSelect(b_.CreateICmpUGE(shared_bytes_, b_.getInt64(size)),
                      b_.CreateAdd(b_.CreateSub(shared_bytes_, b_.getInt64(size)), b_.getInt64(1)), b_.getInt64(0));
  auto* fault = llvm::BasicBlock::Create(ctx_, "shared_fault", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "shared_ok", fn_);
  b_.CreateCondBr(b_.CreateICmpULT(offset, limit), join, fault, llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
  b_.SetInsertPoint(fault);
  Fault(address, split.access, lane);
  b_.SetInsertPoint(join);
  return b_.CreateGEP(b_.getInt8Ty(), shared_arg_, offset);
}

// ld/st.v2/.v4 of global (or generic) memory in vector code: as VectorMemory, lanes that
// all run at consecutive accesses inside the allocation this access hit last are one host
// access of all their elements; otherwise each running lane's access (all its elements'
// bytes) is checked on its own, in lane order, as scalar code checks it, so that a stray
// lane faults with its own thread's detail. Elements travel through stack slots (promoted
// to registers), one vector of the lanes per element.
bool Emitter::VectorLanesAccess(const RawOperand& address, std::string_view space, Type t, uint32_t vec, bool load,
                                bool ordered, const RawOperand& value, std::string* why) {
  if (!LanesAddressable(address, space)) return (*why = "an address vector code does not take", false);
  const uint32_t width = t.bits / 8, bytes = width * vec;
  llvm::Type* element = ScalarType(t);
  std::vector<llvm::Value*> stored(vec, nullptr);
  if (!load) {
    for (uint32_t i = 0; i < vec; ++i) {
      if ((stored[i] = Source(value.items[i], t, why)) == nullptr) return false;
    }
  }
  std::vector<llvm::AllocaInst*> loaded(vec, nullptr);
  if (load) {
    llvm::IRBuilder<> at(alloca_point_);
    for (uint32_t i = 0; i < vec; ++i) {
      loaded[i] = at.CreateAlloca(LlvmType(t));
      b_.CreateStore(llvm::Constant::getNullValue(LlvmType(t)), loaded[i]);
    }
  }
  // A load whose lanes all run at one address (a tile's row every lane reads, as a tiled
  // matrix multiply's ld.shared.v4 of As[ty][k..k+3]): one access of its elements, each
  // element every lane's.
  const LanesSplit split =
      space == "shared" ? SplitSharedLanes(address, bytes, load, load) : SplitLanes(address, bytes, load, load);
  llvm::Value* addresses = split.addresses;
  llvm::Value* mask = split.mask;
  llvm::BasicBlock *each = split.each, *join = split.join;
  llvm::Type* one = llvm::FixedVectorType::get(element, vec);
  auto load_for_all = [&](llvm::Value* at) {
    llvm::Value* elements = b_.CreateAlignedLoad(one, at, llvm::MaybeAlign(1), ordered);
    for (uint32_t i = 0; i < vec; ++i) b_.CreateStore(Splat(b_.CreateExtractElement(elements, uint64_t{i})), loaded[i]);
  };
  if (split.broadcast != nullptr) {
    llvm::BasicBlock* whole = b_.GetInsertBlock();  // SplitLanes leaves the builder there
    b_.SetInsertPoint(split.broadcast);
    load_for_all(split.broadcast_host);
    b_.CreateBr(join);
    b_.SetInsertPoint(whole);
  }
  // All lanes at once: lane k's element i is element k * vec + i of one wide access.
  llvm::Type* wide = llvm::FixedVectorType::get(element, lanes_ * vec);
  llvm::Value* host = split.host;
  if (load && split.uniform) {
    load_for_all(host);
  } else if (load) {
    llvm::Value* all = b_.CreateAlignedLoad(wide, host, llvm::MaybeAlign(1), ordered);
    for (uint32_t i = 0; i < vec; ++i) {
      std::vector<int> picks;
      for (uint32_t k = 0; k < lanes_; ++k) picks.push_back(static_cast<int>(k * vec + i));
      b_.CreateStore(b_.CreateShuffleVector(all, picks), loaded[i]);
    }
  } else {
    llvm::Value* all = llvm::Constant::getNullValue(wide);
    for (uint32_t k = 0; k < lanes_; ++k) {
      for (uint32_t i = 0; i < vec; ++i) {
        all = b_.CreateInsertElement(all, b_.CreateExtractElement(stored[i], uint64_t{k}), uint64_t{k * vec + i});
      }
    }
    b_.CreateAlignedStore(all, host, llvm::MaybeAlign(1), ordered);
  }
  b_.CreateBr(join);
  // Lane by lane (unrolled): a running lane's whole access checked, then its elements.
  b_.SetInsertPoint(each);
  for (uint32_t k = 0; k < lanes_; ++k) {
    auto* lane = llvm::BasicBlock::Create(ctx_, "lane", fn_);
    auto* next = llvm::BasicBlock::Create(ctx_, "lane_next", fn_);
    b_.CreateCondBr(b_.CreateExtractElement(mask, uint64_t{k}), lane, next);
    b_.SetInsertPoint(lane);
    llvm::Value* lane_host = LaneHost(split, b_.CreateExtractElement(addresses, uint64_t{k}), b_.getInt32(k));
    if (load) {
      llvm::Value* elements = b_.CreateAlignedLoad(one, lane_host, llvm::MaybeAlign(1), ordered);
      for (uint32_t i = 0; i < vec; ++i) {
        llvm::Value* lanes_value = b_.CreateLoad(LlvmType(t), loaded[i]);
        b_.CreateStore(b_.CreateInsertElement(lanes_value, b_.CreateExtractElement(elements, uint64_t{i}), uint64_t{k}),
                       loaded[i]);
      }
    } else {
      llvm::Value* elements = llvm::Constant::getNullValue(one);
      for (uint32_t i = 0; i < vec; ++i) {
        elements = b_.CreateInsertElement(elements, b_.CreateExtractElement(stored[i], uint64_t{k}), uint64_t{i});
      }
      b_.CreateAlignedStore(elements, lane_host, llvm::MaybeAlign(1), ordered);
    }
    b_.CreateBr(next);
    b_.SetInsertPoint(next);
  }
  b_.CreateBr(join);
  b_.SetInsertPoint(join);
  if (!load) return true;
  for (uint32_t i = 0; i < vec; ++i) {
    if (value.items[i].kind == RawOperand::kName && value.items[i].name == "_") continue;
    if (!Dest(value.items[i], b_.CreateLoad(LlvmType(t), loaded[i]), t, why)) return false;
  }
  return true;
}

// Whether the result of the atomic at instruction `index`, written to `result`, may decide
// whether a loop around the atomic goes round again: a branch inside such a loop (between
// a label and a backward branch to it, InsideLoop) whose guard depends on the result. A
// thread in such a loop may be waiting for what another thread does (a lock taken by
// compare-and-swap, a flag polled by an atomic read), and here each thread of a CTA runs
// to a barrier or its end before the next one starts: the interpreter lets the others
// run. What depends on the result: every register an instruction writes from a register
// that depends on it, or under a guard that does (flow-insensitive, so a loop's registers
// carried round count; through memory it is not followed: a loop that polls memory
// polls it with a load or an atomic there, which are refused or checked in their own
// right). Every branch of the loop is counted, not only those that leave it: a branch on
// the result may choose what a later iteration's exit reads. But for one: the backward
// branch of a compare-and-swap retry (CasRetryBranch), which goes round again only when
// another thread changed the word since this one read it, so that it waits for no one.
bool Emitter::AtomicResultSteersItsLoop(const RawStatement& atomic, size_t index, const std::string& result) {
  // Each call reads the whole kernel a few times: bounded as liveness is, so that a kernel
  // of many such atomics cannot make a compile run for long (then it is refused).
  steer_work_ += uint64_t{entry_.body.size()} * 64 + 64;  // a statement: map and string work
  if (steer_work_ > kMaxLivenessWork) {
    steer_over_ = true;
    return true;
  }
  std::vector<BackEdge> loops;
  for (const BackEdge& edge : BackEdges(entry_)) {
    if (edge.head <= index && index <= edge.branch) loops.push_back(edge);
  }
  if (loops.empty()) return false;
  std::vector<const RawStatement*> code;
  for (const RawStatement& s : entry_.body) {
    if (s.kind == RawStatement::kInstruction) code.push_back(&s);
  }
  const size_t retry = CasRetryBranch(atomic, index, result, loops, code);
  // Which instructions read each register (the carry flag as one), and which registers
  // each one writes.
  std::map<std::string, std::vector<size_t>> readers;
  std::vector<std::vector<std::string>> writes(code.size());
  for (size_t i = 0; i < code.size(); ++i) {
    const RawStatement& s = *code[i];
    writes[i] = Written(s);
    std::vector<std::string> read;
    for (size_t k = writes[i].empty() ? 0 : 1; k < s.operands.size(); ++k) ReadNames(s.operands[k], &read);
    if (!s.guard.empty()) read.push_back(s.guard);
    if (WritesCarry(s)) writes[i].push_back(kCarryFlag);
    if (ReadsCarry(s)) read.push_back(kCarryFlag);
    for (const std::string& name : read) readers[name].push_back(i);
  }
  // Each register is followed once: linear in the kernel's operands.
  std::set<std::string> depends{result};
  std::vector<std::string> pending{result};
  while (!pending.empty()) {
    const std::string name = std::move(pending.back());
    pending.pop_back();
    auto it = readers.find(name);
    if (it == readers.end()) continue;
    for (size_t i : it->second) {
      for (const std::string& written : writes[i]) {
        if (depends.insert(written).second) pending.push_back(written);
      }
    }
  }
  for (const BackEdge& loop : loops) {
    for (size_t i = loop.head; i <= loop.branch && i < code.size(); ++i) {
      const RawStatement& s = *code[i];
      if (i != retry && s.opcode.rfind("bra", 0) == 0 && !s.guard.empty() && depends.count(s.guard) != 0) {
        return true;
      }
    }
  }
  return false;
}

// The index of the backward branch of a compare-and-swap retry around `atomic` (at
// `index`, its old value in `result`), or SIZE_MAX: the innermost of `loops` ends in `@p
// bra` to its own label, p set in the loop only by `setp.ne` of the old value and the
// compare operand, and the compare operand written in the loop only from the old value
// (after the atomic, by mov; or as the atomic's own result). nvcc's shape of atomicAdd of
// doubles before sm_60 and of every read-modify-write written with atomicCAS:
//   assumed = old; old = atomicCAS(p, assumed, f(assumed)); } while (assumed != old);
// It goes round again only when the word was not what this thread last saw: another
// thread's atomic came in between and made progress. A lock (a constant compare operand,
// or one the loop never takes from the old value) is not one.
size_t Emitter::CasRetryBranch(const RawStatement& atomic, size_t index, const std::string& result,
                               const std::vector<BackEdge>& loops, const std::vector<const RawStatement*>& code) {
  constexpr size_t kNone = SIZE_MAX;
  if (atomic.opcode.find(".cas.") == std::string::npos || !atomic.guard.empty() || atomic.operands.size() != 4) {
    return kNone;
  }
  const RawOperand& compare = atomic.operands[2];
  if (compare.kind != RawOperand::kName || !NamesRegister(compare.name) || IsSpecialRegisterName(compare.name)) {
    return kNone;
  }
  const BackEdge* innermost = &loops[0];
  for (const BackEdge& loop : loops) {
    if (loop.head >= innermost->head) innermost = &loop;
  }
  if (innermost->branch >= code.size()) return kNone;
  const RawStatement& branch = *code[innermost->branch];
  if (branch.opcode != "bra" && branch.opcode != "bra.uni") return kNone;
  if (branch.guard.empty() || branch.guard_negated || branch.operands.size() != 1 ||
      branch.operands[0].name != innermost->label) {
    return kNone;
  }
  bool compared = false, taken = compare.name == result;
  for (size_t i = innermost->head; i <= innermost->branch; ++i) {
    if (i == index) continue;
    const RawStatement& s = *code[i];
    for (const std::string& written : Written(s)) {
      if (written == result) return kNone;
      if (written == branch.guard) {
        const bool both = s.operands.size() == 3 && s.operands[1].kind == RawOperand::kName &&
                          s.operands[2].kind == RawOperand::kName &&
                          ((s.operands[1].name == result && s.operands[2].name == compare.name) ||
                           (s.operands[1].name == compare.name && s.operands[2].name == result));
        if (compared || s.opcode.rfind("setp.ne.", 0) != 0 || !s.guard.empty() || !s.operands[0].pair.empty() ||
            !both) {
          return kNone;
        }
        compared = true;
      }
      if (written == compare.name) {
        const bool from_result = s.opcode.rfind("mov.", 0) == 0 && s.guard.empty() && i > index &&
                                 s.operands.size() == 2 && s.operands[1].kind == RawOperand::kName &&
                                 s.operands[1].name == result;
        if ((!from_result && !ReadsTheWord(s, i, atomic, *innermost, code)) || compare.name == result) return kNone;
        taken = true;
      }
    }
  }
  return compared && taken ? innermost->branch : kNone;
}

// Whether `load` (instruction `at` of `code`) reads, before the compare-and-swap `atomic`
// in the same iteration of `loop`, the word the atomic swaps: `do { old = *p; } while
// (atomicCAS(p, old, f(old)) != old);`. An unguarded ld of the atomic's state space whose
// address is the atomic's: the same register and offset, through adds of a constant to
// registers written once in the kernel (nvcc's `add.s64 %rd19, %rd1, 32`), the register
// not written inside the loop.
bool Emitter::ReadsTheWord(const RawStatement& load, size_t at, const RawStatement& atomic, const BackEdge& loop,
                           const std::vector<const RawStatement*>& code) {
  if (load.opcode.rfind("ld.", 0) != 0 || !load.guard.empty() || load.operands.size() != 2 ||
      load.operands[1].kind != RawOperand::kAddress || at >= instruction_index_) {
    return false;
  }
  auto space = [](const std::string& opcode) {
    for (const char* name : {".global.", ".shared."}) {
      if (opcode.find(name) != std::string::npos) return std::string(name);
    }
    return std::string(".generic.");
  };
  if (space(load.opcode) != space(atomic.opcode) || load.opcode.find(".v") != std::string::npos) return false;
  auto writers = [&](const std::string& name, size_t from, size_t to) {
    std::vector<size_t> found;
    for (size_t i = from; i <= to && i < code.size(); ++i) {
      for (const std::string& written : Written(*code[i])) {
        if (written == name) found.push_back(i);
      }
    }
    return found;
  };
  // The register and offset an address names (offsets wrap as the adds do: compared only).
  auto root = [&](const RawOperand& address) {
    std::pair<std::string, uint64_t> place{address.name, address.bits};
    for (int depth = 0; depth < 4 && NamesRegister(place.first); ++depth) {
      const std::vector<size_t> defs = writers(place.first, 0, code.size() - 1);
      if (defs.size() != 1) break;
      const RawStatement& def = *code[defs[0]];
      if ((def.opcode != "add.s64" && def.opcode != "add.u64") || !def.guard.empty() || def.operands.size() != 3 ||
          def.operands[1].kind != RawOperand::kName || def.operands[2].kind != RawOperand::kInt) {
        break;
      }
      place = {def.operands[1].name, place.second + def.operands[2].bits};
    }
    return place;
  };
  const std::pair<std::string, uint64_t> read = root(load.operands[1]), swapped = root(atomic.operands[1]);
  if (read != swapped) return false;
  return !NamesRegister(read.first) || writers(read.first, loop.head, loop.branch).empty();
}

// atom / red on global or shared memory: add, min, max, and, or, xor, exch, cas, inc and
// dec (inc and dec, which the host has no instruction for, by a compare-and-swap loop).
// An atomic whose result is read is taken unless the result may decide whether a loop
// around it goes round again (AtomicResultSteersItsLoop): the old values handed out follow
// the order threads reach the atomic, here a CTA's threads one after another (in vector
// code a row's lanes in lane order), which is one of the orders a GPU may take, as are the
// interpreter's. In vector code, LanesAtomic.
bool Emitter::Atomic(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  const bool red = parts[0] == "red";
  std::string_view space = "generic", operation;
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    std::string_view qual = parts[i];
    if (qual == "global" || qual == "shared") {
      space = qual;
    } else if (qual == "relaxed" || qual == "acq_rel" || qual == "acquire" || qual == "release" || qual == "gpu" ||
               qual == "cta" || qual == "sys") {
      // One host thread runs a CTA; the host's atomics are sequentially consistent.
    } else if (qual == "noftz" && !operation.empty()) {
      // add.noftz of halves: their adds flush nothing (HalfAtomic's).
    } else if (operation.empty()) {
      operation = qual;
    } else {
      return (*why = "qualifier ." + std::string(qual), false);
    }
  }
  Type t = TypeOf(parts.back());
  using Op = llvm::AtomicRMWInst::BinOp;
  AtomicOperation op;
  const PtxType whole = ParsePtxType(parts.back());
  const bool halves = whole.kind == Kind::kHalf || whole.kind == Kind::kBFloat;
  if (halves || (whole.bits == 16 && whole.is_int())) {
    // 16-bit values and half pairs (HalfAtomic, half_float.h, as the interpreter's HAtom16):
    // add, min, max and exch of f16, bf16 and their pairs; cas and exch of b16/u16.
    op.kind = AtomicOperation::kHalf;
    op.format = !halves ? kHalfBits : whole.kind == Kind::kBFloat ? kHalfBF16 : kHalfF16;
    if (halves && (operation == "add" || operation == "min" || operation == "max" || operation == "exch")) {
      op.mode = operation == "add"   ? kAtomAdd
                : operation == "min" ? kAtomMin
                : operation == "max" ? kAtomMax
                                     : kAtomExch;
    } else if (!halves && (operation == "cas" || operation == "exch") && !red) {
      op.mode = operation == "cas" ? kAtomCas : kAtomExch;
    } else {
      return (*why = "atomic ." + std::string(operation) + " of ." + std::string(parts.back()), false);
    }
    t = Type{Kind::kBits, whole.bits};  // the registers' bits: 16, or 32 for a pair
  } else if (operation == "add") {
    op.rmw = t.kind == Kind::kFloat ? Op::FAdd : Op::Add;
  } else if (operation == "min" || operation == "max") {
    if (!t.is_int() || t.kind == Kind::kBits) return (*why = "type", false);
    const bool sign = t.kind == Kind::kSigned;
    op.rmw = operation == "min" ? (sign ? Op::Min : Op::UMin) : (sign ? Op::Max : Op::UMax);
  } else if (operation == "and" || operation == "or" || operation == "xor" || operation == "exch") {
    if (!t.is_int()) return (*why = "type", false);
    op.rmw = operation == "and" ? Op::And : operation == "or" ? Op::Or : operation == "xor" ? Op::Xor : Op::Xchg;
  } else if (operation == "cas" && !red) {
    if (!t.is_int()) return (*why = "type", false);
    op.kind = AtomicOperation::kCas;
  } else if (operation == "inc" || operation == "dec") {
    if (t.kind != Kind::kUnsigned || t.bits != 32) return (*why = "type", false);
    op.kind = operation == "inc" ? AtomicOperation::kInc : AtomicOperation::kDec;
  } else {
    return (*why = "atomic ." + std::string(operation), false);
  }
  if (!t.ok() || t.kind == Kind::kPred || (t.bits != 32 && t.bits != 64 && op.kind != AtomicOperation::kHalf)) {
    return (*why = "type", false);
  }
  const size_t sources = op.kind == AtomicOperation::kCas || op.mode == kAtomCas ? 2 : 1;
  if (o.size() != (red ? 1 : 2) + sources) return (*why = "operands", false);
  bool result_read = false;
  if (!red) {
    if (o[0].kind != RawOperand::kName) return (*why = "a destination it does not take", false);
    result_read = o[0].name != "_" && uses_[o[0].name] != 1;
    if (result_read && AtomicResultSteersItsLoop(s, instruction_index_, o[0].name)) {
      if (steer_over_) {
        return (*why = "compile work: the loops around atomics whose results are read take more than " +
                       std::to_string(kMaxLivenessWork) + " steps to check",
                false);
      }
      return (*why = "an atomic whose result a branch of a loop around it reads (a thread may wait on another)", false);
    }
  }
  const RawOperand& address = red ? o[0] : o[1];
  if (address.kind != RawOperand::kAddress) return (*why = "address operand", false);
  llvm::Value* value = Source(red ? o[1] : o[2], t, why);
  if (value == nullptr) return false;
  llvm::Value* swap = nullptr;
  if (sources == 2 && (swap = Source(o[3], t, why)) == nullptr) return false;
  llvm::Value* old = nullptr;
  if (lanes_) {
    if (!LanesAtomic(address, space, op, t, value, swap, result_read ? &old : nullptr, why)) return false;
  } else {
    llvm::Value* host = Address(address, space, t.bits / 8, "atomic", why);
    if (host == nullptr) return false;
    // Misaligned: a fault, as on a GPU (the interpreter's "misaligned atomic").
    // Aligned host atomics on global memory, which other CTAs (on the other worker) share;
    // shared memory belongs to this CTA alone, but an atomic there costs little more.
    llvm::Value* misaligned = b_.CreateAnd(b_.CreatePtrToInt(host, i64_), b_.getInt64(t.bits / 8 - 1));
    auto* fault = llvm::BasicBlock::Create(ctx_, "misaligned", fn_);
    auto* ok = llvm::BasicBlock::Create(ctx_, "aligned", fn_);
    b_.CreateCondBr(b_.CreateICmpNE(misaligned, b_.getInt64(0)), fault, ok,
                    llvm::MDBuilder(ctx_).createBranchWeights(1, 1000));
    b_.SetInsertPoint(fault);
    const uint32_t access = static_cast<uint32_t>(accesses_->size());
    accesses_->push_back({t.bits / 8, "misaligned atomic"});
    llvm::Value* device = NamesRegister(address.name)
                              ? b_.CreateAdd(LoadRegister64(address.name), b_.getInt64(address.bits))
                              : b_.getInt64(0);
    Fault(device, access);
    b_.SetInsertPoint(ok);
    old = AtomicAt(op, host, value, swap);
  }
  return !result_read || Dest(o[0], old, t, why);
}

// The host address of lane `lane`'s atomic of `size` bytes at device address `at`, checked
// as scalar code checks it, then its alignment: a misaligned one faults (access
// `misaligned`) naming the address as the instruction made it (a register's; a variable's
// address as scalar code names it, 0).
llvm::Value* Emitter::LaneAtomicHost(const LanesSplit& split, const RawOperand& address, llvm::Value* at,
                                     llvm::Value* lane, uint32_t misaligned, uint32_t size) {
  llvm::Value* host = LaneHost(split, at, lane);
  auto* fault = llvm::BasicBlock::Create(ctx_, "misaligned", fn_);
  auto* ok = llvm::BasicBlock::Create(ctx_, "aligned", fn_);
  b_.CreateCondBr(b_.CreateICmpNE(b_.CreateAnd(b_.CreatePtrToInt(host, i64_), b_.getInt64(size - 1)), b_.getInt64(0)),
                  fault, ok, llvm::MDBuilder(ctx_).createBranchWeights(1, 1000));
  b_.SetInsertPoint(fault);
  Fault(NamesRegister(address.name) ? at : b_.getInt64(0), misaligned, lane);
  b_.SetInsertPoint(ok);
  return host;
}

// One thread's atomic `op` at `host` (aligned) with operand `value` (and cas's `swap`):
// the old value. Relaxed (monotonic), as the interpreter's order between threads allows.
llvm::Value* Emitter::AtomicAt(const AtomicOperation& op, llvm::Value* host, llvm::Value* value, llvm::Value* swap) {
  const llvm::MaybeAlign align(value->getType()->getPrimitiveSizeInBits() / 8);
  constexpr auto kRelaxed = llvm::AtomicOrdering::Monotonic;
  switch (op.kind) {
    case AtomicOperation::kRmw:
      return b_.CreateAtomicRMW(op.rmw, host, value, align, kRelaxed);
    case AtomicOperation::kCas:
      return b_.CreateExtractValue(b_.CreateAtomicCmpXchg(host, value, swap, align, kRelaxed, kRelaxed), 0);
    case AtomicOperation::kHalf: {
      // HalfAtomic through its address, on the value's bits widened to 32.
      llvm::Value* old =
          CallHostOnce(reinterpret_cast<uint64_t>(&HalfAtomic), i32_,
                       {host, b_.getInt8(op.mode), b_.getInt8(align.valueOrOne().value()), b_.getInt8(op.format),
                        b_.CreateZExt(value, i32_), swap != nullptr ? b_.CreateZExt(swap, i32_) : b_.getInt32(0)});
      return b_.CreateTrunc(old, value->getType());
    }
    case AtomicOperation::kInc:
    case AtomicOperation::kDec:
      break;
  }
  // inc: old >= value ? 0 : old + 1; dec: old == 0 || old > value ? value : old - 1 (the
  // interpreter's AtomicResult), exchanged when the word still holds old.
  llvm::BasicBlock* entered = b_.GetInsertBlock();
  llvm::LoadInst* first = b_.CreateAlignedLoad(value->getType(), host, align);
  first->setAtomic(kRelaxed);
  auto* retry = llvm::BasicBlock::Create(ctx_, "atomic_retry", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "atomic_done", fn_);
  b_.CreateBr(retry);
  b_.SetInsertPoint(retry);
  llvm::PHINode* old = b_.CreatePHI(value->getType(), 2);
  old->addIncoming(first, entered);
  llvm::Value* zero = llvm::ConstantInt::get(value->getType(), 0);
  llvm::Value* one = llvm::ConstantInt::get(value->getType(), 1);
  llvm::Value* next = op.kind == AtomicOperation::kInc
                          ? b_.CreateSelect(b_.CreateICmpUGE(old, value), zero, b_.CreateAdd(old, one))
                          : b_.CreateSelect(b_.CreateOr(b_.CreateICmpEQ(old, zero), b_.CreateICmpUGT(old, value)),
                                            value, b_.CreateSub(old, one));
  llvm::Value* exchanged = b_.CreateAtomicCmpXchg(host, old, next, align, kRelaxed, kRelaxed);
  old->addIncoming(b_.CreateExtractValue(exchanged, 0), retry);
  b_.CreateCondBr(b_.CreateExtractValue(exchanged, 1), done, retry);
  b_.SetInsertPoint(done);
  return old;
}

// An atomic of vector code (Atomic): each running lane's in lane order, which is thread
// order, as scalar code runs a CTA's threads (the integer operations give every order the
// same memory; an f32 add rounds alike where each thread adds once between barriers). Each
// lane's address checked as scalar code checks it, then its alignment: a stray or
// misaligned lane faults with its own thread's detail. With `old`, the lanes' old values
// (lanes that did not run: zero, which Dest does not write).
bool Emitter::LanesAtomic(const RawOperand& address, std::string_view space, const AtomicOperation& op, Type t,
                          llvm::Value* value, llvm::Value* swap, llvm::Value** old, std::string* why) {
  if (!LanesAddressable(address, space)) return (*why = "an address vector code does not take", false);
  const uint32_t size = t.bits / 8;
  LanesSplit split;
  split.shared = space == "shared";
  llvm::Value* base = nullptr;
  if (NamesRegister(address.name)) {
    base = LoadRegister64(address.name);
  } else if (uint64_t global = 0; !split.shared && GlobalSymbol(address.name, &global)) {
    base = Int(64, global);
  } else {
    base = Int(64, static_cast<uint64_t>(SharedSymbol(address.name)));
  }
  llvm::Value* addresses = b_.CreateAdd(base, Int(64, address.bits));
  if (split.shared) {
    split.access = static_cast<uint32_t>(accesses_->size());
    accesses_->push_back({size, "atomic"});
  } else {
    split.access = NewAccess(size, "atomic");
  }
  const uint32_t misaligned = static_cast<uint32_t>(accesses_->size());
  accesses_->push_back({size, "misaligned atomic"});
  llvm::Value* mask = Mask();
  // An integer add whose running lanes all name one address (a ticket, a counter): one host
  // atomic of their sum, each lane's old value the first's plus the lanes' before it, as
  // the lanes one after another would leave them with nothing between (another worker's
  // atomic may fall before or after the row, not inside it: also an order a GPU may take).
  llvm::BasicBlock* together_end = nullptr;
  llvm::Value* together_old = nullptr;
  llvm::BasicBlock* join = nullptr;
  if (op.kind == AtomicOperation::kRmw && op.rmw == llvm::AtomicRMWInst::Add && t.kind != Kind::kFloat) {
    llvm::Value* bits = b_.CreateBitCast(mask, b_.getIntNTy(lanes_));
    llvm::Value* first =
        b_.CreateZExtOrTrunc(b_.CreateIntrinsic(llvm::Intrinsic::cttz, {bits->getType()}, {bits, b_.getTrue()}), i32_);
    auto* any = llvm::BasicBlock::Create(ctx_, "atomic_any", fn_);
    auto* together = llvm::BasicBlock::Create(ctx_, "atomic_together", fn_);
    auto* each = llvm::BasicBlock::Create(ctx_, "atomic_each", fn_);
    join = llvm::BasicBlock::Create(ctx_, "atomic_joined", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(bits, b_.getIntN(lanes_, 0)), each, any);
    b_.SetInsertPoint(any);
    llvm::Value* at = b_.CreateExtractElement(addresses, first);
    llvm::Value* elsewhere = b_.CreateAnd(mask, b_.CreateICmpNE(addresses, b_.CreateVectorSplat(lanes_, at)));
    b_.CreateCondBr(b_.CreateICmpEQ(b_.CreateBitCast(elsewhere, b_.getIntNTy(lanes_)), b_.getIntN(lanes_, 0)), together,
                    each);
    b_.SetInsertPoint(together);
    llvm::Value* host = LaneAtomicHost(split, address, at, first, misaligned, size);
    // Inclusive sums of the running lanes' values, by shifts of 1, 2, 4 lanes.
    llvm::Value* zero = llvm::Constant::getNullValue(value->getType());
    llvm::Value* own = b_.CreateSelect(mask, value, zero);
    llvm::Value* sums = own;
    for (uint32_t shift = 1; shift < lanes_; shift *= 2) {
      std::vector<int> from(lanes_);
      for (uint32_t k = 0; k < lanes_; ++k) from[k] = static_cast<int>(k >= shift ? k - shift : lanes_);
      sums = b_.CreateAdd(sums, b_.CreateShuffleVector(sums, zero, from));
    }
    llvm::Value* before = AtomicAt(op, host, b_.CreateExtractElement(sums, uint64_t{lanes_ - 1}), nullptr);
    together_old = b_.CreateAdd(b_.CreateVectorSplat(lanes_, before), b_.CreateSub(sums, own));
    together_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(each);
  }
  const LaneLoop loop =
      OpenLaneLoop("atomic_lane", mask, old != nullptr ? llvm::Constant::getNullValue(value->getType()) : nullptr);
  llvm::Value* k = loop.k;
  llvm::Value* host = LaneAtomicHost(split, address, b_.CreateExtractElement(addresses, k), k, misaligned, size);
  llvm::Value* lane_old = AtomicAt(op, host, b_.CreateExtractElement(value, k),
                                   swap != nullptr ? b_.CreateExtractElement(swap, k) : nullptr);
  llvm::Value* carried = old != nullptr ? b_.CreateInsertElement(loop.carried, lane_old, k) : nullptr;
  llvm::BasicBlock* ran = b_.GetInsertBlock();
  b_.CreateBr(loop.next);
  llvm::Value* merged = CloseLaneLoop(loop, carried, ran);
  if (join != nullptr) {
    llvm::BasicBlock* each_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    if (old != nullptr) {
      llvm::PHINode* joined = b_.CreatePHI(value->getType(), 2);
      joined->addIncoming(together_old, together_end);
      joined->addIncoming(merged, each_end);
      merged = joined;
    }
  }
  if (old != nullptr) *old = merged;
  return true;
}

// cp.async.{ca,cg}.shared{::cta}.global [target], [source], width{, src-size | ignore-src}
// {, cache-policy}, as the interpreter runs it (HCpAsync, interp/wmma.cc): the copy is done
// at issue, so that each thread's copies are complete before its next instruction (one
// order PTX allows), and cp.async.commit_group, wait_group and wait_all wait for nothing.
// The target is checked for the whole width first, then the first from_source bytes of
// the source as a global access of that size (a fault names what the interpreter's names);
// the rest of the target is zeros. Not cp.async.mbarrier.arrive nor the bulk copies (left
// to the interpreter). In vector code, VectorAsyncCopy.
bool Emitter::AsyncCopy(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  if (parts.size() < 3 || parts[1] != "async") return (*why = "a cp other than cp.async", false);
  const std::string_view what = parts[2];
  if (what == "commit_group" || what == "wait_group" || what == "wait_all") return true;
  if (what != "ca" && what != "cg") return (*why = "cp.async." + std::string(what), false);
  bool global = false, shared = false, cache_hint = false;
  for (size_t i = 3; i < parts.size(); ++i) {
    if (parts[i] == "global") {
      global = true;
    } else if (parts[i] == "shared" || parts[i] == "shared::cta") {
      shared = true;
    } else if (parts[i] == "L2::cache_hint") {
      cache_hint = true;
    } else if (parts[i].rfind("L2::", 0) != 0) {  // L2::64B, ...: prefetch sizes, hints
      return (*why = "qualifier ." + std::string(parts[i]), false);
    }
  }
  if (!global || !shared) return (*why = "a cp.async other than from .global to .shared", false);
  const size_t plain = cache_hint ? 4 : 3;  // the operands without src-size / ignore-src
  if (o.size() != plain && o.size() != plain + 1) return (*why = "operands", false);
  if (o[0].kind != RawOperand::kAddress || o[1].kind != RawOperand::kAddress) {
    return (*why = "address operand", false);
  }
  if (o[2].kind != RawOperand::kInt || (o[2].bits != 4 && o[2].bits != 8 && o[2].bits != 16) ||
      (what == "cg" && o[2].bits != 16)) {
    return (*why = "cp-size", false);
  }
  const uint32_t width = static_cast<uint32_t>(o[2].bits);
  const RawOperand* extra_operand = o.size() == plain ? nullptr : &o[3];
  // ignore-src is a predicate (nvcc names them %p), src-size an integer: as the decoder
  // tells them apart.
  const bool predicate = extra_operand != nullptr && extra_operand->kind == RawOperand::kName &&
                         (extra_operand->negated || extra_operand->name.rfind("%p", 0) == 0);
  if (extra_operand != nullptr && extra_operand->negated) return (*why = "a negated ignore-src", false);
  if (lanes_) return VectorAsyncCopy(o[0], o[1], width, extra_operand, predicate, why);
  llvm::Value* target = Address(o[0], "shared", width, "cp.async store", why);
  if (target == nullptr) return false;
  if (extra_operand == nullptr) return CopyToShared(target, o[1], width, width, why);
  const RawOperand& extra = *extra_operand;
  if (extra.kind == RawOperand::kInt) {
    return CopyToShared(target, o[1], static_cast<uint32_t>(std::min<uint64_t>(extra.bits, width)), width, why);
  }
  auto* join = llvm::BasicBlock::Create(ctx_, "copied", fn_);
  // Each size the source may have (0 to width bytes) its own copy, and its own checked
  // access: a fault names the size the interpreter's names.
  auto copy = [&](llvm::BasicBlock* block, uint32_t from_source) {
    b_.SetInsertPoint(block);
    if (!CopyToShared(target, o[1], from_source, width, why)) return false;
    b_.CreateBr(join);
    return true;
  };
  auto* whole = llvm::BasicBlock::Create(ctx_, "copy_whole", fn_);
  if (predicate) {
    llvm::Value* ignore = Source(extra, Type{Kind::kPred, 1}, why);
    if (ignore == nullptr) return false;
    auto* zeros = llvm::BasicBlock::Create(ctx_, "copy_zeros", fn_);
    b_.CreateCondBr(ignore, zeros, whole);
    if (!copy(zeros, 0) || !copy(whole, width)) return false;
  } else {
    // Read at the register's width, as the interpreter reads it (a 64-bit src-size of
    // 2^32 is no 0).
    const bool wide = extra.kind == RawOperand::kName && !extra.name.empty() && NamesRegister(extra.name) &&
                      !IsSpecialRegisterName(extra.name) && StorageBits(extra.name) > 32;
    const uint32_t bits = wide ? 64 : 32;
    llvm::Value* size = Source(extra, Type{Kind::kUnsigned, bits}, why);
    if (size == nullptr) return false;
    llvm::SwitchInst* sizes = b_.CreateSwitch(size, whole, width);  // width or more: whole
    for (uint32_t from_source = 0; from_source < width; ++from_source) {
      auto* part = llvm::BasicBlock::Create(ctx_, "copy_part", fn_);
      sizes->addCase(b_.getIntN(bits, from_source), part);
      if (!copy(part, from_source)) return false;
    }
    if (!copy(whole, width)) return false;
  }
  b_.SetInsertPoint(join);
  return true;
}

// The copy of one cp.async whose source gives `from_source` of its `width` bytes.
bool Emitter::CopyToShared(llvm::Value* target, const RawOperand& source, uint32_t from_source, uint32_t width,
                           std::string* why) {
  if (from_source > 0) {
    llvm::Value* host = Address(source, "global", from_source, "cp.async load", why);
    if (host == nullptr) return false;
    b_.CreateMemCpy(target, llvm::MaybeAlign(1), host, llvm::MaybeAlign(1), from_source);
  }
  if (from_source < width) {
    b_.CreateMemSet(b_.CreateConstGEP1_64(b_.getInt8Ty(), target, from_source), b_.getInt8(0), width - from_source,
                    llvm::MaybeAlign(1));
  }
  return true;
}

// cp.async in vector code: the row's copies, each lane's as scalar code makes it
// (AsyncCopy). Running lanes that are one run (all of the row's, or a quarter of them, as
// where a quarter of a block's threads copy 16 bytes each) and all copy the whole width
// from the source, at consecutive targets whose first and last lie inside the CTA's shared
// bytes and consecutive sources whose first and last lie inside the allocation the
// whole-width access hit last: one copy of all their bytes. Otherwise each running lane in lane order
// (as the interpreter's HCpAsync runs them): its target checked for the whole width, then
// the bytes its source gives (src-size, ignore-src), each size its own checked access, the
// rest zeros; a stray lane faults with its own thread's detail, naming the size the
// interpreter's names.
bool Emitter::VectorAsyncCopy(const RawOperand& target, const RawOperand& source, uint32_t width,
                              const RawOperand* extra, bool predicate, std::string* why) {
  if (!LanesAddressable(target, "shared") || !LanesAddressable(source, "global")) {
    return (*why = "an address vector code does not take", false);
  }
  // Each lane's bytes from the source, 0 to width; `fixed` where they are known here.
  llvm::Value* sizes = nullptr;
  int64_t fixed = width;
  if (extra != nullptr && extra->kind == RawOperand::kInt) {
    fixed = static_cast<int64_t>(std::min<uint64_t>(extra->bits, width));
  } else if (extra != nullptr && predicate) {
    llvm::Value* ignore = Source(*extra, Type{Kind::kPred, 1}, why);
    if (ignore == nullptr) return false;
    sizes = b_.CreateSelect(ignore, Int(32, 0), Int(32, width));
    fixed = -1;
  } else if (extra != nullptr) {
    // Read at the register's width, as scalar code reads it; at most `width`.
    const bool wide = extra->kind == RawOperand::kName && !extra->name.empty() && NamesRegister(extra->name) &&
                      !IsSpecialRegisterName(extra->name) && StorageBits(extra->name) > 32;
    const uint32_t bits = wide ? 64 : 32;
    llvm::Value* size = Source(*extra, Type{Kind::kUnsigned, bits}, why);
    if (size == nullptr) return false;
    llvm::Value* clamped = b_.CreateSelect(b_.CreateICmpULT(size, Int(bits, width)), size, Int(bits, width));
    sizes = b_.CreateZExtOrTrunc(clamped, Lanes(i32_));
    fixed = -1;
  }
  // The lanes' targets as the instruction made them (a fault names them so), their offsets
  // (the low 48 bits, as the interpreter takes them), and their sources.
  llvm::Value* target_base = NamesRegister(target.name) ? LoadRegister64(target.name)
                                                        : Int(64, static_cast<uint64_t>(SharedSymbol(target.name)));
  llvm::Value* targets = b_.CreateAdd(target_base, Int(64, target.bits));
  llvm::Value* offsets = b_.CreateAnd(targets, Int(64, 0xffffffffffffull));
  llvm::Value* source_base = nullptr;
  if (uint64_t global = 0; !NamesRegister(source.name) && GlobalSymbol(source.name, &global)) {
    source_base = Int(64, global);
  } else {
    source_base = LoadRegister64(source.name);
  }
  llvm::Value* sources = b_.CreateAdd(source_base, Int(64, source.bits));
  LanesSplit stores;
  stores.shared = true;
  stores.access = static_cast<uint32_t>(accesses_->size());
  accesses_->push_back({width, "cp.async store"});
  // The source's accesses: one of each size a lane may read (none of 0 bytes).
  std::vector<uint32_t> loads(width + 1, 0);
  for (uint32_t size = 1; size <= width; ++size) {
    if (fixed < 0 ? (!predicate || size == width) : size == static_cast<uint64_t>(fixed)) {
      loads[size] = NewAccess(size, "cp.async load");
    }
  }
  llvm::Value* mask = Mask();
  auto* each = llvm::BasicBlock::Create(ctx_, "copy_lanes", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "copy_join", fn_);
  if (fixed == width || fixed < 0) {
    const std::array<llvm::AllocaInst*, 3>& slots = hint_slots_.at(loads[width]);
    llvm::Value* start = b_.CreateLoad(i64_, slots[0]);
    llvm::Value* limit = b_.CreateLoad(i64_, slots[1]);
    llvm::Value* delta = b_.CreateLoad(i64_, slots[2]);
    // offset + width <= the CTA's shared bytes (below 2^32: no wrap), as the interpreter checks.
    llvm::Value* shared_limit =
        b_.CreateSelect(b_.CreateICmpUGE(shared_bytes_, b_.getInt64(width)),
                        b_.CreateAdd(b_.CreateSub(shared_bytes_, b_.getInt64(width)), b_.getInt64(1)), b_.getInt64(0));
    // The running lanes: first to last, each between them running (a row's first lanes
    // only, as when a quarter of a block's threads copy 16 bytes each).
    llvm::Value* bits = b_.CreateBitCast(mask, b_.getIntNTy(lanes_));
    // (Lane numbers wrapped into the row, so that no lane running is no poison either.)
    llvm::Value* lane_bits = b_.getInt64(lanes_ - 1);
    llvm::Value* first = b_.CreateAnd(
        b_.CreateZExt(b_.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, bits, b_.getFalse()), i64_), lane_bits);
    llvm::Value* count = b_.CreateZExt(b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, bits), i64_);
    llvm::Value* last = b_.CreateAnd(b_.CreateSub(b_.CreateAdd(first, count), b_.getInt64(1)), lane_bits);
    llvm::Value* whole = b_.CreateICmpNE(bits, b_.getIntN(lanes_, 0));
    // No lane running between first and last: bits is the count's ones from first.
    llvm::Value* run = b_.CreateShl(b_.CreateSub(b_.CreateShl(b_.getInt64(1), count), b_.getInt64(1)), first);
    whole = b_.CreateAnd(whole, b_.CreateICmpEQ(b_.CreateZExt(bits, i64_), run));
    llvm::Value* first_offset = b_.CreateExtractElement(offsets, first);
    llvm::Value* last_offset = b_.CreateExtractElement(offsets, last);
    llvm::Value* first_source = b_.CreateExtractElement(sources, first);
    llvm::Value* last_source = b_.CreateExtractElement(sources, last);
    // Lane k's offset and source are the first's + (k - first) x width (running lanes only).
    llvm::Value* back = b_.CreateMul(first, b_.getInt64(width));
    llvm::Value* idle = b_.CreateNot(mask);
    auto consecutive = [&](llvm::Value* lanes, llvm::Value* at_first) {
      llvm::Value* expected = b_.CreateAdd(Splat(b_.CreateSub(at_first, back)), Steps(width));
      return b_.CreateAndReduce(b_.CreateOr(idle, b_.CreateICmpEQ(lanes, expected)));
    };
    if (sizes != nullptr) {
      whole = b_.CreateAnd(whole, b_.CreateAndReduce(b_.CreateOr(idle, b_.CreateICmpEQ(sizes, Int(32, width)))));
    }
    whole = b_.CreateAnd(whole, consecutive(offsets, first_offset));
    whole = b_.CreateAnd(whole, consecutive(sources, first_source));
    whole = b_.CreateAnd(
        whole, b_.CreateAnd(b_.CreateICmpULT(first_offset, shared_limit), b_.CreateICmpULT(last_offset, shared_limit)));
    whole = b_.CreateAnd(whole, b_.CreateAnd(b_.CreateICmpULT(b_.CreateSub(first_source, start), limit),
                                             b_.CreateICmpULT(b_.CreateSub(last_source, start), limit)));
    auto* together = llvm::BasicBlock::Create(ctx_, "copy_whole_lanes", fn_);
    b_.CreateCondBr(whole, together, each, llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
    b_.SetInsertPoint(together);
    llvm::Value* to = b_.CreateGEP(b_.getInt8Ty(), shared_arg_, first_offset);
    llvm::Value* from = b_.CreateIntToPtr(b_.CreateAdd(first_source, delta), ptr_);
    // A copy of known size per count of lanes: inline moves, where a call (memcpy of the
    // lanes' bytes) would spill every vector register live across it.
    auto* all = llvm::BasicBlock::Create(ctx_, "copy_lanes_count", fn_);
    llvm::SwitchInst* counts = b_.CreateSwitch(count, all, lanes_ - 1);
    for (uint32_t n = 1; n < lanes_; ++n) {
      auto* some = llvm::BasicBlock::Create(ctx_, "copy_lanes_count", fn_);
      counts->addCase(b_.getInt64(n), some);
      b_.SetInsertPoint(some);
      b_.CreateMemCpy(to, llvm::MaybeAlign(1), from, llvm::MaybeAlign(1), uint64_t{width} * n);
      b_.CreateBr(join);
    }
    b_.SetInsertPoint(all);
    b_.CreateMemCpy(to, llvm::MaybeAlign(1), from, llvm::MaybeAlign(1), uint64_t{width} * lanes_);
    b_.CreateBr(join);
  } else {
    b_.CreateBr(each);
  }
  // Lane by lane: a loop over the lanes (a lane's thread is the row's first + k).
  b_.SetInsertPoint(each);
  const LaneLoop loop = OpenLaneLoop("copy_lane", mask);
  llvm::Value* k = loop.k;
  llvm::Value* to = LaneHost(stores, b_.CreateExtractElement(targets, k), k);
  llvm::Value* from = b_.CreateExtractElement(sources, k);
  // The lane's copy of `from_source` bytes from its source, the rest zeros.
  auto copy = [&](uint32_t from_source) {
    if (from_source > 0) {
      LanesSplit loads_split;
      loads_split.access = loads[from_source];
      llvm::Value* host = LaneHost(loads_split, from, k);
      b_.CreateMemCpy(to, llvm::MaybeAlign(1), host, llvm::MaybeAlign(1), from_source);
    }
    if (from_source < width) {
      b_.CreateMemSet(b_.CreateConstGEP1_64(b_.getInt8Ty(), to, from_source), b_.getInt8(0), width - from_source,
                      llvm::MaybeAlign(1));
    }
    b_.CreateBr(loop.next);
  };
  if (fixed >= 0) {
    copy(static_cast<uint32_t>(fixed));
  } else {
    llvm::Value* size = b_.CreateExtractElement(sizes, k);
    auto* whole_lane = llvm::BasicBlock::Create(ctx_, "copy_lane_whole", fn_);
    llvm::SwitchInst* cases = b_.CreateSwitch(size, whole_lane, width);  // width: whole
    for (uint32_t from_source = 0; from_source < width; ++from_source) {
      if (predicate && from_source > 0) break;  // ignore-src: none or all
      auto* part = llvm::BasicBlock::Create(ctx_, "copy_lane_part", fn_);
      cases->addCase(b_.getInt32(from_source), part);
      b_.SetInsertPoint(part);
      copy(from_source);
    }
    b_.SetInsertPoint(whole_lane);
    copy(width);
  }
  CloseLaneLoop(loop);
  b_.CreateBr(join);
  b_.SetInsertPoint(join);
  return true;
}

// ld/st of global (or generic) memory in vector code. Lanes that all run, at consecutive
// addresses inside the allocation this access hit last: one vector access. Otherwise
// each running lane on its own, checked as scalar code checks it (and remembering the
// allocation it hits for the next time).
bool Emitter::VectorMemory(const RawOperand& address, std::string_view space, Type t, bool load,
                           const RawOperand& value, std::string* why) {
  if (!LanesAddressable(address, space)) return (*why = "an address vector code does not take", false);
  const uint32_t size = t.bits / 8;
  llvm::Value* stored = nullptr;
  if (!load && (stored = Source(value, t, why)) == nullptr) return false;
  const LanesSplit split =
      space == "shared" ? SplitSharedLanes(address, size, load, load) : SplitLanes(address, size, load, load);
  llvm::Value* addresses = split.addresses;
  llvm::Value* mask = split.mask;
  llvm::BasicBlock *each = split.each, *join = split.join;
  llvm::Value* host = split.host;
  llvm::Value* whole_value = nullptr;
  if (load && split.uniform) {
    whole_value = Splat(b_.CreateAlignedLoad(ScalarType(t), host, llvm::MaybeAlign(1)));
  } else if (load) {
    whole_value = b_.CreateAlignedLoad(LlvmType(t), host, llvm::MaybeAlign(1));
  } else {
    b_.CreateAlignedStore(stored, host, llvm::MaybeAlign(1));
  }
  llvm::BasicBlock* whole = b_.GetInsertBlock();
  b_.CreateBr(join);
  llvm::BasicBlock* broadcast = nullptr;
  llvm::Value* broadcast_value = nullptr;
  if (split.broadcast != nullptr) {
    b_.SetInsertPoint(split.broadcast);
    broadcast_value = Splat(b_.CreateAlignedLoad(ScalarType(t), split.broadcast_host, llvm::MaybeAlign(1)));
    broadcast = b_.GetInsertBlock();
    b_.CreateBr(join);
  }
  b_.SetInsertPoint(each);
  // A loop over the lanes (a lane's thread is the chunk's x + k); a load carries the lanes'
  // elements round it.
  const LaneLoop loop = OpenLaneLoop("lane", mask, load ? llvm::Constant::getNullValue(LlvmType(t)) : nullptr);
  llvm::Value* k = loop.k;
  llvm::Value* lane_host = LaneHost(split, b_.CreateExtractElement(addresses, k), k);
  llvm::Value* with_lane = loop.carried;
  if (load) {
    llvm::Value* element = b_.CreateAlignedLoad(ScalarType(t), lane_host, llvm::MaybeAlign(1));
    with_lane = b_.CreateInsertElement(loop.carried, element, k);
  } else {
    b_.CreateAlignedStore(b_.CreateExtractElement(stored, k), lane_host, llvm::MaybeAlign(1));
  }
  llvm::BasicBlock* ran = b_.GetInsertBlock();
  b_.CreateBr(loop.next);
  llvm::Value* merged = CloseLaneLoop(loop, with_lane, ran);
  llvm::BasicBlock* each_end = b_.GetInsertBlock();
  b_.CreateBr(join);
  b_.SetInsertPoint(join);
  if (!load) return true;
  llvm::PHINode* loaded = b_.CreatePHI(LlvmType(t), 3);
  loaded->addIncoming(whole_value, whole);
  loaded->addIncoming(merged, each_end);
  if (broadcast != nullptr) loaded->addIncoming(broadcast_value, broadcast);
  return Dest(value, loaded, t, why);
}

}  // namespace gpupool::sim::jit

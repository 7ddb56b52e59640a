// The emitter's frame (emitter.h): the CTA function of a kernel, `cta` (CtaFunction), runs
// one CTA: its threads one after another, x fastest, each from its start (or the barrier it
// waits at) to its next barrier or its end; when threads wait at a barrier, another such
// phase. PTX registers are stack slots of their declared width (promoted to SSA values by
// LLVM); across a barrier a thread keeps the registers live after it in `saved`.
#include <algorithm>
#include <set>
#include <string_view>

#include "remote/ptx/front/param_layout.h"
#include "remote/ptx/jit/emitter.h"

namespace gpupool::sim::jit {

bool Emitter::Emit(CompiledKernel* out, std::string* refused) {
  accesses_ = &out->accesses;
  std::vector<uint64_t> offsets;
  LayOutParams(entry_, &offsets);
  for (size_t i = 0; i < entry_.params.size(); ++i) {
    params_[entry_.params[i].name] = {offsets[i], entry_.params[i].size};
  }
  size_t instructions = 0;
  size_t index = 0;  // of the instruction, among entry_.body's (InsideLoop)
  for (const RawStatement& s : entry_.body) {
    if (s.kind == RawStatement::kInstruction && ++instructions > kMaxInstructions) {
      return Refuse("more than " + std::to_string(kMaxInstructions) + " instructions", s.line, refused);
    }
    if (s.kind == RawStatement::kLocal || s.kind == RawStatement::kParam) {
      // As the decoder places them, .local and .param variables alike (a call's arguments
      // and results; InlineCalls adds the scratch of a result the call site leaves), each
      // thread's own in local memory; bounded first, so that no sum wraps.
      if (s.size > kMaxLocalPerThread || local_size_ > kMaxLocalPerThread) {
        return Refuse("more than " + std::to_string(kMaxLocalPerThread) + " bytes of local memory", s.line, refused);
      }
      const uint64_t align = std::max<uint64_t>(s.align, 1);
      local_size_ = (local_size_ + align - 1) / align * align;
      local_offsets_[s.name] = local_size_;
      local_size_ += std::max<uint64_t>(s.size, 1);
      continue;
    }
    if (s.kind == RawStatement::kShared && SharedSymbol(s.name) < 0) {
      // Every one the decoder placed is in its layout, an inlined copy's by the decoder's
      // name for it (InlineCalls): one that is not would be another variable.
      return Refuse("a .shared variable the decoder's layout does not hold", s.line, refused);
    }
    if (s.kind != RawStatement::kInstruction) continue;
    if (IsCtaBarrier(s) || IsWarpOperation(s)) ++barriers_;
    if (IsWarpOperation(s)) ++warp_ops_;
    // A load a thread may spin on: in scalar code a stop before it (a yield), which Settle
    // handles as it does the warp-level operations'.
    if (!lanes_ && IsOrderedLoad(s) && InsideLoop(entry_, index)) {
      spin_loads_.insert(index);
      ++barriers_;
      ++warp_ops_;
    }
    ++index;
    for (const RawOperand& o : s.operands) CountUses(o);
    if (!s.guard.empty()) ++uses_[s.guard];
  }
  // The decoder's layout (SharedLayout): every .shared variable the kernel names has its
  // place, and the CTA's shared size is known before any access is checked against it.
  has_shared_ = !shared_offsets_.empty() || !shared_dynamic_.empty();
  local_size_ = (local_size_ + 15) / 16 * 16;
  if (local_size_ > kMaxLocalPerThread) {
    return Refuse("more than " + std::to_string(kMaxLocalPerThread) + " bytes of local memory", 0, refused);
  }
  out->local_bytes = local_size_;
  if (shared_size_ > kMaxSharedBytes) {
    return Refuse(std::to_string(shared_size_) + " bytes of shared memory", 0, refused);
  }
  if (uses_.size() > kMaxRegisters) {
    return Refuse("more than " + std::to_string(kMaxRegisters) + " names",
                  entry_.body.empty() ? 0 : entry_.body.front().line, refused);
  }
  if (lanes_ > 0) {
    // Vector code takes no warp-level operations or local memory (the scalar
    // code runs those).
    if (warp_ops_ > 0 || local_size_ > 0) {
      return Refuse("vector code: warp-level operations or local memory", 0, refused);
    }
    // The labels a backward branch goes to: each a block of its own, which the branch
    // goes back to while any lane loops.
    for (const BackEdge& edge : BackEdges(entry_)) loop_heads_[edge.label] = nullptr;
  }
  if (!globals_.empty()) {
    std::string why;
    int line = 0;
    if (!CheckVariableStores(&why, &line)) return Refuse(why, line, refused);
  }
  if (barriers_ > 0 || lanes_ > 0) {
    // (Vector code without barriers whose liveness is too much work writes every
    // register under its mask: free_writes_ stays empty.)
    std::string why;
    if (!ComputeLiveness(&why) && barriers_ > 0) return Refuse(why, 0, refused);
    if (lanes_ > 0 && barriers_ > 0) FindRematerialized();
  }
  if (barriers_ > 0) {
    std::string why;
    int line = 0;
    if (warp_ops_ > 0 && !CheckWarpOperations(&why, &line)) return Refuse(why, line, refused);
  }
  warp_table_ = &out->warp_ops;
  i1_ = b_.getInt1Ty();
  i32_ = b_.getInt32Ty();
  i64_ = b_.getInt64Ty();
  ptr_ = b_.getPtrTy();
  auto* type = llvm::FunctionType::get(i32_, {ptr_, ptr_, i32_, i32_, i32_, ptr_, ptr_, ptr_}, false);
  fn_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, lanes_ ? "cta_vector" : "cta", module_);
  context_ = fn_->getArg(0);
  params_arg_ = fn_->getArg(1);
  for (int i = 0; i < 3; ++i) ctaid_[i] = fn_->getArg(2 + i);
  shared_arg_ = fn_->getArg(5);
  resume_arg_ = fn_->getArg(6);
  saved_arg_ = fn_->getArg(7);
  // Neither the context, the parameters, the CTA's shared memory nor its threads' saved
  // state are reachable through a device address (all are the engine's own host memory,
  // no allocation's), and the kernel never writes its parameters: LLVM may keep what it
  // reads of them in registers across threads.
  for (unsigned i : {0u, 1u, 5u, 6u, 7u}) fn_->addParamAttr(i, llvm::Attribute::NoAlias);
  fn_->addParamAttr(1, llvm::Attribute::ReadOnly);
  // RunKernel checks the buffer holds the kernel's parameters: loads of them may move.
  if (param_size_ > 0) {
    fn_->addParamAttr(1, llvm::Attribute::getWithDereferenceableBytes(ctx_, param_size_));
  }

  auto* entry_block = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  auto* phase_block = llvm::BasicBlock::Create(ctx_, "phase", fn_);
  thread_block_ = llvm::BasicBlock::Create(ctx_, "thread", fn_);
  next_block_ = llvm::BasicBlock::Create(ctx_, "next", fn_);
  auto* start_block = llvm::BasicBlock::Create(ctx_, "start", fn_);
  b_.SetInsertPoint(entry_block);
  for (int i = 0; i < 3; ++i) {
    tid_slot_[i] = b_.CreateAlloca(i32_);
    ntid_[i] = b_.CreateLoad(i32_, Field(kOffNtid + 4 * i));
    nctaid_[i] = b_.CreateLoad(i32_, Field(kOffNctaid + 4 * i));
  }
  // The CTA's shared bytes: the static ones and the launch's dynamic ones (RunCompiled).
  shared_bytes_ = b_.CreateLoad(i64_, Field(kOffSharedSize));
  local_arg_ = b_.CreateLoad(ptr_, Field(kOffLocal));
  if (warp_ops_ > 0) {
    slots_arg_ = b_.CreateLoad(ptr_, Field(kOffSlots));
    shadow_arg_ = b_.CreateLoad(ptr_, Field(kOffShadow));
  }
  count_slot_ = b_.CreateAlloca(i64_);
  waiting_slot_ = b_.CreateAlloca(i1_);
  b_.CreateStore(b_.getInt64(0), count_slot_);
  if (lanes_) mask_slot_ = b_.CreateAlloca(Lanes(i1_));
  if (lanes_ && barriers_ > 0) done_slot_ = b_.CreateAlloca(Lanes(i1_));
  budget_slot_ = b_.CreateAlloca(i64_);
  b_.CreateStore(b_.getInt64(kProgressEvery), budget_slot_);
  alloca_point_ = b_.CreateBr(phase_block);

  // phase: every thread from its start or its barrier to its next barrier or its end.
  b_.SetInsertPoint(phase_block);
  for (int i = 0; i < 3; ++i) b_.CreateStore(b_.getInt32(0), tid_slot_[i]);
  b_.CreateStore(b_.getInt1(false), waiting_slot_);
  b_.CreateBr(thread_block_);

  // thread: where this thread is (kernels with barriers), then its code.
  b_.SetInsertPoint(thread_block_);
  llvm::BasicBlock* restore_block = nullptr;
  if (barriers_ > 0 && lanes_) {
    // A row's lanes start together (the first phase); after it, each lane goes on from
    // the barrier it waits at (restore), or has ended.
    llvm::Value* resume = b_.CreateLoad(i32_, ResumeOf());
    restore_block = llvm::BasicBlock::Create(ctx_, "restore", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(resume, b_.getInt32(0)), start_block, restore_block);
  } else if (barriers_ > 0) {
    llvm::Value* resume = b_.CreateLoad(i32_, ResumeOf());
    auto* started = llvm::BasicBlock::Create(ctx_, "started", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(resume, b_.getInt32(0)), start_block, started);
    b_.SetInsertPoint(started);
    restore_block = llvm::BasicBlock::Create(ctx_, "restore", fn_);
    if (warp_ops_ > 0) {
      // A thread stopped at a barrier or a warp-level operation waits for Settle.
      auto* go = llvm::BasicBlock::Create(ctx_, "go", fn_);
      b_.CreateCondBr(b_.CreateICmpSLT(resume, b_.getInt32(0)), next_block_, go);
      b_.SetInsertPoint(go);
      b_.CreateCondBr(b_.CreateICmpNE(b_.CreateAnd(resume, b_.getInt32(kStopped)), b_.getInt32(0)), next_block_,
                      restore_block);
    } else {
      b_.CreateCondBr(b_.CreateICmpSLT(resume, b_.getInt32(0)), next_block_, restore_block);
    }
    b_.SetInsertPoint(restore_block);
    // Filled once every barrier is known (after the body).
  } else {
    b_.CreateBr(start_block);
  }

  // Labels first, so that branches forward find their blocks.
  for (const RawStatement& s : entry_.body) {
    if (s.kind == RawStatement::kLabel && !lanes_) {
      labels_[s.opcode] = llvm::BasicBlock::Create(ctx_, s.opcode, fn_);
    }
    if (s.kind == RawStatement::kLabel && lanes_) {
      llvm::IRBuilder<> at(alloca_point_);
      pending_[s.opcode] = at.CreateAlloca(Lanes(i1_));
      label_blocks_[s.opcode] = llvm::BasicBlock::Create(ctx_, s.opcode, fn_);
      if (loop_heads_.count(s.opcode)) loop_heads_[s.opcode] = label_blocks_[s.opcode];
    }
    if (s.kind == RawStatement::kInstruction && lanes_ && s.opcode.rfind("bra", 0) == 0 && s.operands.size() == 1 &&
        loop_heads_.count(s.operands[0].name)) {
      llvm::IRBuilder<> at(alloca_point_);
      parked_[&s] = at.CreateAlloca(Lanes(i1_));
    }
  }
  if (lanes_) FindSkips();
  b_.SetInsertPoint(start_block);
  // The carry flag of a kernel that uses it starts at 0, as the interpreter's carry slot
  // (the register's slot is the previous thread's otherwise).
  if (std::any_of(entry_.body.begin(), entry_.body.end(),
                  [](const RawStatement& s) { return s.kind == RawStatement::kInstruction && UsesCarry(s); })) {
    b_.CreateStore(llvm::Constant::getNullValue(StorageType(kCarryFlag)), Register(kCarryFlag));
  }
  if (lanes_) {
    // Every lane runs; no lane waits at any label.
    b_.CreateStore(Int(1, 1), mask_slot_);
    for (auto& [label, slot] : pending_) b_.CreateStore(Int(1, 0), slot);
    for (auto& [branch, slot] : parked_) b_.CreateStore(Int(1, 0), slot);
  }
  for (const RawStatement& s : entry_.body) {
    if (s.kind == RawStatement::kLabel && lanes_) {
      seen_labels_.insert(s.opcode);
      // The label's block: a loop's back edges come here with the lanes that loop, and rows
      // with no running lane from before it (SkipIfNoLane).
      llvm::BasicBlock* block = label_blocks_.at(s.opcode);
      if (!b_.GetInsertBlock()->getTerminator()) b_.CreateBr(block);
      b_.SetInsertPoint(block);
      // The lanes that branched here join the running ones, and no longer wait here (a
      // label inside a loop is passed again).
      llvm::AllocaInst* pending = pending_.at(s.opcode);
      b_.CreateStore(b_.CreateOr(b_.CreateLoad(Lanes(i1_), mask_slot_), b_.CreateLoad(Lanes(i1_), pending)),
                     mask_slot_);
      b_.CreateStore(Int(1, 0), pending);
      SkipIfNoLane(s);
      continue;
    }
    if (s.kind == RawStatement::kLabel) {
      seen_labels_.insert(s.opcode);
      llvm::BasicBlock* block = labels_[s.opcode];
      if (!b_.GetInsertBlock()->getTerminator()) b_.CreateBr(block);
      b_.SetInsertPoint(block);
      continue;
    }
    if (s.kind != RawStatement::kInstruction) continue;
    if (b_.GetInsertBlock()->getTerminator()) {
      // Code after an unconditional branch that no label reaches.
      b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "dead", fn_));
    }
    if (!Instruction(s, refused)) return false;
    ++instruction_index_;
  }
  if (lanes_end_ != nullptr) {
    if (!b_.GetInsertBlock()->getTerminator()) b_.CreateBr(lanes_end_);
    b_.SetInsertPoint(lanes_end_);
  }
  if (!b_.GetInsertBlock()->getTerminator()) Exit();

  if (barriers_ > 0 && lanes_) {
    if (!FillLaneBarriers(restore_block, start_block, refused)) return false;
  } else if (barriers_ > 0) {
    // restore: the registers live after the barrier the thread waits at, as it left
    // them, then on after it.
    b_.SetInsertPoint(restore_block);
    llvm::Value* resume = b_.CreateLoad(i32_, ResumeOf());
    llvm::SwitchInst* resume_switch = b_.CreateSwitch(resume, next_block_, resume_points_.size());
    for (size_t k = 0; k < resume_points_.size(); ++k) {
      auto* restore = llvm::BasicBlock::Create(ctx_, "restore_point", fn_);
      resume_switch->addCase(b_.getInt32(static_cast<uint32_t>(k + 1)), restore);
      b_.SetInsertPoint(restore);
      for (const std::string& name : resume_live_[k]) {
        b_.CreateStore(b_.CreateTrunc(b_.CreateLoad(i64_, SavedOf(SavedIndex(name))), StorageType(name)),
                       Register(name));
      }
      b_.CreateBr(resume_points_[k]);
    }
    // The barriers' saves: what is live after each.
    for (auto& [block, point] : saves_) {
      b_.SetInsertPoint(block);
      for (const std::string& name : resume_live_[point - 1]) {
        b_.CreateStore(LoadRegister64(name), SavedOf(SavedIndex(name)));
      }
      b_.CreateStore(b_.getInt32(warp_ops_ > 0 ? point | kStopped : point), ResumeOf());
      b_.CreateStore(b_.getInt1(true), waiting_slot_);
      b_.CreateBr(next_block_);
    }
  }
  if (lanes_) {
    // Each chunk's registers start at 0: what an earlier chunk (other threads) left is
    // nothing to keep for lanes that do not write them, and LLVM then carries no vector
    // registers from one chunk to the next.
    llvm::IRBuilder<> at(start_block, start_block->getFirstInsertionPt());
    for (auto& [name, slot] : registers_) {
      at.CreateStore(llvm::Constant::getNullValue(slot->getAllocatedType()), slot);
    }
  }
  // Each code's saves in the same memory (run.cc sizes it): the more of the two.
  out->registers = std::max(out->registers, static_cast<uint32_t>(saved_index_.size()));
  if (lanes_) out->vector_registers = static_cast<uint32_t>(saved_index_.size());
  out->shared_bytes = shared_size_;
  out->barriers = barriers_ > 0;
  out->warp_level = warp_ops_ > 0;
  out->yields = !spin_loads_.empty();
  out->auto_interpreted = warp_ops_ > 0 && !loop_without_stops_;
  out->whole_warps = whole_warps_;
  out->warp_slots = warp_slots_;
  out->shadows = static_cast<uint32_t>(shadow_index_.size());

  // next: the following thread, x fastest (a chunk of lanes at once in vector code): past
  // the block's x extent x wraps to 0 and y steps, past its y extent z; after the last,
  // another phase if a thread waits at a barrier, else the count and success.
  b_.SetInsertPoint(next_block_);
  Tick();
  auto* last = llvm::BasicBlock::Create(ctx_, "last", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
  static const char* const kAxes[] = {"x", "y", "z"};
  for (int axis = 0; axis < 3; ++axis) {
    const uint32_t step = axis == 0 && lanes_ ? lanes_ : 1;
    llvm::Value* index = b_.CreateAdd(b_.CreateLoad(i32_, tid_slot_[axis]), b_.getInt32(step));
    auto* store = llvm::BasicBlock::Create(ctx_, std::string("store_") + kAxes[axis], fn_);
    auto* wrap = axis == 2 ? last : llvm::BasicBlock::Create(ctx_, std::string("wrap_") + kAxes[axis], fn_);
    b_.CreateCondBr(b_.CreateICmpULT(index, ntid_[axis]), store, wrap);
    b_.SetInsertPoint(store);
    b_.CreateStore(index, tid_slot_[axis]);
    b_.CreateBr(thread_block_);
    b_.SetInsertPoint(wrap);
    if (axis < 2) b_.CreateStore(b_.getInt32(0), tid_slot_[axis]);
  }
  if (warp_ops_ > 0) {
    // Every thread stopped or ended: Settle runs the warp-level operations the threads
    // stopped at (or releases the barrier), and the threads it lets go on run again.
    llvm::Value* settle = b_.CreateLoad(ptr_, Field(kOffSettle));
    auto* type = llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_}, false);
    llvm::Value* more = b_.CreateCall(type, settle, {context_, resume_arg_, saved_arg_});
    if (!spin_loads_.empty()) {
      // Threads let go from yields: the CTA yields its worker (RunCompiled calls it again).
      auto* yield = llvm::BasicBlock::Create(ctx_, "yield", fn_);
      auto* go_on = llvm::BasicBlock::Create(ctx_, "go_on", fn_);
      b_.CreateCondBr(b_.CreateICmpEQ(more, b_.getInt32(kSettleYield)), yield, go_on);
      b_.SetInsertPoint(yield);
      FlushCount();
      b_.CreateRet(b_.getInt32(kCtaYielded));
      b_.SetInsertPoint(go_on);
    }
    b_.CreateCondBr(b_.CreateICmpNE(more, b_.getInt32(0)), phase_block, done);
  } else if (barriers_ > 0) {
    b_.CreateCondBr(b_.CreateLoad(i1_, waiting_slot_), phase_block, done);
  } else {
    b_.CreateBr(done);
  }
  b_.SetInsertPoint(done);
  FlushCount();
  b_.CreateRet(b_.getInt32(0));
  return true;
}

// Vector code's barriers, once every one is known: a row's start clears the lanes waiting
// at each; `restore` (a later phase) puts each lane back at the barrier it waits at and
// runs on from the first of them (the others join at theirs, as lanes join at a label);
// each barrier's saves (the registers live after it, of the lanes that arrived) and
// restores (of the lanes that go on after it).
bool Emitter::FillLaneBarriers(llvm::BasicBlock* restore, llvm::BasicBlock* start, std::string* refused) {
  {
    llvm::IRBuilder<> at(start, start->getFirstInsertionPt());
    for (llvm::AllocaInst* waiting : resume_waiting_) at.CreateStore(Int(1, 0), waiting);
    at.CreateStore(Int(1, 0), done_slot_);
  }
  b_.SetInsertPoint(restore);
  // Registers start at 0, as at a row's start; each lane's live ones come back at its
  // barrier.
  for (auto& [name, slot] : registers_) {
    b_.CreateStore(llvm::Constant::getNullValue(slot->getAllocatedType()), slot);
  }
  std::string why;
  if (!Rematerialize(&why)) return Refuse("registers computed again after a barrier: " + why, 0, refused);
  llvm::Value* resume = b_.CreateAlignedLoad(Lanes(i32_), ResumeOf(), llvm::Align(4));
  b_.CreateStore(Int(1, 0), mask_slot_);
  for (auto& [label, slot] : pending_) b_.CreateStore(Int(1, 0), slot);
  for (auto& [branch, slot] : parked_) b_.CreateStore(Int(1, 0), slot);
  b_.CreateStore(b_.CreateICmpEQ(resume, Int(32, 0xffffffffu)), done_slot_);
  for (size_t k = 0; k < resume_waiting_.size(); ++k) {
    b_.CreateStore(b_.CreateICmpEQ(resume, Int(32, static_cast<uint32_t>(k + 1))), resume_waiting_[k]);
  }
  // Resume points are numbered in the code's order: the least is the first reached (an
  // ended lane's -1 is the greatest; all ended: the row is done).
  llvm::Value* first = b_.CreateIntMinReduce(resume, false);
  llvm::SwitchInst* points = b_.CreateSwitch(first, next_block_, resume_points_.size());
  for (size_t k = 0; k < resume_points_.size(); ++k) {
    points->addCase(b_.getInt32(static_cast<uint32_t>(k + 1)), resume_points_[k]);
  }
  for (const LaneStop& save : lane_saves_) {
    b_.SetInsertPoint(save.block);
    for (const std::string& name : resume_live_[save.point - 1]) {
      llvm::Value* value = LoadRegister(name);
      if (StorageBits(name) == 1) value = b_.CreateZExt(value, Lanes(b_.getInt8Ty()));
      b_.CreateMaskedStore(value, SavedLanesOf(name), llvm::Align(SavedBytes(name)), save.lanes);
    }
    b_.CreateBr(save.after);
  }
  for (const LaneStop& back : lane_restores_) {
    b_.SetInsertPoint(back.block);
    for (const std::string& name : resume_live_[back.point - 1]) {
      llvm::Type* type = Lanes(b_.getIntNTy(8 * SavedBytes(name)));
      llvm::Value* value = b_.CreateAlignedLoad(type, SavedLanesOf(name), llvm::Align(SavedBytes(name)));
      if (StorageBits(name) == 1) value = b_.CreateTrunc(value, StorageType(name));
      b_.CreateStore(b_.CreateSelect(back.lanes, value, LoadRegister(name)), Register(name));
    }
    b_.CreateBr(back.after);
  }
  return true;
}

// Where a row of vector code whose lanes all branched away or ended may go on: from after
// a statement, the next label, if no barrier and no loop's back edge lies between. Every
// other instruction does nothing for no lane (its stores and register writes are masked; a
// forward branch adds no lane to its label's), but a barrier restores the lanes waiting at
// it and a back edge lets go the lanes that left its loop: neither is passed over.
void Emitter::FindSkips() {
  skip_to_.assign(entry_.body.size(), kNoSkip);
  int target = kSkipToEnd;
  for (size_t p = entry_.body.size(); p-- > 0;) {
    const RawStatement& s = entry_.body[p];
    skip_to_[p] = target;
    if (s.kind == RawStatement::kLabel) {
      target = static_cast<int>(p);
    } else if (s.kind == RawStatement::kInstruction && (IsCtaBarrier(s) || IsWarpOperation(s) || parked_.count(&s))) {
      target = kNoSkip;
    }
  }
}

// After `s` (a label, a branch, an end), a row with no lane running jumps past the code up
// to the next label (FindSkips): the rows of a block whose lanes all went one way skip the
// other way's code instead of running it for no lane.
void Emitter::SkipIfNoLane(const RawStatement& s) {
  const int target = skip_to_.at(static_cast<size_t>(&s - entry_.body.data()));
  if (target == kNoSkip) return;
  llvm::BasicBlock* to = nullptr;
  if (target == kSkipToEnd) {
    if (lanes_end_ == nullptr) lanes_end_ = llvm::BasicBlock::Create(ctx_, "lanes_end", fn_);
    to = lanes_end_;
  } else {
    to = label_blocks_.at(entry_.body[static_cast<size_t>(target)].opcode);
  }
  auto* on = llvm::BasicBlock::Create(ctx_, "lanes_on", fn_);
  b_.CreateCondBr(AnyLane(b_.CreateLoad(Lanes(i1_), mask_slot_)), on, to);
  b_.SetInsertPoint(on);
}

// A saved register's bytes per lane in vector code: its width (a predicate's, one).
uint32_t Emitter::SavedBytes(const std::string& name) { return std::max<uint32_t>(StorageBits(name) / 8, 1); }

// Saved registers of vector code: a row of lanes keeps each register of its lanes side by
// side, at its width (SavedBytes), in the row's threads' place (theirs in scalar code's
// layout: saved_index_.size() words each), the widest first, so that each is aligned. At
// the width, not in 64-bit words: a 16 x 16 block whose barriers saved 29 registers, most
// of them 32-bit, wrote and read 58 KiB at each, more than the host's L1 holds.
llvm::Value* Emitter::SavedLanesOf(const std::string& name) {
  SavedIndex(name);  // saved_index_ made (and the row's place sized by it: out->registers)
  if (lane_saved_at_.empty()) {
    std::vector<std::pair<uint32_t, std::string>> by_width;
    for (const auto& [saved, index] : saved_index_) by_width.emplace_back(SavedBytes(saved), saved);
    std::sort(by_width.begin(), by_width.end(), [](const auto& x, const auto& y) {
      return x.first != y.first ? x.first > y.first : x.second < y.second;
    });
    uint64_t at = 0;
    for (const auto& [bytes, saved] : by_width) {
      lane_saved_at_[saved] = at;
      at += uint64_t{bytes} * lanes_;
    }
  }
  llvm::Value* base = b_.CreateMul(b_.CreateZExt(ThreadIndex(), i64_), b_.getInt64(saved_index_.size() * 8));
  return b_.CreateGEP(b_.getInt8Ty(), saved_arg_, b_.CreateAdd(base, b_.getInt64(lane_saved_at_.at(name))));
}

bool Emitter::Refuse(const std::string& why, int line, std::string* refused) {
  *refused = why + " (PTX line " + std::to_string(line) + ")";
  return false;
}

void Emitter::CountUses(const RawOperand& o) {
  if (!o.name.empty()) ++uses_[o.name];
  if (!o.pair.empty()) ++uses_[o.pair];
  for (const RawOperand& item : o.items) CountUses(item);
}

// This thread's index in its block, and its resume point and saved registers.
llvm::Value* Emitter::ThreadIndex() {
  return b_.CreateAdd(b_.CreateLoad(i32_, tid_slot_[0]),
                      b_.CreateMul(ntid_[0], b_.CreateAdd(b_.CreateLoad(i32_, tid_slot_[1]),
                                                          b_.CreateMul(ntid_[1], b_.CreateLoad(i32_, tid_slot_[2])))));
}

// A register's place among those any barrier saves.
uint32_t Emitter::SavedIndex(const std::string& name) {
  if (saved_index_.empty()) {
    for (const std::vector<std::string>& names : resume_live_) {
      for (const std::string& n : names) saved_index_.emplace(n, saved_index_.size());
    }
  }
  return saved_index_.at(name);
}

// Saved registers: thread-major, saved_index_.size() of them per thread (made once every
// barrier is known).
llvm::Value* Emitter::SavedOf(uint32_t index) {
  llvm::Value* base = b_.CreateMul(b_.CreateZExt(ThreadIndex(), i64_), b_.getInt64(saved_index_.size()));
  return b_.CreateGEP(i64_, saved_arg_, b_.CreateAdd(base, b_.getInt64(index)));
}

llvm::Value* Emitter::FieldAt(llvm::IRBuilder<>& at, uint64_t offset) {
  return at.CreateConstGEP1_64(at.getInt8Ty(), context_, offset);
}

void Emitter::FlushCount() {
  llvm::Value* at = Field(kOffInstructions);
  b_.CreateStore(b_.CreateAdd(b_.CreateLoad(i64_, at), b_.CreateLoad(i64_, count_slot_)), at);
}

// Whether no plain store reaches a module variable's memory: at [name+offset], or through a
// register holding what is made from a variable's address or read through it (mov of its
// name, arithmetic on it, a load from it: a flow-insensitive closure over the body).
// Module variables hold what the threads share (counters, tables: `table[i % 3] += 1`),
// and threads that load and store one word, run one after another here, would each see
// the others' stores, where the interpreter's lanes of a warp load together and then store
// together, as a GPU's do. Such kernels stay on the interpreter; loads of the variables and
// atomics on them (whose sums no order changes) are taken.
bool Emitter::CheckVariableStores(std::string* why, int* line) {
  auto variable = [&](const std::string& name) {
    uint64_t address = 0;
    return !name.empty() && !NamesRegister(name) && SharedSymbol(name) < 0 && LocalSymbol(name) < 0 &&
           GlobalSymbol(name, &address);
  };
  std::set<std::string> derived;
  auto reaches = [&](const RawOperand& o) {
    return (o.kind == RawOperand::kName || o.kind == RawOperand::kAddress) &&
           (derived.count(o.name) > 0 || variable(o.name));
  };
  auto opcode = [](const RawStatement& s) { return std::string_view(s.opcode).substr(0, s.opcode.find('.')); };
  // Each pass adds a register or ends; a chain longer than this is refused rather than
  // followed (bounded work per compile).
  constexpr int kMaxPasses = 64;
  bool changed = true;
  for (int pass = 0; changed; ++pass) {
    if (pass == kMaxPasses) return (*why = "addresses of module variables through a long chain of registers", false);
    changed = false;
    for (const RawStatement& s : entry_.body) {
      if (s.kind != RawStatement::kInstruction || s.operands.empty()) continue;
      const std::string_view op = opcode(s);
      if (op == "st" || op == "red" || op == "bra" || op == "call") continue;
      const RawOperand& dest = s.operands[0];
      if (dest.kind != RawOperand::kName || dest.name.empty() || !NamesRegister(dest.name) ||
          derived.count(dest.name)) {
        continue;
      }
      for (size_t i = 1; i < s.operands.size(); ++i) {
        if (reaches(s.operands[i])) {
          derived.insert(dest.name);
          changed = true;
          break;
        }
      }
    }
  }
  for (const RawStatement& s : entry_.body) {
    if (s.kind != RawStatement::kInstruction || s.operands.empty() || opcode(s) != "st") continue;
    if (s.operands[0].kind == RawOperand::kAddress && reaches(s.operands[0])) {
      *line = s.line;
      *why =
          "a store to a module variable's memory (threads that load and store one word would see each "
          "other's stores, where a warp's lanes load together)";
      return false;
    }
  }
  return true;
}

}  // namespace gpupool::sim::jit

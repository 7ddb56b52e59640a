// An instruction under its guard (emitter.h): branches, thread ends and barriers (in scalar
// and in vector code), the watchdog's progress at back edges, and the dispatch of the rest
// by opcode.
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>

#include <algorithm>

#include "remote/ptx/ir/opcodes.h"
#include "remote/ptx/jit/emitter.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim::jit {

// `steps` of the watchdog's budget (a back edge of vector code is one per lane); when it
// runs out, progress.
void Emitter::Tick(uint32_t steps) {
  llvm::Value* budget = b_.CreateSub(b_.CreateLoad(i64_, budget_slot_), b_.getInt64(steps));
  b_.CreateStore(budget, budget_slot_);
  auto* report = llvm::BasicBlock::Create(ctx_, "progress", fn_);
  auto* on = llvm::BasicBlock::Create(ctx_, "ticked", fn_);
  b_.CreateCondBr(b_.CreateICmpSLE(budget, b_.getInt64(0)), report, on,
                  llvm::MDBuilder(ctx_).createBranchWeights(1, 1000));
  b_.SetInsertPoint(report);
  b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add, b_.CreateLoad(ptr_, Field(kOffProgress)), b_.getInt64(1),
                     llvm::MaybeAlign(8), llvm::AtomicOrdering::Monotonic);
  b_.CreateStore(b_.getInt64(kProgressEvery), budget_slot_);
  // The launch's cancel flag (LaunchSpec::cancel), read as often as progress is told:
  // a kernel that never ends is ended here.
  auto* cancelled = llvm::BasicBlock::Create(ctx_, "cancelled", fn_);
  llvm::LoadInst* flag = b_.CreateLoad(b_.getInt8Ty(), b_.CreateLoad(ptr_, Field(kOffCancel)));
  flag->setAtomic(llvm::AtomicOrdering::Monotonic);
  flag->setAlignment(llvm::Align(1));
  b_.CreateCondBr(b_.CreateICmpNE(flag, b_.getInt8(0)), cancelled, on,
                  llvm::MDBuilder(ctx_).createBranchWeights(1, 1000));
  b_.SetInsertPoint(cancelled);
  b_.CreateRet(b_.getInt32(kLaunchTimeout));
  b_.SetInsertPoint(on);
}

// ret/exit: the thread ends (with barriers: it no longer takes part in them); in vector
// code, the running lanes at the code's end.
void Emitter::Exit() {
  if (barriers_ > 0 && lanes_) {
    EndLanes(Mask());
  } else if (barriers_ > 0) {
    b_.CreateStore(b_.getInt32(-1), ResumeOf());
  }
  b_.CreateBr(next_block_);
}

// Whether any of `lanes` (a mask of vector code) is set.
llvm::Value* Emitter::AnyLane(llvm::Value* lanes) {
  return b_.CreateICmpNE(b_.CreateBitCast(lanes, b_.getIntNTy(lanes_)), b_.getIntN(lanes_, 0));
}

// Lanes of vector code with barriers that end: they no longer take part in barriers.
void Emitter::EndLanes(llvm::Value* lanes) {
  b_.CreateMaskedStore(Int(32, 0xffffffffu), ResumeOf(), llvm::Align(4), lanes);
  b_.CreateStore(b_.CreateOr(b_.CreateLoad(Lanes(i1_), done_slot_), lanes), done_slot_);
}

// bar.sync of vector code. The running lanes stop here: their registers live after it are
// saved (FillLaneBarriers), their resume point set, and the row goes on without them, so
// that lanes waiting further on (at a label, after a loop, at a later barrier) still reach
// their own next barrier or end in this phase, as each thread of scalar code does; once
// every lane of the row stopped or ended, the next row. Lanes that stopped here in the
// last phase go on from here (restored), joining the running ones as at a label.
void Emitter::VectorBarrier() {
  const uint32_t point = static_cast<uint32_t>(resume_points_.size() + 1);
  std::vector<std::string> kept;  // the live registers not computed again (rematerialized_)
  for (const std::string& name : barrier_live_.at(instruction_index_)) {
    if (!rematerialized_.count(name)) kept.push_back(name);
  }
  resume_live_.push_back(std::move(kept));
  llvm::IRBuilder<> at(alloca_point_);
  llvm::AllocaInst* waiting = at.CreateAlloca(Lanes(i1_));
  resume_waiting_.push_back(waiting);
  llvm::Value* arrived = b_.CreateLoad(Lanes(i1_), mask_slot_);
  auto* save = llvm::BasicBlock::Create(ctx_, "lanes_save", fn_);
  auto* saved = llvm::BasicBlock::Create(ctx_, "lanes_saved", fn_);
  auto* resume = llvm::BasicBlock::Create(ctx_, "lanes_resume", fn_);
  auto* restore = llvm::BasicBlock::Create(ctx_, "lanes_restore", fn_);
  auto* merged = llvm::BasicBlock::Create(ctx_, "lanes_merged", fn_);
  resume_points_.push_back(resume);
  b_.CreateCondBr(AnyLane(arrived), save, resume);
  lane_saves_.push_back({save, point, arrived, saved});
  b_.SetInsertPoint(saved);
  b_.CreateMaskedStore(Int(32, point), ResumeOf(), llvm::Align(4), arrived);
  b_.CreateStore(b_.getInt1(true), waiting_slot_);
  llvm::Value* done = b_.CreateOr(b_.CreateLoad(Lanes(i1_), done_slot_), arrived);
  b_.CreateStore(done, done_slot_);
  b_.CreateStore(Int(1, 0), mask_slot_);
  b_.CreateCondBr(b_.CreateAndReduce(done), next_block_, resume);
  b_.SetInsertPoint(resume);
  llvm::Value* going = b_.CreateLoad(Lanes(i1_), waiting);
  b_.CreateCondBr(AnyLane(going), restore, merged);
  lane_restores_.push_back({restore, point, going, merged});
  b_.SetInsertPoint(merged);
  b_.CreateStore(b_.CreateOr(b_.CreateLoad(Lanes(i1_), mask_slot_), going), mask_slot_);
  b_.CreateStore(Int(1, 0), waiting);
}

// An instruction of vector code: branches and ends move lanes between the running mask
// and the labels' waiting masks (no host branch); the rest runs on the running lanes its
// guard keeps.
bool Emitter::VectorInstruction(const RawStatement& s, const std::vector<std::string_view>& parts, llvm::Value* guard,
                                std::string* refused) {
  const std::string_view op = parts[0];
  auto refuse = [&](const std::string& text) { return Refuse(s.opcode + ": " + text, s.line, refused); };
  llvm::Value* running = b_.CreateLoad(Lanes(i1_), mask_slot_);
  llvm::Value* lanes = guard ? b_.CreateAnd(running, guard) : running;
  if (op == "bra") {
    auto pending = s.operands.size() == 1 ? pending_.find(s.operands[0].name) : pending_.end();
    if (pending == pending_.end()) return refuse("a branch target it does not take");
    llvm::Value* stay = b_.CreateAnd(running, b_.CreateNot(lanes));
    if (auto parked = parked_.find(&s); parked != parked_.end() && seen_labels_.count(pending->first)) {
      // A loop's back edge: while any lane loops, the code runs again from the loop's head
      // with those lanes, and the others wait here (lanes that leave a loop, each after its
      // own trip count); when none loops, the waiting ones go on together.
      llvm::Value* waiting = b_.CreateOr(b_.CreateLoad(Lanes(i1_), parked->second), stay);
      llvm::Value* any = AnyLane(lanes);
      auto* back = llvm::BasicBlock::Create(ctx_, "back", fn_);
      auto* leave = llvm::BasicBlock::Create(ctx_, "loop_done", fn_);
      b_.CreateCondBr(any, back, leave);
      b_.SetInsertPoint(back);
      b_.CreateStore(waiting, parked->second);
      b_.CreateStore(lanes, mask_slot_);
      Tick(lanes_);
      b_.CreateBr(loop_heads_.at(pending->first));
      b_.SetInsertPoint(leave);
      b_.CreateStore(waiting, mask_slot_);
      b_.CreateStore(Int(1, 0), parked->second);
      return true;
    }
    b_.CreateStore(b_.CreateOr(b_.CreateLoad(Lanes(i1_), pending->second), lanes), pending->second);
    b_.CreateStore(stay, mask_slot_);
    SkipIfNoLane(s);
    return true;
  }
  if (op == "ret" || op == "exit") {
    if (barriers_ > 0) EndLanes(lanes);
    b_.CreateStore(b_.CreateAnd(running, b_.CreateNot(lanes)), mask_slot_);
    SkipIfNoLane(s);
    return true;
  }
  if (op == "bar" || op == "barrier") {
    // The forms scalar code takes (which compiled first): bar.sync / barrier.sync
    // (.aligned) of a constant ID, under no guard.
    const bool sync =
        parts.size() >= 2 && parts[1] == "sync" && (parts.size() == 2 || (parts.size() == 3 && parts[2] == "aligned"));
    if (!sync || guard != nullptr || s.operands.size() != 1 || s.operands[0].kind != RawOperand::kInt) {
      return refuse("a barrier form the tier does not take");
    }
    VectorBarrier();
    return true;
  }
  if (IsWarpOperation(s)) return refuse("a warp-level operation in vector code");
  std::string why;
  op_mask_ = lanes;
  op_guard_ = guard;
  const bool done = Operation(s, parts, &why);
  op_mask_ = nullptr;
  op_guard_ = nullptr;
  return done || refuse(why);
}

bool Emitter::Instruction(const RawStatement& s, std::string* refused) {
  std::vector<std::string_view> parts = SplitOpcode(s.opcode);
  const std::string_view op = parts[0];
  std::string why;
  auto refuse = [&](const std::string& text) { return Refuse(s.opcode + ": " + text, s.line, refused); };
  // The opcode table's jit column is this dispatch's list: an opcode it does not mark is
  // left to the interpreter here, whatever branch below might match its name.
  const bool too_deep = s.opcode == kCallsTooDeepOpcode;
  const bool runtime = s.opcode == kMallocOpcode || s.opcode == kFreeOpcode || s.opcode == kPrintfOpcode ||
                       s.opcode == kAssertOpcode || s.opcode == kSetConditionalOpcode;
  if (!too_deep && !runtime && !JitHasEmitter(op))
    return refuse("an opcode the tier has no emitter for (ir/opcodes.def)");
  // Count it (each running thread), then run it under its guard.
  llvm::Value* counted = b_.getInt64(1);
  if (lanes_) {
    llvm::Value* bits = b_.CreateBitCast(b_.CreateLoad(Lanes(i1_), mask_slot_), b_.getIntNTy(lanes_));
    counted = b_.CreateZExt(b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, bits), i64_);
  }
  b_.CreateStore(b_.CreateAdd(b_.CreateLoad(i64_, count_slot_), counted), count_slot_);
  llvm::Value* guard = nullptr;
  if (!s.guard.empty()) {
    if (IsSpecialRegisterName(s.guard) || !NamesRegister(s.guard)) return refuse("guard " + s.guard);
    guard = FromStorage(LoadRegister(s.guard), StorageBits(s.guard), Type{Kind::kPred, 1});
    if (s.guard_negated) guard = b_.CreateNot(guard);
  }
  if (too_deep) {
    // A call nested deeper than kMaxCallDepth (InlineCalls): the launch fails here, as the
    // decoder's trap fails it (CallsTooDeepDetail, with this line).
    if (lanes_) return refuse("a call nested too deep, in vector code");
    b_.CreateStore(b_.getInt32(static_cast<uint32_t>(s.line)), Field(kOffTrapLine));
    FlushCount();
    b_.CreateRet(b_.getInt32(kLaunchFailed));
    return true;
  }
  if (op == "trap" || op == "brkpt") {
    Trap(guard);
    return true;
  }
  if (runtime) return RuntimeCall(s, guard, refused);
  if (lanes_) return VectorInstruction(s, parts, guard, refused);
  if (op == "bra") {
    if (s.operands.size() != 1 || s.operands[0].kind != RawOperand::kName || !labels_.count(s.operands[0].name)) {
      return refuse("a branch target it does not take");
    }
    llvm::BasicBlock* target = labels_[s.operands[0].name];
    // A loop's back edge: a thread may spin here for long.
    if (seen_labels_.count(s.operands[0].name)) Tick();
    if (guard == nullptr) {
      b_.CreateBr(target);
    } else {
      auto* fall = llvm::BasicBlock::Create(ctx_, "fall", fn_);
      b_.CreateCondBr(guard, target, fall);
      b_.SetInsertPoint(fall);
    }
    return true;
  }
  if (op == "ret" || op == "exit") {
    if (guard == nullptr) {
      Exit();
    } else {
      auto* fall = llvm::BasicBlock::Create(ctx_, "fall", fn_);
      auto* leave = llvm::BasicBlock::Create(ctx_, "leave", fn_);
      b_.CreateCondBr(guard, leave, fall);
      b_.SetInsertPoint(leave);
      Exit();
      b_.SetInsertPoint(fall);
    }
    return true;
  }
  if (IsWarpOperation(s)) {
    if (guard != nullptr) return refuse("a warp-level operation under a guard");
    return WarpOperation(s, parts, &why) || refuse(why);
  }
  if (op == "bar" || op == "barrier") {
    // bar.sync / barrier.sync (.aligned) ID: a barrier of every thread of the CTA. Not a
    // count of threads, arrive or red (producer-consumer patterns, left to the
    // interpreter), nor one under a guard.
    const bool sync =
        parts.size() >= 2 && parts[1] == "sync" && (parts.size() == 2 || (parts.size() == 3 && parts[2] == "aligned"));
    if (!sync || guard != nullptr || s.operands.size() != 1 || s.operands[0].kind != RawOperand::kInt) {
      return refuse("a barrier form the tier does not take");
    }
    Stop(WarpOp{});
    return true;
  }
  if (spin_loads_.count(instruction_index_)) {
    // A load a thread may spin on: the thread stops before it (its registers live there
    // saved), and once the CTA's other threads stopped or ended, the CTA yields its worker
    // (Settle), which runs the others it holds, one of which may be what this thread waits
    // for; back, the thread loads. Not under a guard (a stop is every thread's).
    if (guard != nullptr) return refuse("a load a thread may spin on, under a guard");
    WarpOp yield;
    yield.kind = WarpOp::kYield;
    Stop(yield);
  }
  llvm::BasicBlock* after = nullptr;
  if (guard != nullptr) {
    auto* run = llvm::BasicBlock::Create(ctx_, "guarded", fn_);
    after = llvm::BasicBlock::Create(ctx_, "after", fn_);
    b_.CreateCondBr(guard, run, after);
    b_.SetInsertPoint(run);
  }
  if (!Operation(s, parts, &why)) return refuse(why);
  if (after != nullptr) {
    b_.CreateBr(after);
    b_.SetInsertPoint(after);
  }
  return true;
}

bool Emitter::Operation(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  const std::string_view op = parts[0];
  const Type t = TypeOf(parts.back());
  const std::vector<RawOperand>& o = s.operands;
  auto need = [&](size_t n) {
    if (o.size() == n) return true;
    *why = "expected " + std::to_string(n) + " operands";
    return false;
  };
  // Qualifiers between the opcode and the type.
  std::vector<std::string_view> q(parts.begin() + 1, parts.end() - (parts.size() > 1 ? 1 : 0));

  if (op == "cp") return AsyncCopy(s, parts, why);
  if (op == "membar" || op == "fence") return Fence(parts, why);
  if (op == "prefetch" || op == "prefetchu" || op == "discard" || op == "applypriority") {
    // Cache hints: the sim has no caches, and the interpreter checks no address of theirs.
    return true;
  }
  if (op == "griddepcontrol") {
    // Programmatic dependent launch: a grid starts once the one before it completed.
    return true;
  }
  if (op == "nanosleep") {
    // A sleep of at most the time given (none, as on the interpreter): a thread waiting
    // in a loop for another yields at its load instead (a spin load: emit_kernel.cc).
    return true;
  }
  if (op == "ld" || op == "ldu" || op == "st") {
    // ldu: a load of memory no thread writes during the kernel, which ld reads as well.
    const bool load = op != "st";
    if (!t.ok() || t.kind == Kind::kPred) return (*why = "type", false);
    std::string_view space = "generic";
    uint32_t vec = 1;
    bool ordering = false, acquire = false, release = false;
    for (std::string_view qual : q) {
      // .cg reads past the L1: how code polls a flag another block sets (CUB's look-back
      // loaded its tile status so), so in a loop it is taken as one a thread may spin on.
      if (qual == "cg") ordering = true;
      if (IsOrderingQualifier(qual)) {
        ordering = true;
        acquire |= qual == "acquire";
        release |= qual == "release";
      } else if (qual == "global" || qual == "param" || qual == "shared" || qual == "local") {
        space = qual;
      } else if (qual == "const" && load) {
        // Constant memory is module variables in global memory: the interpreter reads
        // ld.const as a global load (Address, Space::kConst), checked against the same
        // allocations. (st.const always faults there: left to it.)
        space = "global";
      } else if (qual == "v2" || qual == "v4") {
        vec = qual == "v2" ? 2 : 4;
      } else if (!IsCacheHint(qual)) {
        *why = "qualifier ." + std::string(qual);
        return false;
      }
    }
    if ((acquire && !load) || (release && load)) return (*why = "form", false);
    if (ordering && load && !spin_loads_.count(instruction_index_) && InsideLoop(entry_, instruction_index_)) {
      return (*why = "a load a thread may spin on, inside a loop, in vector code", false);
    }
    // .release: no earlier access moves after the store; .acquire: no later one before the
    // load (CTAs run on two host threads).
    if (release) b_.CreateFence(llvm::AtomicOrdering::Release);
    auto done = [&](bool ok) {
      if (ok && acquire) b_.CreateFence(llvm::AtomicOrdering::Acquire);
      return ok;
    };
    if (!need(2)) return false;
    const RawOperand& address = load ? o[1] : o[0];
    const RawOperand& value = load ? o[0] : o[1];
    if (address.kind != RawOperand::kAddress) return (*why = "address operand", false);
    // A .param variable a function declares (a call's argument or result) is the
    // thread's local memory, as the decoder places it: ld/st.param of it are local accesses.
    if (space == "param" && !address.name.empty() && LocalSymbol(address.name) >= 0) space = "local";
    if (lanes_ && space == "local") return (*why = "local memory in vector code", false);
    if (vec > 1) return done(VectorAccess(address, space, t, vec, load, ordering, value, why));
    const uint32_t size = t.bits / 8;
    if (space == "param") {
      llvm::Value* at = ParamAddress(address, size, load, why);
      if (at == nullptr) return false;
      llvm::Value* v = Splat(b_.CreateAlignedLoad(ScalarType(t), at, llvm::MaybeAlign(1)));
      return done(Dest(value, v, t, why));
    }
    if (lanes_) return done(VectorMemory(address, space, t, load, value, why));
    llvm::Value* host = Address(address, space, size, load ? "load" : "store", why);
    if (host == nullptr) return false;
    if (load) {
      llvm::LoadInst* v = b_.CreateAlignedLoad(LlvmType(t), host, llvm::MaybeAlign(1));
      return done(Dest(value, v, t, why));
    }
    llvm::Value* v = Source(value, t, why);
    if (v == nullptr) return false;
    b_.CreateAlignedStore(v, host, llvm::MaybeAlign(1));
    return true;
  }
  if (op == "atom" || op == "red") return Atomic(s, parts, why);
  if (op == "tex" || op == "tld4" || op == "txq" || op == "suld" || op == "sust" || op == "suq") {
    return Texture(s, parts, why);
  }
  if (op == "mov") {
    if (!t.ok() || !need(2) || !q.empty()) return (*why = why->empty() ? "form" : *why, false);
    if (o[0].kind == RawOperand::kVector || o[1].kind == RawOperand::kVector) return MovPair(o, t, why);
    llvm::Value* v = Source(o[1], t, why);
    return v != nullptr && Dest(o[0], v, t, why);
  }
  if (op == "cvta") {
    // cvta.to.global / cvta.global: global addresses are generic ones.
    if (!need(2) || !t.is_int() || (t.bits != 64 && t.bits != 32)) return (*why = "form", false);
    const bool to = std::find(q.begin(), q.end(), "to") != q.end();
    llvm::Value* v = Source(o[1], t, why);
    if (v == nullptr) return false;
    if (std::find(q.begin(), q.end(), "global") != q.end()) {
      if (t.bits != 64) return (*why = "a 32-bit global address", false);
      return Dest(o[0], v, t, why);
    }
    const bool local = std::find(q.begin(), q.end(), "local") != q.end();
    if (!local && std::find(q.begin(), q.end(), "shared") == q.end()) {
      return (*why = "a window other than global, shared or local", false);
    }
    // As the interpreter: to generic adds the window to the (32-bit: zero-extended)
    // offset, from generic subtracts it; a 32-bit result keeps the low half.
    const uint64_t start = local ? kLocalWindow : kSharedWindow;
    llvm::Value* wide = b_.CreateZExtOrTrunc(v, i64_);
    if (!to) return Dest(o[0], b_.CreateAdd(wide, b_.getInt64(start)), Type{Kind::kUnsigned, 64}, why);
    llvm::Value* r = b_.CreateSub(wide, b_.getInt64(start));
    return Dest(o[0], b_.CreateZExtOrTrunc(r, LlvmType(t)), t, why);
  }
  if (const PtxType whole = ParsePtxType(parts.back());
      whole.kind == PtxKind::kHalf || whole.kind == PtxKind::kBFloat) {
    // f16/bf16 and their pairs (emit_half.cc); atom and the rest stay refused.
    if (op == "setp") return HalfSetp(s, q, whole, why);
    if (op == "set") return HalfSet(s, q, whole, why);
    if (op != "cvt" && op != "mov" && op != "ld" && op != "st" && op != "atom" && op != "red" && op != "set") {
      return HalfArithmetic(s, op, q, whole, why);
    }
  }
  if (op == "setp") {
    return Setp(s, q, t, why);
  }
  if (op == "selp") {
    if (!t.ok() || !need(4)) return false;
    llvm::Value* a = Source(o[1], t, why);
    llvm::Value* c = Source(o[2], t, why);
    llvm::Value* p = Source(o[3], Type{Kind::kPred, 1}, why);
    if (!a || !c || !p) return false;
    return Dest(o[0], b_.CreateSelect(p, a, c), t, why);
  }
  if (op == "cvt") return Cvt(s, parts, why);
  if (op == "vabsdiff4" || op == "vabsdiff2") return AbsoluteDifferences(s, parts, why);
  if (op == "prmt") {
    // prmt.b32{.mode}: the mode follows the type.
    std::vector<std::string_view> modes(parts.begin() + std::min<size_t>(parts.size(), 2), parts.end());
    return BitField(s, op, modes, parts.size() >= 2 ? TypeOf(parts[1]) : Type{}, why);
  }
  if (t.is_int()) return Integer(s, op, q, t, why);
  if (t.kind == Kind::kFloat) return Float(s, op, q, t, why);
  if (t.kind == Kind::kPred && (op == "and" || op == "or" || op == "xor" || op == "not")) {
    return Integer(s, op, q, t, why);
  }
  *why = "an instruction the tier does not take";
  return false;
}

// trap and brkpt: the launch fails where a thread (a running lane of vector code) reaches
// one under its guard, as the interpreter's trap fails it (CUDA_ERROR_LAUNCH_FAILED, the
// detail "trap": Context::trap_line -1).
void Emitter::Trap(llvm::Value* guard) {
  llvm::Value* taken = guard;
  if (lanes_) {
    llvm::Value* running = b_.CreateLoad(Lanes(i1_), mask_slot_);
    taken = AnyLane(guard != nullptr ? b_.CreateAnd(running, guard) : running);
  }
  auto* trap = llvm::BasicBlock::Create(ctx_, "trap", fn_);
  auto* fall = llvm::BasicBlock::Create(ctx_, "no_trap", fn_);
  if (taken != nullptr) {
    b_.CreateCondBr(taken, trap, fall);
  } else {
    b_.CreateBr(trap);
  }
  b_.SetInsertPoint(trap);
  b_.CreateStore(b_.getInt32(static_cast<uint32_t>(-1)), Field(kOffTrapLine));
  FlushCount();
  b_.CreateRet(b_.getInt32(kLaunchFailed));
  // Unreached after an unguarded trap; the code after it is emitted there.
  b_.SetInsertPoint(fall);
}

// membar.{cta,gl,sys}, fence{.sc,.acq_rel}.{cta,gpu,sys}: the CTAs of a launch run on two
// host threads at once, so that a fence beyond the CTA is a host fence: sequentially
// consistent where PTX's is (.sc, membar; the interpreter's HFenceSc), else acquire-release
// (nothing on x86-64, but LLVM moves no access across it). Not the proxy and mbarrier
// fences (fence.proxy.*, fence.mbarrier_init).
bool Emitter::Fence(const std::vector<std::string_view>& parts, std::string* why) {
  const bool membar = parts[0] == "membar";
  std::string_view sem = membar ? "sc" : "acq_rel", scope;
  for (size_t i = 1; i < parts.size(); ++i) {
    std::string_view qual = parts[i];
    if (!membar && i == 1 && (qual == "sc" || qual == "acq_rel") && parts.size() == 3) {
      sem = qual;
    } else if (i + 1 == parts.size() && (membar ? qual == "cta" || qual == "gl" || qual == "sys"
                                                : qual == "cta" || qual == "gpu" || qual == "sys")) {
      scope = qual;
    } else {
      return (*why = "a fence form the tier does not take", false);
    }
  }
  if (scope.empty()) return (*why = "a fence without a scope", false);
  const bool sc = sem == "sc" && scope != "cta";
  b_.CreateFence(sc ? llvm::AtomicOrdering::SequentiallyConsistent : llvm::AtomicOrdering::AcquireRelease);
  return true;
}

}  // namespace gpupool::sim::jit

// Warp-level operations in scalar code (emitter.h): shfl.sync, vote.sync, redux.sync,
// match.sync, activemask and bar.warp.sync. A thread stops at one as at a barrier (its live registers saved, its
// operands in its warp slots); once every thread of the CTA stopped, Settle (run.cc) runs
// the operation for the lanes the interpreter runs it with and writes each lane's results
// into its slots, and those threads go on from there, the results in their registers.
//
// The interpreter runs a warp's lanes in step, the lanes at the lowest instruction first
// (interp/scheduler.cc). Settle picks among the operations the warp's threads stopped at
// the same way, which is the interpreter's choice only when no thread can still reach an
// operation from code placed after it: CheckWarpOperations refuses kernels where one can.
// A shuffle also reads lanes that do not run it (the interpreter's register of that lane,
// whatever it last held): the registers shuffles read are kept per lane in Context::shadow,
// written with every write of the register.
#include <algorithm>
#include <cstdint>
#include <deque>

#include "remote/ptx/jit/emitter.h"

namespace gpupool::sim::jit {

namespace {

std::string_view OpcodeName(const RawStatement& s) { return std::string_view(s.opcode).substr(0, s.opcode.find('.')); }

// The special registers the interpreter's hoisting counts as the same in every CTA
// (interp/hoist.cc), and so a register computed from them only once per warp.
bool InvariantSpecial(const std::string& name) {
  switch (DecodeSpecialRegister(name).reg) {
    case SpecialRegister::kTid:
    case SpecialRegister::kNtid:
    case SpecialRegister::kNctaid:
    case SpecialRegister::kLaneid:
    case SpecialRegister::kWarpid:
    case SpecialRegister::kNwarpid:
    case SpecialRegister::kNsmid:
    case SpecialRegister::kGridid:
    case SpecialRegister::kLanemaskEq:
    case SpecialRegister::kLanemaskLt:
    case SpecialRegister::kLanemaskLe:
    case SpecialRegister::kLanemaskGt:
    case SpecialRegister::kLanemaskGe:
    case SpecialRegister::kEnvreg:
      return true;
    default:
      return false;
  }
}

}  // namespace

// The registers `s` writes: its first operand's (and its pair's, or a vector's elements).
std::vector<std::string> Written(const RawStatement& s) {
  const std::string_view op = OpcodeName(s);
  std::vector<std::string> names;
  if (s.operands.empty() || op == "st" || op == "red" || op == "bra" || op == "ret" || op == "exit" || op == "bar" ||
      op == "barrier") {
    return names;
  }
  auto add = [&](const std::string& name) {
    // A %name, or a register of inline assembly's scope (named lo#12 by the parser).
    const bool register_name = !name.empty() && (name[0] == '%' || name.find('#') != std::string::npos);
    if (register_name && !IsSpecialRegisterName(name)) names.push_back(name);
  };
  const RawOperand& d = s.operands[0];
  if (d.kind == RawOperand::kName) {
    add(d.name);
    add(d.pair);
  } else if (d.kind == RawOperand::kVector) {
    for (const RawOperand& item : d.items) add(item.name);
  }
  return names;
}

bool IsWarpOperation(const RawStatement& s) {
  const std::string_view op = OpcodeName(s);
  return op == "shfl" || op == "vote" || op == "redux" || op == "match" || op == "activemask" ||
         s.opcode.rfind("bar.warp", 0) == 0 || IsMatrixOperation(s);
}

bool IsOrderedLoad(const RawStatement& s) {
  const std::vector<std::string_view> parts = SplitOpcode(s.opcode);
  if (parts.empty() || (parts[0] != "ld" && parts[0] != "ldu")) return false;
  return std::any_of(parts.begin() + 1, parts.end(),
                     [](std::string_view q) { return q == "cg" || IsOrderingQualifier(q); });
}

bool IsCtaBarrier(const RawStatement& s) {
  const std::string_view op = OpcodeName(s);
  return (op == "bar" || op == "barrier") && !IsWarpOperation(s);
}

// Refuses (false, *why) kernels whose warp-level operations the scheduler of Settle would
// run with other lanes than the interpreter:
//  - one under a guard;
//  - one a thread can reach, since its last stop (the start, a barrier, a warp-level
//    operation), through an instruction placed at or after it: the interpreter may then run
//    it before that thread arrives, Settle waits for it (not a matrix operation, which the
//    interpreter too runs only once the warp's other ready lanes stopped);
//  - in a kernel with a backward branch, one without a membermask of all 32 lanes
//    (activemask, a mask in a register set otherwise): a lane spinning in a loop while the
//    others wait is set aside by the interpreter after 1024 rounds, and the others run
//    ahead through what does not wait for it;
//  - a shuffle of a register the interpreter may compute once per warp before the CTA
//    runs (hoist.cc: its value is then in lanes that never ran its instruction), unless
//    every thread runs its instruction first (the kernel is then compiled for launches of
//    whole warps only), or not of a 32-bit register or an immediate; the same for the
//    registers a matrix operation reads from every lane.
// Gives each register a shuffle or a matrix operation reads its shadow index, and notes whether a loop (placed
// between a backward branch and its target) holds no warp-level operation.
bool Emitter::CheckWarpOperations(std::string* why, int* line) {
  std::vector<const RawStatement*> code;
  std::map<std::string, size_t> label_at;
  // The instructions every thread runs first, in order (before the first label, branch,
  // end or stop).
  size_t straight = SIZE_MAX;
  for (const RawStatement& s : entry_.body) {
    if (s.kind == RawStatement::kLabel) {
      label_at[s.opcode] = code.size();
      straight = std::min(straight, code.size());
    }
    if (s.kind != RawStatement::kInstruction) continue;
    const std::string_view op = OpcodeName(s);
    if (op == "bra" || op == "ret" || op == "exit" || IsWarpOperation(s) || IsCtaBarrier(s)) {
      straight = std::min(straight, code.size());
    }
    code.push_back(&s);
  }
  const size_t n = code.size();
  std::vector<std::vector<size_t>> previous(n);
  bool backward = false;
  std::map<std::string, std::vector<size_t>> defs;
  for (size_t i = 0; i < n; ++i) {
    const RawStatement& s = *code[i];
    const std::string_view op = OpcodeName(s);
    const bool ends = op == "ret" || op == "exit";
    if (op == "bra" && !s.operands.empty()) {
      if (auto it = label_at.find(s.operands[0].name); it != label_at.end() && it->second < n) {
        previous[it->second].push_back(i);
        if (it->second <= i) backward = true;
      }
      if (!s.guard.empty() && i + 1 < n) previous[i + 1].push_back(i);
      if (auto it = label_at.find(s.operands[0].name); it != label_at.end() && it->second <= i) {
        bool stops = false;
        for (size_t k = it->second; k <= i; ++k) stops = stops || IsWarpOperation(*code[k]);
        loop_without_stops_ = loop_without_stops_ || !stops;
      }
    } else if ((!ends || !s.guard.empty()) && i + 1 < n) {
      previous[i + 1].push_back(i);
    }
    for (const std::string& d : Written(s)) defs[d].push_back(i);
  }
  // Registers the interpreter may compute before the CTA runs: written once, unguarded, by
  // a mov of no register, or by an instruction without memory or warp-level effects whose
  // sources are such registers, invariant special registers or no registers at all
  // (hoist.cc's copies and invariants; more than it takes, never fewer).
  std::set<std::string> once;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      const RawStatement& s = *code[i];
      const std::string_view op = OpcodeName(s);
      const std::vector<std::string> written = Written(s);
      if (!s.guard.empty() || written.empty()) continue;
      const bool param = s.opcode.find(".param") != std::string::npos;
      if (op == "bra" || op == "st" || op == "red" || op == "atom" || op == "bar" || op == "barrier" || op == "ret" ||
          op == "exit" || op == "cp" || op == "membar" || op == "fence" || IsWarpOperation(s) ||
          ((op == "ld" || op == "ldu") && !param)) {
        continue;
      }
      std::vector<std::string> read;
      for (size_t k = 1; k < s.operands.size(); ++k) ReadNames(s.operands[k], &read);
      bool invariant = true;
      for (size_t k = 1; k < s.operands.size(); ++k) {
        const RawOperand& o = s.operands[k];
        if (o.kind == RawOperand::kName && IsSpecialRegisterName(o.name) && !InvariantSpecial(o.name)) {
          invariant = false;
        }
      }
      for (const std::string& r : read) invariant = invariant && once.count(r) > 0;
      if (!invariant) continue;
      for (const std::string& d : written) {
        if (defs[d].size() == 1 && once.insert(d).second) changed = true;
      }
    }
  }
  // A membermask of all 32 lanes: the immediate, or a register only ever set to it.
  auto full = [&](const RawOperand& m) {
    if (m.kind == RawOperand::kInt) return static_cast<uint32_t>(m.bits) == 0xffffffffu;
    if (m.kind != RawOperand::kName || m.name.empty() || !NamesRegister(m.name) || IsSpecialRegisterName(m.name)) {
      return false;
    }
    auto it = defs.find(m.name);
    if (it == defs.end()) return false;
    for (size_t i : it->second) {
      const RawStatement& s = *code[i];
      if (OpcodeName(s) != "mov" || !s.guard.empty() || s.operands.size() != 2 ||
          s.operands[1].kind != RawOperand::kInt || static_cast<uint32_t>(s.operands[1].bits) != 0xffffffffu) {
        return false;
      }
    }
    return true;
  };
  // Gives `name`, a register an operation reads from other lanes, its shadow; false (and
  // *why) for one the interpreter may compute once per warp before the CTA runs unless
  // every thread computes it first.
  auto shadow = [&](const std::string& name, bool fragment = false) {
    if (name.empty() || !NamesRegister(name) || IsSpecialRegisterName(name)) {
      return (*why = "an operand the tier cannot read across lanes: " + name, false);
    }
    // A matrix fragment's registers the interpreter never computes ahead (hoist.cc counts
    // them written many times): its lanes hold what they ran, as the shadows do.
    if (once.count(name) && !fragment) {
      // Its value is in every lane before the CTA runs; here in each lane's shadow once
      // the thread ran its instruction: before any shuffle where every thread runs it
      // first, and in launches of whole warps (no lane past the CTA's last thread).
      if (defs[name].front() >= straight) {
        *why = "a warp-level operation reading " + name + ", which the interpreter may compute once per warp";
        return false;
      }
      whole_warps_ = true;
    }
    shadow_index_.emplace(name, static_cast<uint32_t>(shadow_index_.size()));
    return true;
  };
  for (size_t i = 0; i < n; ++i) {
    const RawStatement& s = *code[i];
    if (!IsWarpOperation(s)) continue;
    *line = s.line;
    if (!s.guard.empty()) return (*why = "a warp-level operation under a guard", false);
    // A matrix operation waits for the whole warp (the interpreter's kSyncWarp): lanes the
    // interpreter finds elsewhere, ready, it runs first (to their own warp-synchronous
    // instruction, a barrier or their end), where Settle finds them stopped, whether they
    // come to it from code placed before or after it (a k-loop's back edge), and it has no
    // membermask a loop could leave short. It reads registers of every lane: shadowed as a
    // shuffle's source is.
    if (IsMatrixOperation(s)) {
      warp_slots_ = kMatrixWarpSlots;
      for (const std::string& name : MatrixLaneOperands(s)) {
        if (!shadow(name, OpcodeName(s) != "ldmatrix")) return false;
      }
      continue;
    }
    // Back from it to the stops before it: every instruction on the way is placed before it.
    // (Allowing operations of all 32 lanes here compiled CUB's decoupled look-back, whose
    // polling load yields, but its scans and selections ran 2x slower than interpreted.)
    std::vector<bool> seen(n, false);
    std::deque<size_t> frontier = {i};
    while (!frontier.empty()) {
      const size_t at = frontier.front();
      frontier.pop_front();
      for (size_t p : previous[at]) {
        if (p >= i) {
          *why =
              "a warp-level operation reached from code placed after it (the interpreter's lanes may meet it at "
              "other times)";
          return false;
        }
        if (seen[p]) continue;
        seen[p] = true;
        if (!IsWarpOperation(*code[p]) && !IsCtaBarrier(*code[p])) frontier.push_back(p);
      }
    }
    const std::string_view op = OpcodeName(s);
    if (backward) {
      const size_t member = op == "shfl" ? 4 : op == "vote" || op == "redux" || op == "match" ? 2 : 0;
      if (op == "activemask" || s.operands.size() <= member || !full(s.operands[member])) {
        *why = "a warp-level operation without a membermask of all lanes in a kernel with loops";
        return false;
      }
    }
    if (op == "shfl" && s.operands.size() > 1) {
      const RawOperand& a = s.operands[1];
      if (a.kind == RawOperand::kInt) continue;
      if (a.kind != RawOperand::kName || a.name.empty() || !NamesRegister(a.name) || IsSpecialRegisterName(a.name) ||
          a.negated || StorageBits(a.name) != 32) {
        return (*why = "a shuffle of other than a 32-bit register or an immediate", false);
      }
      if (!shadow(a.name)) return false;
    }
  }
  return true;
}

// This thread's warp slot `slot`, and its shadow of register `index`.
llvm::Value* Emitter::SlotOf(uint32_t slot) {
  llvm::Value* base = b_.CreateMul(b_.CreateZExt(ThreadIndex(), i64_), b_.getInt64(warp_slots_));
  return b_.CreateGEP(i64_, slots_arg_, b_.CreateAdd(base, b_.getInt64(slot)));
}

llvm::Value* Emitter::ShadowOf(uint32_t index) {
  llvm::Value* base = b_.CreateMul(b_.CreateZExt(ThreadIndex(), i64_), b_.getInt64(shadow_index_.size()));
  return b_.CreateGEP(i64_, shadow_arg_, b_.CreateAdd(base, b_.getInt64(index)));
}

// A stop at the instruction being emitted: a barrier or a warp-level operation `op`.
void Emitter::Stop(WarpOp op) {
  op.pc = static_cast<uint32_t>(instruction_index_);
  warp_table_->push_back(op);
  auto* save = llvm::BasicBlock::Create(ctx_, "save", fn_);
  auto* resume = llvm::BasicBlock::Create(ctx_, "resume", fn_);
  resume_points_.push_back(resume);
  resume_live_.push_back(barrier_live_.at(instruction_index_));
  saves_.push_back({save, static_cast<int32_t>(resume_points_.size())});
  b_.CreateBr(save);
  b_.SetInsertPoint(resume);
}

// shfl.sync.{idx,up,down,bfly}.b32 d[|p], a, b, c, membermask; vote.sync.{all,any,uni}.pred
// d, [!]a, membermask; vote.sync.ballot.b32 d, [!]a, membermask; activemask.b32 d;
// redux.sync (below); bar.warp.sync membermask. Not the forms without .sync (before
// sm_70).
bool Emitter::WarpOperation(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  const std::string_view name = parts[0];
  if (name == "mma") return MmaSync(s, parts, why);
  if (name == "ldmatrix") return Ldmatrix(s, parts, why);
  if (name == "wmma") return Wmma(s, parts, why);
  const bool sync = parts.size() > 1 && parts[1] == "sync";
  const Type u32{Kind::kUnsigned, 32};
  const Type b32{Kind::kBits, 32};
  const Type pred{Kind::kPred, 1};
  WarpOp op;
  std::vector<std::pair<uint32_t, llvm::Value*>> slots;
  auto form = [&] { return (*why = "a form of " + std::string(name) + " the tier does not take", false); };
  if (name == "shfl") {
    if (!sync || parts.size() != 4 || parts[3] != "b32" || o.size() != 5) return form();
    static const char* const kModes[] = {"idx", "up", "down", "bfly"};
    auto mode = std::find(std::begin(kModes), std::end(kModes), parts[2]);
    if (mode == std::end(kModes)) return form();
    op.kind = WarpOp::kShfl;
    op.mode = static_cast<uint8_t>(mode - std::begin(kModes));
    op.member = true;
    if (o[1].kind == RawOperand::kInt) {
      op.value = static_cast<uint32_t>(o[1].bits);
    } else {
      auto it = shadow_index_.find(o[1].name);
      if (it == shadow_index_.end()) return form();
      op.source = static_cast<int32_t>(it->second);
    }
    for (auto [slot, k] : {std::pair{kSlotB, 2}, std::pair{kSlotC, 3}, std::pair{kSlotMember, 4}}) {
      llvm::Value* v = Source(o[k], u32, why);
      if (v == nullptr) return false;
      slots.push_back({slot, v});
    }
  } else if (name == "vote") {
    static const char* const kModes[] = {"all", "any", "uni", "ballot"};
    auto mode = parts.size() == 4 ? std::find(std::begin(kModes), std::end(kModes), parts[2]) : std::end(kModes);
    if (!sync || mode == std::end(kModes) || o.size() != 3) return form();
    op.kind = WarpOp::kVote;
    op.mode = static_cast<uint8_t>(mode - std::begin(kModes));
    if (parts[3] != (op.mode == 3 ? "b32" : "pred")) return form();
    op.member = true;
    RawOperand a = o[1];
    a.negated = false;
    llvm::Value* v = Source(a, pred, why);
    llvm::Value* m = Source(o[2], u32, why);
    if (v == nullptr || m == nullptr) return false;
    if (o[1].negated) v = b_.CreateNot(v);
    slots.push_back({kSlotPredicate, v});
    slots.push_back({kSlotMember, m});
  } else if (name == "redux") {
    // redux.sync.{add,min,max}.{u32,s32} and redux.sync.{and,or,xor}.b32 d, a, membermask:
    // the interpreter's 32-bit integer forms.
    static const char* const kModes[] = {"add", "min", "max", "and", "or", "xor"};
    auto mode = parts.size() == 4 ? std::find(std::begin(kModes), std::end(kModes), parts[2]) : std::end(kModes);
    if (!sync || mode == std::end(kModes) || o.size() != 3) return form();
    const bool arithmetic = mode - std::begin(kModes) < 3;
    if (arithmetic ? parts[3] != "u32" && parts[3] != "s32" : parts[3] != "b32") return form();
    op.kind = WarpOp::kRedux;
    op.mode = static_cast<uint8_t>((mode - std::begin(kModes)) + (parts[3] == "s32" ? 8 : 0));
    op.member = true;
    llvm::Value* v = Source(o[1], u32, why);
    llvm::Value* m = Source(o[2], u32, why);
    if (v == nullptr || m == nullptr) return false;
    slots.push_back({kSlotPredicate, v});
    slots.push_back({kSlotMember, m});
  } else if (name == "match") {
    // match.any.sync.{b32,b64} d, a, membermask; match.all.sync.{b32,b64} d[|p], a,
    // membermask: the interpreter's forms (HMatch), over each lane's membermask.
    const bool any = parts.size() == 4 && parts[1] == "any";
    if (parts.size() != 4 || (!any && parts[1] != "all") || parts[2] != "sync" ||
        (parts[3] != "b32" && parts[3] != "b64") || o.size() != 3 || (any && !o[0].pair.empty())) {
      return form();
    }
    op.kind = WarpOp::kMatch;
    op.mode = any ? 0 : 1;
    op.member = true;
    llvm::Value* v = Source(o[1], Type{Kind::kBits, parts[3] == "b64" ? 64u : 32u}, why);
    llvm::Value* m = Source(o[2], u32, why);
    if (v == nullptr || m == nullptr) return false;
    slots.push_back({kSlotPredicate, v});
    slots.push_back({kSlotMember, m});
  } else if (name == "activemask") {
    if (parts.size() != 2 || parts[1] != "b32" || o.size() != 1) return form();
    op.kind = WarpOp::kActivemask;
  } else {
    if (parts.size() != 3 || parts[1] != "warp" || parts[2] != "sync" || o.size() != 1) return form();
    op.kind = WarpOp::kSyncWarp;
    op.member = true;
    llvm::Value* m = Source(o[0], u32, why);
    if (m == nullptr) return false;
    slots.push_back({kSlotMember, m});
  }
  for (auto& [slot, v] : slots) b_.CreateStore(b_.CreateZExt(v, i64_), SlotOf(slot));
  Stop(op);
  // Resumed: the results Settle left in the slots.
  if (op.kind == WarpOp::kSyncWarp) return true;
  RawOperand d = o[0];
  d.pair.clear();
  llvm::Value* result = b_.CreateLoad(i64_, SlotOf(kSlotResult));
  if (op.kind == WarpOp::kVote && op.mode != 3) {
    return Dest(d, b_.CreateICmpNE(result, b_.getInt64(0)), pred, why);
  }
  if (!Dest(d, b_.CreateTrunc(result, i32_), b32, why)) return false;
  if (!o[0].pair.empty()) {
    RawOperand p;
    p.kind = RawOperand::kName;
    p.name = o[0].pair;
    llvm::Value* ok = b_.CreateICmpNE(b_.CreateLoad(i64_, SlotOf(kSlotResultPredicate)), b_.getInt64(0));
    if (!Dest(p, ok, pred, why)) return false;
  }
  return true;
}

}  // namespace gpupool::sim::jit

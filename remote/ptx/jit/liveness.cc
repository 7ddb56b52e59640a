// Which registers are live after each barrier (emitter.h), so that a thread of compiled
// code saves and restores only those across it, and in vector code, which registers may be
// written for every lane of a row.
#include <algorithm>

#include "remote/ptx/jit/emitter.h"

namespace gpupool::sim::jit {

// Registers an operand reads (a destination's name is not read).
void Emitter::ReadNames(const RawOperand& o, std::vector<std::string>* names) {
  if (!o.name.empty() && NamesRegister(o.name) && !IsSpecialRegisterName(o.name)) names->push_back(o.name);
  for (const RawOperand& item : o.items) ReadNames(item, names);
}

// Instructions whose vector first operand is written, element by element, and not read
// (wgmma's accumulator, for one, is both).
static bool WritesWholeVector(const std::string& op) {
  return op == "ld" || op == "ldu" || op == "mov" || op == "tex" || op == "tld4" || op == "suld" || op == "mma" ||
         op == "wmma" || op == "ldmatrix" || op == "atom";
}

// Which registers are live after each barrier, so that a thread saves and restores only
// those (a backward dataflow over the kernel's instructions; a guarded write does not
// end a register's life, and a destination of st/red is an address, read); in vector code,
// also which registers no waiting lane needs (free_writes_).
// False (and *why) when the work would exceed the compile's bounds (kMaxLivenessWork,
// kMaxBarrierSaves): the kernel then runs on the interpreter.
bool Emitter::ComputeLiveness(std::string* why) {
  std::vector<const RawStatement*> code;
  std::map<std::string, size_t> label_at;
  for (const RawStatement& s : entry_.body) {
    if (s.kind == RawStatement::kLabel) label_at[s.opcode] = code.size();
    if (s.kind == RawStatement::kInstruction) code.push_back(&s);
  }
  std::map<std::string, uint32_t> ids;
  auto id = [&](const std::string& name) {
    auto [it, added] = ids.emplace(name, static_cast<uint32_t>(ids.size()));
    return it->second;
  };
  const size_t n = code.size();
  std::vector<std::vector<uint32_t>> uses(n), defs(n);
  std::vector<std::vector<size_t>> next(n);
  for (size_t i = 0; i < n; ++i) {
    const RawStatement& s = *code[i];
    const std::string op = s.opcode.substr(0, s.opcode.find('.'));
    const bool writes =
        !(op == "st" || op == "red" || op == "bra" || op == "ret" || op == "exit" || op == "bar" || op == "barrier");
    std::vector<std::string> read;
    for (size_t k = 0; k < s.operands.size(); ++k) {
      const RawOperand& o = s.operands[k];
      if (k == 0 && writes && o.kind == RawOperand::kName) {
        if (!o.name.empty() && NamesRegister(o.name) && !IsSpecialRegisterName(o.name)) {
          (s.guard.empty() ? defs[i] : uses[i]).push_back(id(o.name));
        }
        if (!o.pair.empty()) (s.guard.empty() ? defs[i] : uses[i]).push_back(id(o.pair));
        continue;
      }
      if (k == 0 && writes && o.kind == RawOperand::kVector && WritesWholeVector(op)) {
        // A vector destination ({a, b, c, d} of ld.v4, tex, mma, mov's unpacking): each
        // element written (taken as read, it kept 49 registers live across a tiled matrix
        // multiply's barrier instead of 17: the elements of its ld.shared.v4 after it).
        for (const RawOperand& item : o.items) {
          if (item.kind != RawOperand::kName || item.name.empty() || !NamesRegister(item.name) ||
              IsSpecialRegisterName(item.name)) {
            ReadNames(item, &read);
            continue;
          }
          (s.guard.empty() ? defs[i] : uses[i]).push_back(id(item.name));
        }
        continue;
      }
      ReadNames(o, &read);
    }
    if (!s.guard.empty()) read.push_back(s.guard);
    // The carry flag: written by .cc (a guarded write does not end its life), read by
    // addc, subc and madc.
    if (WritesCarry(s)) (s.guard.empty() ? defs[i] : uses[i]).push_back(id(kCarryFlag));
    if (ReadsCarry(s)) read.push_back(kCarryFlag);
    for (const std::string& name : read) uses[i].push_back(id(name));
    const bool ends = op == "ret" || op == "exit";
    if (op == "bra" && !s.operands.empty()) {
      // A label after the last instruction (`DONE: }`) ends the thread: no successor
      // (found by the ptx_jit fuzz target: it indexed one past the instructions).
      if (auto it = label_at.find(s.operands[0].name); it != label_at.end() && it->second < n) {
        next[i].push_back(it->second);
      }
      if (!s.guard.empty() && i + 1 < n) next[i].push_back(i + 1);
    } else if (!ends || !s.guard.empty()) {
      if (i + 1 < n) next[i].push_back(i + 1);
    }
  }
  // Each pass costs n x registers steps, and a pass may change one instruction only.
  const uint64_t pass_work = uint64_t{n} * std::max<size_t>(ids.size(), 1);
  if (pass_work > kMaxLivenessWork) {
    *why = "compile work: " + std::to_string(n) + " instructions x " + std::to_string(ids.size()) +
           " registers is more than " + std::to_string(kMaxLivenessWork);
    return false;
  }
  uint64_t work = 0;
  std::vector<std::vector<bool>> live_in(n, std::vector<bool>(ids.size()));
  for (bool changed = true; changed;) {
    if ((work += pass_work) > kMaxLivenessWork) {
      *why = "compile work: the liveness of " + std::to_string(ids.size()) + " registers over " + std::to_string(n) +
             " instructions takes more than " + std::to_string(kMaxLivenessWork) + " steps";
      return false;
    }
    changed = false;
    for (size_t i = n; i-- > 0;) {
      std::vector<bool> live(ids.size());
      for (size_t j : next[i]) {
        for (size_t r = 0; r < live.size(); ++r) live[r] = live[r] || live_in[j][r];
      }
      for (uint32_t r : defs[i]) live[r] = false;
      for (uint32_t r : uses[i]) live[r] = true;
      if (live != live_in[i]) {
        live_in[i] = std::move(live);
        changed = true;
      }
    }
  }
  if (lanes_) {
    // Vector code: the registers live where a lane that does not run waits to go on (at a
    // label, after a branch to a loop's head: emit_control.cc). A lane stopped at a barrier
    // keeps its live registers in its saves, and one that ended none: so a register live at
    // none of these places may be written for every lane, not only the running ones (Dest).
    std::vector<bool> waiting_live(ids.size());
    auto add = [&](size_t at) {
      if (at >= n) return;
      for (size_t r = 0; r < waiting_live.size(); ++r) waiting_live[r] = waiting_live[r] || live_in[at][r];
    };
    for (const auto& [label, at] : label_at) add(at);
    for (size_t i = 0; i < n; ++i) {
      const RawStatement& s = *code[i];
      if (s.opcode.rfind("bra", 0) == 0 && !s.operands.empty() && loop_heads_.count(s.operands[0].name)) add(i + 1);
    }
    for (const auto& [name, r] : ids) {
      if (!waiting_live[r]) free_writes_.insert(name);
    }
  }
  // A last pass with the fixed point: what is live after each barrier.
  barrier_live_.assign(n, {});
  uint64_t saves = 0;
  for (size_t i = 0; i < n; ++i) {
    // Barriers and warp-level operations: a thread stops at each, and goes on after it; a
    // load it may spin on (spin_loads_): it stops before it, and goes on with the load.
    const bool before = spin_loads_.count(i) > 0;
    if (!IsCtaBarrier(*code[i]) && !IsWarpOperation(*code[i]) && !before) continue;
    std::vector<bool> live(ids.size());
    if (before) {
      live = live_in[i];
    } else {
      for (size_t j : next[i]) {
        for (size_t r = 0; r < live.size(); ++r) live[r] = live[r] || live_in[j][r];
      }
    }
    for (const auto& [name, r] : ids) {
      if (live[r]) barrier_live_[i].push_back(name);
    }
    // The code made grows with barriers x the registers live across each.
    if ((saves += barrier_live_[i].size()) > kMaxBarrierSaves) {
      *why = "compile work: more than " + std::to_string(kMaxBarrierSaves) + " registers saved at barriers (" +
             std::to_string(barriers_) + " barriers)";
      return false;
    }
  }
  return true;
}

// Vector code's registers that barriers need not save (rematerialized_): each has one
// definition in the kernel, under no guard, of an operation with no other effect (moves,
// integer and float arithmetic, conversions, comparisons, selects, a load of a
// parameter), from constants, module and shared variables' addresses, %tid, %ntid, %ctaid,
// %nctaid and registers of the same kind defined before it: the value a lane reads after a
// barrier is the one that definition gives it wherever it runs, and a phase that restores
// the row computes it again for every lane (Rematerialize; a kernel that reads such a
// register before its definition has run reads that value instead of 0 then). A 16 x 16
// four-stage cp.async multiply's barriers saved 29 registers, 19 of them its indices and pointers.
void Emitter::FindRematerialized() {
  std::map<std::string, int> writes;
  std::map<std::string, size_t> defined_at;
  std::map<std::string, const RawStatement*> definition;
  for (size_t p = 0; p < entry_.body.size(); ++p) {
    const RawStatement& s = entry_.body[p];
    if (s.kind != RawStatement::kInstruction || s.operands.empty()) continue;
    const RawOperand& d = s.operands[0];
    // Counted as written: operand 0 of any instruction that names a register there (of
    // st, nanosleep and the like too: more writes only leave a register saved).
    if (d.kind == RawOperand::kName && !d.name.empty() && NamesRegister(d.name) && !IsSpecialRegisterName(d.name)) {
      writes[d.name] += s.guard.empty() && d.pair.empty() ? 1 : 2;
      defined_at[d.name] = p;
      definition[d.name] = &s;
      if (!d.pair.empty()) writes[d.pair] += 2;
    }
    for (const RawOperand& item : d.items) {
      if (!item.name.empty()) writes[item.name] += 2;
    }
    if (WritesCarry(s)) writes[kCarryFlag] += 2;
  }
  static const std::set<std::string_view> kPure = {"mov",  "add", "sub", "mul", "mad", "mul24", "mad24",
                                                   "shl",  "shr", "and", "or",  "xor", "not",   "cvt",
                                                   "cvta", "min", "max", "neg", "abs", "selp",  "setp"};
  std::set<std::string> candidates;
  for (const auto& [name, count] : writes) {
    if (count != 1 || !definition.count(name)) continue;
    const RawStatement& s = *definition.at(name);
    const std::vector<std::string_view> parts = SplitOpcode(s.opcode);
    bool pure = kPure.count(parts[0]) > 0;
    for (std::string_view part : parts) pure = pure && part != "cc";
    if (parts[0] == "ld") {
      // ld.param [a parameter + offset]: the launch's parameters, which no thread writes.
      pure = parts.size() == 3 && parts[1] == "param" && s.operands.size() == 2 &&
             s.operands[1].kind == RawOperand::kAddress && params_.count(s.operands[1].name) > 0;
    }
    if (pure) candidates.insert(name);
  }
  auto invariant = [&](const std::string& user, const RawOperand& o) {
    switch (o.kind) {
      case RawOperand::kInt:
      case RawOperand::kF32:
      case RawOperand::kF64:
        return true;
      case RawOperand::kAddress:
        return params_.count(o.name) > 0;
      case RawOperand::kName:
        if (o.name.empty() || !o.pair.empty()) return false;
        if (IsSpecialRegisterName(o.name)) {
          for (std::string_view family : {"%tid.", "%ntid.", "%ctaid.", "%nctaid."}) {
            if (o.name.rfind(family, 0) == 0) return true;
          }
          return false;
        }
        if (!NamesRegister(o.name)) return true;  // a variable's address
        return candidates.count(o.name) > 0 && defined_at.at(o.name) < defined_at.at(user);
      default:
        return false;
    }
  };
  // In the order of the definitions: a candidate's register operands are defined before it
  // (invariant), so each is settled when it is asked; one pass, where passes in the names'
  // order until nothing changed took one a link of a chain (a crafted kernel's quadratic
  // work on the compile thread).
  std::vector<std::pair<size_t, std::string>> in_order;
  for (const std::string& name : candidates) in_order.emplace_back(defined_at.at(name), name);
  std::sort(in_order.begin(), in_order.end());
  for (const auto& [at, name] : in_order) {
    const RawStatement& s = *definition.at(name);
    bool all = true;
    for (size_t k = 1; k < s.operands.size() && all; ++k) all = invariant(name, s.operands[k]);
    if (!all) candidates.erase(name);
  }
  // Those live after a barrier, and what they are made from, in the code's order.
  std::set<std::string> needed;
  std::vector<std::string> work;
  for (const std::vector<std::string>& live : barrier_live_) {
    for (const std::string& name : live) {
      if (candidates.count(name) && needed.insert(name).second) work.push_back(name);
    }
  }
  while (!work.empty()) {
    const std::string name = work.back();
    work.pop_back();
    const RawStatement& s = *definition.at(name);
    for (size_t k = 1; k < s.operands.size(); ++k) {
      const std::string& from = s.operands[k].name;
      if (candidates.count(from) && needed.insert(from).second) work.push_back(from);
    }
  }
  rematerialized_ = needed;
  std::vector<std::pair<size_t, const RawStatement*>> ordered;
  for (const std::string& name : needed) ordered.emplace_back(defined_at.at(name), definition.at(name));
  std::sort(ordered.begin(), ordered.end());
  for (const auto& [at, s] : ordered) remat_code_.push_back(s);
}

// The rematerialized registers' definitions again, for every lane of the row (at a phase's
// start: FillLaneBarriers), as the body computes them.
bool Emitter::Rematerialize(std::string* why) {
  op_mask_ = Int(1, 1);
  op_guard_ = nullptr;
  for (const RawStatement* s : remat_code_) {
    if (!Operation(*s, SplitOpcode(s->opcode), why)) {
      op_mask_ = nullptr;
      return false;
    }
  }
  op_mask_ = nullptr;
  return true;
}

}  // namespace gpupool::sim::jit

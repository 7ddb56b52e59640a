// Calls of device functions (internal.h: InlineCalls): the tier inlines them into the
// entry's statements before the emitter sees it, as the decoder inlines them into its code
// (interp/decode_calls.cc), rather than emitting LLVM functions: compiled code then runs the
// same statements the interpreter runs (every register, label and .local/.param variable of
// an inlined copy its own, the same local layout, the same trap past kMaxCallDepth), and the
// emitter's frame (one thread to its next barrier, its registers saved there) needs no call
// stack, so a callee may hold a barrier.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "remote/ptx/ir/kernel.h"
#include "remote/ptx/jit/internal.h"

namespace gpupool::sim::jit {

namespace {

class Inliner {
 public:
  Inliner(const ParsedModule& module, RawFunction* out, size_t max_statements)
      : module_(module), out_(out), max_statements_(max_statements) {}

  // The statements of `function` into out_, renamed by `frame` (depth -1: the entry).
  bool Expand(const RawFunction& function, const std::string& tag, std::map<std::string, std::string> alias, int depth,
              std::string* refused) {
    Frame frame;
    frame.tag = tag;
    frame.alias = std::move(alias);
    // What the decoder renames per inlined copy (Decoder::Emit): what the function
    // declares, its labels, and its register families' members (%r@3).
    for (const RawStatement& s : function.body) {
      if (s.kind != RawStatement::kInstruction) frame.locals.insert(s.kind == RawStatement::kLabel ? s.opcode : s.name);
    }
    if (depth >= 0) {
      // Bounded as the statements are: a copy of a function declaring many register
      // families and running few instructions costs its declarations too.
      if (out_->register_bits.size() + function.register_bits.size() > max_statements_) {
        return Refuse("more than " + std::to_string(max_statements_) + " registers once its calls are inlined",
                      function.body.empty() ? 0 : function.body.front().line, refused);
      }
      for (const auto& [name, bits] : function.register_bits) out_->register_bits[Rename(frame, name)] = bits;
    }
    const std::string return_label = tag + "#return";  // no PTX name starts with #
    for (const RawStatement& statement : function.body) {
      RawStatement s = statement;
      if (s.kind == RawStatement::kLabel) {
        s.opcode = Local(frame, s.opcode);
      } else if (s.kind != RawStatement::kInstruction) {
        s.name = Local(frame, s.name);
        if (s.kind == RawStatement::kRegister) registers_.insert(s.name);
        if (s.kind == RawStatement::kParam) params_.insert(s.name);
      } else {
        if (!s.opcode.empty() && s.opcode[0] == '$') {
          // The job's own (which the decoder refuses too): only InlineCalls makes it.
          return Refuse("instruction " + s.opcode, s.line, refused);
        }
        if (!s.guard.empty()) s.guard = Local(frame, s.guard);
        for (RawOperand& o : s.operands) RenameOperand(frame, &o);
        if (s.opcode == "call" || s.opcode.rfind("call.", 0) == 0) {
          // Counted as an instruction: a call of an empty function still costs its copy.
          if (++instructions_ > kMaxInstructions) return TooLarge(s.line, refused);
          if (!Call(s, depth, refused)) return false;
          continue;
        }
        if (depth >= 0 && (s.opcode == "ret" || s.opcode.rfind("ret.", 0) == 0)) {
          // ret of an inlined copy: on after it (the decoder's branch to its $return).
          s.opcode = "bra";
          s.operands.assign(1, RawOperand{});
          s.operands[0].kind = RawOperand::kName;
          s.operands[0].name = return_label;
        }
      }
      if (!Push(std::move(s), refused)) return false;
    }
    return depth < 0 || Label(return_label, function.body.empty() ? 0 : function.body.back().line, refused);
  }

 private:
  struct Frame {
    std::string tag;                           // "c3:": this copy's names
    std::map<std::string, std::string> alias;  // its parameters and return values: the call site's
    std::set<std::string> locals;
  };

  // The decoder's Local: an alias, or a name of this copy's own, or a module name as it is.
  // A copy's names keep a register's leading % (the emitter tells registers by it) and take
  // ':', which no PTX name holds, so that no renamed name meets another.
  static std::string Rename(const Frame& frame, const std::string& name) {
    if (!name.empty() && name[0] == '%') return "%" + frame.tag + name.substr(1);
    return frame.tag + name;
  }
  static std::string Local(const Frame& frame, const std::string& name) {
    if (auto it = frame.alias.find(name); it != frame.alias.end()) return it->second;
    if (frame.tag.empty() || (!frame.locals.count(name) && name.find('@') == std::string::npos)) return name;
    return Rename(frame, name);
  }
  static void RenameOperand(const Frame& frame, RawOperand* o) {
    if ((o->kind == RawOperand::kName || o->kind == RawOperand::kAddress) && !o->name.empty()) {
      o->name = Local(frame, o->name);
    }
    if (!o->pair.empty()) o->pair = Local(frame, o->pair);
    for (RawOperand& item : o->items) RenameOperand(frame, &item);
  }

  static bool Refuse(const std::string& why, int line, std::string* refused) {
    *refused = why + " (PTX line " + std::to_string(line) + ")";
    return false;
  }

  static bool TooLarge(int line, std::string* refused) {
    return Refuse("more than " + std::to_string(kMaxInstructions) + " instructions once its calls are inlined", line,
                  refused);
  }

  // A statement of the inlined body; bounded, instructions and all statements (copies of
  // a function that declares much and runs little), before the emitter's own bound.
  bool Push(RawStatement s, std::string* refused) {
    if (s.kind == RawStatement::kInstruction && ++instructions_ > kMaxInstructions) return TooLarge(s.line, refused);
    if (out_->body.size() >= max_statements_) {
      return Refuse("more than " + std::to_string(max_statements_) + " statements once its calls are inlined", s.line,
                    refused);
    }
    out_->body.push_back(std::move(s));
    return true;
  }

  bool Label(const std::string& name, int line, std::string* refused) {
    RawStatement label;
    label.kind = RawStatement::kLabel;
    label.opcode = name;
    label.line = line;
    return Push(std::move(label), refused);
  }

  // A call (its operands renamed to the caller's names) as the decoder's Decoder::Call
  // takes it: `call (returns), callee, (arguments)`, a device function of the module
  // inlined, anything else refused.
  bool Call(const RawStatement& s, int depth, std::string* refused) {
    const RawOperand* returns = nullptr;
    const RawOperand* callee = nullptr;
    const RawOperand* args = nullptr;
    for (const RawOperand& op : s.operands) {
      if (op.kind == RawOperand::kList) {
        (callee == nullptr ? returns : args) = &op;
      } else if (op.kind == RawOperand::kName && callee == nullptr) {
        callee = &op;
      }
    }
    if (callee == nullptr) return Refuse("a call without a target", s.line, refused);
    const std::string& name = callee->name;
    if (name == "vprintf" || name == "__assertfail" || name == "__assert_fail") {
      return PrintCall(s, name == "vprintf", returns, args, refused);
    }
    if (registers_.count(name) || name.find('@') != std::string::npos) {
      return Refuse("an indirect call", s.line, refused);
    }
    auto found = module_.functions.find(name);
    if ((name == "malloc" || name == "free") && found != module_.functions.end() && !found->second.has_body) {
      return DeviceHeapCall(s, name == "malloc", returns, args, refused);
    }
    if (name == "cudaGraphSetConditional" && found != module_.functions.end() && !found->second.has_body) {
      return SetConditionalCall(s, args, refused);
    }
    if (found == module_.functions.end() || !found->second.has_body) {
      return Refuse("a call of external function '" + name + "' (the device runtime's, or another module's)", s.line,
                    refused);
    }
    const RawFunction& target = found->second;
    // Its arguments and return values: the caller's .param variables, in local memory.
    auto param_variable = [&](const RawOperand* list, size_t i) {
      return list != nullptr && i < list->items.size() && list->items[i].kind == RawOperand::kName &&
             params_.count(list->items[i].name) > 0;
    };
    std::map<std::string, std::string> alias;
    for (size_t i = 0; i < target.params.size(); ++i) {
      if (!param_variable(args, i)) return Refuse("a call's argument other than a .param variable", s.line, refused);
      alias[target.params[i].name] = args->items[i].name;
    }
    const size_t returned = returns == nullptr ? 0 : returns->items.size();
    for (size_t i = 0; i < std::min(returned, target.returns.size()); ++i) {
      if (!param_variable(returns, i)) return Refuse("a call's result other than a .param variable", s.line, refused);
    }
    // A guarded call: a branch around it where the guard is false, as the decoder's.
    std::string skip;
    if (!s.guard.empty()) {
      skip = "s" + std::to_string(++skips_) + ":$skip";
      RawStatement branch;
      branch.opcode = "bra";
      branch.guard = s.guard;
      branch.guard_negated = !s.guard_negated;
      branch.line = s.line;
      branch.operands.resize(1);
      branch.operands[0].kind = RawOperand::kName;
      branch.operands[0].name = skip;
      if (!Push(std::move(branch), refused)) return false;
    }
    if (std::max(depth, 0) + 1 > kMaxCallDepth) {
      // Where the call would run: the decoder's trap (kTrapCallsTooDeep).
      RawStatement trap;
      trap.opcode = std::string(kCallsTooDeepOpcode);
      trap.line = s.line;
      if (!Push(std::move(trap), refused)) return false;
    } else {
      for (size_t i = 0; i < target.returns.size(); ++i) {
        if (i < returned) {
          alias[target.returns[i].name] = returns->items[i].name;
          continue;
        }
        // A result the call site leaves: scratch of the decoder's size and alignment.
        RawStatement scratch;
        scratch.kind = RawStatement::kLocal;
        scratch.name = "r" + std::to_string(++calls_) + ":$return";
        scratch.size = std::max<uint64_t>(target.returns[i].size, 8);
        scratch.align = 16;
        scratch.line = s.line;
        alias[target.returns[i].name] = scratch.name;
        if (!Push(std::move(scratch), refused)) return false;
      }
      const std::string tag = "c" + std::to_string(++calls_) + ":";
      if (!Expand(target, tag, std::move(alias), std::max(depth, 0) + 1, refused)) return false;
    }
    return skip.empty() || Label(skip, s.line, refused);
  }

  // malloc or free of the device runtime, as the decoder's Decoder::Call takes them: the
  // statement kMallocOpcode or kFreeOpcode under the call's guard (the decoder's one
  // instruction, counted once), naming the call's .param variables.
  bool DeviceHeapCall(const RawStatement& s, bool is_malloc, const RawOperand* returns, const RawOperand* args,
                      std::string* refused) {
    auto param_variable = [&](const RawOperand* list) {
      return list != nullptr && !list->items.empty() && list->items[0].kind == RawOperand::kName &&
             params_.count(list->items[0].name) > 0;
    };
    if (!param_variable(args) || (is_malloc && !param_variable(returns))) {
      return Refuse("a call's argument or result other than a .param variable", s.line, refused);
    }
    uint64_t heap_size = 0;
    for (const ModuleVariable& variable : module_.variables) {
      if (variable.name == kDeviceHeapVariable) heap_size = variable.size;
    }
    // As the decoder checks it (a module that calls malloc has its heap: PtxModule::Parse).
    if (heap_size < 64 || heap_size % 16 != 0 || heap_size > kMaxDeviceHeapBytes) {
      return Refuse("a device heap of " + std::to_string(heap_size) + " bytes", s.line, refused);
    }
    RawStatement call;
    call.opcode = std::string(is_malloc ? kMallocOpcode : kFreeOpcode);
    call.guard = s.guard;
    call.guard_negated = s.guard_negated;
    call.line = s.line;
    call.size = heap_size;
    call.operands.push_back(args->items[0]);
    if (is_malloc) call.operands.push_back(returns->items[0]);
    return Push(std::move(call), refused);
  }

  // vprintf or __assertfail, as the decoder's Decoder::Call takes them: the statement
  // kPrintfOpcode or kAssertOpcode under the call's guard, naming the call's .param
  // variables (vprintf's result only where the call takes one).
  bool PrintCall(const RawStatement& s, bool is_printf, const RawOperand* returns, const RawOperand* args,
                 std::string* refused) {
    const size_t count = is_printf ? 2 : 4;
    RawStatement call;
    call.opcode = std::string(is_printf ? kPrintfOpcode : kAssertOpcode);
    call.guard = s.guard;
    call.guard_negated = s.guard_negated;
    call.line = s.line;
    for (size_t i = 0; i < count; ++i) {
      if (args == nullptr || i >= args->items.size() || args->items[i].kind != RawOperand::kName ||
          params_.count(args->items[i].name) == 0) {
        return Refuse("a call's argument other than a .param variable", s.line, refused);
      }
      call.operands.push_back(args->items[i]);
    }
    if (is_printf && returns != nullptr && !returns->items.empty()) {
      if (returns->items[0].kind != RawOperand::kName || params_.count(returns->items[0].name) == 0) {
        return Refuse("a call's result other than a .param variable", s.line, refused);
      }
      call.operands.push_back(returns->items[0]);
    }
    return Push(std::move(call), refused);
  }

  // cudaGraphSetConditional, as the decoder's Decoder::Call takes it: the statement
  // kSetConditionalOpcode under the call's guard, naming its two .param variables.
  bool SetConditionalCall(const RawStatement& s, const RawOperand* args, std::string* refused) {
    RawStatement call;
    call.opcode = std::string(kSetConditionalOpcode);
    call.guard = s.guard;
    call.guard_negated = s.guard_negated;
    call.line = s.line;
    for (size_t i = 0; i < 2; ++i) {
      if (args == nullptr || i >= args->items.size() || args->items[i].kind != RawOperand::kName ||
          params_.count(args->items[i].name) == 0) {
        return Refuse("a call's argument other than a .param variable", s.line, refused);
      }
      call.operands.push_back(args->items[i]);
    }
    return Push(std::move(call), refused);
  }

  const ParsedModule& module_;
  RawFunction* out_;
  const size_t max_statements_;
  std::set<std::string> registers_;  // declared, by their names in out_
  std::set<std::string> params_;     // .param variables declared, by their names in out_
  size_t instructions_ = 0;
  // The decoder's count of calls (Decoder::call_count_, one for each inlined copy and each
  // result's scratch, in the same order): a copy's names are the decoder's, "c3:tile", and
  // so are the .shared variables it declares (a kernel's __shared__ array that nvcc
  // declares in the device function using it), which the decoder places per copy, in the
  // layout the emitter takes (SharedLayout).
  int calls_ = 0;
  int skips_ = 0;
};

// Whether `entry` calls anything, or names the statement only InlineCalls may make (then
// the inliner refuses it).
bool NeedsInlining(const RawFunction& entry) {
  for (const RawStatement& s : entry.body) {
    if (s.kind != RawStatement::kInstruction) continue;
    if (s.opcode == "call" || s.opcode.rfind("call.", 0) == 0 || (!s.opcode.empty() && s.opcode[0] == '$')) {
      return true;
    }
  }
  return false;
}

}  // namespace

const RawFunction* InlineCalls(const ParsedModule& module, const RawFunction& entry, RawFunction* storage,
                               std::string* refused) {
  if (!NeedsInlining(entry)) return &entry;
  RawFunction& out = *storage;
  out.name = entry.name;
  out.is_entry = entry.is_entry;
  out.has_body = entry.has_body;
  out.max_threads = entry.max_threads;
  out.ptx_version = entry.ptx_version;
  out.target_arch = entry.target_arch;
  out.params = entry.params;
  out.returns = entry.returns;
  out.register_bits = entry.register_bits;
  out.body.clear();
  // The entry's own statements, and as many again as four times the instructions the tier
  // takes at most (labels and declarations of the copies).
  Inliner inliner(module, &out, entry.body.size() + 4 * kMaxInstructions);
  if (!inliner.Expand(entry, "", {}, -1, refused)) return nullptr;
  return &out;
}

}  // namespace gpupool::sim::jit

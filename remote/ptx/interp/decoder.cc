// The decoder: ParsedModule -> DecodedKernel, once per kernel (PtxModule::Decode): device
// functions inlined, registers and constants given slots, each instruction its handler
// (handler_tables.h and the family headers), then Hoist.
// Over 1,500 lines: it is one class, Decoder, whose InstructionBody maps every opcode to
// its handler; it moved here unchanged, and splits once an opcode table (opcodes.def) lets
// each family decode its own opcodes.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/arithmetic.h"
#include "remote/ptx/interp/conversions.h"
#include "remote/ptx/interp/memory.h"
#include "remote/ptx/interp/warp_ops.h"
#include "remote/ptx/interp/printf.h"
#include "remote/ptx/interp/device_heap.h"
#include "remote/ptx/interp/device_runtime.h"
#include "remote/ptx/interp/half.h"
#include "remote/ptx/interp/wmma.h"
#include "remote/ptx/interp/handler_tables.h"
#include "remote/ptx/interp/hoist.h"
#include "remote/ptx/interp/texture.h"
#include "remote/ptx/interp/texture_ops.h"

namespace gpupool::sim::interp {

struct Symbol {
  Space space;
  uint64_t value;  // address in its own space
};

// SplitOpcode (front/program.h), as strings: the decoder keeps and compares its parts.
std::vector<std::string> Split(const std::string& opcode) {
  std::vector<std::string_view> views = SplitOpcode(opcode);
  return std::vector<std::string>(views.begin(), views.end());
}

class Decoder {
 public:
  Decoder(const ParsedModule& module, const std::map<std::string, uint64_t>& addresses, DecodedKernel* kernel)
      : module_(module), addresses_(addresses), k_(kernel) {}

  // A kernel's parameters' offsets, by natural alignment; returns their bytes (what a
  // launch of it, from the host or from a kernel, passes).
  static uint64_t ParamLayout(const RawFunction& entry, std::vector<uint64_t>* offsets) {
    uint64_t offset = 0;
    for (const RawParam& param : entry.params) {
      offset = (offset + param.align - 1) / param.align * param.align;
      if (offsets != nullptr) offsets->push_back(offset);
      offset += param.size;
    }
    return offset;
  }

  Status Run(const RawFunction& entry) {
    k_->name = entry.name;
    std::vector<uint64_t> offsets;
    const uint64_t param_bytes = ParamLayout(entry, &offsets);
    // CUDA 12.1 on allows 32,764 bytes of kernel parameters; more (a size from a job's
    // PTX) would not fit the 32 bits a launch carries them in.
    if (param_bytes > kMaxParamBytes) {
      return Status::InvalidArgument("kernel " + entry.name + " declares " + std::to_string(param_bytes) +
                                     " bytes of parameters: more than " + std::to_string(kMaxParamBytes));
    }
    k_->param_size = static_cast<uint32_t>(param_bytes);
    for (size_t i = 0; i < entry.params.size(); ++i) {
      symbols_[entry.params[i].name] = Symbol{Space::kParam, offsets[i]};
    }
    // Module-level static shared variables are placed when the kernel first names them
    // (SymbolValue); dynamic shared memory comes after all static.
    for (const SharedVariable& var : module_.shared) {
      if (!var.is_extern) unplaced_shared_[var.name] = &var;
    }
    for (const ModuleVariable& var : module_.variables) {
      auto found = addresses_.find(var.name);
      symbols_[var.name] = Symbol{Space::kGlobal, found == addresses_.end() ? 0 : found->second};
      if (var.is_const && !var.is_declaration) k_->const_bytes += var.size;
    }
    k_->max_threads = entry.max_threads;
    // Device functions as values (mov.u64 %rd, f): their addresses.
    // Kernels too: a device-side launch names its kernel by address.
    for (const auto& [name, function] : module_.functions) {
      if (function.has_body) symbols_[name] = Symbol{Space::kGlobal, FunctionAddress(module_, name)};
    }
    for (const std::string& name : module_.unsupported_symbols) unsupported_symbols_.insert(name);
    k_->carry_slot = NewSlot();
    zero_slot_ = Constant(0);
    GPUPOOL_RETURN_IF_ERROR(Emit(entry, "", {}, -1, 0));
    k_->declared_shared = shared_size_;
    // Dynamic shared memory starts after the static variables.
    shared_size_ = (shared_size_ + 15) / 16 * 16;
    for (auto [slot, name] : dynamic_shared_constants_) k_->constants.push_back({slot, shared_size_});
    k_->static_shared = shared_size_;
    k_->local_size = (local_size_ + 15) / 16 * 16;
    // The layout the JIT tier takes as it is (jit/jit.h, SharedLayout).
    for (const auto& [name, symbol] : symbols_) {
      if (symbol.space == Space::kShared) k_->shared_layout.offsets[name] = symbol.value;
    }
    k_->shared_layout.size = k_->static_shared;
    for (auto& [index, label] : fixups_) {
      auto found = labels_.find(label);
      if (found == labels_.end()) return Status::InvalidArgument("PTX: unknown label " + label);
      k_->code[index].target = found->second;
    }
    // A final exit so that falling off the end ends the threads.
    Inst exit;
    exit.flow = Flow::kExit;
    exit.run = &HNop;
    k_->code.push_back(exit);
    k_->slot_count = static_cast<uint32_t>(next_slot_);
    Hoist(k_);
    return Status::OK();
  }

 private:
  struct Frame {
    std::string prefix;
    std::map<std::string, std::string> alias;  // callee param name -> caller's variable
    std::set<std::string> locals;              // names declared in this body
    std::string return_label;                  // "" at kernel level
  };

  int32_t NewSlot() { return next_slot_++; }

  int32_t Constant(uint64_t value) {
    auto found = constants_.find(value);
    if (found != constants_.end()) return found->second;
    int32_t slot = NewSlot();
    constants_[value] = slot;
    k_->constants.push_back({slot, value});
    return slot;
  }

  std::string Local(const Frame& frame, const std::string& name) const {
    auto alias = frame.alias.find(name);
    if (alias != frame.alias.end()) return alias->second;
    if (frame.locals.count(name)) return frame.prefix + name;
    return name;
  }

  void Unsupported(const std::string& why, int line) {
    if (k_->unsupported.empty()) k_->unsupported = why + " (PTX line " + std::to_string(line) + ")";
  }

  // Marks the kernel unsupported (`why`, at PTX `line`; its launches answer
  // CUDA_ERROR_NOT_SUPPORTED) and puts a trap where `inst` would have gone.
  Status Refuse(const std::string& why, int line, Inst inst) {
    Unsupported(why, line);
    inst.run = &HNop;
    inst.flow = Flow::kTrap;
    k_->code.push_back(inst);
    return Status::OK();
  }

  // Slot of a special register, or -1.
  int32_t Special(const std::string& name) {
    static const char* kAxes = "xyz";
    for (int i = 0; i < 3; ++i) {
      std::string axis = std::string(".") + kAxes[i];
      if (name == "%tid" + axis) return Ensure(&k_->tid[i]);
      if (name == "%ntid" + axis) return Ensure(&k_->ntid[i]);
      if (name == "%ctaid" + axis) return Ensure(&k_->ctaid[i]);
      if (name == "%nctaid" + axis) return Ensure(&k_->nctaid[i]);
      // The sim runs every launch as clusters of one block (the client refuses larger ones
      // for a kernel that names its cluster): each block is its own cluster.
      if (name == "%clusterid" + axis) return Ensure(&k_->ctaid[i]);
      if (name == "%nclusterid" + axis) return Ensure(&k_->nctaid[i]);
      if (name == "%cluster_ctaid" + axis) return Constant(0);
      if (name == "%cluster_nctaid" + axis) return Constant(1);
    }
    if (name == "%cluster_ctarank" || name == "%is_explicit_cluster") return Constant(0);
    if (name == "%cluster_nctarank") return Constant(1);
    if (name == "%laneid") return Ensure(&k_->laneid);
    if (name == "%warpid") return Ensure(&k_->warpid);
    if (name == "%nwarpid") return Ensure(&k_->nwarpid);
    if (name == "%smid") return Ensure(&k_->smid);
    if (name == "%nsmid") return Ensure(&k_->nsmid);
    if (name == "%gridid") return Ensure(&k_->gridid);
    if (name == "%lanemask_eq") return Ensure(&k_->lanemask_eq);
    if (name == "%lanemask_lt") return Ensure(&k_->lanemask_lt);
    if (name == "%lanemask_le") return Ensure(&k_->lanemask_le);
    if (name == "%lanemask_gt") return Ensure(&k_->lanemask_gt);
    if (name == "%lanemask_ge") return Ensure(&k_->lanemask_ge);
    if (name.rfind("%envreg", 0) == 0 && name.size() > 7 && name.size() <= 9) {
      int n = 0;
      for (size_t i = 7; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') return -1;
        n = n * 10 + (name[i] - '0');
      }
      if (n < 32) return Ensure(&k_->envreg[n]);
    }
    return -1;
  }
  int32_t Ensure(int32_t* slot) {
    if (*slot < 0) *slot = NewSlot();
    return *slot;
  }
  static int ClockMode(const std::string& name) {
    if (name == "%clock") return 0;
    if (name == "%clock64") return 1;
    if (name == "%globaltimer") return 2;
    if (name == "%globaltimer_lo") return 3;
    if (name == "%globaltimer_hi") return 4;
    return -1;
  }

  bool IsRegister(const Frame& frame, const std::string& name) const {
    std::string local = Local(frame, name);
    return registers_.count(local) > 0 || name.find('@') != std::string::npos;
  }

  // Value of a symbol as an operand (its address in its own space).
  bool SymbolValue(const Frame& frame, const std::string& name, Symbol* symbol) {
    std::string local = Local(frame, name);
    auto found = symbols_.find(local);
    if (found == symbols_.end()) {
      // A module's .shared variable takes its place in a CTA's shared memory when the
      // kernel, or a function it calls, first names it: as ptxas lays them out, a kernel's
      // static shared memory (cudaFuncAttributes::sharedSizeBytes) holds only its own.
      auto unplaced = unplaced_shared_.find(local);
      if (unplaced == unplaced_shared_.end()) return false;
      const SharedVariable& var = *unplaced->second;
      shared_size_ = (shared_size_ + var.align - 1) / var.align * var.align;
      found = symbols_.emplace(local, Symbol{Space::kShared, shared_size_}).first;
      shared_size_ += var.size;
      unplaced_shared_.erase(unplaced);
    }
    *symbol = found->second;
    return true;
  }

  // Slot holding a source operand's value; `type` decides how literals are
  // encoded.
  Result<int32_t> Source(const Frame& frame, const RawOperand& op, Ty type, int line) {
    switch (op.kind) {
      case RawOperand::kInt: {
        if (type == kF32) return Constant(Put<float>(static_cast<float>(static_cast<int64_t>(op.bits))));
        if (type == kF64) return Constant(Put<double>(static_cast<double>(static_cast<int64_t>(op.bits))));
        return Constant(op.bits);
      }
      case RawOperand::kF32: {
        float f = std::bit_cast<float>(static_cast<uint32_t>(op.bits));
        if (type == kF64) return Constant(Put<double>(f));
        return Constant(op.bits & 0xffffffffu);
      }
      case RawOperand::kF64: {
        double d = std::bit_cast<double>(op.bits);
        if (type == kF32) return Constant(Put<float>(static_cast<float>(d)));
        if (type == kF64) return Constant(op.bits);
        return Constant(static_cast<uint64_t>(static_cast<int64_t>(d)));
      }
      case RawOperand::kAddress: {
        if (!op.negated) break;  // sym+offset as a value
        Symbol symbol;
        if (!SymbolValue(frame, op.name, &symbol)) {
          return Status::InvalidArgument("PTX line " + std::to_string(line) + ": unknown symbol " + op.name);
        }
        return Constant(symbol.value + op.bits);
      }
      case RawOperand::kName: {
        if (int32_t special = Special(op.name); special >= 0) return special;
        if (IsRegister(frame, op.name)) return RegisterSlot(frame, op.name);
        Symbol symbol;
        if (SymbolValue(frame, op.name, &symbol)) {
          if (IsDynamicShared(op.name)) {
            int32_t slot = NewSlot();
            dynamic_shared_constants_.push_back({slot, op.name});
            return slot;
          }
          return Constant(symbol.value);
        }
        if (unsupported_symbols_.count(op.name)) {
          Unsupported("texture, surface or external symbol '" + op.name + "'", line);
          return zero_slot_;
        }
        if (IsDynamicShared(op.name)) {
          int32_t slot = NewSlot();
          dynamic_shared_constants_.push_back({slot, op.name});
          return slot;
        }
        if (op.name == "WARP_SZ") return Constant(32);
        // An undeclared name used as a register (inline asm may omit
        // declarations).
        return RegisterSlot(frame, op.name);
      }
      default:
        break;
    }
    return Status::InvalidArgument("PTX line " + std::to_string(line) + ": unexpected operand");
  }

  bool IsDynamicShared(const std::string& name) const {
    for (const SharedVariable& var : module_.shared) {
      if (var.is_extern && var.name == name) return true;
    }
    return false;
  }

  int32_t RegisterSlot(const Frame& frame, const std::string& name) {
    std::string local = Local(frame, name);
    if (local == "_") return NewSlot();  // sink
    auto found = slots_.find(local);
    if (found != slots_.end()) return found->second;
    int32_t slot = NewSlot();
    slots_[local] = slot;
    return slot;
  }

  Result<int32_t> Dest(const Frame& frame, const RawOperand& op, int line) {
    if (op.kind != RawOperand::kName) {
      return Status::InvalidArgument("PTX line " + std::to_string(line) + ": destination must be a register");
    }
    return RegisterSlot(frame, op.name);
  }

  // Address operand: sets inst.a (base slot), inst.offset and, for symbols, the
  // space.
  Status AddressOperand(const Frame& frame, const RawOperand& op, Inst* inst, int line) {
    if (op.kind != RawOperand::kAddress) {
      return Status::InvalidArgument("PTX line " + std::to_string(line) + ": expected an address");
    }
    inst->offset = static_cast<int64_t>(op.bits);
    if (op.name.empty()) {
      inst->a = zero_slot_;
      inst->uniform_address = true;
      return Status::OK();
    }
    if (IsRegister(frame, op.name) || Special(op.name) >= 0) {
      inst->a = Special(op.name) >= 0 ? Special(op.name) : RegisterSlot(frame, op.name);
      return Status::OK();
    }
    Symbol symbol;
    if (SymbolValue(frame, op.name, &symbol)) {
      // Variables of call parameters live in local memory; the rest keep the
      // stated space (a generic access through a symbol needs the generic
      // address).
      if (symbol.space == Space::kLocal && (inst->space == Space::kParam || inst->space == Space::kLocal)) {
        inst->space = Space::kLocal;
      } else if (inst->space == Space::kGeneric) {
        switch (symbol.space) {
          case Space::kShared:
            symbol.value += kSharedWindow;
            break;
          case Space::kLocal:
            symbol.value += kLocalWindow;
            break;
          case Space::kParam:
            symbol.value += kParamWindow;
            break;
          default:
            break;
        }
      }
      inst->a = Constant(symbol.value);
      inst->uniform_address = true;
      return Status::OK();
    }
    if (IsDynamicShared(op.name)) {
      int32_t slot = NewSlot();
      dynamic_shared_constants_.push_back({slot, op.name});
      inst->a = slot;
      if (inst->space == Space::kGeneric) {
        return Status::InvalidArgument("PTX line " + std::to_string(line) +
                                       ": generic access to dynamic shared symbol");
      }
      return Status::OK();
    }
    if (unsupported_symbols_.count(op.name)) {
      Unsupported("texture, surface or external symbol '" + op.name + "'", line);
      inst->a = zero_slot_;
      return Status::OK();
    }
    return Status::InvalidArgument("PTX line " + std::to_string(line) + ": unknown symbol " + op.name);
  }

  static Space ParseSpace(const std::string& mod, bool* matched) {
    *matched = true;
    if (mod == "global") return Space::kGlobal;
    if (mod == "shared" || mod == "shared::cta") return Space::kShared;
    if (mod == "local") return Space::kLocal;
    if (mod == "param") return Space::kParam;
    if (mod == "const") return Space::kConst;
    *matched = false;
    return Space::kGeneric;
  }

  Status Emit(const RawFunction& function, const std::string& prefix, std::map<std::string, std::string> alias,
              int depth, int) {
    if (k_->code.size() > kMaxKernelInstructions) {
      return Status::InvalidArgument(
          "more than " + std::to_string(kMaxKernelInstructions) +
          " instructions once its device functions are inlined (deep or branching recursion?)"
          " at " +
          function.name);
    }
    Frame frame;
    frame.prefix = prefix;
    frame.alias = std::move(alias);
    frame.return_label = depth >= 0 ? prefix + "$return" : "";
    for (const RawStatement& statement : function.body) {
      if (statement.kind != RawStatement::kInstruction)
        frame.locals.insert(statement.name.empty() ? statement.opcode : statement.name);
    }
    // Register families (%r@3) are local too.
    for (const RawStatement& statement : function.body) {
      if (statement.kind != RawStatement::kInstruction) continue;
      auto note = [&](const RawOperand& op, auto&& self) -> void {
        if ((op.kind == RawOperand::kName || op.kind == RawOperand::kAddress) &&
            op.name.find('@') != std::string::npos) {
          frame.locals.insert(op.name);
        }
        if (!op.pair.empty() && op.pair.find('@') != std::string::npos) frame.locals.insert(op.pair);
        for (const RawOperand& item : op.items) self(item, self);
      };
      for (const RawOperand& op : statement.operands) note(op, note);
      if (statement.guard.find('@') != std::string::npos) frame.locals.insert(statement.guard);
    }
    for (const RawStatement& statement : function.body) {
      switch (statement.kind) {
        case RawStatement::kLabel:
          labels_[Local(frame, statement.opcode)] = static_cast<int32_t>(k_->code.size());
          break;
        case RawStatement::kRegister:
          registers_.insert(Local(frame, statement.name));
          break;
        case RawStatement::kLocal:
        case RawStatement::kParam: {
          uint32_t align = std::max<uint32_t>(statement.align, 1);
          // Checked: declarations are bounded, but inlined calls add theirs up (a launch
          // refuses more than kMaxLocalPerThread, launch.cc; this keeps the sum from wrapping first).
          if (local_size_ > kMaxLocalSum) {
            return Status::InvalidArgument("PTX line " + std::to_string(statement.line) + ": more than " +
                                           std::to_string(kMaxLocalSum) + " bytes of local memory per thread");
          }
          local_size_ = (local_size_ + align - 1) / align * align;
          symbols_[Local(frame, statement.name)] = Symbol{Space::kLocal, local_size_};
          local_size_ += std::max<uint64_t>(statement.size, 1);
          break;
        }
        case RawStatement::kShared: {
          uint32_t align = std::max<uint32_t>(statement.align, 1);
          shared_size_ = (shared_size_ + align - 1) / align * align;
          symbols_[Local(frame, statement.name)] = Symbol{Space::kShared, shared_size_};
          shared_size_ += statement.size;
          break;
        }
        case RawStatement::kInstruction:
          GPUPOOL_RETURN_IF_ERROR(Instruction(frame, statement, depth));
          break;
      }
    }
    if (!frame.return_label.empty()) labels_[frame.return_label] = static_cast<int32_t>(k_->code.size());
    return Status::OK();
  }

  Status Call(const Frame& frame, const RawStatement& s, Inst inst, int depth) {
    // call{.uni} (ret), name, (args);  call name, (args);  call (ret), name;
    const RawOperand* returns = nullptr;
    const RawOperand* callee = nullptr;
    const RawOperand* args = nullptr;
    for (const RawOperand& op : s.operands) {
      if (op.kind == RawOperand::kList) {
        if (callee == nullptr)
          returns = &op;
        else
          args = &op;
      } else if (op.kind == RawOperand::kName && callee == nullptr) {
        callee = &op;
      }
    }
    if (callee == nullptr)
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": call without a target");
    auto local_offset = [&](const RawOperand* list, size_t i) { return ParamVariableOffset(frame, list, i); };
    if (callee->name == "vprintf") {
      inst.run = &HPrintf;
      int64_t format = local_offset(args, 0), arguments = local_offset(args, 1);
      if (format < 0 || arguments < 0) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                       ": vprintf arguments must be .param variables");
      }
      inst.printf_fmt = static_cast<uint32_t>(format);
      inst.printf_args = static_cast<uint32_t>(arguments);
      inst.offset = local_offset(returns, 0);
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (auto declared = module_.functions.find(callee->name); (callee->name == "malloc" || callee->name == "free") &&
                                                              declared != module_.functions.end() &&
                                                              !declared->second.has_body) {
      // Device-side malloc/free on the module's heap variable (HMalloc).
      const bool is_malloc = callee->name == "malloc";
      int64_t argument = local_offset(args, 0), result = is_malloc ? local_offset(returns, 0) : 0;
      Symbol heap;
      if (argument < 0 || result < 0) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + callee->name +
                                       " arguments must be .param variables");
      }
      if (!SymbolValue(frame, kDeviceHeapVariable, &heap) || heap.space != Space::kGlobal || heap.value == 0) {
        return Status::Internal("PTX line " + std::to_string(s.line) + ": " + callee->name +
                                " without the module's device heap");
      }
      uint64_t heap_size = 0;
      for (const ModuleVariable& variable : module_.variables) {
        if (variable.name == kDeviceHeapVariable) heap_size = variable.size;
      }
      if (heap_size < 64 || heap_size % 16 != 0 || heap_size > kMaxDeviceHeapBytes) {
        return Status::Internal("PTX line " + std::to_string(s.line) + ": the module's device heap has " +
                                std::to_string(heap_size) + " bytes");
      }
      inst.aux = static_cast<uint32_t>(heap_size / 16);
      inst.run = is_malloc ? &HMalloc : &HFree;
      inst.printf_fmt = static_cast<uint32_t>(argument);
      inst.printf_args = static_cast<uint32_t>(result);
      inst.offset = static_cast<int64_t>(heap.value);
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (auto declared = module_.functions.find(callee->name); callee->name == "cudaGraphSetConditional" &&
                                                              declared != module_.functions.end() &&
                                                              !declared->second.has_body) {
      int64_t handle = local_offset(args, 0), value = local_offset(args, 1);
      if (handle < 0 || value < 0) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                       ": cudaGraphSetConditional arguments must be .param "
                                       "variables");
      }
      inst.run = &HSetConditional;
      inst.printf_fmt = static_cast<uint32_t>(handle);
      inst.printf_args = static_cast<uint32_t>(value);
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (auto declared = module_.functions.find(callee->name);
        declared != module_.functions.end() && !declared->second.has_body) {
      if (auto op = DeviceRuntimeOp(callee->name); op >= 0) {
        return DeviceRuntime(frame, s, static_cast<DeviceRuntimeCall::Op>(op), callee->name, returns, args, inst);
      }
    }
    if (callee->name == "__assertfail" || callee->name == "__assert_fail") {
      inst.run = &HAssert;
      inst.flow = Flow::kAssert;
      int64_t message = local_offset(args, 0), file = local_offset(args, 1), line = local_offset(args, 2),
              function = local_offset(args, 3);
      if (message < 0 || file < 0 || line < 0 || function < 0) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                       ": __assertfail arguments must be .param variables");
      }
      inst.printf_fmt = static_cast<uint32_t>(message);
      inst.printf_args = static_cast<uint32_t>(file);
      inst.offset = line;
      inst.aux = static_cast<uint32_t>(function);  // not e: a source slot, renamed by Optimize
      k_->code.push_back(inst);
      return Status::OK();
    }
    const bool indirect = IsRegister(frame, callee->name);
    auto found = module_.functions.find(callee->name);
    if (!indirect && (found == module_.functions.end() || !found->second.has_body)) {
      return Refuse("call of external function '" + callee->name + "'", s.line, inst);
    }
    // A guarded call: jump around the call where the guard is false.
    int32_t skip_index = -1;
    if (inst.guard >= 0) {
      Inst skip;
      skip.run = &HNop;
      skip.flow = Flow::kBranch;
      skip.guard = inst.guard;
      skip.guard_negated = !inst.guard_negated;
      skip.line = s.line;
      skip_index = static_cast<int32_t>(k_->code.size());
      k_->code.push_back(skip);
    }
    if (indirect) {
      GPUPOOL_RETURN_IF_ERROR(IndirectCall(frame, s, *callee, returns, args, depth));
    } else {
      GPUPOOL_RETURN_IF_ERROR(InlineCall(frame, s, found->second, returns, args, depth));
    }
    if (skip_index >= 0) k_->code[skip_index].target = static_cast<int32_t>(k_->code.size());
    return Status::OK();
  }

  // The local-memory offset of item `i` of a call's argument or result list, which must
  // be a .param variable (calls of built-ins read and write them there); -1 otherwise.
  int64_t ParamVariableOffset(const Frame& frame, const RawOperand* list, size_t i) {
    if (list == nullptr || i >= list->items.size()) return -1;
    Symbol symbol;
    if (!SymbolValue(frame, list->items[i].name, &symbol) || symbol.space != Space::kLocal) return -1;
    return static_cast<int64_t>(symbol.value);
  }

  // The device runtime's entry points (CUDA 12's CDP2) the engine runs; -1 for others.
  static int DeviceRuntimeOp(const std::string& name) {
    static const std::map<std::string, DeviceRuntimeCall::Op> ops = {
        {"__cudaCDP2GetParameterBufferV2", DeviceRuntimeCall::kGetParameterBuffer},
        {"__cudaCDP2LaunchDeviceV2", DeviceRuntimeCall::kLaunchDevice},
        {"__cudaCDP2LaunchDeviceV2_ptsz", DeviceRuntimeCall::kLaunchDevice},  // --default-stream per-thread
        {"__cudaCDP2GetLastError", DeviceRuntimeCall::kGetLastError},
        {"__cudaCDP2PeekAtLastError", DeviceRuntimeCall::kPeekAtLastError},
        {"__cudaCDP2StreamCreateWithFlags", DeviceRuntimeCall::kStreamCreate},
        {"__cudaCDP2StreamDestroy", DeviceRuntimeCall::kStreamDestroy},
        {"__cudaCDP2Malloc", DeviceRuntimeCall::kMalloc},
        {"__cudaCDP2Free", DeviceRuntimeCall::kFree},
        {"__cudaCDP2EventCreateWithFlags", DeviceRuntimeCall::kEventCreate},
        {"__cudaCDP2EventRecord", DeviceRuntimeCall::kEventOrder},
        {"__cudaCDP2EventRecord_ptsz", DeviceRuntimeCall::kEventOrder},
        {"__cudaCDP2EventRecordWithFlags", DeviceRuntimeCall::kEventOrder},
        {"__cudaCDP2EventRecordWithFlags_ptsz", DeviceRuntimeCall::kEventOrder},
        {"__cudaCDP2StreamWaitEvent", DeviceRuntimeCall::kEventOrder},
        {"__cudaCDP2StreamWaitEvent_ptsz", DeviceRuntimeCall::kEventOrder},
        {"__cudaCDP2EventDestroy", DeviceRuntimeCall::kEventOrder},
    };
    auto found = ops.find(name);
    return found == ops.end() ? -1 : found->second;
  }

  // A call of the device runtime: HDeviceRuntime with its arguments' offsets.
  Status DeviceRuntime(const Frame& frame, const RawStatement& s, DeviceRuntimeCall::Op op, const std::string& name,
                       const RawOperand* returns, const RawOperand* args, Inst inst) {
    static constexpr size_t kArgCount[] = {4, 2, 0, 2, 1, 2, 1, 0, 2, 0};  // by Op (kEventOrder reads none)
    DeviceRuntimeCall call;
    call.op = op;
    auto local_offset = [&](const RawOperand* list, size_t i) { return ParamVariableOffset(frame, list, i); };
    for (size_t i = 0; i < kArgCount[op]; ++i) {
      const int64_t offset = local_offset(args, i);
      if (offset < 0) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + name +
                                       " arguments must be .param variables");
      }
      call.args[i] = static_cast<uint32_t>(offset);
    }
    const int64_t result = local_offset(returns, 0);
    if (result < 0) {
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + name +
                                     " needs a .param variable for its result");
    }
    call.result = static_cast<uint32_t>(result);
    if (runtime_error_offset_ < 0) {
      // Each thread's last error (cudaGetLastError) in local memory, which CTAs reuse:
      // the error, then its CTA's number + 1 (another CTA's error is none).
      local_size_ = (local_size_ + 3) / 4 * 4;
      runtime_error_offset_ = static_cast<int64_t>(local_size_);
      local_size_ += 8;
    }
    call.last_error = static_cast<uint32_t>(runtime_error_offset_);
    Symbol heap;
    if (SymbolValue(frame, kDeviceHeapVariable, &heap) && heap.space == Space::kGlobal) {
      call.heap = heap.value;
      for (const ModuleVariable& variable : module_.variables) {
        if (variable.name == kDeviceHeapVariable) call.heap_size = variable.size;
      }
    }
    if (k_->entries.empty()) {
      for (const auto& [entry_name, function] : module_.functions) {
        if (!function.is_entry || !function.has_body) continue;
        k_->entries.push_back(LaunchableEntry{FunctionAddress(module_, entry_name), entry_name,
                                              static_cast<uint32_t>(ParamLayout(function, nullptr))});
      }
    }
    inst.run = &HDeviceRuntime;
    inst.aux = static_cast<uint32_t>(k_->device_calls.size());
    k_->device_calls.push_back(call);
    k_->code.push_back(inst);
    return Status::OK();
  }

  // A trap of `kind` (kTrap...): the launch fails where a lane reaches it.
  void EmitTrap(uint8_t kind, int line) {
    Inst trap;
    trap.run = &HNop;
    trap.flow = Flow::kTrap;
    trap.mode = kind;
    trap.line = line;
    k_->code.push_back(trap);
  }

  // The body of `target` inlined here, its parameters and results the call's variables.
  // Nested deeper than kMaxCallDepth: a trap where the call would run.
  Status InlineCall(const Frame& frame, const RawStatement& s, const RawFunction& target, const RawOperand* returns,
                    const RawOperand* args, int depth) {
    if (std::max(depth, 0) + 1 > kMaxCallDepth) {
      EmitTrap(kTrapCallsTooDeep, s.line);
      return Status::OK();
    }
    std::map<std::string, std::string> alias;
    for (size_t i = 0; i < target.params.size(); ++i) {
      if (args == nullptr || i >= args->items.size() || args->items[i].kind != RawOperand::kName) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": call of " + target.name +
                                       " with missing arguments");
      }
      alias[target.params[i].name] = Local(frame, args->items[i].name);
    }
    for (size_t i = 0; i < target.returns.size(); ++i) {
      if (returns != nullptr && i < returns->items.size()) {
        alias[target.returns[i].name] = Local(frame, returns->items[i].name);
      } else {
        std::string scratch = "ret$" + std::to_string(++call_count_);
        if (local_size_ > kMaxLocalSum) {
          return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": more than " +
                                         std::to_string(kMaxLocalSum) + " bytes of local memory per thread");
        }
        local_size_ = (local_size_ + 15) / 16 * 16;
        symbols_[scratch] = Symbol{Space::kLocal, local_size_};
        local_size_ += std::max<uint64_t>(target.returns[i].size, 8);
        alias[target.returns[i].name] = scratch;
      }
    }
    std::string prefix = "c" + std::to_string(++call_count_) + ":";
    return Emit(target, prefix, std::move(alias), std::max(depth, 0) + 1, 0);
  }

  // Device functions whose address the module takes (in an initialiser, as virtual tables
  // and function-pointer arrays have them, or as an instruction's operand): what an
  // indirect call may reach.
  const std::vector<const RawFunction*>& AddressTaken() {
    if (address_taken_ready_) return address_taken_;
    address_taken_ready_ = true;
    std::set<std::string> names;
    for (const ModuleVariable& variable : module_.variables) {
      for (const Relocation& relocation : variable.relocations) names.insert(relocation.symbol);
    }
    for (const auto& [name, function] : module_.functions) {
      for (const RawStatement& statement : function.body) {
        if (statement.kind != RawStatement::kInstruction || statement.opcode.rfind("call", 0) == 0) continue;
        for (const RawOperand& op : statement.operands) {
          if (op.kind == RawOperand::kName || op.kind == RawOperand::kAddress) names.insert(op.name);
        }
      }
    }
    for (const std::string& name : names) {
      auto found = module_.functions.find(name);
      if (found != module_.functions.end() && found->second.has_body && !found->second.is_entry)
        address_taken_.push_back(&found->second);
    }
    return address_taken_;
  }

  // call (ret), %rd, (args), prototype: the lanes compare %rd with the address of each
  // function it may reach (taken somewhere in the module, with as many parameters and
  // results as the call passes) and run that function's body inlined; a lane whose %rd
  // is none of them traps with CUDA_ERROR_ILLEGAL_ADDRESS, as a GPU faults on a bad
  // function pointer. Lanes calling different functions diverge and reconverge after.
  Status IndirectCall(const Frame& frame, const RawStatement& s, const RawOperand& callee, const RawOperand* returns,
                      const RawOperand* args, int depth) {
    const size_t arg_count = args == nullptr ? 0 : args->items.size();
    const size_t return_count = returns == nullptr ? 0 : returns->items.size();
    const std::string tag = "$icall" + std::to_string(++call_count_);
    const std::string predicate = tag + "$p", end = tag + "$end";
    registers_.insert(predicate);
    int candidate = 0;
    for (const RawFunction* target : AddressTaken()) {
      if (target->params.size() != arg_count || target->returns.size() < return_count) continue;
      const std::string next = tag + "$" + std::to_string(candidate++);
      RawStatement compare;
      compare.opcode = "setp.eq.u64";
      compare.line = s.line;
      compare.operands.resize(3);
      compare.operands[0].kind = RawOperand::kName;
      compare.operands[0].name = predicate;
      compare.operands[1] = callee;
      compare.operands[2].kind = RawOperand::kInt;
      compare.operands[2].bits = FunctionAddress(module_, target->name);
      GPUPOOL_RETURN_IF_ERROR(Instruction(frame, compare, depth));
      RawStatement branch;
      branch.opcode = "bra";
      branch.line = s.line;
      branch.guard = predicate;
      branch.guard_negated = true;
      branch.operands.resize(1);
      branch.operands[0].kind = RawOperand::kName;
      branch.operands[0].name = next;
      GPUPOOL_RETURN_IF_ERROR(Instruction(frame, branch, depth));
      GPUPOOL_RETURN_IF_ERROR(InlineCall(frame, s, *target, returns, args, depth));
      branch.guard.clear();
      branch.operands[0].name = end;
      GPUPOOL_RETURN_IF_ERROR(Instruction(frame, branch, depth));
      labels_[next] = static_cast<int32_t>(k_->code.size());
    }
    EmitTrap(kTrapBadFunction, s.line);
    labels_[end] = static_cast<int32_t>(k_->code.size());
    return Status::OK();
  }

  // f16/bf16 arithmetic (scalar and x2): computed in float, rounded to nearest.
  Status HalfInstruction(const Frame& frame, const RawStatement& s, Inst inst, const std::string& op, Ty type) {
    static const std::map<std::string, std::pair<uint8_t, int>> kOps = {
        {"add", {0, 2}}, {"sub", {1, 2}}, {"mul", {2, 2}}, {"fma", {3, 3}},  {"mad", {3, 3}}, {"neg", {4, 1}},
        {"abs", {5, 1}}, {"min", {6, 2}}, {"max", {7, 2}}, {"tanh", {8, 1}}, {"ex2", {9, 1}}};
    auto found = kOps.find(op);
    if (found == kOps.end()) {
      return Refuse("half-precision instruction '" + s.opcode + "' is not supported", s.line, inst);
    }
    inst.mode = found->second.first;
    int arity = found->second.second;
    for (const std::string& part : Split(s.opcode)) {
      if (part == "relu") inst.flags |= kFlagRelu;
      if (part == "NaN" && (op == "min" || op == "max")) inst.flags |= kFlagNaNOperand;
      if (part == "xorsign") {
        return Refuse("half-precision instruction '" + s.opcode + "' is not supported", s.line, inst);
      }
    }
    inst.vec = (type == kF16x2 || type == kBF16x2) ? 2 : 1;
    inst.mode2 = (type == kBF16 || type == kBF16x2) ? 1 : 0;
    const auto& ops = s.operands;
    if (ops.size() < static_cast<size_t>(arity) + 1) {
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + s.opcode + " has too few operands");
    }
    auto dest = Dest(frame, ops[0], s.line);
    if (!dest.ok()) return dest.status();
    inst.d[0] = *dest;
    int32_t* sources[3] = {&inst.a, &inst.b, &inst.c};
    for (int i = 0; i < arity; ++i) {
      auto slot = Source(frame, ops[i + 1], kU32, s.line);
      if (!slot.ok()) return slot.status();
      *sources[i] = *slot;
    }
    inst.run = &HHalf;
    k_->code.push_back(inst);
    return Status::OK();
  }

  // InvalidArgument naming the instruction and its PTX line.
  static Status BadInstruction(const RawStatement& s, const std::string& why) {
    return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + s.opcode + ": " + why);
  }

  // Element types of wmma and mma.sync fragments, by their PTX names.
  inline static const std::map<std::string, WmmaType> kWmmaTypes = {
      {"f16", WmmaType::kF16}, {"bf16", WmmaType::kBF16}, {"tf32", WmmaType::kTF32}, {"f32", WmmaType::kF32},
      {"f64", WmmaType::kF64}, {"s8", WmmaType::kS8},     {"u8", WmmaType::kU8},     {"s32", WmmaType::kS32}};

  // The registers of fragment operand `operand` ({%r1, ...}) of matrix `matrix` (a, b, c
  // or d) of `op`, into *slots: enough to hold the matrix across the warp (wmma, whose
  // fragments may hold copies), or exactly that many (exact: mma.sync).
  Status Fragment(const Frame& frame, const RawStatement& s, const RawOperand& operand, const WmmaOp& op, char matrix,
                  WmmaType type, bool exact, std::vector<int32_t>* slots) {
    if (operand.kind != RawOperand::kVector) return BadInstruction(s, "a fragment must be a {list}");
    for (const RawOperand& item : operand.items) {
      if (item.kind != RawOperand::kName) {
        return BadInstruction(s, "a fragment holds registers only");
      }
      slots->push_back(RegisterSlot(frame, item.name));
    }
    uint32_t rows, cols;
    WmmaShape(op, matrix, &rows, &cols);
    const uint64_t held = slots->size() * WmmaPerRegister(type) * 32;
    if (exact ? held != rows * cols : held < rows * cols) {
      return BadInstruction(s, "fragment " + std::string(1, matrix) + " of " + std::to_string(slots->size()) +
                                   " registers does not fit a " + std::to_string(rows) + "x" + std::to_string(cols) +
                                   " matrix");
    }
    return Status::OK();
  }

  // The modifiers of a wmma or mma.sync instruction: its shape (into op's m, n, k), its
  // element types and layouts (true: row) in order, and .satfinite. False when it names a
  // sub-byte type (s4, u4, b1), which the sim does not run.
  static bool MatrixModifiers(const std::vector<std::string>& parts, WmmaOp* op, std::vector<WmmaType>* types,
                              std::vector<bool>* row_layouts) {
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string& part = parts[i];
      unsigned m = 0, n = 0, k = 0;
      char tail = 0;
      if (std::sscanf(part.c_str(), "m%un%uk%u%c", &m, &n, &k, &tail) == 3) {
        op->m = m;
        op->n = n;
        op->k = k;
      } else if (auto type = kWmmaTypes.find(part); type != kWmmaTypes.end()) {
        types->push_back(type->second);
      } else if (part == "row" || part == "col") {
        row_layouts->push_back(part == "row");
      } else if (part == "satfinite") {
        op->satfinite = true;
      } else if (part == "s4" || part == "u4" || part == "b1") {
        return false;
      }
    }
    return true;
  }

  // wmma.load / wmma.store / wmma.mma (HWmmaMemory, HWmmaMma). `inst` comes with
  // its guard and state space.
  Status Wmma(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
    auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
    WmmaOp op;
    std::vector<WmmaType> types;
    std::vector<bool> layouts;  // true: row
    if (!MatrixModifiers(parts, &op, &types, &layouts)) {
      return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU (sub-byte wmma)", s.line, inst);
    }
    static const std::set<std::tuple<uint32_t, uint32_t, uint32_t>> kShapes = {
        {16, 16, 16}, {8, 32, 16}, {32, 8, 16}, {16, 16, 8}, {8, 8, 4}};
    if (!kShapes.count({op.m, op.n, op.k})) return invalid("unknown or missing shape");
    const std::string& what = parts.size() > 1 ? parts[1] : "";
    auto fragment = [&](const RawOperand& operand, char matrix, WmmaType type, std::vector<int32_t>* slots) {
      return Fragment(frame, s, operand, op, matrix, type, /*exact=*/false, slots);
    };
    const auto& ops = s.operands;
    if (what == "load" || what == "store") {
      const bool store = what == "store";
      op.kind = store ? WmmaOp::kStore : WmmaOp::kLoad;
      op.matrix = parts.size() > 2 && parts[2].size() == 1 ? parts[2][0] : '?';
      if (store ? op.matrix != 'd' : (op.matrix < 'a' || op.matrix > 'c')) {
        return invalid(store ? "only d is stored" : "loads a, b or c");
      }
      if (layouts.size() != 1 || types.size() != 1) return invalid("needs one layout and one type");
      if (ops.size() != 2 && ops.size() != 3) return invalid("needs a fragment, an address and an optional stride");
      op.row_major = layouts[0];
      op.types[0] = types[0];
      GPUPOOL_RETURN_IF_ERROR(fragment(ops[store ? 1 : 0], op.matrix, op.types[0], &op.fragments[0]));
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[store ? 0 : 1], &inst, s.line));
      if (ops.size() == 3) {
        auto stride = Source(frame, ops[2], kU32, s.line);
        if (!stride.ok()) return stride.status();
        inst.b = *stride;
      }
      inst.run = store ? &HWmmaMemory<true> : &HWmmaMemory<false>;
    } else if (what == "mma") {
      op.kind = WmmaOp::kMma;
      if (layouts.size() != 2) return invalid("needs the layouts of a and b");
      if (types.size() == 2) {  // .dtype.ctype: f16 inputs
        types = {types[0], WmmaType::kF16, WmmaType::kF16, types[1]};
      }
      if (types.size() != 4 || ops.size() != 4) return invalid("needs d, a, b and c");
      for (int i = 0; i < 4; ++i) op.types[i] = types[i];
      const bool integer = types[1] == WmmaType::kS8 || types[1] == WmmaType::kU8;
      const bool valid = integer                      ? types[0] == WmmaType::kS32 && types[3] == WmmaType::kS32
                         : types[1] == WmmaType::kF64 ? types[0] == WmmaType::kF64 && types[3] == WmmaType::kF64
                                                      : (types[0] == WmmaType::kF32 || types[0] == WmmaType::kF16) &&
                                                            (types[3] == WmmaType::kF32 || types[3] == WmmaType::kF16);
      if (!valid) return invalid("unsupported combination of types");
      static const char kMatrices[4] = {'d', 'a', 'b', 'c'};
      for (int i = 0; i < 4; ++i) {
        GPUPOOL_RETURN_IF_ERROR(fragment(ops[i], kMatrices[i], op.types[i], &op.fragments[i]));
      }
      inst.run = &HWmmaMma;
    } else {
      return invalid("expected wmma.load, wmma.store or wmma.mma");
    }
    inst.aux = static_cast<uint32_t>(k_->wmma.size());
    k_->wmma.push_back(std::move(op));
    k_->code.push_back(inst);
    return Status::OK();
  }

  // cp.async (HCpAsync): the copy forms, cp.async.{ca,cg}.shared{::cta}.global
  // [dst], [src], cp-size{, src-size | ignore-src}, and commit_group, wait_group, wait_all,
  // which have nothing to wait for here. `inst` comes with its guard.
  Status CpAsync(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
    const std::string what = parts.size() > 2 ? parts[2] : "";
    if (what == "mbarrier") {
      // cp.async.mbarrier.arrive{.noinc}.shared.b64 [mbar]: an arrival once this thread's
      // copies are done, which they are. Without .noinc the pending count is raised by one
      // first, so the two cancel out.
      if (parts.size() < 4 || parts[3] != "arrive" || s.operands.size() != 1) {
        return BadInstruction(s, "expected cp.async.mbarrier.arrive [mbar]");
      }
      if (std::find(parts.begin(), parts.end(), "noinc") == parts.end()) {
        inst.run = &HNop;
        k_->code.push_back(inst);
        return Status::OK();
      }
      if (inst.space != Space::kShared) inst.space = Space::kGeneric;
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, s.operands[0], &inst, s.line));
      inst.mode = 1;
      inst.run = &HMbarrier;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (what == "commit_group" || what == "wait_group" || what == "wait_all") {
      inst.run = &HNop;
      k_->code.push_back(inst);
      return Status::OK();
    }
    auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
    if (what != "ca" && what != "cg") return invalid("expected .ca, .cg, commit_group or wait_group");
    if (std::find(parts.begin(), parts.end(), "global") == parts.end() ||
        (std::find(parts.begin(), parts.end(), "shared") == parts.end() &&
         std::find(parts.begin(), parts.end(), "shared::cta") == parts.end())) {
      return invalid("copies from .global to .shared");
    }
    const bool cache_hint = std::find(parts.begin(), parts.end(), "L2::cache_hint") != parts.end();
    const auto& ops = s.operands;
    const size_t plain = cache_hint ? 4 : 3;  // the operands without src-size / ignore-src
    if (ops.size() != plain && ops.size() != plain + 1) return invalid("wrong number of operands");
    if (ops[2].kind != RawOperand::kInt || (ops[2].bits != 4 && ops[2].bits != 8 && ops[2].bits != 16)) {
      return invalid("cp-size must be 4, 8 or 16");
    }
    if (what == "cg" && ops[2].bits != 16) return invalid(".cg copies 16 bytes");
    inst.width = static_cast<uint8_t>(ops[2].bits);
    inst.space = Space::kGlobal;
    Inst source = inst;
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &source, s.line));
    if (source.offset < INT32_MIN || source.offset > INT32_MAX) return invalid("source offset too large");
    inst.b = source.a;
    inst.aux = static_cast<uint32_t>(static_cast<int32_t>(source.offset));
    inst.space = Space::kShared;
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[0], &inst, s.line));
    if (ops.size() == plain + 1) {
      const RawOperand& extra = ops[3];
      // ignore-src is a predicate (nvcc names them %p), src-size an integer.
      const bool predicate = extra.kind == RawOperand::kName && (extra.negated || extra.name.rfind("%p", 0) == 0);
      auto slot = Source(frame, extra, predicate ? kPred : kU32, s.line);
      if (!slot.ok()) return slot.status();
      inst.c = *slot;
      if (predicate) {
        if (extra.negated) return invalid("a negated ignore-src is not supported");
        inst.flags |= kFlagSigned;
      }
    }
    inst.run = &HCpAsync;
    k_->code.push_back(inst);
    return Status::OK();
  }

  // mbarrier.{init,arrive,arrive_drop,test_wait,try_wait,inval,pending_count} (HMbarrier)
  // on the CTA's shared memory; the transaction-count forms (sm_90) are refused.
  Status Mbarrier(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
    auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
    auto has = [&](const char* part) { return std::find(parts.begin(), parts.end(), part) != parts.end(); };
    if (has("expect_tx") || has("complete_tx") || has("shared::cluster")) {
      return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU (transaction counts, clusters)",
                    s.line, inst);
    }
    const std::string what = parts.size() > 1 ? parts[1] : "";
    const auto& ops = s.operands;
    auto destination = [&]() -> Status {
      auto slot = Dest(frame, ops[0], s.line);
      if (!slot.ok()) return slot.status();
      inst.d[0] = *slot;
      return Status::OK();
    };
    // Generic addresses (a shared-memory barrier reached through a pointer) or shared ones.
    if (inst.space != Space::kShared) inst.space = Space::kGeneric;
    if (what == "pending_count") {
      if (ops.size() != 2) return invalid("needs a destination and a state");
      GPUPOOL_RETURN_IF_ERROR(destination());
      auto state = Source(frame, ops[1], kU64, s.line);
      if (!state.ok()) return state.status();
      inst.b = *state;
      inst.mode = 6;
    } else if (what == "init" || what == "inval") {
      if (ops.size() != (what == "init" ? 2u : 1u)) return invalid("wrong number of operands");
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[0], &inst, s.line));
      if (what == "init") {
        auto count = Source(frame, ops[1], kU32, s.line);
        if (!count.ok()) return count.status();
        inst.b = *count;
      }
      inst.mode = what == "init" ? 0 : 5;
    } else if (what == "arrive" || what == "arrive_drop") {
      if (ops.size() != 2 && ops.size() != 3) return invalid("needs a state, an address and an optional count");
      if (!(ops[0].kind == RawOperand::kName && ops[0].name == "_")) {
        GPUPOOL_RETURN_IF_ERROR(destination());
      }
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &inst, s.line));
      if (ops.size() == 3) {
        auto count = Source(frame, ops[2], kU32, s.line);
        if (!count.ok()) return count.status();
        inst.b = *count;
      }
      inst.mode = what == "arrive" ? 1 : 2;
    } else if (what == "test_wait" || what == "try_wait") {
      // try_wait may take a suspend-time hint as a fourth operand: nothing waits here.
      if (ops.size() != 3 && !(what == "try_wait" && ops.size() == 4)) {
        return invalid("needs a predicate, an address and a state or parity");
      }
      GPUPOOL_RETURN_IF_ERROR(destination());
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &inst, s.line));
      auto state = Source(frame, ops[2], kU64, s.line);
      if (!state.ok()) return state.status();
      inst.b = *state;
      inst.mode = has("parity") ? 4 : 3;
    } else {
      return invalid("expected init, arrive, arrive_drop, test_wait, try_wait, inval or pending_count");
    }
    inst.run = &HMbarrier;
    k_->code.push_back(inst);
    return Status::OK();
  }

  // mma.sync.aligned.shape.row.col.dtype.atype.btype.ctype d, a, b, c (HWmmaMma with the
  // lane layouts PTX defines): m16n8k16 and m16n8k8 of f16 and bf16 into f32 or f16 (f16
  // inputs only), m16n8k8 of tf32, m8n8k4 of f64. Other shapes and types are refused.
  Status MmaSync(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
    WmmaOp op;
    op.kind = WmmaOp::kMma;
    op.ptx_layout = true;
    std::vector<WmmaType> types;
    std::vector<bool> layouts;  // true: row
    const bool whole_bytes = MatrixModifiers(parts, &op, &types, &layouts);
    const auto shape = std::make_tuple(op.m, op.n, op.k);
    bool supported = whole_bytes && types.size() == 4 && layouts == std::vector<bool>{true, false};
    if (supported) {
      for (int i = 0; i < 4; ++i) op.types[i] = types[i];
      const WmmaType a = types[1], d = types[0], c = types[3];
      const bool half_in = (a == WmmaType::kF16 || a == WmmaType::kBF16) && types[2] == a &&
                           (shape == std::make_tuple(16u, 8u, 16u) || shape == std::make_tuple(16u, 8u, 8u));
      const bool half_out = d == WmmaType::kF16 || c == WmmaType::kF16;
      supported = (half_in && (d == WmmaType::kF32 || d == WmmaType::kF16) &&
                   (c == WmmaType::kF32 || c == WmmaType::kF16) && (!half_out || a == WmmaType::kF16)) ||
                  (a == WmmaType::kTF32 && types[2] == a && d == WmmaType::kF32 && c == WmmaType::kF32 &&
                   shape == std::make_tuple(16u, 8u, 8u)) ||
                  (a == WmmaType::kF64 && types[2] == a && d == a && c == a && shape == std::make_tuple(8u, 8u, 4u));
    }
    if (!supported) {
      return Refuse("instruction '" + s.opcode +
                        "' is not supported by the sim GPU (mma.sync runs m16n8k16 and m16n8k8 "
                        "of f16/bf16, m16n8k8 of tf32 and m8n8k4 of f64)",
                    s.line, inst);
    }
    const auto& ops = s.operands;
    if (ops.size() != 4) return BadInstruction(s, "needs d, a, b and c");
    static const char kMatrices[4] = {'d', 'a', 'b', 'c'};
    for (int i = 0; i < 4; ++i) {
      GPUPOOL_RETURN_IF_ERROR(Fragment(frame, s, ops[i], op, kMatrices[i], op.types[i],
                                       /*exact=*/true, &op.fragments[i]));
    }
    inst.run = &HWmmaMma;
    inst.aux = static_cast<uint32_t>(k_->wmma.size());
    k_->wmma.push_back(std::move(op));
    k_->code.push_back(inst);
    return Status::OK();
  }

  // tex, tld4, txq, suld.b, sust.b, suq (HTexture).
  Status Texture(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
    texture::Op op;
    std::string why;
    if (!texture::ParseOpcode(parts, &op, &why)) return Refuse(why, s.line, inst);
    const auto& ops = s.operands;
    const bool store = op.kind == texture::Kind::kSust;
    const bool query = op.kind == texture::Kind::kTxq || op.kind == texture::Kind::kSuq;
    if (ops.size() != 2) return Refuse(s.opcode + " with these operands", s.line, inst);
    const RawOperand& address = ops[store ? 0 : 1];
    const RawOperand& data = ops[store ? 1 : 0];
    if (address.kind != RawOperand::kAddress || !IsRegister(frame, address.name) || address.bits != 0 ||
        address.items.size() != (query ? 0u : 1u)) {
      // A .texref/.surfref name, or an explicit sampler: texture references.
      return Refuse("texture references and samplers are not supported by the sim GPU", s.line, inst);
    }
    inst.a = RegisterSlot(frame, address.name);
    int32_t* coordinate_slots[4] = {&inst.b, &inst.c, &inst.e, nullptr};
    int32_t fourth = -1;
    coordinate_slots[3] = &fourth;
    if (!query) {
      const RawOperand& coords = address.items[0];
      const std::vector<RawOperand> single = {coords};
      const std::vector<RawOperand>& items = coords.kind == RawOperand::kVector ? coords.items : single;
      if (static_cast<int>(items.size()) != texture::CoordinateCount(op)) {
        return BadInstruction(s, "needs " + std::to_string(texture::CoordinateCount(op)) + " coordinates");
      }
      const bool surface = op.kind == texture::Kind::kSuld || store;
      for (size_t i = 0; i < items.size(); ++i) {
        const bool integer = surface || op.int_coords || static_cast<int>(i) == texture::LayerCoordinate(op);
        auto slot = Source(frame, items[i], integer ? kS32 : kF32, s.line);
        if (!slot.ok()) return slot.status();
        *coordinate_slots[i] = *slot;
      }
    }
    inst.offset = fourth;
    const std::vector<RawOperand> single = {data};
    const std::vector<RawOperand>& values = data.kind == RawOperand::kVector ? data.items : single;
    const size_t expected = query ? 1 : (op.kind == texture::Kind::kSuld || store) ? op.vec : 4;
    if (values.size() != expected) {
      return BadInstruction(s, "needs " + std::to_string(expected) + " values");
    }
    static const Ty kElement[9] = {kNoType, kU8, kU16, kNoType, kU32, kNoType, kNoType, kNoType, kU64};
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i].kind == RawOperand::kName && values[i].name == "_") continue;  // a sink
      auto slot = store ? Source(frame, values[i], kElement[op.width], s.line) : Dest(frame, values[i], s.line);
      if (!slot.ok()) return slot.status();
      inst.d[i] = *slot;
    }
    inst.aux = texture::Pack(op);
    inst.run = &HTexture;
    k_->code.push_back(inst);
    return Status::OK();
  }

  // ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16 (HLdmatrix).
  Status Ldmatrix(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
    auto has = [&](const char* part) { return std::find(parts.begin(), parts.end(), part) != parts.end(); };
    const int count = has("x1") ? 1 : has("x2") ? 2 : has("x4") ? 4 : 0;
    if (!has("m8n8") || !has("b16") || count == 0) {
      return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU (ldmatrix runs m8n8 .b16)", s.line,
                    inst);
    }
    const auto& ops = s.operands;
    if (ops.size() != 2 || ops[0].kind != RawOperand::kVector || ops[0].items.size() != static_cast<size_t>(count)) {
      return BadInstruction(s, "needs " + std::to_string(count) + " destination registers and an address");
    }
    for (int j = 0; j < count; ++j) {
      auto slot = Dest(frame, ops[0].items[j], s.line);
      if (!slot.ok()) return slot.status();
      inst.d[j] = *slot;
    }
    if (inst.space != Space::kShared) inst.space = Space::kGeneric;
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &inst, s.line));
    inst.vec = static_cast<uint8_t>(count);
    if (has("trans")) inst.flags |= kFlagSigned;
    inst.run = &HLdmatrix;
    k_->code.push_back(inst);
    return Status::OK();
  }

  Status Instruction(const Frame& frame, const RawStatement& s, int depth) {
    const size_t first = k_->code.size();
    GPUPOOL_RETURN_IF_ERROR(InstructionBody(frame, s, depth));
    const std::string op = s.opcode.substr(0, s.opcode.find('.'));
    uint8_t sync = kSyncNone;
    if (op == "wmma" || op == "mma" || op == "ldmatrix") sync = kSyncWarp;
    if (op == "vote" || op == "match" || op == "redux") sync = kSyncMaskB;
    if (op == "shfl" || s.opcode.rfind("bar.warp", 0) == 0) sync = kSyncMaskE;
    for (size_t i = first; i < k_->code.size() && sync != kSyncNone; ++i) {
      Inst& inst = k_->code[i];
      inst.collective = sync;
      // Without a membermask (the old forms), the lanes executing are the lanes it names.
      if ((sync == kSyncMaskB && inst.b < 0) || (sync == kSyncMaskE && inst.e < 0)) {
        inst.collective = kSyncNone;
      }
    }
    return Status::OK();
  }

  // The first of `mods` that the arithmetic and logic handlers (the end of
  // InstructionBody) do not implement for `op`, or "" when they implement them all.
  // Rounding (.rn, .rz, .rm, .rp), .ftz and .sat are applied to floats; .approx and .full
  // are computed at least as exactly as the ISA bounds them.
  static std::string UnhonouredModifier(const std::string& op, const std::set<std::string>& mods) {
    static const std::map<std::string, std::set<std::string>> kHonoured = [] {
      const std::set<std::string> rounding = {"rn", "rz", "rm", "rp", "ftz", "sat"};
      auto with = [&](std::set<std::string> extra) {
        extra.insert(rounding.begin(), rounding.end());
        return extra;
      };
      std::map<std::string, std::set<std::string>> m;
      m["add"] = m["sub"] = with({"cc"});
      m["addc"] = m["subc"] = {"cc"};
      m["mul"] = with({"wide", "hi", "lo"});
      m["mad"] = m["fma"] = with({"wide", "hi", "lo", "cc"});
      m["madc"] = {"hi", "lo", "cc"};
      m["mul24"] = m["mad24"] = {"hi", "lo"};
      m["div"] = with({"approx", "full"});
      m["sqrt"] = m["rcp"] = with({"approx"});
      m["rsqrt"] = m["sin"] = m["cos"] = m["lg2"] = m["ex2"] = {"approx", "ftz"};
      m["tanh"] = {"approx"};
      m["min"] = m["max"] = {"ftz", "NaN"};
      m["neg"] = m["abs"] = {"ftz"};
      m["bfind"] = {"shiftamt"};
      m["prmt"] = {"f4e", "b4e", "rc8", "ecl", "ecr", "rc16"};
      m["shf"] = {"l", "r", "clamp", "wrap"};
      m["bmsk"] = {"clamp", "wrap"};
      return m;
    }();
    auto found = kHonoured.find(op);
    for (const std::string& mod : mods) {
      if (found == kHonoured.end() || found->second.count(mod) == 0) return mod;
    }
    return "";
  }

  Status InstructionBody(const Frame& frame, const RawStatement& s, int depth) {
    std::vector<std::string> parts = Split(s.opcode);
    const std::string& op = parts[0];
    Inst inst;
    inst.line = s.line;
    if (!s.guard.empty()) {
      inst.guard = RegisterSlot(frame, s.guard);
      inst.guard_negated = s.guard_negated;
    }
    // Modifiers: state space, types (in order), and the rest.
    std::vector<Ty> types;
    std::set<std::string> mods;
    int vec = 1;
    for (size_t i = 1; i < parts.size(); ++i) {
      bool matched = false;
      Space space = ParseSpace(parts[i], &matched);
      if (matched) {
        inst.space = space;
        continue;
      }
      if (parts[i].size() > 1 && parts[i][0] == 'v' && std::isdigit(static_cast<unsigned char>(parts[i][1]))) {
        vec = std::atoi(parts[i].c_str() + 1);
        continue;
      }
      Ty type = ParseType(parts[i]);
      if (type != kNoType) {
        types.push_back(type);
        continue;
      }
      mods.insert(parts[i]);
    }
    if (mods.count("ftz")) inst.flags |= kFlagFtz;
    if (mods.count("sat")) inst.flags |= kFlagSat;
    Ty type = types.empty() ? kNoType : types.back();
    if (mods.count("shared::cluster") || ((op == "bar" || op == "barrier") && mods.count("cluster")) ||
        ((op == "ld" || op == "ldu" || op == "st" || op == "atom" || op == "red") && mods.count("async"))) {
      // st.async / red.async complete on an mbarrier of another CTA of the cluster, and
      // .shared::cluster addresses (ld, st, atom, cvta, isspacep) are another CTA's shared
      // memory: run as plain accesses to generic addresses they would go astray, so the
      // kernel is refused instead, as are cluster barriers (the sim launches no clusters).
      return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU (clusters, asynchronous stores)",
                    s.line, inst);
    }

    const auto& ops = s.operands;
    auto need = [&](size_t n) -> Status {
      if (ops.size() < n) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + s.opcode + " needs " +
                                       std::to_string(n) + " operands");
      }
      return Status::OK();
    };
    auto src = [&](size_t i, Ty t) -> Result<int32_t> { return Source(frame, ops[i], t, s.line); };
    auto bad_type = [&]() {
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": unsupported type in " + s.opcode);
    };
#define GPUPOOL_SRC(field, index, ty)       \
  do {                                      \
    auto value = src(index, ty);            \
    if (!value.ok()) return value.status(); \
    inst.field = *value;                    \
  } while (0)
#define GPUPOOL_DST(index)                        \
  do {                                            \
    auto value = Dest(frame, ops[index], s.line); \
    if (!value.ok()) return value.status();       \
    inst.d[0] = *value;                           \
  } while (0)

    // Textures, surfaces and the like: the kernel is marked unsupported (at
    // launch).
    static const std::set<std::string> kUnsupported = {"tex",
                                                       "tld4",
                                                       "txq",
                                                       "suld",
                                                       "sust",
                                                       "sured",
                                                       "suq",
                                                       "istypep",
                                                       "cp",
                                                       "stmatrix",
                                                       "cp.async",
                                                       "multimem",
                                                       "tensormap",
                                                       "elect",
                                                       "griddepcontrol",
                                                       "setmaxnreg",
                                                       "getctarank",
                                                       "alloca",
                                                       "stackrestore",
                                                       "stacksave",
                                                       "wgmma",
                                                       "tcgen05",
                                                       "clusterlaunchcontrol"};
    if (op == "cp" && parts.size() > 1 && parts[1] == "async") {
      const bool bulk = std::find(parts.begin(), parts.end(), "bulk") != parts.end();
      if (!bulk) return CpAsync(frame, s, parts, inst);
    }
    if (op == "mbarrier") return Mbarrier(frame, s, parts, inst);
    if (op == "tex" || op == "tld4" || op == "txq" || op == "suld" || op == "sust" || op == "suq") {
      return Texture(frame, s, parts, inst);
    }
    if (kUnsupported.count(op)) {
      std::string what = (op == "tex" || op == "tld4" || op == "txq") ? "textures are not supported by the sim GPU"
                         : (op[0] == 's' && op[1] == 'u')
                             ? "surfaces are not supported by the sim GPU"
                             : "instruction '" + s.opcode + "' is not supported by the sim GPU";
      return Refuse(what, s.line, inst);
    }

    if (op == "bra" || op == "brx") {
      if (op == "brx") {
        Unsupported("brx.idx is not supported", s.line);
      }
      GPUPOOL_RETURN_IF_ERROR(need(1));
      inst.flow = Flow::kBranch;
      inst.run = &HNop;
      fixups_.push_back({static_cast<int32_t>(k_->code.size()), Local(frame, ops[0].name)});
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "ret" || op == "exit") {
      inst.run = &HNop;
      if (op == "ret" && !frame.return_label.empty()) {
        inst.flow = Flow::kBranch;
        fixups_.push_back({static_cast<int32_t>(k_->code.size()), frame.return_label});
      } else {
        inst.flow = Flow::kExit;
      }
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "bar" || op == "barrier") {
      bool warp_only = mods.count("warp");
      if (warp_only) {
        inst.run = &HNop;                           // bar.warp.sync: warps run in lockstep here
        if (!ops.empty()) GPUPOOL_SRC(e, 0, kU32);  // membermask: see RunWarp
      } else if (mods.count("red")) {
        // __syncthreads_count/and/or: bar.red.{popc.u32,and.pred,or.pred} d, b, [n,] {!}p
        GPUPOOL_RETURN_IF_ERROR(need(3));
        inst.mode = mods.count("popc") ? 1 : mods.count("and") ? 2 : 3;
        GPUPOOL_DST(0);
        GPUPOOL_SRC(b, 1, kU32);
        if (ops.size() > 3) GPUPOOL_SRC(c, 2, kU32);
        GPUPOOL_SRC(a, ops.size() - 1, kPred);
        if (ops.back().negated) inst.flags |= kFlagSigned;
        inst.run = &HNop;
        inst.flow = Flow::kBarrier;
      } else {
        // bar.sync ID{, COUNT} (__syncthreads is bar.sync 0) and bar.arrive ID, COUNT
        // (mode2 1: arrives without waiting). IDs and counts may be registers.
        bool arrive = mods.count("arrive");
        GPUPOOL_RETURN_IF_ERROR(need(arrive ? 2 : 1));
        GPUPOOL_SRC(b, 0, kU32);
        if (ops.size() > 1) GPUPOOL_SRC(c, 1, kU32);
        inst.mode2 = arrive ? 1 : 0;
        inst.run = &HNop;
        inst.flow = Flow::kBarrier;
      }
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "trap" || op == "brkpt") {
      inst.run = &HNop;
      inst.flow = Flow::kTrap;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if ((op == "membar" && !mods.count("cta")) || (op == "fence" && mods.count("sc") && !mods.count("cta"))) {
      // membar.{gl,sys} is fence.sc.{gpu,sys}: see HFenceSc. At CTA scope (one thread runs
      // the whole CTA) and for acquire-release (the x86-64 order) nothing is needed.
      inst.run = &HFenceSc;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "membar" || op == "fence" || op == "nanosleep" || op == "pmevent" || op == "prefetch" ||
        op == "prefetchu" || op == "discard" || op == "applypriority" || op == "griddepcontrol") {
      inst.run = &HNop;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "call") return Call(frame, s, inst, depth);
    if (op == "createpolicy") {
      GPUPOOL_RETURN_IF_ERROR(need(1));
      GPUPOOL_DST(0);
      inst.run = &HZero;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "ld" || op == "ldu" || op == "st") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      bool is_store = op == "st";
      const RawOperand& data = is_store ? ops[1] : ops[0];
      const RawOperand& address = is_store ? ops[0] : ops[1];
      inst.width = static_cast<uint8_t>(TySize(type));
      if (type == kNoType || inst.width == 0) return bad_type();
      if (TySigned(type)) inst.flags |= kFlagSigned;
      inst.vec = static_cast<uint8_t>(vec);
      if (vec > 4) return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": vectors wider than 4");
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, address, &inst, s.line));
      if (vec == 1) {
        if (is_store) {
          GPUPOOL_SRC(d[0], is_store ? 1 : 0, type);
        } else {
          auto slot = Dest(frame, data, s.line);
          if (!slot.ok()) return slot.status();
          inst.d[0] = *slot;
        }
      } else {
        if (data.kind != RawOperand::kVector || data.items.size() != static_cast<size_t>(vec)) {
          return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": vector operand expected");
        }
        for (int i = 0; i < vec; ++i) {
          auto slot = is_store ? Source(frame, data.items[i], type, s.line) : Dest(frame, data.items[i], s.line);
          if (!slot.ok()) return slot.status();
          inst.d[i] = *slot;
        }
      }
      inst.run = LoadStoreHandler(inst, is_store);
      // A kernel parameter at a fixed address (Hoist checks it is inside the parameters).
      inst.pure = !is_store && inst.space == Space::kParam && inst.uniform_address;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "atom" || op == "red") {
      bool has_dest = op == "atom";
      GPUPOOL_RETURN_IF_ERROR(need(has_dest ? 3 : 2));
      static const std::map<std::string, AtomOp> kOps = {
          {"add", kAtomAdd}, {"min", kAtomMin},   {"max", kAtomMax}, {"and", kAtomAnd}, {"or", kAtomOr},
          {"xor", kAtomXor}, {"exch", kAtomExch}, {"cas", kAtomCas}, {"inc", kAtomInc}, {"dec", kAtomDec}};
      bool known = false;
      for (const auto& [name, value] : kOps) {
        if (mods.count(name)) {
          inst.mode = value;
          known = true;
        }
      }
      if (!known || vec != 1) return bad_type();
      size_t first = has_dest ? 1 : 0;
      if (has_dest) GPUPOOL_DST(0);
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[first], &inst, s.line));
      GPUPOOL_SRC(b, first + 1, type);
      if (inst.mode == kAtomCas) {
        GPUPOOL_RETURN_IF_ERROR(need(first + 3));
        GPUPOOL_SRC(c, first + 2, type);
      }
      if ((type == kF32 || type == kF64) &&
          !(inst.mode == kAtomAdd || inst.mode == kAtomMin || inst.mode == kAtomMax || inst.mode == kAtomExch)) {
        return bad_type();
      }
      if (TyHalf(type) || type == kU16 || type == kS16) {
        const bool half = TyHalf(type);
        if (half ? !(inst.mode == kAtomAdd || inst.mode == kAtomMin || inst.mode == kAtomMax || inst.mode == kAtomExch)
                 : !(inst.mode == kAtomCas || inst.mode == kAtomExch)) {
          return bad_type();
        }
        inst.vec = (type == kF16x2 || type == kBF16x2) ? 2 : 1;
        inst.mode2 = !half ? 2 : (type == kBF16 || type == kBF16x2) ? 1 : 0;
        inst.run = &HAtom16;
        k_->code.push_back(inst);
        return Status::OK();
      }
      switch (type) {
        case kU32:
          inst.run = AtomHandlerOf<uint32_t>(inst.space);
          break;
        case kS32:
          inst.run = AtomHandlerOf<int32_t>(inst.space);
          break;
        case kU64:
          inst.run = AtomHandlerOf<uint64_t>(inst.space);
          break;
        case kS64:
          inst.run = AtomHandlerOf<int64_t>(inst.space);
          break;
        case kF32:
          inst.run = AtomHandlerOf<float>(inst.space);
          break;
        case kF64:
          inst.run = AtomHandlerOf<double>(inst.space);
          break;
        default:
          inst.run = ByType<WAtom>(type == kU8 || type == kU16 || type == kS8 || type == kS16 ? kNoType : type);
      }
      if (inst.run == nullptr) return bad_type();
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "mov") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      if (ops[1].kind == RawOperand::kName && ClockMode(ops[1].name) >= 0) {
        GPUPOOL_DST(0);
        inst.mode = static_cast<uint8_t>(ClockMode(ops[1].name));
        inst.run = &HClock;
        k_->code.push_back(inst);
        return Status::OK();
      }
      if (ops[1].kind == RawOperand::kVector) {  // pack
        GPUPOOL_DST(0);
        inst.vec = static_cast<uint8_t>(ops[1].items.size());
        if (inst.vec < 2 || inst.vec > 4) return bad_type();
        inst.width = static_cast<uint8_t>(TySize(type) / inst.vec);
        int32_t* sources[4] = {&inst.a, &inst.b, &inst.c, &inst.e};
        for (size_t i = 0; i < ops[1].items.size(); ++i) {
          auto slot = Source(frame, ops[1].items[i], kNoType, s.line);
          if (!slot.ok()) return slot.status();
          *sources[i] = *slot;
        }
        inst.run = &HPack;
        k_->code.push_back(inst);
        return Status::OK();
      }
      if (ops[0].kind == RawOperand::kVector) {  // unpack
        inst.vec = static_cast<uint8_t>(ops[0].items.size());
        if (inst.vec < 2 || inst.vec > 4) return bad_type();
        inst.width = static_cast<uint8_t>(TySize(type) / inst.vec);
        for (size_t i = 0; i < ops[0].items.size(); ++i) {
          auto slot = Dest(frame, ops[0].items[i], s.line);
          if (!slot.ok()) return slot.status();
          inst.d[i] = *slot;
        }
        GPUPOOL_SRC(a, 1, type);
        inst.run = &HUnpack;
        k_->code.push_back(inst);
        return Status::OK();
      }
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, type);
      inst.run = &WMov<uint64_t>::run;
      inst.pure = true;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "cvta") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, type);
      inst.mode = mods.count("to") ? 1 : 0;
      inst.width = static_cast<uint8_t>(TySize(type));
      switch (inst.space) {
        case Space::kShared:
          inst.offset = static_cast<int64_t>(kSharedWindow);
          break;
        case Space::kLocal:
          inst.offset = static_cast<int64_t>(kLocalWindow);
          break;
        case Space::kParam:
          inst.offset = static_cast<int64_t>(kParamWindow);
          break;
        default:
          inst.offset = 0;
          break;
      }
      inst.run = &HCvta;
      inst.pure = true;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "isspacep") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, kU64);
      inst.mode = static_cast<uint8_t>(inst.space);
      inst.run = &HIsspacep;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "cvt" && parts.size() > 2 && std::find(parts.begin(), parts.end(), "tf32") != parts.end()) {
      // cvt.{rna,rn,rz}{.satfinite}.tf32.f32 (sm_80: wmma::__float_to_tf32).
      GPUPOOL_RETURN_IF_ERROR(need(2));
      if (types.size() != 1 || types[0] != kF32 || parts[parts.size() - 2] != "tf32") {
        return bad_type();
      }
      inst.mode = mods.count("rna") ? 0 : mods.count("rn") ? 1 : mods.count("rz") ? 2 : 3;
      if (inst.mode == 3) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": cvt to tf32 needs .rna, .rn or .rz");
      }
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, kF32);
      inst.run = &HCvtTf32;
      inst.pure = true;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "cvt") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      if (types.size() < 2) return bad_type();
      Ty dst = types[types.size() - 2], source = types.back();
      auto kind = [](Ty t) -> int {
        if (t == kBF16) return kKindB;
        if (TyFloat(t)) return kKindF;
        if (TySigned(t)) return kKindS;
        return kKindU;
      };
      int rounding = 0;
      if (mods.count("rz")) rounding = 1;
      if (mods.count("rm")) rounding = 2;
      if (mods.count("rp")) rounding = 3;
      if (mods.count("rni")) rounding = 4;
      if (mods.count("rzi")) rounding = 5;
      if (mods.count("rmi")) rounding = 6;
      if (mods.count("rpi")) rounding = 7;
      if ((dst == kF16x2 || dst == kBF16x2) && source == kF32 && ops.size() == 3) {
        // cvt.f16x2.f32 d, a, b (sm_80, as __floats2half2_rn compiles): d's upper half is
        // a converted, its lower half b. Two conversions into slots of their own, then a
        // pack.
        if (mods.count("relu") || mods.count("satfinite")) {
          return Refuse("cvt." + std::string(mods.count("relu") ? "relu" : "satfinite") +
                            " to a packed type is not supported by the sim GPU",
                        s.line, inst);
        }
        const Ty half = dst == kF16x2 ? kF16 : kBF16;
        int32_t halves[2];  // lower, upper
        for (int i = 0; i < 2; ++i) {
          Inst part = inst;
          halves[i] = NewSlot();
          part.d[0] = halves[i];
          auto value = src(i == 0 ? 2 : 1, source);
          if (!value.ok()) return value.status();
          part.a = *value;
          part.mode = static_cast<uint8_t>(kind(half) | (TySize(half) << 2));
          part.mode2 = static_cast<uint8_t>(kind(source) | (TySize(source) << 2));
          part.width = static_cast<uint8_t>(rounding);
          part.run = CvtHandler(part);
          part.pure = true;
          k_->code.push_back(part);
        }
        GPUPOOL_DST(0);
        inst.a = halves[0];
        inst.b = halves[1];
        inst.vec = 2;
        inst.width = 2;
        inst.run = &HPack;
        k_->code.push_back(inst);
        return Status::OK();
      }
      if (ops[0].kind == RawOperand::kVector || ops[1].kind == RawOperand::kVector) {
        return Refuse("packed conversions (cvt with vectors) are not supported", s.line, inst);
      }
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, source);
      inst.mode = static_cast<uint8_t>(kind(dst) | (TySize(dst) << 2));
      inst.mode2 = static_cast<uint8_t>(kind(source) | (TySize(source) << 2));
      // Float -> integer without an explicit mode rounds toward zero (as C
      // does).
      if (TyFloat(source) && !TyFloat(dst) && rounding < 4) rounding = rounding == 0 ? 5 : rounding + 4;
      inst.width = static_cast<uint8_t>(rounding);
      inst.run = CvtHandler(inst);
      inst.pure = true;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "setp" || op == "set") {
      GPUPOOL_RETURN_IF_ERROR(need(3));
      if (TyHalf(type)) {
        // Half sources (HHalfCompare): the destination type, for set, before the source's.
        inst.run = &HHalfCompare;
        inst.vec = (type == kF16x2 || type == kBF16x2) ? 2 : 1;
        inst.mode2 = (type == kBF16 || type == kBF16x2) ? 1 : 0;
        inst.width = kTruePredicate;
        if (op == "set") {
          switch (types.size() >= 2 ? types[types.size() - 2] : kNoType) {
            case kU16:
            case kS16:
            case kU32:
            case kS32:
              inst.width = kTrueAllOnes;
              break;
            case kF16:
            case kF16x2:
              inst.width = kTrueF16;
              break;
            case kBF16:
            case kBF16x2:
              inst.width = kTrueBF16;
              break;
            case kF32:
              inst.width = kTrueF32;
              break;
            default:
              return bad_type();
          }
        }
      }
      if (inst.run == &HHalfCompare && inst.vec == 2 && op == "setp" && ops[0].pair.empty()) {
        return BadInstruction(s, "setp on .x2 halves needs two predicates (p|q)");
      }
      static const std::map<std::string, Cmp> kCmps = {
          {"eq", kEq},   {"ne", kNe},   {"lt", kLt},   {"le", kLe},   {"gt", kGt},   {"ge", kGe},
          {"lo", kLt},   {"ls", kLe},   {"hi", kGt},   {"hs", kGe},   {"equ", kEqu}, {"neu", kNeu},
          {"ltu", kLtu}, {"leu", kLeu}, {"gtu", kGtu}, {"geu", kGeu}, {"num", kNum}, {"nan", kNan}};
      bool found = false;
      for (const auto& [name, cmp] : kCmps) {
        if (mods.count(name)) {
          inst.mode = cmp;
          found = true;
        }
      }
      if (!found) return bad_type();
      const uint8_t bool_op = mods.count("and") ? 1 : mods.count("or") ? 2 : mods.count("xor") ? 3 : 0;
      GPUPOOL_DST(0);
      if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
      if (inst.run == &HHalfCompare) {
        GPUPOOL_SRC(a, 1, kU32);
        GPUPOOL_SRC(b, 2, kU32);
        if (ops.size() >= 4) {
          GPUPOOL_SRC(c, 3, kPred);
          if (ops[3].negated) inst.flags |= kFlagSigned;
        }
        if ((bool_op != 0) != (inst.c >= 0)) {
          return BadInstruction(s, "a BoolOp (.and/.or/.xor) goes with a fourth operand, {!}c");
        }
        inst.mode2 |= bool_op << 1;
        k_->code.push_back(inst);
        return Status::OK();
      }
      inst.mode2 = bool_op;
      GPUPOOL_SRC(a, 1, type);
      GPUPOOL_SRC(b, 2, type);
      if (op == "setp") {
        if (ops.size() >= 4) {
          GPUPOOL_SRC(c, 3, kPred);
          if (ops[3].negated) inst.flags |= kFlagSigned;
        }
        inst.run = ByType<WSetp>(type);
        if (inst.c < 0 && inst.mode2 == 0) {
          // Plain comparisons of the common types: no switch per lane.
          Handler plain = nullptr;
          switch (type) {
            case kU32:
              plain = WSetpPlain<uint32_t>::For(inst.mode);
              break;
            case kS32:
              plain = WSetpPlain<int32_t>::For(inst.mode);
              break;
            case kU64:
              plain = WSetpPlain<uint64_t>::For(inst.mode);
              break;
            case kS64:
              plain = WSetpPlain<int64_t>::For(inst.mode);
              break;
            case kF32:
              plain = WSetpPlain<float>::For(inst.mode, inst.flags & kFlagFtz);
              break;
            case kF64:
              plain = WSetpPlain<double>::For(inst.mode);
              break;
            default:
              break;
          }
          if (plain != nullptr) inst.run = plain;
        }
      } else {
        // mode2: bits 0-1 what true writes (0 all ones, 1 1.0f, 2 f16 1.0, 3 bf16 1.0),
        // bits 2-3 the BoolOp with c.
        Ty dst = types.size() >= 2 ? types[types.size() - 2] : kU32;
        inst.mode2 = (dst == kF32 ? 1 : dst == kF16 ? 2 : dst == kBF16 ? 3 : 0) | bool_op << 2;
        if (ops.size() >= 4) {
          GPUPOOL_SRC(c, 3, kPred);
          if (ops[3].negated) inst.flags |= kFlagSigned;
        }
        if ((bool_op != 0) != (inst.c >= 0)) {
          return BadInstruction(s, "a BoolOp (.and/.or/.xor) goes with a fourth operand, {!}c");
        }
        inst.run = ByType<WSet>(type);
      }
      if (inst.run == nullptr) return bad_type();
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "selp") {
      GPUPOOL_RETURN_IF_ERROR(need(4));
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, type);
      GPUPOOL_SRC(b, 2, type);
      GPUPOOL_SRC(c, 3, kPred);
      inst.run = &HSelp;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "slct") {
      GPUPOOL_RETURN_IF_ERROR(need(4));
      Ty dst = types.size() >= 2 ? types[0] : type;
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, dst);
      GPUPOOL_SRC(b, 2, dst);
      GPUPOOL_SRC(c, 3, type);
      inst.mode = type == kF32 ? 1 : 0;
      inst.run = &HSlct;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "testp") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, type);
      static const char* kClasses[] = {"finite", "infinite", "number", "notanumber", "normal", "subnormal"};
      for (int i = 0; i < 6; ++i) {
        if (mods.count(kClasses[i])) inst.mode = static_cast<uint8_t>(i);
      }
      inst.width = static_cast<uint8_t>(TySize(type));
      inst.run = &HTestp;
      k_->code.push_back(inst);
      return Status::OK();
    }

    // Warp-level operations.
    if (op == "shfl") {
      GPUPOOL_RETURN_IF_ERROR(need(4));
      GPUPOOL_DST(0);
      if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
      GPUPOOL_SRC(a, 1, kU32);
      GPUPOOL_SRC(b, 2, kU32);
      GPUPOOL_SRC(c, 3, kU32);
      if (ops.size() > 4) GPUPOOL_SRC(e, 4, kU32);  // membermask (.sync): see RunWarp
      inst.mode = mods.count("up") ? 0 : mods.count("down") ? 1 : mods.count("bfly") ? 2 : 3;
      inst.run = &HShfl;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "vote") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, kPred);
      if (ops.size() > 2) GPUPOOL_SRC(b, 2, kU32);  // membermask (.sync)
      if (ops[1].negated) inst.flags |= kFlagSigned;
      inst.mode = mods.count("all") ? 0 : mods.count("any") ? 1 : mods.count("uni") ? 2 : 3;
      inst.run = &HVote;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "match") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      GPUPOOL_DST(0);
      if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
      GPUPOOL_SRC(a, 1, type);
      if (ops.size() > 2) GPUPOOL_SRC(b, 2, kU32);  // membermask
      inst.mode = mods.count("all") ? 1 : 0;
      inst.width = static_cast<uint8_t>(TySize(type));
      inst.run = &HMatch;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "redux") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      static const std::map<std::string, uint8_t> kOps = {{"add", 0}, {"min", 1}, {"max", 2},
                                                          {"and", 3}, {"or", 4},  {"xor", 5}};
      int found = -1;
      for (const auto& [name, mode] : kOps) {
        if (mods.count(name)) found = mode;
      }
      if (found < 0 || TySize(type) != 4 || TyFloat(type)) {
        return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU (redux on 32-bit integers only)",
                      s.line, inst);
      }
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, type);
      if (ops.size() > 2) GPUPOOL_SRC(b, 2, kU32);  // membermask
      inst.mode = static_cast<uint8_t>(found);
      inst.mode2 = TySigned(type) ? 1 : 0;
      inst.run = &HRedux;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "wmma") return Wmma(frame, s, parts, inst);
    if (op == "mma") return MmaSync(frame, s, parts, inst);
    if (op == "ldmatrix") return Ldmatrix(frame, s, parts, inst);
    if (op == "activemask") {
      GPUPOOL_RETURN_IF_ERROR(need(1));
      GPUPOOL_DST(0);
      inst.run = &HActivemask;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "dp4a" || op == "dp2a" || op == "vabsdiff4" || op == "vabsdiff2") {
      // dp4a.atype.btype, dp2a.{lo,hi}.atype.btype, vabsdiff{4,2}.dtype.atype.btype{.sat}{.add}
      // d, a, b, c: HByteDot. Video selectors and masks (a.b0, d.h1) are not supported.
      GPUPOOL_RETURN_IF_ERROR(need(4));
      if (types.size() < 2) return bad_type();
      for (Ty t : types) {
        if (t != kU32 && t != kS32) return bad_type();
      }
      const Ty a_type = types[types.size() - 2], b_type = types.back();
      inst.mode2 = (a_type == kS32 ? 1 : 0) | (b_type == kS32 ? 2 : 0);
      if (op == "dp4a") {
        inst.mode = 0;
      } else if (op == "dp2a") {
        if (mods.count("lo") == mods.count("hi")) {
          return BadInstruction(s, "dp2a needs one of .lo and .hi");
        }
        inst.mode = mods.count("hi") ? 2 : 1;
      } else {
        if (types.size() != 3) return bad_type();
        inst.mode = op == "vabsdiff4" ? (mods.count("add") ? 4 : 3) : (mods.count("add") ? 6 : 5);
        if (mods.count("sat") && types[0] == kS32) inst.mode2 |= 4;
      }
      for (size_t i = 0; i < 4; ++i) {
        if (ops[i].kind == RawOperand::kName && ops[i].name.find('.') != std::string::npos) {
          return Refuse("SIMD video selectors and masks ('" + ops[i].name + "') are not supported by the sim GPU",
                        s.line, inst);
        }
      }
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, kU32);
      GPUPOOL_SRC(b, 2, kU32);
      GPUPOOL_SRC(c, 3, kU32);
      inst.run = &HByteDot;
      inst.pure = true;
      k_->code.push_back(inst);
      return Status::OK();
    }

    // Arithmetic and logic.
    bool is_float = TyFloat(type);
    if (TyHalf(type)) return HalfInstruction(frame, s, inst, op, type);
    // A modifier the handlers below do not honour would be ignored and the kernel would
    // run with other results than a GPU's: such an instruction is refused instead.
    if (std::string unknown = UnhonouredModifier(op, mods); !unknown.empty()) {
      return Refuse("instruction '" + s.opcode + "': modifier ." + unknown + " is not supported by the sim GPU", s.line,
                    inst);
    }
    Handler handler = nullptr;
    int arity = 2;
    if (op == "add" || op == "sub" || op == "addc" || op == "subc") {
      bool carry = op == "addc" || op == "subc" || mods.count("cc");
      if (carry) {
        handler = ByIntType<WCarry>(type);
        inst.mode = (op == "sub" || op == "subc") ? 1 : 0;
        if (op == "addc" || op == "subc") inst.flags |= kFlagCarryIn;
        if (mods.count("cc")) inst.flags |= kFlagCarryOut;
      } else if (mods.count("sat") && type == kS32) {
        handler = op == "add" ? &HBinary<int32_t, kAddSat> : &HBinary<int32_t, kSubSat>;
        inst.flags &= static_cast<uint8_t>(~kFlagSat);
      } else {
        handler = op == "add" ? ByType<WAdd>(type) : ByType<WSub>(type);
      }
    } else if (op == "mul") {
      if (mods.count("wide"))
        handler = ByIntType<WMulWide>(type);
      else if (mods.count("hi"))
        handler = ByIntType<WMulHi>(type);
      else
        handler = ByType<WMul>(type);
    } else if (op == "mul24") {
      handler = mods.count("hi") ? ByIntType<WMul24Hi>(type) : ByIntType<WMul24>(type);
    } else if (op == "mad24") {
      handler = ByIntType<WMad24>(type);
      inst.mode = mods.count("hi") ? 1 : 0;
      arity = 3;
    } else if (op == "mad" || op == "madc" || op == "fma") {
      arity = 3;
      if (is_float) {
        handler = ByType<WFma>(type);
#if defined(__x86_64__)
        if (HostHasFma() && type == kF32) handler = &HFmaHw<float>;
        if (HostHasFma() && type == kF64) handler = &HFmaHw<double>;
#endif
      } else if (op == "madc" || mods.count("cc")) {
        handler = ByIntType<WCarry>(type);
        inst.mode = mods.count("hi") ? 3 : 2;
        if (op == "madc") inst.flags |= kFlagCarryIn;
        if (mods.count("cc")) inst.flags |= kFlagCarryOut;
      } else if (mods.count("wide")) {
        handler = ByIntType<WMulWide>(type);
      } else if (mods.count("hi")) {
        handler = ByIntType<WMadHi>(type);
      } else {
        handler = ByIntType<WMadLo>(type);
      }
    } else if (op == "div") {
      handler = ByType<WDiv>(type);
    } else if (op == "rem") {
      handler = ByIntType<WRem>(type);
    } else if ((op == "min" || op == "max") && (mods.count("xorsign") || mods.count("relu") || ops.size() > 3)) {
      return Refuse("instruction '" + s.opcode + "' with " + std::to_string(ops.size() - 1) +
                        " sources is not supported by the sim GPU",
                    s.line, inst);
    } else if ((op == "min" || op == "max") && mods.count("NaN")) {
      if (type != kF32) return bad_type();
      handler = op == "max" ? &HMinMaxNaN<true> : &HMinMaxNaN<false>;
    } else if (op == "min") {
      handler = ByType<WMin>(type);
    } else if (op == "max") {
      handler = ByType<WMax>(type);
    } else if (op == "and") {
      handler = ByIntType<WAnd>(type);
    } else if (op == "or") {
      handler = ByIntType<WOr>(type);
    } else if (op == "xor") {
      handler = ByIntType<WXor>(type);
    } else if (op == "shl") {
      handler = ByIntType<WShl>(type);
    } else if (op == "shr") {
      handler = ByIntType<WShr>(type);
    } else if (op == "copysign") {
      handler = ByType<WCopysign>(type);
    } else if (op == "sad") {
      handler = ByIntType<WSad>(type);
      arity = 3;
    } else if (op == "bfe") {
      handler = ByIntType<WBfe>(type);
      arity = 3;
    } else if (op == "bfi") {
      handler = ByIntType<WBfi>(type);
      arity = 4;
    } else if (op == "prmt") {
      handler = &HPrmt;
      arity = 3;
      static const char* kModes[] = {"", "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"};
      for (int i = 1; i < 7; ++i) {
        if (mods.count(kModes[i])) inst.mode = static_cast<uint8_t>(i);
      }
    } else if (op == "shf") {
      handler = &HShf;
      arity = 3;
      inst.mode = mods.count("r") ? 1 : 0;
      inst.mode2 = mods.count("clamp") ? 1 : 0;
    } else if (op == "lop3") {
      handler = &HLop3;
      arity = 4;
    } else if (op == "fns") {
      if (type != kU32) return bad_type();
      handler = &HFns;
      arity = 3;
    } else if (op == "bmsk") {
      if (type != kU32) return bad_type();
      handler = &HBmsk;
      arity = 2;
      inst.mode = mods.count("clamp") ? 1 : 0;
    } else {
      arity = 1;
      if (op == "neg")
        handler = ByType<WNeg>(type);
      else if (op == "abs")
        handler = ByType<WAbs>(type);
      else if (op == "not")
        handler = type == kPred ? &WNotPred<uint8_t>::run : ByIntType<WNot>(type);
      else if (op == "cnot")
        handler = ByIntType<WCnot>(type);
      else if (op == "popc")
        handler = ByIntType<WPopc>(type);
      else if (op == "clz")
        handler = ByIntType<WClz>(type);
      else if (op == "brev")
        handler = ByIntType<WBrev>(type);
      else if (op == "bfind")
        handler = mods.count("shiftamt") ? ByIntType<WBfindShift>(type) : ByIntType<WBfind>(type);
      else if (op == "sqrt" && is_float)
        handler = ByType<WSqrt>(type);
      else if (op == "rsqrt" && is_float)
        handler = ByType<WRsqrt>(type);
      else if (op == "rcp" && is_float)
        handler = ByType<WRcp>(type);
      else if (op == "sin" && is_float)
        handler = ByType<WSin>(type);
      else if (op == "cos" && is_float)
        handler = ByType<WCos>(type);
      else if (op == "lg2" && is_float)
        handler = ByType<WLg2>(type);
      else if (op == "ex2" && is_float)
        handler = ByType<WEx2>(type);
      else if (op == "tanh" && is_float)
        handler = ByType<WTanh>(type);
      else {
        return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU", s.line, inst);
      }
    }
    if (handler == nullptr) return bad_type();
    GPUPOOL_RETURN_IF_ERROR(need(static_cast<size_t>(arity) + 1));
    GPUPOOL_DST(0);
    if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
    // Shift amounts and bit positions are .u32 whatever the data type.
    bool u32_b = op == "shl" || op == "shr" || op == "bfe" || op == "prmt" || op == "shf";
    Ty narrow = (mods.count("wide") && !is_float) ? type : type;
    GPUPOOL_SRC(a, 1, narrow);
    if (arity >= 2) GPUPOOL_SRC(b, 2, u32_b && op != "prmt" && op != "shf" ? kU32 : type);
    if (arity >= 3) {
      Ty third = type;
      if (op == "bfe" || op == "prmt" || op == "shf") third = kU32;
      if (op == "mad" && mods.count("wide")) {
        // mad.wide: the addend is twice as wide.
        third = type == kS32 ? kS64 : kU64;
      }
      GPUPOOL_SRC(c, 3, third);
    }
    if (arity >= 4) GPUPOOL_SRC(e, 4, op == "bfi" ? kU32 : type);
    if (op == "bfi") {
      GPUPOOL_SRC(c, 3, kU32);
    }
    inst.run = handler;
    const bool directed = mods.count("rz") || mods.count("rm") || mods.count("rp");
    if (directed && (type == kF32 || type == kF64)) {
      static const std::set<std::string> kRounded = {"add", "sub", "mul", "fma", "mad", "div", "sqrt", "rcp"};
      if (!kRounded.count(op) || mods.count("approx") || mods.count("full")) return bad_type();
      inst.aux = static_cast<uint32_t>(k_->inner.size());
      k_->inner.push_back(handler);
      inst.run = mods.count("rz")   ? &HDirectedRounding<FE_TOWARDZERO>
                 : mods.count("rm") ? &HDirectedRounding<FE_DOWNWARD>
                                    : &HDirectedRounding<FE_UPWARD>;
    }
    // Integer division by zero would trap on the host; carries touch the carry slot.
    inst.pure = op != "div" && op != "rem" && (inst.flags & (kFlagCarryIn | kFlagCarryOut)) == 0;
    k_->code.push_back(inst);
    return Status::OK();
#undef GPUPOOL_SRC
#undef GPUPOOL_DST
  }

  const ParsedModule& module_;
  const std::map<std::string, uint64_t>& addresses_;
  DecodedKernel* k_;
  int32_t next_slot_ = 0;
  int32_t zero_slot_ = -1;
  std::map<uint64_t, int32_t> constants_;
  std::map<std::string, int32_t> slots_;
  std::set<std::string> registers_;
  std::map<std::string, Symbol> symbols_;
  std::map<std::string, int32_t> labels_;
  std::vector<std::pair<int32_t, std::string>> fixups_;
  std::vector<std::pair<int32_t, std::string>> dynamic_shared_constants_;
  std::set<std::string> unsupported_symbols_;
  std::map<std::string, const SharedVariable*> unplaced_shared_;  // not yet named
  int64_t runtime_error_offset_ = -1;                             // DeviceRuntimeCall::last_error, once reserved
  uint64_t shared_size_ = 0;
  uint64_t local_size_ = 0;
  int call_count_ = 0;
  std::vector<const RawFunction*> address_taken_;
  bool address_taken_ready_ = false;
};

}  // namespace gpupool::sim::interp

namespace gpupool::sim {

using interp::Decoder;

Result<const DecodedKernel*> PtxModule::Decode(const std::string& name,
                                               const std::map<std::string, uint64_t>& addresses) {
  if (auto done = decoded_.find(name); done != decoded_.end()) return done->second.get();
  if (auto failed = failed_.find(name); failed != failed_.end()) return failed->second;
  if (!HasKernel(name)) return Status::NotFound("no kernel " + name + " in the PTX");
  auto kernel = std::make_unique<DecodedKernel>();
  Decoder decoder(*parsed_, addresses, kernel.get());
  Status status = decoder.Run(parsed_->functions.at(name));
  if (!status.ok()) {
    failed_[name] = status;
    return status;
  }
  kernel->source = &parsed_->functions.at(name);
  kernel->jit = std::make_shared<JitSlot>();
  const DecodedKernel* result = kernel.get();
  decoded_[name] = std::move(kernel);
  return result;
}

}  // namespace gpupool::sim

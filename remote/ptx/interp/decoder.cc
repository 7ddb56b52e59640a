// The decoder: ParsedModule -> DecodedKernel, once per kernel (PtxModule::Decode): device
// functions inlined, registers and constants given slots, each instruction its handler
// (handler_tables.h and the family headers), then Hoist.
// The class is declared in decoder.h; the opcodes of each family are decoded in
// decode_<family>.cc.
#include "remote/ptx/interp/decoder.h"

#include "remote/ptx/interp/conversions.h"
#include "remote/ptx/interp/half.h"
#include "remote/ptx/interp/hoist.h"
#include "remote/ptx/interp/warp_ops.h"
#include "remote/ptx/interp/wmma.h"

namespace gpupool::sim::interp {

std::vector<std::string> Split(const std::string& opcode) {
  std::vector<std::string_view> views = SplitOpcode(opcode);
  return std::vector<std::string>(views.begin(), views.end());
}

uint64_t Decoder::ParamLayout(const RawFunction& entry, std::vector<uint64_t>* offsets) {
  uint64_t offset = 0;
  for (const RawParam& param : entry.params) {
    offset = (offset + param.align - 1) / param.align * param.align;
    if (offsets != nullptr) offsets->push_back(offset);
    offset += param.size;
  }
  return offset;
}

Status Decoder::Run(const RawFunction& entry) {
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

int32_t Decoder::NewSlot() { return next_slot_++; }

int32_t Decoder::Constant(uint64_t value) {
  auto found = constants_.find(value);
  if (found != constants_.end()) return found->second;
  int32_t slot = NewSlot();
  constants_[value] = slot;
  k_->constants.push_back({slot, value});
  return slot;
}

std::string Decoder::Local(const Frame& frame, const std::string& name) const {
  auto alias = frame.alias.find(name);
  if (alias != frame.alias.end()) return alias->second;
  if (frame.locals.count(name)) return frame.prefix + name;
  return name;
}

void Decoder::Unsupported(const std::string& why, int line) {
  if (k_->unsupported.empty()) k_->unsupported = why + " (PTX line " + std::to_string(line) + ")";
}

Status Decoder::Refuse(const std::string& why, int line, Inst inst) {
  Unsupported(why, line);
  inst.run = &HNop;
  inst.flow = Flow::kTrap;
  k_->code.push_back(inst);
  return Status::OK();
}

int32_t Decoder::Special(const std::string& name) {
  static const char* kAxes = "xyz";
  for (int i = 0; i < 3; ++i) {
    std::string axis = std::string(".") + kAxes[i];
    if (name == "%tid" + axis) return Ensure(&k_->tid[i]);
    if (name == "%ntid" + axis) return Ensure(&k_->ntid[i]);
    if (name == "%ctaid" + axis) return Ensure(&k_->ctaid[i]);
    if (name == "%nctaid" + axis) return Ensure(&k_->nctaid[i]);
  }
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

int32_t Decoder::Ensure(int32_t* slot) {
  if (*slot < 0) *slot = NewSlot();
  return *slot;
}

int Decoder::ClockMode(const std::string& name) {
  if (name == "%clock") return 0;
  if (name == "%clock64") return 1;
  if (name == "%globaltimer") return 2;
  if (name == "%globaltimer_lo") return 3;
  if (name == "%globaltimer_hi") return 4;
  return -1;
}

bool Decoder::IsRegister(const Frame& frame, const std::string& name) const {
  std::string local = Local(frame, name);
  return registers_.count(local) > 0 || name.find('@') != std::string::npos;
}

bool Decoder::SymbolValue(const Frame& frame, const std::string& name, Symbol* symbol) {
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

Result<int32_t> Decoder::Source(const Frame& frame, const RawOperand& op, Ty type, int line) {
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

bool Decoder::IsDynamicShared(const std::string& name) const {
  for (const SharedVariable& var : module_.shared) {
    if (var.is_extern && var.name == name) return true;
  }
  return false;
}

int32_t Decoder::RegisterSlot(const Frame& frame, const std::string& name) {
  std::string local = Local(frame, name);
  if (local == "_") return NewSlot();  // sink
  auto found = slots_.find(local);
  if (found != slots_.end()) return found->second;
  int32_t slot = NewSlot();
  slots_[local] = slot;
  return slot;
}

Result<int32_t> Decoder::Dest(const Frame& frame, const RawOperand& op, int line) {
  if (op.kind != RawOperand::kName) {
    return Status::InvalidArgument("PTX line " + std::to_string(line) + ": destination must be a register");
  }
  return RegisterSlot(frame, op.name);
}

Status Decoder::AddressOperand(const Frame& frame, const RawOperand& op, Inst* inst, int line) {
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
      return Status::InvalidArgument("PTX line " + std::to_string(line) + ": generic access to dynamic shared symbol");
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

Space Decoder::ParseSpace(const std::string& mod, bool* matched) {
  *matched = true;
  if (mod == "global") return Space::kGlobal;
  if (mod == "shared" || mod == "shared::cta") return Space::kShared;
  if (mod == "local") return Space::kLocal;
  if (mod == "param") return Space::kParam;
  if (mod == "const") return Space::kConst;
  *matched = false;
  return Space::kGeneric;
}

Status Decoder::Emit(const RawFunction& function, const std::string& prefix, std::map<std::string, std::string> alias,
                     int depth, int) {
  if (k_->code.size() > kMaxKernelInstructions) {
    return Status::InvalidArgument("more than " + std::to_string(kMaxKernelInstructions) +
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
      if ((op.kind == RawOperand::kName || op.kind == RawOperand::kAddress) && op.name.find('@') != std::string::npos) {
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

Status Decoder::BadInstruction(const RawStatement& s, const std::string& why) {
  return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + s.opcode + ": " + why);
}

Status Decoder::Instruction(const Frame& frame, const RawStatement& s, int depth) {
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

Status Decoder::InstructionBody(const Frame& frame, const RawStatement& s, int depth) {
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
        return Refuse("SIMD video selectors and masks ('" + ops[i].name + "') are not supported by the sim GPU", s.line,
                      inst);
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

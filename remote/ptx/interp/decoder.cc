// The decoder: ParsedModule -> DecodedKernel, once per kernel (PtxModule::Decode): device
// functions inlined, registers and constants given slots, each instruction its handler
// (handler_tables.h and the family headers), then Hoist.
// The class is declared in decoder.h; the opcodes of each family are decoded in
// decode_<family>.cc.
#include "remote/ptx/interp/decoder.h"

#include "remote/ptx/front/param_layout.h"
#include "remote/ptx/front/special_registers.h"
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

Status Decoder::Run(const RawFunction& entry) {
  k_->name = entry.name;
  std::vector<uint64_t> offsets;
  const uint64_t param_bytes = LayOutParams(entry, &offsets);
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
  std::copy(std::begin(entry.required_cluster), std::end(entry.required_cluster), k_->required_cluster);
  k_->max_cluster_rank = entry.max_cluster_rank;
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
    if (symbol.space == Space::kGlobal) k_->shared_layout.globals[name] = symbol.value;
  }
  k_->shared_layout.size = k_->static_shared;
  for (const auto& [slot, name] : dynamic_shared_constants_) k_->shared_layout.dynamic.insert(name);
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
  using R = SpecialRegister;
  const SpecialRegisterName special = DecodeSpecialRegister(name);
  const uint32_t i = special.index;
  switch (special.reg) {
    case R::kTid:
      return Ensure(&k_->tid[i]);
    case R::kNtid:
      return Ensure(&k_->ntid[i]);
    case R::kCtaid:
      return Ensure(&k_->ctaid[i]);
    case R::kNctaid:
      return Ensure(&k_->nctaid[i]);
    // A launch without clusters runs each block as a cluster of one (StartCta).
    case R::kClusterid:
      k_->names_cluster = true;
      return Ensure(&k_->clusterid[i]);
    case R::kNclusterid:
      k_->names_cluster = true;
      return Ensure(&k_->nclusterid[i]);
    case R::kClusterCtaid:
      k_->names_cluster = true;
      return Ensure(&k_->cluster_ctaid[i]);
    case R::kClusterNctaid:
      k_->names_cluster = true;
      return Ensure(&k_->cluster_nctaid[i]);
    case R::kClusterCtarank:
      k_->names_cluster = true;
      return Ensure(&k_->cluster_ctarank);
    case R::kClusterNctarank:
      k_->names_cluster = true;
      return Ensure(&k_->cluster_nctarank);
    case R::kIsExplicitCluster:
      k_->names_cluster = true;
      return Ensure(&k_->is_explicit_cluster);
    case R::kLaneid:
      return Ensure(&k_->laneid);
    case R::kWarpid:
      return Ensure(&k_->warpid);
    case R::kNwarpid:
      return Ensure(&k_->nwarpid);
    case R::kSmid:
      return Ensure(&k_->smid);
    case R::kNsmid:
      return Ensure(&k_->nsmid);
    case R::kGridid:
      return Ensure(&k_->gridid);
    case R::kLanemaskEq:
      return Ensure(&k_->lanemask_eq);
    case R::kLanemaskLt:
      return Ensure(&k_->lanemask_lt);
    case R::kLanemaskLe:
      return Ensure(&k_->lanemask_le);
    case R::kLanemaskGt:
      return Ensure(&k_->lanemask_gt);
    case R::kLanemaskGe:
      return Ensure(&k_->lanemask_ge);
    case R::kEnvreg:
      return Ensure(&k_->envreg[i]);
    // Clocks and timers have no slot: mov reads them (HClock, DecodeConversion).
    case R::kClock:
    case R::kClock64:
    case R::kGlobaltimer:
    case R::kGlobaltimerLo:
    case R::kGlobaltimerHi:
    case R::kNone:
      return -1;
  }
  return -1;
}

int32_t Decoder::Ensure(int32_t* slot) {
  if (*slot < 0) *slot = NewSlot();
  return *slot;
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
  // A .shared::cluster address names a block of the cluster in its upper bits
  // (kClusterRankShift, interp/internal.h); the executing block's own are .shared::cta ones.
  if (mod == "shared" || mod == "shared::cta" || mod == "shared::cluster") return Space::kShared;
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
  if (op == "wmma" || op == "mma" || op == "ldmatrix" || op == "stmatrix") sync = kSyncWarp;
  if (op == "vote" || op == "match" || op == "redux" || op == "elect") sync = kSyncMaskB;
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
  Decoding d{frame, s, depth, Split(s.opcode), s.operands};
  const std::vector<std::string>& parts = d.parts;
  const std::string& op = parts[0];
  Inst& inst = d.inst;
  inst.line = s.line;
  if (!s.guard.empty()) {
    inst.guard = RegisterSlot(frame, s.guard);
    inst.guard_negated = s.guard_negated;
  }
  // Modifiers: state space, types (in order), and the rest.
  std::vector<Ty>& types = d.types;
  std::set<std::string>& mods = d.mods;
  for (size_t i = 1; i < parts.size(); ++i) {
    bool matched = false;
    Space space = ParseSpace(parts[i], &matched);
    if (matched) {
      inst.space = space;
      continue;
    }
    if (parts[i].size() > 1 && parts[i][0] == 'v' && std::isdigit(static_cast<unsigned char>(parts[i][1]))) {
      d.vec = std::atoi(parts[i].c_str() + 1);
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
  d.type = types.empty() ? kNoType : types.back();
  if ((op == "st" || op == "red") && mods.count("async")) {
    k_->names_cluster = true;  // another block's shared memory and barrier: the interpreter's
    return StoreAsync(d);
  }
  if ((op == "ld" || op == "ldu" || op == "atom") && mods.count("async")) {
    return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU", s.line, inst);
  }
  if (std::find(parts.begin() + 1, parts.end(), "shared::cluster") != parts.end() ||
      ((op == "bar" || op == "barrier") && mods.count("cluster"))) {
    k_->names_cluster = true;
  }

  return (this->*FamilyOf(op))(d);
}

Decoder::FamilyDecoder Decoder::FamilyOf(const std::string& op) {
  static const std::map<std::string_view, FamilyDecoder> kFamilies = {
#define GPUPOOL_PTX_OPCODE(name, family, jit) {name, &Decoder::Decode##family},
#include "remote/ptx/ir/opcodes.def"
#undef GPUPOOL_PTX_OPCODE
  };
  auto found = kFamilies.find(op);
  return found == kFamilies.end() ? &Decoder::DecodeArithmetic : found->second;
}

Status Decoder::Need(const Decoding& d, size_t n) {
  if (d.ops.size() < n) {
    return Status::InvalidArgument("PTX line " + std::to_string(d.s.line) + ": " + d.s.opcode + " needs " +
                                   std::to_string(n) + " operands");
  }
  return Status::OK();
}

Status Decoder::NeedWithDest(Decoding& d, size_t n) {
  GPUPOOL_RETURN_IF_ERROR(Need(d, n));
  GPUPOOL_DST(0);
  return Status::OK();
}

Status Decoder::BadType(const Decoding& d) {
  return Status::InvalidArgument("PTX line " + std::to_string(d.s.line) + ": unsupported type in " + d.s.opcode);
}

// Textures, surfaces and the like: the kernel is marked unsupported (at launch).
Status Decoder::DecodeUnsupported(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  [[maybe_unused]] const std::string& op = parts[0];
  std::string what = (op == "tex" || op == "tld4" || op == "txq") ? "textures are not supported by the sim GPU"
                     : (op[0] == 's' && op[1] == 'u')
                         ? "surfaces are not supported by the sim GPU"
                         : "instruction '" + s.opcode + "' is not supported by the sim GPU";
  return Refuse(what, s.line, inst);
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
  kernel->module = parsed_.get();
  kernel->jit = std::make_shared<JitSlot>();
  const DecodedKernel* result = kernel.get();
  decoded_[name] = std::move(kernel);
  return result;
}

}  // namespace gpupool::sim

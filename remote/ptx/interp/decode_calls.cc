// The decoder (decoder.h): calls: call (inlined, indirect through a table of the functions whose address is taken, or
// the device runtime), and traps where a call cannot go.
#include "remote/ptx/interp/decoder.h"

#include "remote/ptx/front/param_layout.h"
#include "remote/ptx/interp/device_heap.h"
#include "remote/ptx/interp/device_runtime.h"
#include "remote/ptx/interp/printf.h"
#include "remote/ptx/texture.h"
#include "remote/ptx/interp/warp_ops.h"

namespace gpupool::sim::interp {

Status Decoder::Call(const Frame& frame, const RawStatement& s, Inst inst, int depth) {
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
    return Append(inst);
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
    return Append(inst);
  }
  if (auto declared = module_.functions.find(callee->name);
      callee->name == "cudaGraphSetConditional" && declared != module_.functions.end() && !declared->second.has_body) {
    int64_t handle = local_offset(args, 0), value = local_offset(args, 1);
    if (handle < 0 || value < 0) {
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                     ": cudaGraphSetConditional arguments must be .param "
                                     "variables");
    }
    inst.run = &HSetConditional;
    inst.printf_fmt = static_cast<uint32_t>(handle);
    inst.printf_args = static_cast<uint32_t>(value);
    return Append(inst);
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
    return Append(inst);
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

int64_t Decoder::ParamVariableOffset(const Frame& frame, const RawOperand* list, size_t i) {
  if (list == nullptr || i >= list->items.size()) return -1;
  Symbol symbol;
  if (!SymbolValue(frame, list->items[i].name, &symbol) || symbol.space != Space::kLocal) return -1;
  return static_cast<int64_t>(symbol.value);
}

int Decoder::DeviceRuntimeOp(const std::string& name) {
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
      {"__cudaCDP2MemcpyAsync", DeviceRuntimeCall::kMemcpyAsync},
      {"__cudaCDP2MemcpyAsync_ptsz", DeviceRuntimeCall::kMemcpyAsync},
      {"__cudaCDP2Memcpy2DAsync", DeviceRuntimeCall::kMemcpy2DAsync},
      {"__cudaCDP2Memcpy2DAsync_ptsz", DeviceRuntimeCall::kMemcpy2DAsync},
      {"__cudaCDP2MemsetAsync", DeviceRuntimeCall::kMemsetAsync},
      {"__cudaCDP2MemsetAsync_ptsz", DeviceRuntimeCall::kMemsetAsync},
      {"__cudaCDP2Memset2DAsync", DeviceRuntimeCall::kMemset2DAsync},
      {"__cudaCDP2Memset2DAsync_ptsz", DeviceRuntimeCall::kMemset2DAsync},
      {"__cudaCDP2GetDevice", DeviceRuntimeCall::kGetDevice},
      {"__cudaCDP2DeviceGetAttribute", DeviceRuntimeCall::kDeviceGetAttribute},
      {"__cudaCDP2DeviceGetLimit", DeviceRuntimeCall::kDeviceGetLimit},
      {"__cudaCDP2Memcpy3DAsync", DeviceRuntimeCall::kMemcpy3DAsync},
      {"__cudaCDP2Memcpy3DAsync_ptsz", DeviceRuntimeCall::kMemcpy3DAsync},
      {"__cudaCDP2Memset3DAsync", DeviceRuntimeCall::kMemset3DAsync},
      {"__cudaCDP2Memset3DAsync_ptsz", DeviceRuntimeCall::kMemset3DAsync},
      {"__cudaCDP2GetDeviceCount", DeviceRuntimeCall::kGetDeviceCount},
      {"__cudaCDP2FuncGetAttributes", DeviceRuntimeCall::kFuncGetAttributes},
      {"__cudaCDP2OccupancyMaxActiveBlocksPerMultiprocessor", DeviceRuntimeCall::kOccupancy},
      {"__cudaCDP2OccupancyMaxActiveBlocksPerMultiprocessorWithFlags", DeviceRuntimeCall::kOccupancyWithFlags},
      {"__cudaCDP2DeviceGetCacheConfig", DeviceRuntimeCall::kDeviceGetCacheConfig},
      {"__cudaCDP2DeviceGetSharedMemConfig", DeviceRuntimeCall::kDeviceGetSharedMemConfig},
      {"__cudaCDP2RuntimeGetVersion", DeviceRuntimeCall::kRuntimeGetVersion},
      {"__cudaCDP2GetErrorString", DeviceRuntimeCall::kGetErrorString},
      {"__cudaCDP2GetErrorName", DeviceRuntimeCall::kGetErrorName},
  };
  auto found = ops.find(name);
  return found == ops.end() ? -1 : found->second;
}

Status Decoder::DeviceRuntime(const Frame& frame, const RawStatement& s, DeviceRuntimeCall::Op op,
                              const std::string& name, const RawOperand* returns, const RawOperand* args, Inst inst) {
  // By Op (kEventOrder reads none).
  static constexpr size_t kArgCount[] = {4, 2, 0, 2, 1, 2, 1, 0, 2, 0, 5, 8, 4, 6,
                                         1, 3, 2, 2, 4, 1, 2, 4, 5, 1, 1, 1, 1, 1};
  static_assert(std::size(kArgCount) == DeviceRuntimeCall::kGetErrorName + 1);
  static_assert(*std::max_element(std::begin(kArgCount), std::end(kArgCount)) <= std::size(DeviceRuntimeCall{}.args));
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
  Symbol strings;
  if (SymbolValue(frame, kErrorStringsVariable, &strings) && strings.space == Space::kGlobal) {
    call.strings = strings.value;
  }
  if (k_->entries.empty()) {
    for (const auto& [entry_name, function] : module_.functions) {
      if (!function.is_entry || !function.has_body) continue;
      k_->entries.push_back(LaunchableEntry{FunctionAddress(module_, entry_name), entry_name,
                                            static_cast<uint32_t>(LayOutParams(function, nullptr)),
                                            function.ptx_version, function.target_arch});
    }
  }
  inst.run = &HDeviceRuntime;
  inst.aux = static_cast<uint32_t>(k_->device_calls.size());
  k_->device_calls.push_back(call);
  return Append(inst);
}

void Decoder::EmitTrap(TrapKind kind, int line) {
  Inst trap;
  trap.run = &HNop;
  trap.flow = Flow::kTrap;
  trap.mode = kind;
  trap.line = line;
  k_->code.push_back(trap);
}

Status Decoder::InlineCall(const Frame& frame, const RawStatement& s, const RawFunction& target,
                           const RawOperand* returns, const RawOperand* args, int depth) {
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

const std::vector<const RawFunction*>& Decoder::AddressTaken() {
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

Status Decoder::IndirectCall(const Frame& frame, const RawStatement& s, const RawOperand& callee,
                             const RawOperand* returns, const RawOperand* args, int depth) {
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

// call: Call (decode_calls.cc).
Status Decoder::DecodeCall(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  [[maybe_unused]] const std::string& op = parts[0];
  return Call(frame, s, inst, depth);
}

}  // namespace gpupool::sim::interp

// The decoder's class (remote/ptx/interp/decoder*.cc): ParsedModule -> DecodedKernel, once
// per kernel (PtxModule::Decode). decoder.cc holds the walk over a kernel (device functions
// inlined, registers and constants given slots, labels fixed up, then Hoist) and each
// statement's common part (guard, modifiers, operands); decode_<family>.cc the opcodes of
// one family. Included only by the decoder's files.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "remote/ptx/interp/handler_tables.h"
#include "remote/ptx/interp/internal.h"

namespace gpupool::sim::interp {

struct Symbol {
  Space space;
  uint64_t value;  // address in its own space
};

// SplitOpcode (front/program.h), as strings: Decoding keeps the parts, and the family
// decoders join them into messages and look them up in tables keyed by std::string.
std::vector<std::string> Split(const std::string& opcode);

// Operand `index` of the statement into slot field `field` of its Inst (a source, read as
// type `ty`) or into d[0] (a destination); returns the error from the enclosing
// Decoder::Decode<family>(Decoding& d) if the operand is not one.
#define GPUPOOL_SRC(field, index, ty)                         \
  do {                                                        \
    auto value = Source(d.frame, d.ops[index], ty, d.s.line); \
    if (!value.ok()) return value.status();                   \
    d.inst.field = *value;                                    \
  } while (0)
#define GPUPOOL_DST(index)                              \
  do {                                                  \
    auto value = Dest(d.frame, d.ops[index], d.s.line); \
    if (!value.ok()) return value.status();             \
    d.inst.d[0] = *value;                               \
  } while (0)

class Decoder {
 public:
  Decoder(const ParsedModule& module, const std::map<std::string, uint64_t>& addresses, DecodedKernel* kernel)
      : module_(module), addresses_(addresses), k_(kernel) {}

  Status Run(const RawFunction& entry);

 private:
  struct Frame {
    std::string prefix;
    std::map<std::string, std::string> alias;  // callee param name -> caller's variable
    std::set<std::string> locals;              // names declared in this body
    std::string return_label;                  // "" at kernel level
  };
  int32_t NewSlot();
  int32_t Constant(uint64_t value);
  std::string Local(const Frame& frame, const std::string& name) const;
  void Unsupported(const std::string& why, int line);

  // Marks the kernel unsupported (`why`, at PTX `line`; its launches answer
  // CUDA_ERROR_NOT_SUPPORTED) and puts a trap where `inst` would have gone.
  Status Refuse(const std::string& why, int line, Inst inst);

  // Slot of a special register (front/special_registers.h), or -1: for any other name,
  // and for the clocks and timers, which only mov reads (DecodeConversion).
  int32_t Special(const std::string& name);
  int32_t Ensure(int32_t* slot);
  bool IsRegister(const Frame& frame, const std::string& name) const;

  // Value of a symbol as an operand (its address in its own space).
  bool SymbolValue(const Frame& frame, const std::string& name, Symbol* symbol);

  // Slot holding a source operand's value; `type` decides how literals are
  // encoded.
  Result<int32_t> Source(const Frame& frame, const RawOperand& op, Ty type, int line);
  bool IsDynamicShared(const std::string& name) const;
  int32_t RegisterSlot(const Frame& frame, const std::string& name);
  Result<int32_t> Dest(const Frame& frame, const RawOperand& op, int line);

  // Address operand: sets inst.a (base slot), inst.offset and, for symbols, the
  // space.
  Status AddressOperand(const Frame& frame, const RawOperand& op, Inst* inst, int line);
  static Space ParseSpace(const std::string& mod, bool* matched);
  Status Emit(const RawFunction& function, const std::string& prefix, std::map<std::string, std::string> alias,
              int depth, int);
  Status Call(const Frame& frame, const RawStatement& s, Inst inst, int depth);

  // The local-memory offset of item `i` of a call's argument or result list, which must
  // be a .param variable (calls of built-ins read and write them there); -1 otherwise.
  int64_t ParamVariableOffset(const Frame& frame, const RawOperand* list, size_t i);

  // The device runtime's entry points (CUDA 12's CDP2) the engine runs; -1 for others.
  static int DeviceRuntimeOp(const std::string& name);

  // A call of the device runtime: HDeviceRuntime with its arguments' offsets.
  Status DeviceRuntime(const Frame& frame, const RawStatement& s, DeviceRuntimeCall::Op op, const std::string& name,
                       const RawOperand* returns, const RawOperand* args, Inst inst);

  // A trap of `kind` (kTrap...): the launch fails where a lane reaches it.
  void EmitTrap(TrapKind kind, int line);

  // The body of `target` inlined here, its parameters and results the call's variables.
  // Nested deeper than kMaxCallDepth: a trap where the call would run.
  Status InlineCall(const Frame& frame, const RawStatement& s, const RawFunction& target, const RawOperand* returns,
                    const RawOperand* args, int depth);

  // Device functions whose address the module takes (in an initialiser, as virtual tables
  // and function-pointer arrays have them, or as an instruction's operand): what an
  // indirect call may reach.
  const std::vector<const RawFunction*>& AddressTaken();

  // call (ret), %rd, (args), prototype: the lanes compare %rd with the address of each
  // function it may reach (taken somewhere in the module, with as many parameters and
  // results as the call passes) and run that function's body inlined; a lane whose %rd
  // is none of them traps with CUDA_ERROR_ILLEGAL_ADDRESS, as a GPU faults on a bad
  // function pointer. Lanes calling different functions diverge and reconverge after.
  Status IndirectCall(const Frame& frame, const RawStatement& s, const RawOperand& callee, const RawOperand* returns,
                      const RawOperand* args, int depth);

  // f16/bf16 arithmetic (scalar and x2): computed in float, rounded to nearest.
  Status HalfInstruction(const Frame& frame, const RawStatement& s, Inst inst, const std::string& op, Ty type);

  // InvalidArgument naming the instruction and its PTX line.
  static Status BadInstruction(const RawStatement& s, const std::string& why);

  // The registers of fragment operand `operand` ({%r1, ...}) of matrix `matrix` (a, b, c
  // or d) of `op`, into *slots: enough to hold the matrix across the warp (wmma, whose
  // fragments may hold copies), or exactly that many (exact: mma.sync).
  Status Fragment(const Frame& frame, const RawStatement& s, const RawOperand& operand, const WmmaOp& op, char matrix,
                  WmmaType type, bool exact, std::vector<int32_t>* slots);

  // wmma.load / wmma.store / wmma.mma (HWmmaMemory, HWmmaMma). `inst` comes with
  // its guard and state space.
  Status Wmma(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst);

  // cp.async (HCpAsync): the copy forms, cp.async.{ca,cg}.shared{::cta}.global
  // [dst], [src], cp-size{, src-size | ignore-src}, and commit_group, wait_group, wait_all,
  // which have nothing to wait for here. `inst` comes with its guard.
  Status CpAsync(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst);

  // cp.async.bulk (sm_90, HBulkCopy): global or another block's shared memory to shared
  // memory, completing on an mbarrier's transaction count; shared memory to global in a
  // bulk async-group; commit_group, wait_group and prefetch, which have nothing to wait for
  // here. Multicast and cp.reduce.async.bulk are refused.
  Status BulkCopy(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst);
  // cp.async.bulk.tensor (sm_90, HTensorCopy): tensor copies (TMA) in tile mode, a box of a
  // tensor map's tensor into shared memory (completing on an mbarrier) or back to global
  // memory (in a bulk async-group). im2col and gather4 modes, multicast and CTA groups are
  // refused.
  Status TensorCopy(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst);

  // mbarrier.{init,arrive,arrive_drop,expect_tx,complete_tx,test_wait,try_wait,inval,
  // pending_count} (HMbarrier) on the cluster's shared memory, with transaction counts.
  Status Mbarrier(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst);

  // mma.sync.aligned.shape.row.col.dtype.atype.btype.ctype d, a, b, c (HWmmaMma with the
  // lane layouts PTX defines): m16n8k16 and m16n8k8 of f16 and bf16 into f32 or f16 (f16
  // inputs only), m16n8k8 of tf32, m8n8k4 of f64. Other shapes and types are refused.
  Status MmaSync(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst);

  // tex, tld4, txq, suld.b, sust.b, suq (HTexture).
  Status Texture(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst);

  // ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16 (HLdmatrix).
  Status Ldmatrix(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst);
  Status Instruction(const Frame& frame, const RawStatement& s, int depth);

  // The first of `mods` that the arithmetic and logic handlers (the end of
  // InstructionBody) do not implement for `op`, or "" when they implement them all.
  // Rounding (.rn, .rz, .rm, .rp), .ftz and .sat are applied to floats; .approx and .full
  // are computed at least as exactly as the ISA bounds them.
  static std::string UnhonouredModifier(const std::string& op, const std::set<std::string>& mods);
  Status InstructionBody(const Frame& frame, const RawStatement& s, int depth);

  // One statement as InstructionBody has read it (its guard, state space, types, vector
  // width and other modifiers), handed to the Decode<family> member that ir/opcodes.def
  // names for its opcode; that fills in `inst` and appends it (or several) to the code.
  struct Decoding {
    const Frame& frame;
    const RawStatement& s;
    int depth;
    std::vector<std::string> parts;  // the opcode's (Split): parts[0] is the opcode
    const std::vector<RawOperand>& ops;
    Inst inst{};
    std::vector<Ty> types{};  // in order
    std::set<std::string> mods{};
    int vec = 1;
    Ty type = kNoType;  // the last of `types`
  };
  using FamilyDecoder = Status (Decoder::*)(Decoding& d);
  // Decode<family> of `op` (ir/opcodes.def); DecodeArithmetic for an opcode not there.
  static FamilyDecoder FamilyOf(const std::string& op);
  // InvalidArgument unless the statement has `n` operands.
  static Status Need(const Decoding& d, size_t n);
  // Appends the decoded `inst` to the kernel's code, the last step of most opcodes'
  // decoding; the overload with `run` sets its handler first.
  Status Append(const Inst& inst) {
    k_->code.push_back(inst);
    return Status::OK();
  }
  Status Append(Inst& inst, Handler run) {
    inst.run = run;
    return Append(inst);
  }
  // InvalidArgument: the statement's type is not one its opcode takes.
  static Status BadType(const Decoding& d);
  // Need(d, n), then operand 0 as the destination, d.inst.d[0].
  Status NeedWithDest(Decoding& d, size_t n);
  // Appends d.inst if its type gave it a handler; BadType if it did not.
  Status AppendIfTyped(Decoding& d) {
    if (d.inst.run == nullptr) return BadType(d);
    return Append(d.inst);
  }
  // The families of ir/opcodes.def, each in the file it names.
  Status DecodeControl(Decoding& d);
  Status DecodeCall(Decoding& d);
  Status DecodeMemory(Decoding& d);
  Status DecodeAsyncCopy(Decoding& d);
  // st.async and red.async (sm_90, HStoreAsync, HRedAsync): a store or reduction into a
  // block of the cluster's shared memory that completes its bytes on that block's mbarrier.
  Status StoreAsync(Decoding& d);
  Status DecodeMbarrier(Decoding& d);
  Status DecodeTexture(Decoding& d);
  Status DecodeConversion(Decoding& d);
  Status DecodeCompare(Decoding& d);
  Status DecodeVideo(Decoding& d);
  Status DecodeArithmetic(Decoding& d);
  Status DecodeWarp(Decoding& d);
  Status DecodeWmma(Decoding& d);
  Status DecodeMmaSync(Decoding& d);
  Status DecodeLdmatrix(Decoding& d);
  Status DecodeUnsupported(Decoding& d);
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

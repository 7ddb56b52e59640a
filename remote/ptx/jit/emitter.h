// Private to jit/: the emitter, which makes the LLVM IR of a kernel's CTA function from its
// parsed PTX (one Emitter per function made: scalar code, or vector code over kVectorLanes
// threads). Its parts by family, one file each:
//   emit_kernel.cc      the CTA function's frame: its phases, threads, barriers' saves;
//   liveness.cc         which registers are live after each barrier;
//   emit_control.cc     an instruction under its guard: branches, ends, barriers, fences,
//                       and the dispatch of the rest by opcode (ld/st, mov, cvta, selp
//                       inline);
//   emit_operands.cc    registers, types, special registers, an instruction's operands;
//   emit_memory.cc      checked global, shared and local accesses, ld/st .v2/.v4, atomics,
//                       cp.async, vector code's ld/st;
//   emit_carries.cc     add.cc/addc, sub.cc/subc, mad.cc/madc (the carry flag), mul24, mad24;
//   emit_half.cc        f16/bf16 arithmetic, setp and cvt (calls of half_float.h's lane
//                       functions), cvt to tf32;
//   emit_texture.cc     tex, tld4, txq, suld, sust, suq: calls of the interpreter's code
//                       for one lane;
//   emit_warp.cc        warp-level operations (shfl, vote, redux, match, activemask,
//                       bar.warp): stops that Settle (run.cc) runs for the warp;
//   emit_matrix.cc      mma.sync, ldmatrix and wmma, likewise, by matrix_ops.h's arithmetic;
//   emit_arithmetic.cc  setp, cvt, integer and float arithmetic (bit fields, byte dot
//                       products, directed roundings by call, min/max as selects), mov of
//                       vectors of elements, the C library's approximate functions.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "remote/ptx/front/program.h"
#include "remote/ptx/front/special_registers.h"
#include "remote/ptx/front/types.h"
#include "remote/ptx/ir/kernel.h"
#include "remote/ptx/jit/internal.h"
#include "remote/ptx/jit/jit.h"

namespace gpupool::sim::jit {

// ---- Types of PTX instructions: the front end's (front/types.h)

using Kind = PtxKind;
using Type = PtxType;

// The front end's type of an opcode's suffix, or none (kNone) for one the tier does not
// compute in: .f16, .bf16 and their pairs (a kernel using them runs on the interpreter).
Type TypeOf(std::string_view suffix);

// The carry flag's register (emit_carries.cc), and whether an instruction uses, reads or
// writes it (addc/subc/madc read it, .cc writes it).
extern const char* const kCarryFlag;
bool UsesCarry(const RawStatement& s);
bool ReadsCarry(const RawStatement& s);
bool WritesCarry(const RawStatement& s);

// Whether a cvt from `from` to `to` is one the tier computes by the interpreter's
// ConvertLane (emit_half.cc): to or from f16/bf16, or a float to an integer narrower than
// 32 bits.
bool NeedsLaneConversion(PtxType to, PtxType from);

// Qualifiers of ld/st that change nothing for one thread on the host: cache hints (.cg too:
// a load cached in the L2 only reads what a plain load reads; but a .cg load inside a loop
// is refused as the ordered loads below are, since polling loops use it).
bool IsCacheHint(std::string_view q);

// Qualifiers of ld/st that order memory (.volatile, .relaxed, .acquire, .release, their
// scopes) or fetch again (.cv): the same value as a plain access, but a thread may spin on
// such a load until another thread stores, and here a thread runs to its end or its next
// barrier before the next one starts (the interpreter lets the others run). Taken where the
// load cannot run again: outside every loop (InsideLoop).
bool IsOrderingQualifier(std::string_view q);

// A backward branch: to `label`, whose next instruction is `head`, from instruction
// `branch` (head <= branch; indices of entry.body's instructions).
struct BackEdge {
  std::string label;
  size_t head;
  size_t branch;
};
std::vector<BackEdge> BackEdges(const RawFunction& entry);

// Whether instruction `index` (of entry.body's instructions) lies inside a loop: between a
// label and a backward branch to it, as placed. Every cycle of the control flow has such a
// branch around each of its instructions (to come back to one, a thread must branch from
// at or after it to at or before it).
bool InsideLoop(const RawFunction& entry, size_t index);

// Warp-level operations (emit_warp.cc): shfl, vote, redux, match, activemask, bar.warp;
// and barriers of the whole CTA (bar, barrier, not bar.warp).
bool IsWarpOperation(const RawStatement& s);
// The registers `s` writes: its first operand's (and its pair's, or a vector's elements).
std::vector<std::string> Written(const RawStatement& s);
bool IsCtaBarrier(const RawStatement& s);
// A load with an ordering or refetching qualifier (IsOrderingQualifier, .cg): one a thread
// may spin on, where another thread, perhaps of another CTA, is to store. A .v2/.v4 one
// too: compiled code loads it whole (VectorAccess).
bool IsOrderedLoad(const RawStatement& s);

// Warp matrix operations (emit_matrix.cc): mma, ldmatrix and wmma (warp-level operations
// too), and the registers one reads from every lane of the warp (the a, b and c of mma.sync
// and wmma.mma; ldmatrix's address).
bool IsMatrixOperation(const RawStatement& s);
std::vector<std::string> MatrixLaneOperands(const RawStatement& s);

class Emitter {
 public:
  Emitter(const RawFunction& entry, const SharedLayout& shared, uint32_t param_size, llvm::LLVMContext& context,
          llvm::Module& module, uint32_t lanes)
      : entry_(entry),
        param_size_(param_size),
        ctx_(context),
        module_(module),
        b_(context),
        shared_offsets_(shared.offsets),
        shared_dynamic_(shared.dynamic),
        shared_size_(shared.size),
        globals_(shared.globals),
        lanes_(lanes) {}

  // Emits `cta`; false (and *refused) when the kernel has what the tier does not take.
  bool Emit(CompiledKernel* out, std::string* refused);

 private:
  // emit_kernel.cc
  bool Refuse(const std::string& why, int line, std::string* refused);
  void CountUses(const RawOperand& o);
  bool CheckVariableStores(std::string* why, int* line);
  // This thread's index in its block, and its resume point and saved registers.
  llvm::Value* ThreadIndex();
  llvm::Value* ResumeOf() { return b_.CreateGEP(i32_, resume_arg_, b_.CreateZExt(ThreadIndex(), i64_)); }
  uint32_t SavedIndex(const std::string& name);
  llvm::Value* SavedOf(uint32_t index);
  llvm::Value* SavedLanesOf(const std::string& name);
  uint32_t SavedBytes(const std::string& name);
  void FindSkips();
  void SkipIfNoLane(const RawStatement& s);
  void FindRematerialized();
  bool Rematerialize(std::string* why);
  bool FillLaneBarriers(llvm::BasicBlock* restore, llvm::BasicBlock* start, std::string* refused);
  llvm::Value* Field(uint64_t offset) { return FieldAt(b_, offset); }
  llvm::Value* FieldAt(llvm::IRBuilder<>& at, uint64_t offset);
  void FlushCount();

  // liveness.cc
  void ReadNames(const RawOperand& o, std::vector<std::string>* names);
  bool ComputeLiveness(std::string* why);

  // emit_control.cc
  void Tick(uint32_t steps = 1);
  void Exit();
  bool VectorInstruction(const RawStatement& s, const std::vector<std::string_view>& parts, llvm::Value* guard,
                         std::string* refused);
  void VectorBarrier();
  void EndLanes(llvm::Value* lanes);
  llvm::Value* AnyLane(llvm::Value* lanes);
  bool Instruction(const RawStatement& s, std::string* refused);
  bool Operation(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);
  bool Fence(const std::vector<std::string_view>& parts, std::string* why);
  void Trap(llvm::Value* guard);

  // emit_runtime.cc: malloc, free, vprintf, __assertfail and cudaGraphSetConditional
  // (kMallocOpcode, kFreeOpcode, kPrintfOpcode, kAssertOpcode, kSetConditionalOpcode) under `guard` (or none);
  // `offsets`: the call's .param variables in local memory, `slice`: the thread's local memory's offset in the CTA's.
  bool RuntimeCall(const RawStatement& s, llvm::Value* guard, std::string* refused);
  void HeapCall(bool is_malloc, uint64_t heap_size, uint64_t heap, const std::vector<uint64_t>& offsets,
                llvm::Value* slice);
  void PrintCall(const RawStatement& s, const std::vector<uint64_t>& offsets, llvm::Value* slice);
  void SetConditionalCall(const std::vector<uint64_t>& offsets, llvm::Value* slice);
  void EndLaunchIfLaneFailed(llvm::Value* failed, const std::string& what);

  // emit_operands.cc
  // Whether `name` names a register: a %name (special registers too), or a register of
  // inline assembly's scope (`{ .reg .u32 lo; ... }`), which the parser names uniquely
  // (lo#12) and declares in the function's register_bits as any other.
  bool NamesRegister(const std::string& name) const {
    return !name.empty() && (name[0] == '%' || entry_.register_bits.count(name) > 0);
  }
  int64_t SharedSymbol(const std::string& name) const;
  int64_t LocalSymbol(const std::string& name) const;
  bool GlobalSymbol(const std::string& name, uint64_t* address) const;
  uint32_t StorageBits(const std::string& name);
  llvm::Type* StorageType(const std::string& name) { return Lanes(b_.getIntNTy(StorageBits(name))); }
  llvm::Value* LoadRegister(const std::string& name) { return b_.CreateLoad(StorageType(name), Register(name)); }
  // Its value as 64 bits, zero-extended (an address; what a barrier saves).
  llvm::Value* LoadRegister64(const std::string& name) { return b_.CreateZExt(LoadRegister(name), I64()); }
  llvm::AllocaInst* Register(const std::string& name);
  // Types and constants of one thread (scalar) or of kLanes threads at once (vectors).
  llvm::Type* Lanes(llvm::Type* scalar) { return lanes_ ? llvm::FixedVectorType::get(scalar, lanes_) : scalar; }
  llvm::Type* I64() { return Lanes(i64_); }
  llvm::Value* Splat(llvm::Value* scalar) { return lanes_ ? b_.CreateVectorSplat(lanes_, scalar) : scalar; }
  llvm::Value* Int(uint32_t bits, uint64_t value) { return Splat(b_.getIntN(bits, value)); }
  llvm::Type* ScalarType(Type t);
  llvm::Value* Steps(uint64_t step);
  llvm::Value* LanesConsecutive(llvm::Value* addresses, uint64_t bytes);
  llvm::Value* LaneNumbers();
  // The lanes an instruction of vector code runs on.
  llvm::Value* Mask() { return op_mask_ ? op_mask_ : b_.CreateLoad(Lanes(i1_), mask_slot_); }
  llvm::Type* LlvmType(Type t);
  llvm::Value* FromStorage(llvm::Value* bits, uint32_t width, Type t);
  llvm::Value* ToStorage(llvm::Value* v, Type t, uint32_t width);
  llvm::Value* Special(const std::string& name);
  llvm::Value* Source(const RawOperand& op, Type t, std::string* why);
  bool Dest(const RawOperand& op, llvm::Value* v, Type t, std::string* why);

  // emit_warp.cc
  bool CheckWarpOperations(std::string* why, int* line);
  llvm::Value* SlotOf(uint32_t slot);
  llvm::Value* ShadowOf(uint32_t index);
  void Stop(WarpOp op);
  bool WarpOperation(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);

  // emit_matrix.cc
  bool MmaSync(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);
  bool Ldmatrix(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);
  bool Wmma(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);
  bool Multiply(const RawStatement& s, std::shared_ptr<WmmaOp> op, std::string* why);
  bool WmmaMemory(const RawStatement& s, const WmmaOp& op, std::string_view space, std::string* why);

  // emit_memory.cc
  void Fault(llvm::Value* address, uint32_t access, llvm::Value* lane = nullptr);
  llvm::Value* CheckedShared(llvm::Value* offset, llvm::Value* device, uint32_t size, const char* what);
  llvm::Value* CheckedWithin(llvm::Value* offset, llvm::Value* device, llvm::Value* bytes, llvm::Value* base,
                             uint32_t size, const char* what, const char* space);
  llvm::Value* CheckedLocal(llvm::Value* offset, llvm::Value* device, uint32_t size, const char* what);
  uint32_t NewAccess(uint32_t size, const char* what);
  llvm::Value* Checked(llvm::Value* address, uint32_t size, const char* what);
  llvm::Value* CheckedAccess(llvm::Value* address, uint32_t access, llvm::Value* lane);
  llvm::Value* Address(const RawOperand& address, std::string_view space, uint32_t size, const char* what,
                       std::string* why);
  // The checked host address of an access of `size` bytes at device address `at` in `space`
  // (shared, local, global or generic: then the window it lies in), as the interpreter
  // resolves it; Address's last step, and the warp matrix operations' (emit_matrix.cc).
  llvm::Value* Host(llvm::Value* at, std::string_view space, uint32_t size, const char* what);
  llvm::Value* ParamAddress(const RawOperand& address, uint32_t size, bool load, std::string* why);
  bool VectorAccess(const RawOperand& address, std::string_view space, Type t, uint32_t vec, bool load, bool ordered,
                    const RawOperand& value, std::string* why);
  struct LanesSplit {
    llvm::Value* addresses = nullptr;  // the 8 lanes' device addresses
    llvm::Value* mask = nullptr;       // the running lanes
    uint32_t access = 0;
    llvm::Value* host = nullptr;       // the first lane's host address, in the whole-lanes block
    bool uniform = false;              // one address for every lane (a module variable's)
    llvm::BasicBlock* each = nullptr;  // lane by lane
    llvm::BasicBlock* join = nullptr;
    bool shared = false;                    // of the CTA's shared memory (addresses: offsets there)
    llvm::BasicBlock* broadcast = nullptr;  // a load whose 8 lanes all run at one address
    llvm::Value* broadcast_host = nullptr;  // its host address, in that block
  };
  bool LanesAddressable(const RawOperand& address, std::string_view space) const;
  LanesSplit SplitLanes(const RawOperand& address, uint32_t bytes, bool load, bool uniform_ok = false);
  LanesSplit SplitSharedLanes(const RawOperand& address, uint32_t bytes, bool load, bool uniform_ok);
  llvm::Value* LaneHost(const LanesSplit& split, llvm::Value* address, llvm::Value* lane);
  // A loop over a row's running lanes in lane order (lane k's thread is the row's first +
  // k), for what vector code does lane by lane. OpenLaneLoop leaves the insert point in lane
  // k's body, every path of which ends by branching to `next`. A value may be carried round
  // the loop: `carried`, starting at `initial`.
  struct LaneLoop {
    llvm::PHINode* k = nullptr;
    llvm::PHINode* carried = nullptr;
    llvm::BasicBlock* head = nullptr;
    llvm::BasicBlock* next = nullptr;
    llvm::BasicBlock* done = nullptr;
  };
  LaneLoop OpenLaneLoop(const std::string& name, llvm::Value* mask, llvm::Value* initial = nullptr);
  // Emits `next` (k + 1, back to the head while lanes remain) and leaves the insert point
  // after the loop. With a carried value: `carried_out` is the body's, reaching `next` from
  // block `ran`; returns the value after the loop (nullptr without one).
  llvm::Value* CloseLaneLoop(const LaneLoop& loop, llvm::Value* carried_out = nullptr, llvm::BasicBlock* ran = nullptr);
  bool VectorLanesAccess(const RawOperand& address, std::string_view space, Type t, uint32_t vec, bool load,
                         bool ordered, const RawOperand& value, std::string* why);
  bool Atomic(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);
  // An atom/red's operation: a read-modify-write the host has, cas, or inc/dec (a
  // compare-and-swap loop).
  struct AtomicOperation {
    enum Kind : uint8_t { kRmw, kCas, kInc, kDec, kHalf } kind = kRmw;
    llvm::AtomicRMWInst::BinOp rmw = llvm::AtomicRMWInst::Add;
    uint8_t mode = 0;    // kHalf: the AtomMode HalfAtomic runs
    uint8_t format = 0;  // kHalf: its HalfFormat
  };
  bool AtomicResultSteersItsLoop(const RawStatement& atomic, size_t index, const std::string& result);
  size_t CasRetryBranch(const RawStatement& atomic, size_t index, const std::string& result,
                        const std::vector<BackEdge>& loops, const std::vector<const RawStatement*>& code);
  bool ReadsTheWord(const RawStatement& load, size_t at, const RawStatement& atomic, const BackEdge& loop,
                    const std::vector<const RawStatement*>& code);
  llvm::Value* AtomicAt(const AtomicOperation& op, llvm::Value* host, llvm::Value* value, llvm::Value* swap);
  llvm::Value* LaneAtomicHost(const LanesSplit& split, const RawOperand& address, llvm::Value* at, llvm::Value* lane,
                              uint32_t misaligned, uint32_t size);
  bool LanesAtomic(const RawOperand& address, std::string_view space, const AtomicOperation& op, Type t,
                   llvm::Value* value, llvm::Value* swap, llvm::Value** old, std::string* why);
  bool AsyncCopy(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);
  bool CopyToShared(llvm::Value* target, const RawOperand& source, uint32_t from_source, uint32_t width,
                    std::string* why);
  bool VectorAsyncCopy(const RawOperand& target, const RawOperand& source, uint32_t width, const RawOperand* extra,
                       bool predicate, std::string* why);
  bool VectorMemory(const RawOperand& address, std::string_view space, Type t, bool load, const RawOperand& value,
                    std::string* why);

  // emit_texture.cc
  bool Texture(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);

  // emit_carries.cc
  bool Carry(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
             std::string* why);
  bool Mul24(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
             std::string* why);

  // emit_half.cc
  llvm::Value* HalfToF32(llvm::Value* bits16, bool bf16);
  llvm::Value* HalfOf(llvm::Value* packed, PtxType t, uint32_t k);
  bool HalfSetp(const RawStatement& s, const std::vector<std::string_view>& q, PtxType t, std::string* why);
  bool HalfSet(const RawStatement& s, const std::vector<std::string_view>& q, PtxType t, std::string* why);
  bool HalfArithmetic(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, PtxType t,
                      std::string* why);
  bool LaneConversion(const RawStatement& s, const std::vector<std::string_view>& parts, PtxType to, PtxType from,
                      std::string* why);
  bool ConvertTf32(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);

  // emit_arithmetic.cc
  bool Setp(const RawStatement& s, const std::vector<std::string_view>& q, Type t, std::string* why);
  llvm::Value* FloatCompare(std::string_view cmp, llvm::Value* a, llvm::Value* c, std::string* why);
  bool Cvt(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);
  llvm::Value* RoundToInteger(llvm::Value* a, Type from, std::string_view rounding);
  bool Integer(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
               std::string* why);
  bool BitField(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
                std::string* why);
  bool AbsoluteDifferences(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why);
  bool Float(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
             std::string* why);
  bool MovPair(const std::vector<RawOperand>& o, Type t, std::string* why);
  llvm::Value* CallHost(uint64_t address, llvm::Type* result, const std::vector<llvm::Value*>& args);
  // One call of the host function at `address` with scalar `args` (CallHost's, per lane).
  llvm::Value* CallHostOnce(uint64_t address, llvm::Type* result, const std::vector<llvm::Value*>& args);
  llvm::Value* FloatOperand(llvm::Value* v, Type t);
  llvm::Value* FloatResult(llvm::Value* v, Type t, bool ftz, bool sat);
  bool HostFunction(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
                    std::string* why);

  struct ParamAt {
    uint64_t offset = 0;
    uint64_t size = 0;
  };

  const RawFunction& entry_;
  const uint32_t param_size_;
  llvm::LLVMContext& ctx_;
  llvm::Module& module_;
  llvm::IRBuilder<> b_;
  std::vector<MemoryAccess>* accesses_ = nullptr;
  std::map<std::string, ParamAt> params_;
  std::map<std::string, llvm::AllocaInst*> registers_;
  std::map<std::string, uint32_t> saved_index_;
  std::map<std::string, uint32_t> uses_;                   // operands naming each register, over the body
  const std::map<std::string, uint64_t>& shared_offsets_;  // the decoder's (SharedLayout)
  const std::set<std::string>& shared_dynamic_;            // .extern .shared, at shared_size_
  const uint64_t shared_size_;                             // static; the launch's total: shared_bytes_
  llvm::Value* shared_bytes_ = nullptr;                    // static + the launch's dynamic (Context)
  const std::map<std::string, uint64_t>& globals_;         // module variables' addresses (SharedLayout)
  bool has_shared_ = false;
  // Local memory: the .local variables' offsets, laid out as the decoder lays them out
  // (each at its alignment, in order; the total rounded up to 16), and each thread's bytes.
  std::map<std::string, uint64_t> local_offsets_;
  uint64_t local_size_ = 0;
  llvm::Value* local_arg_ = nullptr;                                 // the CTA's local memory (Context::local)
  std::map<uint32_t, std::array<llvm::AllocaInst*, 3>> hint_slots_;  // per access: its hint
  // Vector code (lanes_ > 0): kVectorLanes threads of a row at once, x, x + 1, ...; the
  // lanes still running (not branched away, not ended), and the per-label lanes waiting
  // there (a label merges them back as the code passes it).
  uint32_t lanes_ = 0;
  llvm::AllocaInst* mask_slot_ = nullptr;
  llvm::Value* op_mask_ = nullptr;   // while an instruction runs: its lanes (mask & guard)
  llvm::Value* op_guard_ = nullptr;  // ... and its guard (null: none)
  // Registers no lane that does not run needs (ComputeLiveness): written for every lane
  // a guard keeps, whether it runs or not.
  std::set<std::string> free_writes_;
  std::map<std::string, llvm::AllocaInst*> pending_;
  // Loops of vector code: the labels backward branches go to (a block each), and per
  // backward branch the lanes that left its loop there, waiting after it while other lanes
  // of the row loop.
  std::map<std::string, llvm::BasicBlock*> loop_heads_;
  std::map<const RawStatement*, llvm::AllocaInst*> parked_;
  // Rows with no running lane: per statement of the body, the label a row whose lanes all
  // branched away or ended jumps to from after it (its index, kSkipToEnd, or kNoSkip:
  // FindSkips), each label's block, and the code's end.
  static constexpr int kNoSkip = -2;
  static constexpr int kSkipToEnd = -1;
  std::vector<int> skip_to_;
  std::map<std::string, llvm::BasicBlock*> label_blocks_;
  llvm::BasicBlock* lanes_end_ = nullptr;
  // Barriers of vector code: per resume point, the lanes that go on after it in this
  // phase (set when the phase starts); the row's lanes that ended or stopped at a barrier
  // in this phase; each barrier's save of the lanes that arrive and restore of the lanes
  // that go on (filled once every barrier is known: FillLaneBarriers).
  std::vector<llvm::AllocaInst*> resume_waiting_;
  llvm::AllocaInst* done_slot_ = nullptr;
  struct LaneStop {
    llvm::BasicBlock* block = nullptr;
    uint32_t point = 0;
    llvm::Value* lanes = nullptr;
    llvm::BasicBlock* after = nullptr;
  };
  std::vector<LaneStop> lane_saves_, lane_restores_;
  uint32_t barriers_ = 0;  // stops: barriers, warp-level operations and yields
  // Scalar code's loads a thread may spin on (inside a loop: SpinLoad), by instruction
  // index: a thread stops before each (WarpOp::kYield) and its CTA yields its worker, so
  // that the CTA it waits for can run (run.cc). Vector code refuses them.
  std::set<size_t> spin_loads_;
  // Kernels with warp-level operations: how many, what stops a thread at each resume point
  // (CompiledKernel::warp_ops), the registers shuffles read (their shadows' indices), and
  // the CTA's warp slots and shadows (Context).
  uint32_t warp_ops_ = 0;
  std::vector<WarpOp>* warp_table_ = nullptr;
  std::map<std::string, uint32_t> shadow_index_;
  bool loop_without_stops_ = false;   // a backward branch over no warp-level operation
  bool whole_warps_ = false;          // CompiledKernel::whole_warps
  uint32_t warp_slots_ = kWarpSlots;  // CompiledKernel::warp_slots
  llvm::Value* slots_arg_ = nullptr;
  llvm::Value* shadow_arg_ = nullptr;
  std::vector<std::vector<std::string>> barrier_live_;  // per instruction: live after a barrier
  size_t instruction_index_ = 0;                        // of the instruction being emitted
  // Vector code: registers of one unguarded definition made only from constants, the
  // thread's and block's indices and dimensions, parameters and other such registers (the
  // same value wherever a lane reads them): not saved at barriers but computed again when a
  // phase restores the row (their definitions, in order).
  std::set<std::string> rematerialized_;
  std::vector<const RawStatement*> remat_code_;
  std::map<std::string, uint64_t> lane_saved_at_;  // vector code: each saved register's place in its row's
  uint64_t steer_work_ = 0;  // AtomicResultSteersItsLoop's steps so far (bounded by kMaxLivenessWork)
  bool steer_over_ = false;  // ... and past the bound
  std::vector<std::vector<std::string>> resume_live_;         // per resume point: what to restore
  std::vector<llvm::BasicBlock*> resume_points_;              // after barrier k + 1
  std::vector<std::pair<llvm::BasicBlock*, int32_t>> saves_;  // before it, and k + 1
  llvm::AllocaInst* waiting_slot_ = nullptr;
  llvm::AllocaInst* budget_slot_ = nullptr;  // back edges and thread ends to the next progress
  std::set<std::string> seen_labels_;        // a thread of this phase waits at a barrier
  llvm::Value* shared_arg_ = nullptr;
  llvm::Value* resume_arg_ = nullptr;
  llvm::Value* saved_arg_ = nullptr;
  std::map<std::string, llvm::BasicBlock*> labels_;
  llvm::Type *i1_ = nullptr, *i32_ = nullptr, *i64_ = nullptr, *ptr_ = nullptr;
  llvm::Function* fn_ = nullptr;
  llvm::Value* context_ = nullptr;
  llvm::Value* params_arg_ = nullptr;
  llvm::Value* ctaid_[3] = {};
  llvm::Value* ntid_[3] = {};
  llvm::Value* nctaid_[3] = {};
  llvm::AllocaInst* tid_slot_[3] = {};
  llvm::AllocaInst* count_slot_ = nullptr;
  llvm::Instruction* alloca_point_ = nullptr;
  llvm::BasicBlock* thread_block_ = nullptr;
  llvm::BasicBlock* next_block_ = nullptr;
};

}  // namespace gpupool::sim::jit

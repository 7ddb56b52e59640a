// The JIT tier of the PTX engine (jit.h): a kernel whose threads meet only at barriers,
// from its parsed PTX to LLVM IR to host code.
//
// The function made for a kernel, `cta` (CtaFunction), runs one CTA: its threads one after
// another, x fastest, each from its start (or the barrier it waits at) to its next barrier
// or its end; when threads wait at a barrier, another such phase. PTX registers are 64-bit
// stack slots (promoted to SSA values by LLVM): an instruction reads a register as its type
// (truncating) and writes the value extended to 64 bits as its type says, as the
// interpreter keeps them; across a barrier a thread keeps the registers live after it in
// `saved`. Each global access checks its address against the allocation it last hit (a
// per-instruction hint, one compare) and calls back into the engine (Translate) otherwise;
// shared accesses are checked against the CTA's shared size: no address reaches memory
// unchecked.
#include "remote/ptx/jit/jit.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "remote/protocol/protocol.h"
#include "remote/ptx/front/program.h"
#include "remote/ptx/launch.h"
#include "remote/ptx/memory.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim {

namespace {

// The CUresult values a launch ends with: the protocol's (remote/protocol/protocol.h).
constexpr int32_t kIllegalAddress = dataplane::kCuIllegalAddress;
constexpr int32_t kLaunchOutOfResources = dataplane::kCuLaunchOutOfResources;
constexpr int32_t kLaunchTimeout = dataplane::kCuLaunchTimeout;  // cancelled
// Kernels larger than this are left to the interpreter: LLVM's time grows faster than the
// code, and a launch waits for its compile.
constexpr size_t kMaxInstructions = 16384;
constexpr size_t kMaxRegisters = 4096;
// Threads vector code runs at once (8 floats fill an AVX register).
constexpr uint32_t kVectorLanes = 8;

// The allocation a memory instruction hit last: an address a of `size` bytes is in it when
// a - start < limit (limit = allocation size - size + 1; 0 matches nothing).
struct Hint {
  uint64_t start = 0;
  uint64_t limit = 0;
  int64_t delta = 0;  // host address - device address
};

struct MemoryAccess {
  uint32_t size = 0;
  const char* what = "load";  // load, store, atomic: as the interpreter names a fault
};

// What compiled code reads and writes besides the kernel's memory; offsets are fixed for
// the IR (kOff* below).
struct Context {
  Hint* hints = nullptr;                                       // +0
  char* (*translate)(Context*, uint32_t, uint64_t) = nullptr;  // +8
  uint64_t instructions = 0;                                   // +16
  uint64_t fault_address = 0;                                  // +24
  uint32_t fault_access = 0;                                   // +32
  uint32_t fault_thread = 0;                                   // +36
  uint32_t ntid[3] = {1, 1, 1};                                // +40
  uint32_t nctaid[3] = {1, 1, 1};                              // +52
  std::atomic<uint64_t>* progress = nullptr;                   // +64, never null
  const std::atomic<bool>* cancel = nullptr;                   // +72, never null
  // Not read by compiled code.
  const LaunchSpec* spec = nullptr;
  const std::vector<MemoryAccess>* accesses = nullptr;
};
constexpr uint64_t kOffHints = 0, kOffTranslate = 8, kOffInstructions = 16, kOffFaultAddress = 24, kOffFaultAccess = 32,
                   kOffFaultThread = 36, kOffNtid = 40, kOffNctaid = 52, kOffProgress = 64, kOffCancel = 72;
// Compiled code adds one to the launch's progress (what the agent's watchdog tells a long
// kernel from a hung GPU by, as the interpreter does every 2^16 warp instructions) after
// this many backward branches and ended threads.
constexpr int64_t kProgressEvery = int64_t{1} << 16;
static_assert(offsetof(Context, hints) == kOffHints);
static_assert(offsetof(Context, translate) == kOffTranslate);
static_assert(offsetof(Context, instructions) == kOffInstructions);
static_assert(offsetof(Context, fault_address) == kOffFaultAddress);
static_assert(offsetof(Context, fault_access) == kOffFaultAccess);
static_assert(offsetof(Context, fault_thread) == kOffFaultThread);
static_assert(offsetof(Context, ntid) == kOffNtid);
static_assert(offsetof(Context, nctaid) == kOffNctaid);
static_assert(offsetof(Context, progress) == kOffProgress);
static_assert(offsetof(Context, cancel) == kOffCancel);
// What Context::cancel points to when the launch has no cancel flag.
const std::atomic<bool> kNeverCancelled{false};

// The slow path of a checked access: the allocation holding [address, address + size)
// among the launch's, remembered in the instruction's hint; nullptr if none holds it.
char* Translate(Context* context, uint32_t access, uint64_t address) {
  const uint32_t size = (*context->accesses)[access].size;
  const std::vector<MemoryRange>& ranges = context->spec->memory;
  const MemoryRange* found = AllocationAtOrBelow(ranges, address);
  if (found == nullptr) return nullptr;
  const MemoryRange& range = *found;
  // Global memory stays below the shared window, as the interpreter keeps it.
  if (range.size < size || range.start + range.size > kSharedWindow) return nullptr;
  if (address - range.start > range.size - size) return nullptr;
  Hint& hint = context->hints[access];
  hint.start = range.start;
  hint.limit = range.size - size + 1;
  hint.delta = reinterpret_cast<int64_t>(range.host) - static_cast<int64_t>(range.start);
  return range.host + (address - range.start);
}

// Runs one CTA: (context, parameters, ctaid x/y/z, shared memory, each thread's resume
// point (0: not started, -1: ended, k: after barrier k), each thread's saved registers).
using CtaFunction = int32_t (*)(Context*, const uint8_t* params, uint32_t, uint32_t, uint32_t, uint8_t* shared,
                                int32_t* resume, uint64_t* saved);

}  // namespace

class CompiledKernel {
 public:
  std::unique_ptr<llvm::orc::LLJIT> jit;
  CtaFunction cta = nullptr;
  // The same over kVectorLanes threads of a row at once, for blocks whose x extent is a
  // multiple of it; nullptr where the kernel has what vector code does not take.
  CtaFunction cta_vector = nullptr;
  std::vector<MemoryAccess> accesses;
  uint32_t registers = 0;     // saved at a barrier, per thread
  uint64_t shared_bytes = 0;  // of the CTA's .shared variables
  bool barriers = false;
};

namespace {

// ---- Types of PTX instructions

enum class Kind : uint8_t { kNone, kSigned, kUnsigned, kBits, kFloat, kPred };
struct Type {
  Kind kind = Kind::kNone;
  uint32_t bits = 0;
  bool ok() const { return kind != Kind::kNone; }
  bool is_int() const { return kind == Kind::kSigned || kind == Kind::kUnsigned || kind == Kind::kBits; }
};

Type TypeOf(std::string_view suffix) {
  static const std::map<std::string_view, Type> kTypes = {
      {"s8", {Kind::kSigned, 8}},     {"s16", {Kind::kSigned, 16}},   {"s32", {Kind::kSigned, 32}},
      {"s64", {Kind::kSigned, 64}},   {"u8", {Kind::kUnsigned, 8}},   {"u16", {Kind::kUnsigned, 16}},
      {"u32", {Kind::kUnsigned, 32}}, {"u64", {Kind::kUnsigned, 64}}, {"b8", {Kind::kBits, 8}},
      {"b16", {Kind::kBits, 16}},     {"b32", {Kind::kBits, 32}},     {"b64", {Kind::kBits, 64}},
      {"f32", {Kind::kFloat, 32}},    {"f64", {Kind::kFloat, 64}},    {"pred", {Kind::kPred, 1}},
  };
  auto it = kTypes.find(suffix);
  return it == kTypes.end() ? Type{} : it->second;
}

// Qualifiers of ld/st that change nothing for one thread on the host: cache hints. Not
// .volatile, .relaxed, .acquire, nor .cg and .cv (a load past the L1, which polling code
// uses): a thread may spin on such a load until another thread stores, and here a thread
// runs to its end or its next barrier before the next one starts (the interpreter lets the
// others run).
bool IsCacheHint(std::string_view q) {
  return q == "ca" || q == "cs" || q == "lu" || q == "nc" || q == "wb" || q == "wt";
}

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
        shared_size_(shared.size),
        lanes_(lanes) {}

  // Emits `cta`; false (and *refused) when the kernel has what the tier does not take.
  bool Emit(CompiledKernel* out, std::string* refused) {
    accesses_ = &out->accesses;
    uint64_t offset = 0;
    for (const RawParam& param : entry_.params) {
      offset = (offset + param.align - 1) / param.align * param.align;
      params_[param.name] = {offset, param.size};
      offset += param.size;
    }
    size_t instructions = 0;
    for (const RawStatement& s : entry_.body) {
      if (s.kind == RawStatement::kInstruction && ++instructions > kMaxInstructions) {
        return Refuse("more than " + std::to_string(kMaxInstructions) + " instructions", s.line, refused);
      }
      if (s.kind == RawStatement::kLocal || s.kind == RawStatement::kParam) {
        return Refuse(
            std::string("it declares ") + (s.kind == RawStatement::kLocal ? ".local" : ".param") + " variables", s.line,
            refused);
      }
      if (s.kind != RawStatement::kInstruction) continue;
      if (s.opcode.rfind("bar.", 0) == 0 || s.opcode.rfind("barrier.", 0) == 0) ++barriers_;
      for (const RawOperand& o : s.operands) CountUses(o);
      if (!s.guard.empty()) ++uses_[s.guard];
    }
    // The decoder's layout (SharedLayout): every .shared variable the kernel names has its
    // place, and the CTA's shared size is known before any access is checked against it.
    has_shared_ = !shared_offsets_.empty();
    if (shared_size_ > kMaxSharedBytes) {
      return Refuse(std::to_string(shared_size_) + " bytes of shared memory", 0, refused);
    }
    if (uses_.size() > kMaxRegisters) {
      return Refuse("more than " + std::to_string(kMaxRegisters) + " names",
                    entry_.body.empty() ? 0 : entry_.body.front().line, refused);
    }
    if (lanes_ > 0) {
      // Vector code takes straight code and forward branches only, without barriers,
      // shared memory or atomics (the scalar code runs those).
      if (barriers_ > 0 || has_shared_) {
        return Refuse("vector code: barriers or shared memory", 0, refused);
      }
      std::map<std::string, size_t> label_at;
      size_t index = 0;
      for (const RawStatement& s : entry_.body) {
        if (s.kind == RawStatement::kLabel) label_at[s.opcode] = index;
        if (s.kind == RawStatement::kInstruction) ++index;
      }
      index = 0;
      for (const RawStatement& s : entry_.body) {
        if (s.kind != RawStatement::kInstruction) continue;
        if (s.opcode.rfind("bra", 0) == 0 && !s.operands.empty()) {
          auto it = label_at.find(s.operands[0].name);
          if (it == label_at.end() || it->second <= index) {
            return Refuse("vector code: a backward branch", s.line, refused);
          }
        }
        ++index;
      }
    }
    if (barriers_ > 0) {
      std::string why;
      if (!ComputeLiveness(&why)) return Refuse(why, 0, refused);
    }
    i1_ = b_.getInt1Ty();
    i32_ = b_.getInt32Ty();
    i64_ = b_.getInt64Ty();
    ptr_ = b_.getPtrTy();
    auto* type = llvm::FunctionType::get(i32_, {ptr_, ptr_, i32_, i32_, i32_, ptr_, ptr_, ptr_}, false);
    fn_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, lanes_ ? "cta_vector" : "cta", module_);
    context_ = fn_->getArg(0);
    params_arg_ = fn_->getArg(1);
    for (int i = 0; i < 3; ++i) ctaid_[i] = fn_->getArg(2 + i);
    shared_arg_ = fn_->getArg(5);
    resume_arg_ = fn_->getArg(6);
    saved_arg_ = fn_->getArg(7);
    // Neither the context, the parameters, the CTA's shared memory nor its threads' saved
    // state are reachable through a device address (all are the engine's own host memory,
    // no allocation's), and the kernel never writes its parameters: LLVM may keep what it
    // reads of them in registers across threads.
    for (unsigned i : {0u, 1u, 5u, 6u, 7u}) fn_->addParamAttr(i, llvm::Attribute::NoAlias);
    fn_->addParamAttr(1, llvm::Attribute::ReadOnly);
    // RunKernel checks the buffer holds the kernel's parameters: loads of them may move.
    if (param_size_ > 0) {
      fn_->addParamAttr(1, llvm::Attribute::getWithDereferenceableBytes(ctx_, param_size_));
    }

    auto* entry_block = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    auto* phase_block = llvm::BasicBlock::Create(ctx_, "phase", fn_);
    thread_block_ = llvm::BasicBlock::Create(ctx_, "thread", fn_);
    next_block_ = llvm::BasicBlock::Create(ctx_, "next", fn_);
    auto* start_block = llvm::BasicBlock::Create(ctx_, "start", fn_);
    b_.SetInsertPoint(entry_block);
    for (int i = 0; i < 3; ++i) {
      tid_slot_[i] = b_.CreateAlloca(i32_);
      ntid_[i] = b_.CreateLoad(i32_, Field(kOffNtid + 4 * i));
      nctaid_[i] = b_.CreateLoad(i32_, Field(kOffNctaid + 4 * i));
    }
    count_slot_ = b_.CreateAlloca(i64_);
    waiting_slot_ = b_.CreateAlloca(i1_);
    b_.CreateStore(b_.getInt64(0), count_slot_);
    if (lanes_) mask_slot_ = b_.CreateAlloca(Lanes(i1_));
    budget_slot_ = b_.CreateAlloca(i64_);
    b_.CreateStore(b_.getInt64(kProgressEvery), budget_slot_);
    alloca_point_ = b_.CreateBr(phase_block);

    // phase: every thread from its start or its barrier to its next barrier or its end.
    b_.SetInsertPoint(phase_block);
    for (int i = 0; i < 3; ++i) b_.CreateStore(b_.getInt32(0), tid_slot_[i]);
    b_.CreateStore(b_.getInt1(false), waiting_slot_);
    b_.CreateBr(thread_block_);

    // thread: where this thread is (kernels with barriers), then its code.
    b_.SetInsertPoint(thread_block_);
    llvm::BasicBlock* restore_block = nullptr;
    if (barriers_ > 0) {
      llvm::Value* resume = b_.CreateLoad(i32_, ResumeOf());
      auto* started = llvm::BasicBlock::Create(ctx_, "started", fn_);
      b_.CreateCondBr(b_.CreateICmpEQ(resume, b_.getInt32(0)), start_block, started);
      b_.SetInsertPoint(started);
      restore_block = llvm::BasicBlock::Create(ctx_, "restore", fn_);
      b_.CreateCondBr(b_.CreateICmpSLT(resume, b_.getInt32(0)), next_block_, restore_block);
      b_.SetInsertPoint(restore_block);
      // Filled once every barrier is known (after the body).
    } else {
      b_.CreateBr(start_block);
    }

    // Labels first, so that branches forward find their blocks.
    for (const RawStatement& s : entry_.body) {
      if (s.kind == RawStatement::kLabel && !lanes_) {
        labels_[s.opcode] = llvm::BasicBlock::Create(ctx_, s.opcode, fn_);
      }
      if (s.kind == RawStatement::kLabel && lanes_) {
        llvm::IRBuilder<> at(alloca_point_);
        pending_[s.opcode] = at.CreateAlloca(Lanes(i1_));
      }
    }
    b_.SetInsertPoint(start_block);
    if (lanes_) {
      // Every lane runs; no lane waits at any label.
      b_.CreateStore(Int(1, 1), mask_slot_);
      for (auto& [label, slot] : pending_) b_.CreateStore(Int(1, 0), slot);
    }
    for (const RawStatement& s : entry_.body) {
      if (s.kind == RawStatement::kLabel && lanes_) {
        // The lanes that branched here join the running ones.
        b_.CreateStore(
            b_.CreateOr(b_.CreateLoad(Lanes(i1_), mask_slot_), b_.CreateLoad(Lanes(i1_), pending_.at(s.opcode))),
            mask_slot_);
        continue;
      }
      if (s.kind == RawStatement::kLabel) {
        seen_labels_.insert(s.opcode);
        llvm::BasicBlock* block = labels_[s.opcode];
        if (!b_.GetInsertBlock()->getTerminator()) b_.CreateBr(block);
        b_.SetInsertPoint(block);
        continue;
      }
      if (s.kind != RawStatement::kInstruction) continue;
      if (b_.GetInsertBlock()->getTerminator()) {
        // Code after an unconditional branch that no label reaches.
        b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "dead", fn_));
      }
      if (!Instruction(s, refused)) return false;
      ++instruction_index_;
    }
    if (!b_.GetInsertBlock()->getTerminator()) Exit();

    if (barriers_ > 0) {
      // restore: the registers live after the barrier the thread waits at, as it left
      // them, then on after it.
      b_.SetInsertPoint(restore_block);
      llvm::Value* resume = b_.CreateLoad(i32_, ResumeOf());
      llvm::SwitchInst* resume_switch = b_.CreateSwitch(resume, next_block_, resume_points_.size());
      for (size_t k = 0; k < resume_points_.size(); ++k) {
        auto* restore = llvm::BasicBlock::Create(ctx_, "restore_point", fn_);
        resume_switch->addCase(b_.getInt32(static_cast<uint32_t>(k + 1)), restore);
        b_.SetInsertPoint(restore);
        for (const std::string& name : resume_live_[k]) {
          b_.CreateStore(b_.CreateTrunc(b_.CreateLoad(i64_, SavedOf(SavedIndex(name))), StorageType(name)),
                         Register(name));
        }
        b_.CreateBr(resume_points_[k]);
      }
      // The barriers' saves: what is live after each.
      for (auto& [block, point] : saves_) {
        b_.SetInsertPoint(block);
        for (const std::string& name : resume_live_[point - 1]) {
          b_.CreateStore(LoadRegister64(name), SavedOf(SavedIndex(name)));
        }
        b_.CreateStore(b_.getInt32(point), ResumeOf());
        b_.CreateStore(b_.getInt1(true), waiting_slot_);
        b_.CreateBr(next_block_);
      }
    }
    if (lanes_) {
      // Each chunk's registers start at 0: what an earlier chunk (other threads) left is
      // nothing to keep for lanes that do not write them, and LLVM then carries no vector
      // registers from one chunk to the next.
      llvm::IRBuilder<> at(start_block, start_block->getFirstInsertionPt());
      for (auto& [name, slot] : registers_) {
        at.CreateStore(llvm::Constant::getNullValue(slot->getAllocatedType()), slot);
      }
    }
    out->registers = static_cast<uint32_t>(saved_index_.size());
    out->shared_bytes = shared_size_;
    out->barriers = barriers_ > 0;

    // next: the following thread, x fastest; after the last, another phase if a thread
    // waits at a barrier, else the count and success.
    b_.SetInsertPoint(next_block_);
    Tick();
    llvm::Value* x = b_.CreateAdd(b_.CreateLoad(i32_, tid_slot_[0]), b_.getInt32(lanes_ ? lanes_ : 1));
    auto* wrap_x = llvm::BasicBlock::Create(ctx_, "wrap_x", fn_);
    auto* wrap_y = llvm::BasicBlock::Create(ctx_, "wrap_y", fn_);
    auto* last = llvm::BasicBlock::Create(ctx_, "last", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
    auto* store_x = llvm::BasicBlock::Create(ctx_, "store_x", fn_);
    b_.CreateCondBr(b_.CreateICmpULT(x, ntid_[0]), store_x, wrap_x);
    b_.SetInsertPoint(store_x);
    b_.CreateStore(x, tid_slot_[0]);
    b_.CreateBr(thread_block_);
    b_.SetInsertPoint(wrap_x);
    b_.CreateStore(b_.getInt32(0), tid_slot_[0]);
    llvm::Value* y = b_.CreateAdd(b_.CreateLoad(i32_, tid_slot_[1]), b_.getInt32(1));
    auto* store_y = llvm::BasicBlock::Create(ctx_, "store_y", fn_);
    b_.CreateCondBr(b_.CreateICmpULT(y, ntid_[1]), store_y, wrap_y);
    b_.SetInsertPoint(store_y);
    b_.CreateStore(y, tid_slot_[1]);
    b_.CreateBr(thread_block_);
    b_.SetInsertPoint(wrap_y);
    b_.CreateStore(b_.getInt32(0), tid_slot_[1]);
    llvm::Value* z = b_.CreateAdd(b_.CreateLoad(i32_, tid_slot_[2]), b_.getInt32(1));
    b_.CreateStore(z, tid_slot_[2]);
    b_.CreateCondBr(b_.CreateICmpULT(z, ntid_[2]), thread_block_, last);
    b_.SetInsertPoint(last);
    if (barriers_ > 0) {
      b_.CreateCondBr(b_.CreateLoad(i1_, waiting_slot_), phase_block, done);
    } else {
      b_.CreateBr(done);
    }
    b_.SetInsertPoint(done);
    FlushCount();
    b_.CreateRet(b_.getInt32(0));
    return true;
  }

 private:
  bool Refuse(const std::string& why, int line, std::string* refused) {
    *refused = why + " (PTX line " + std::to_string(line) + ")";
    return false;
  }

  void CountUses(const RawOperand& o) {
    if (!o.name.empty()) ++uses_[o.name];
    if (!o.pair.empty()) ++uses_[o.pair];
    for (const RawOperand& item : o.items) CountUses(item);
  }

  // The shared offset of symbol `name`, or -1 when it is no .shared variable the decoder
  // placed (or an extern one, dynamic shared memory, which the tier leaves to the
  // interpreter).
  int64_t SharedSymbol(const std::string& name) const {
    auto it = shared_offsets_.find(name);
    return it == shared_offsets_.end() ? -1 : static_cast<int64_t>(it->second);
  }

  // Registers an operand reads (a destination's name is not read).
  void ReadNames(const RawOperand& o, std::vector<std::string>* names) {
    if (!o.name.empty() && o.name[0] == '%' && !IsSpecialName(o.name)) names->push_back(o.name);
    for (const RawOperand& item : o.items) ReadNames(item, names);
  }

  // Which registers are live after each barrier, so that a thread saves and restores only
  // those (a backward dataflow over the kernel's instructions; a guarded write does not
  // end a register's life, and a destination of st/red is an address, read).
  // False (and *why) when the work would exceed the compile's bounds (kMaxLivenessWork,
  // kMaxBarrierSaves): the kernel then runs on the interpreter.
  bool ComputeLiveness(std::string* why) {
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
          if (!o.name.empty() && o.name[0] == '%' && !IsSpecialName(o.name)) {
            (s.guard.empty() ? defs[i] : uses[i]).push_back(id(o.name));
          }
          if (!o.pair.empty()) (s.guard.empty() ? defs[i] : uses[i]).push_back(id(o.pair));
          continue;
        }
        ReadNames(o, &read);
      }
      if (!s.guard.empty()) read.push_back(s.guard);
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
    // A last pass with the fixed point: what is live after each barrier.
    barrier_live_.assign(n, {});
    uint64_t saves = 0;
    for (size_t i = 0; i < n; ++i) {
      const std::string op = code[i]->opcode.substr(0, code[i]->opcode.find('.'));
      if (op != "bar" && op != "barrier") continue;
      std::vector<bool> live(ids.size());
      for (size_t j : next[i]) {
        for (size_t r = 0; r < live.size(); ++r) live[r] = live[r] || live_in[j][r];
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

  // This thread's index in its block, and its resume point and saved registers.
  llvm::Value* ThreadIndex() {
    return b_.CreateAdd(
        b_.CreateLoad(i32_, tid_slot_[0]),
        b_.CreateMul(ntid_[0], b_.CreateAdd(b_.CreateLoad(i32_, tid_slot_[1]),
                                            b_.CreateMul(ntid_[1], b_.CreateLoad(i32_, tid_slot_[2])))));
  }
  llvm::Value* ResumeOf() { return b_.CreateGEP(i32_, resume_arg_, b_.CreateZExt(ThreadIndex(), i64_)); }
  // A register's place among those any barrier saves.
  uint32_t SavedIndex(const std::string& name) {
    if (saved_index_.empty()) {
      for (const std::vector<std::string>& names : resume_live_) {
        for (const std::string& n : names) saved_index_.emplace(n, saved_index_.size());
      }
    }
    return saved_index_.at(name);
  }
  // Saved registers: thread-major, saved_index_.size() of them per thread (made once every
  // barrier is known).
  llvm::Value* SavedOf(uint32_t index) {
    llvm::Value* base = b_.CreateMul(b_.CreateZExt(ThreadIndex(), i64_), b_.getInt64(saved_index_.size()));
    return b_.CreateGEP(i64_, saved_arg_, b_.CreateAdd(base, b_.getInt64(index)));
  }

  // One step of the watchdog's budget; when it runs out, progress.
  void Tick() {
    llvm::Value* budget = b_.CreateSub(b_.CreateLoad(i64_, budget_slot_), b_.getInt64(1));
    b_.CreateStore(budget, budget_slot_);
    auto* report = llvm::BasicBlock::Create(ctx_, "progress", fn_);
    auto* on = llvm::BasicBlock::Create(ctx_, "ticked", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(budget, b_.getInt64(0)), report, on,
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

  // ret/exit: the thread ends (with barriers: it no longer takes part in them).
  void Exit() {
    if (barriers_ > 0) b_.CreateStore(b_.getInt32(-1), ResumeOf());
    b_.CreateBr(next_block_);
  }

  llvm::Value* Field(uint64_t offset) { return FieldAt(b_, offset); }
  llvm::Value* FieldAt(llvm::IRBuilder<>& at, uint64_t offset) {
    return at.CreateConstGEP1_64(at.getInt8Ty(), context_, offset);
  }

  void FlushCount() {
    llvm::Value* at = Field(kOffInstructions);
    b_.CreateStore(b_.CreateAdd(b_.CreateLoad(i64_, at), b_.CreateLoad(i64_, count_slot_)), at);
  }

  // A register's width as declared (64 for one used undeclared, as inline asm may).
  uint32_t StorageBits(const std::string& name) {
    auto it = entry_.register_bits.find(name);
    if (it == entry_.register_bits.end()) {
      const size_t at = name.rfind('@');
      if (at != std::string::npos) it = entry_.register_bits.find(name.substr(0, at));
    }
    return it == entry_.register_bits.end() ? 64 : it->second;
  }
  llvm::Type* StorageType(const std::string& name) { return Lanes(b_.getIntNTy(StorageBits(name))); }
  llvm::Value* LoadRegister(const std::string& name) { return b_.CreateLoad(StorageType(name), Register(name)); }
  // Its value as 64 bits, zero-extended (an address; what a barrier saves).
  llvm::Value* LoadRegister64(const std::string& name) { return b_.CreateZExt(LoadRegister(name), I64()); }

  // A register: a stack slot of its declared width (i1 for a predicate, i32 for .b32...),
  // so that 32-bit work stays 32-bit (half the vector registers in vector code).
  llvm::AllocaInst* Register(const std::string& name) {
    auto it = registers_.find(name);
    if (it != registers_.end()) return it->second;
    llvm::IRBuilder<> at(alloca_point_);
    llvm::Type* type = StorageType(name);
    llvm::AllocaInst* slot = at.CreateAlloca(type, nullptr, name);
    at.CreateStore(llvm::Constant::getNullValue(type), slot);
    registers_[name] = slot;
    return slot;
  }

  // Types and constants of one thread (scalar) or of kLanes threads at once (vectors).
  llvm::Type* Lanes(llvm::Type* scalar) { return lanes_ ? llvm::FixedVectorType::get(scalar, lanes_) : scalar; }
  llvm::Type* I64() { return Lanes(i64_); }
  llvm::Value* Splat(llvm::Value* scalar) { return lanes_ ? b_.CreateVectorSplat(lanes_, scalar) : scalar; }
  llvm::Value* Int(uint32_t bits, uint64_t value) { return Splat(b_.getIntN(bits, value)); }

  llvm::Type* ScalarType(Type t) {
    if (t.kind == Kind::kPred) return i1_;
    if (t.kind == Kind::kFloat) return t.bits == 32 ? b_.getFloatTy() : b_.getDoubleTy();
    return b_.getIntNTy(t.bits);
  }
  // <0, 1, 2, ...> times `step`, 64-bit.
  llvm::Value* Steps(uint64_t step) {
    std::vector<llvm::Constant*> steps;
    for (uint32_t k = 0; k < lanes_; ++k) steps.push_back(b_.getInt64(k * step));
    return llvm::ConstantVector::get(steps);
  }
  llvm::Value* LaneNumbers() {
    std::vector<llvm::Constant*> lanes;
    for (uint32_t k = 0; k < lanes_; ++k) lanes.push_back(b_.getInt32(k));
    return llvm::ConstantVector::get(lanes);
  }
  // The lanes an instruction of vector code runs on.
  llvm::Value* Mask() { return op_mask_ ? op_mask_ : b_.CreateLoad(Lanes(i1_), mask_slot_); }

  llvm::Type* LlvmType(Type t) {
    if (t.kind == Kind::kPred) return Lanes(i1_);
    if (t.kind == Kind::kFloat) return Lanes(t.bits == 32 ? b_.getFloatTy() : b_.getDoubleTy());
    return Lanes(b_.getIntNTy(t.bits));
  }

  // A register's value (its declared width) -> a value of type t; nullptr when t is wider
  // than the register (PTX allows only narrower or equal types).
  llvm::Value* FromStorage(llvm::Value* bits, uint32_t width, Type t) {
    if (t.kind == Kind::kPred) {
      return width == 1 ? bits : b_.CreateICmpNE(bits, Int(width, 0));
    }
    if (width == 1 || t.bits > width) return nullptr;
    if (t.bits < width) bits = b_.CreateTrunc(bits, Lanes(b_.getIntNTy(t.bits)));
    if (t.kind == Kind::kFloat) bits = b_.CreateBitCast(bits, LlvmType(t));
    return bits;
  }

  // A value of type t -> a register of `width` bits (signed types sign-extended, as the
  // interpreter keeps them); nullptr when t is wider.
  llvm::Value* ToStorage(llvm::Value* v, Type t, uint32_t width) {
    if (t.kind == Kind::kPred) return width == 1 ? v : b_.CreateZExt(v, Lanes(b_.getIntNTy(width)));
    if (width == 1 || t.bits > width) return nullptr;
    if (t.kind == Kind::kFloat) v = b_.CreateBitCast(v, Lanes(b_.getIntNTy(t.bits)));
    if (t.bits == width) return v;
    llvm::Type* type = Lanes(b_.getIntNTy(width));
    return t.kind == Kind::kSigned ? b_.CreateSExt(v, type) : b_.CreateZExt(v, type);
  }

  // Special registers this tier knows: %tid, %ntid, %ctaid, %nctaid (u32).
  llvm::Value* Special(const std::string& name) {
    static const char* kAxes = "xyz";
    for (int i = 0; i < 3; ++i) {
      std::string axis = std::string(".") + kAxes[i];
      if (name == "%tid" + axis) {
        llvm::Value* tid = Splat(b_.CreateLoad(i32_, tid_slot_[i]));
        if (lanes_ && i == 0) tid = b_.CreateAdd(tid, LaneNumbers());  // lanes are x, x+1, ...
        return tid;
      }
      if (name == "%ntid" + axis) return Splat(ntid_[i]);
      if (name == "%ctaid" + axis) return Splat(ctaid_[i]);
      if (name == "%nctaid" + axis) return Splat(nctaid_[i]);
    }
    return nullptr;
  }

  bool IsSpecialName(const std::string& name) {
    return name.size() > 1 && name[0] == '%' &&
           (name.rfind("%tid", 0) == 0 || name.rfind("%ntid", 0) == 0 || name.rfind("%ctaid", 0) == 0 ||
            name.rfind("%nctaid", 0) == 0 || name.rfind("%laneid", 0) == 0 || name.rfind("%warpid", 0) == 0 ||
            name.rfind("%clock", 0) == 0 || name.rfind("%lanemask", 0) == 0 || name.rfind("%smid", 0) == 0 ||
            name.rfind("%nsmid", 0) == 0 || name.rfind("%nwarpid", 0) == 0 || name.rfind("%gridid", 0) == 0 ||
            name.rfind("%globaltimer", 0) == 0 || name.rfind("%envreg", 0) == 0 || name.rfind("%pm", 0) == 0 ||
            name.rfind("%dynamic_smem", 0) == 0 || name.rfind("%total_smem", 0) == 0 ||
            name.rfind("%cluster", 0) == 0 || name.rfind("%is_explicit", 0) == 0 || name.rfind("%aggr_smem", 0) == 0 ||
            name.rfind("%reserved_smem", 0) == 0 || name.rfind("%current_graph", 0) == 0);
  }

  // A source operand as type t; nullptr with *why when the tier does not take it.
  llvm::Value* Source(const RawOperand& op, Type t, std::string* why) {
    switch (op.kind) {
      case RawOperand::kName: {
        if (IsSpecialName(op.name)) {
          llvm::Value* v = Special(op.name);
          if (v == nullptr) {
            *why = "it reads " + op.name;
            return nullptr;
          }
          if (!t.is_int()) {
            *why = "it reads " + op.name + " as a non-integer";
            return nullptr;
          }
          return b_.CreateZExtOrTrunc(v, LlvmType(t));
        }
        if (!op.name.empty() && op.name[0] != '%' && !op.negated && t.is_int()) {
          // A .shared variable's name: its offset in the CTA's shared memory.
          if (int64_t offset = SharedSymbol(op.name); offset >= 0) {
            return Int(t.bits, static_cast<uint64_t>(offset));
          }
        }
        if (op.name.empty() || op.name[0] != '%' || op.negated) {
          *why = "it names " + (op.name.empty() ? std::string("an operand") : op.name);
          return nullptr;
        }
        llvm::Value* v = FromStorage(LoadRegister(op.name), StorageBits(op.name), t);
        if (v == nullptr) *why = "it reads " + op.name + " as a type wider than the register";
        return v;
      }
      case RawOperand::kInt:
        if (t.kind == Kind::kFloat) {
          // An integer literal of a float instruction holds the value, as ptxas reads it.
          double value = static_cast<double>(static_cast<int64_t>(op.bits));
          return llvm::ConstantFP::get(LlvmType(t), value);
        }
        if (t.kind == Kind::kPred) return Int(1, op.bits != 0);
        return Int(t.bits, op.bits);
      case RawOperand::kF32: {
        float f;
        uint32_t bits = static_cast<uint32_t>(op.bits);
        std::memcpy(&f, &bits, 4);
        if (t.kind == Kind::kFloat) return llvm::ConstantFP::get(LlvmType(t), static_cast<double>(f));
        if (t.is_int() && t.bits == 32) return Int(32, bits);
        break;
      }
      case RawOperand::kF64: {
        double d;
        std::memcpy(&d, &op.bits, 8);
        if (t.kind == Kind::kFloat) {
          if (t.bits == 64) return llvm::ConstantFP::get(LlvmType(t), d);
          return llvm::ConstantFP::get(LlvmType(t), static_cast<double>(static_cast<float>(d)));
        }
        if (t.is_int() && t.bits == 64) return Int(64, op.bits);
        break;
      }
      default:
        break;
    }
    *why = "an operand it does not take";
    return nullptr;
  }

  bool Dest(const RawOperand& op, llvm::Value* v, Type t, std::string* why) {
    if (op.kind != RawOperand::kName || op.name.empty() || op.name[0] != '%' || IsSpecialName(op.name) ||
        !op.pair.empty()) {
      *why = "a destination it does not take";
      return false;
    }
    llvm::Value* bits = ToStorage(v, t, StorageBits(op.name));
    if (bits == nullptr) {
      *why = "it writes " + op.name + " with a type wider than the register";
      return false;
    }
    llvm::AllocaInst* slot = Register(op.name);
    // Lanes outside the mask keep their value.
    if (lanes_) bits = b_.CreateSelect(Mask(), bits, b_.CreateLoad(StorageType(op.name), slot));
    b_.CreateStore(bits, slot);
    return true;
  }

  // Ends the launch with CUDA_ERROR_ILLEGAL_ADDRESS for `access` at `address`.
  void Fault(llvm::Value* address, uint32_t access, llvm::Value* lane = nullptr) {
    b_.CreateStore(address, Field(kOffFaultAddress));
    b_.CreateStore(b_.getInt32(access), Field(kOffFaultAccess));
    llvm::Value* thread = ThreadIndex();
    if (lane != nullptr) thread = b_.CreateAdd(thread, lane);
    b_.CreateStore(thread, Field(kOffFaultThread));
    FlushCount();
    b_.CreateRet(b_.getInt32(kIllegalAddress));
  }

  // The host address of an access of `size` bytes at `offset` in the CTA's shared memory
  // (the low 48 bits of a window address, as the interpreter takes them); a fault past it.
  llvm::Value* CheckedShared(llvm::Value* offset, uint32_t size, const char* what) {
    const uint32_t access = static_cast<uint32_t>(accesses_->size());
    accesses_->push_back({size, what});
    offset = b_.CreateAnd(offset, b_.getInt64(0xffffffffffffull));
    // The shared size is final: the pre-pass placed every variable the kernel names.
    llvm::Value* limit = b_.getInt64(shared_size_ >= size ? shared_size_ - size + 1 : 0);
    auto* fault = llvm::BasicBlock::Create(ctx_, "shared_fault", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "shared_ok", fn_);
    b_.CreateCondBr(b_.CreateICmpULT(offset, limit), join, fault, llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
    b_.SetInsertPoint(fault);
    Fault(b_.CreateAdd(offset, b_.getInt64(kSharedWindow)), access);
    b_.SetInsertPoint(join);
    return b_.CreateGEP(b_.getInt8Ty(), shared_arg_, offset);
  }

  // A new global access of `size` bytes: its number (its hint's) and stack slots holding
  // the hint for the CTA (registers, once promoted: a store of the kernel's cannot change
  // them), loaded at its start and again after each slow path.
  uint32_t NewAccess(uint32_t size, const char* what) {
    const uint32_t access = static_cast<uint32_t>(accesses_->size());
    accesses_->push_back({size, what});
    llvm::IRBuilder<> at(alloca_point_);
    llvm::Value* hints = at.CreateLoad(ptr_, FieldAt(at, kOffHints));
    llvm::Value* hint = at.CreateConstGEP1_64(at.getInt8Ty(), hints, uint64_t{access} * sizeof(Hint));
    std::array<llvm::AllocaInst*, 3>& slots = hint_slots_[access];
    for (int i = 0; i < 3; ++i) {
      slots[i] = at.CreateAlloca(i64_);
      at.CreateStore(at.CreateLoad(i64_, at.CreateConstGEP1_64(at.getInt8Ty(), hint, 8 * i)), slots[i]);
    }
    return access;
  }

  // The host address of global access `access` (NewAccess) of one thread (lane `lane` of the
  // vector code) at `address`, checked; a stray one ends the launch.
  llvm::Value* Checked(llvm::Value* address, uint32_t size, const char* what) {
    return CheckedAccess(address, NewAccess(size, what), nullptr);
  }
  llvm::Value* CheckedAccess(llvm::Value* address, uint32_t access, llvm::Value* lane) {
    const std::array<llvm::AllocaInst*, 3>& slots = hint_slots_.at(access);
    llvm::Value* start = b_.CreateLoad(i64_, slots[0]);
    llvm::Value* limit = b_.CreateLoad(i64_, slots[1]);
    llvm::Value* delta = b_.CreateLoad(i64_, slots[2]);
    llvm::Value* hit = b_.CreateICmpULT(b_.CreateSub(address, start), limit);
    llvm::BasicBlock* before = b_.GetInsertBlock();
    auto* slow = llvm::BasicBlock::Create(ctx_, "slow", fn_);
    auto* fault = llvm::BasicBlock::Create(ctx_, "fault", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "join", fn_);
    llvm::Value* fast = b_.CreateIntToPtr(b_.CreateAdd(address, delta), ptr_);
    b_.CreateCondBr(hit, join, slow, llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
    b_.SetInsertPoint(slow);
    auto* translate_type = llvm::FunctionType::get(ptr_, {ptr_, i32_, i64_}, false);
    llvm::Value* translate = b_.CreateLoad(ptr_, Field(kOffTranslate));
    llvm::Value* found = b_.CreateCall(translate_type, translate, {context_, b_.getInt32(access), address});
    auto* reload = llvm::BasicBlock::Create(ctx_, "reload", fn_);
    b_.CreateCondBr(b_.CreateIsNull(found), fault, reload);
    b_.SetInsertPoint(reload);
    {
      llvm::Value* hints = b_.CreateLoad(ptr_, Field(kOffHints));
      llvm::Value* hint = b_.CreateConstGEP1_64(b_.getInt8Ty(), hints, uint64_t{access} * sizeof(Hint));
      for (int i = 0; i < 3; ++i) {
        b_.CreateStore(b_.CreateLoad(i64_, b_.CreateConstGEP1_64(b_.getInt8Ty(), hint, 8 * i)), slots[i]);
      }
    }
    b_.CreateBr(join);
    b_.SetInsertPoint(fault);
    Fault(address, access, lane);
    b_.SetInsertPoint(join);
    llvm::PHINode* host = b_.CreatePHI(ptr_, 2);
    host->addIncoming(fast, before);
    host->addIncoming(found, reload);
    return host;
  }

  // The host address of an access of `size` bytes through address operand `address` in
  // `space` (global, shared or generic), checked; nullptr with *why when the tier does not
  // take the operand.
  llvm::Value* Address(const RawOperand& address, std::string_view space, uint32_t size, const char* what,
                       std::string* why) {
    llvm::Value* base = nullptr;
    if (address.name.empty()) {
      *why = "an absolute address";
      return nullptr;
    }
    if (address.name[0] != '%') {
      // [symbol+offset]: a .shared variable, as an offset (.shared) or its window address
      // (generic), as the interpreter resolves it.
      const int64_t offset = SharedSymbol(address.name);
      if (offset < 0 || space == "global") {
        *why = "an access to " + address.name;
        return nullptr;
      }
      base = b_.getInt64(static_cast<uint64_t>(offset) + (space == "shared" ? 0 : kSharedWindow));
    } else {
      if (IsSpecialName(address.name)) {
        *why = "an address in " + address.name;
        return nullptr;
      }
      base = LoadRegister64(address.name);
    }
    llvm::Value* at = b_.CreateAdd(base, b_.getInt64(address.bits));
    if (space == "shared") return CheckedShared(at, size, what);
    if (space == "global" || !has_shared_) return Checked(at, size, what);
    // Generic: the shared window or global memory (a kernel of this tier has no local
    // memory, and an address in another window finds no allocation).
    llvm::Value* offset = b_.CreateSub(at, b_.getInt64(kSharedWindow));
    auto* shared = llvm::BasicBlock::Create(ctx_, "generic_shared", fn_);
    auto* global = llvm::BasicBlock::Create(ctx_, "generic_global", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "generic", fn_);
    b_.CreateCondBr(b_.CreateICmpULT(offset, b_.getInt64(kWindowSize)), shared, global);
    b_.SetInsertPoint(shared);
    llvm::Value* shared_host = CheckedShared(offset, size, what);
    llvm::BasicBlock* shared_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(global);
    llvm::Value* global_host = Checked(at, size, what);
    llvm::BasicBlock* global_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    llvm::PHINode* host = b_.CreatePHI(ptr_, 2);
    host->addIncoming(shared_host, shared_end);
    host->addIncoming(global_host, global_end);
    return host;
  }

  // atom / red on global or shared memory, whose result no instruction reads: a thread
  // that used it might wait in a loop for what another thread does, and here each thread
  // runs to a barrier or its end before the next one starts.
  bool Atomic(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
    const std::vector<RawOperand>& o = s.operands;
    if (lanes_) return (*why = "an atomic in vector code", false);
    const bool red = parts[0] == "red";
    std::string_view space = "generic", operation;
    for (size_t i = 1; i + 1 < parts.size(); ++i) {
      std::string_view qual = parts[i];
      if (qual == "global" || qual == "shared") {
        space = qual;
      } else if (qual == "relaxed" || qual == "acq_rel" || qual == "acquire" || qual == "release" || qual == "gpu" ||
                 qual == "cta" || qual == "sys") {
        // One host thread runs a CTA; the host's atomics are sequentially consistent.
      } else if (operation.empty()) {
        operation = qual;
      } else {
        return (*why = "qualifier ." + std::string(qual), false);
      }
    }
    const Type t = TypeOf(parts.back());
    using Op = llvm::AtomicRMWInst::BinOp;
    Op rmw;
    if (operation == "add") {
      rmw = t.kind == Kind::kFloat ? Op::FAdd : Op::Add;
    } else if (operation == "min" || operation == "max") {
      if (!t.is_int() || t.kind == Kind::kBits) return (*why = "type", false);
      const bool sign = t.kind == Kind::kSigned;
      rmw = operation == "min" ? (sign ? Op::Min : Op::UMin) : (sign ? Op::Max : Op::UMax);
    } else if (operation == "and" || operation == "or" || operation == "xor" || operation == "exch") {
      if (!t.is_int()) return (*why = "type", false);
      rmw = operation == "and" ? Op::And : operation == "or" ? Op::Or : operation == "xor" ? Op::Xor : Op::Xchg;
    } else {
      return (*why = "atomic ." + std::string(operation), false);
    }
    if (!t.ok() || t.kind == Kind::kPred || (t.bits != 32 && t.bits != 64)) {
      return (*why = "type", false);
    }
    if (o.size() != (red ? 2u : 3u)) return (*why = "operands", false);
    if (!red) {
      if (o[0].kind != RawOperand::kName || uses_[o[0].name] != 1) {
        return (*why = "an atomic whose result is read", false);
      }
    }
    const RawOperand& address = red ? o[0] : o[1];
    if (address.kind != RawOperand::kAddress) return (*why = "address operand", false);
    llvm::Value* value = Source(red ? o[1] : o[2], t, why);
    if (value == nullptr) return false;
    llvm::Value* host = Address(address, space, t.bits / 8, "atomic", why);
    if (host == nullptr) return false;
    // Misaligned: a fault, as on a GPU (the interpreter's "misaligned atomic").
    // Aligned host atomics on global memory, which other CTAs (on the other worker) share;
    // shared memory belongs to this CTA alone, but an atomic there costs little more.
    llvm::Value* misaligned = b_.CreateAnd(b_.CreatePtrToInt(host, i64_), b_.getInt64(t.bits / 8 - 1));
    auto* fault = llvm::BasicBlock::Create(ctx_, "misaligned", fn_);
    auto* ok = llvm::BasicBlock::Create(ctx_, "aligned", fn_);
    b_.CreateCondBr(b_.CreateICmpNE(misaligned, b_.getInt64(0)), fault, ok,
                    llvm::MDBuilder(ctx_).createBranchWeights(1, 1000));
    b_.SetInsertPoint(fault);
    const uint32_t access = static_cast<uint32_t>(accesses_->size());
    accesses_->push_back({t.bits / 8, "misaligned atomic"});
    llvm::Value* device =
        address.name[0] == '%' ? b_.CreateAdd(LoadRegister64(address.name), b_.getInt64(address.bits)) : b_.getInt64(0);
    Fault(device, access);
    b_.SetInsertPoint(ok);
    b_.CreateAtomicRMW(rmw, host, value, llvm::MaybeAlign(t.bits / 8), llvm::AtomicOrdering::Monotonic);
    return true;
  }

  // An instruction of vector code: branches and ends move lanes between the running mask
  // and the labels' waiting masks (no host branch); the rest runs on the running lanes its
  // guard keeps.
  bool VectorInstruction(const RawStatement& s, const std::vector<std::string_view>& parts, llvm::Value* guard,
                         std::string* refused) {
    const std::string_view op = parts[0];
    auto refuse = [&](const std::string& text) { return Refuse(s.opcode + ": " + text, s.line, refused); };
    llvm::Value* running = b_.CreateLoad(Lanes(i1_), mask_slot_);
    llvm::Value* lanes = guard ? b_.CreateAnd(running, guard) : running;
    if (op == "bra") {
      auto pending = s.operands.size() == 1 ? pending_.find(s.operands[0].name) : pending_.end();
      if (pending == pending_.end()) return refuse("a branch target it does not take");
      b_.CreateStore(b_.CreateOr(b_.CreateLoad(Lanes(i1_), pending->second), lanes), pending->second);
      b_.CreateStore(b_.CreateAnd(running, b_.CreateNot(lanes)), mask_slot_);
      return true;
    }
    if (op == "ret" || op == "exit") {
      b_.CreateStore(b_.CreateAnd(running, b_.CreateNot(lanes)), mask_slot_);
      return true;
    }
    if (op == "bar" || op == "barrier") return refuse("a barrier in vector code");
    std::string why;
    op_mask_ = lanes;
    const bool done = Operation(s, parts, &why);
    op_mask_ = nullptr;
    return done || refuse(why);
  }

  // ld/st of global (or generic) memory in vector code. Lanes that all run, at consecutive
  // addresses inside the allocation this access hit last: one vector access. Otherwise
  // each running lane on its own, checked as scalar code checks it (and remembering the
  // allocation it hits for the next time).
  bool VectorMemory(const RawOperand& address, std::string_view space, Type t, bool load, const RawOperand& value,
                    std::string* why) {
    if (space == "shared") return (*why = "shared memory in vector code", false);
    if (address.name.empty() || address.name[0] != '%' || IsSpecialName(address.name)) {
      return (*why = "an address that is not a register", false);
    }
    const uint32_t size = t.bits / 8;
    llvm::Value* stored = nullptr;
    if (!load && (stored = Source(value, t, why)) == nullptr) return false;
    llvm::Value* addresses = b_.CreateAdd(LoadRegister64(address.name), Int(64, address.bits));
    const uint32_t access = NewAccess(size, load ? "load" : "store");
    const std::array<llvm::AllocaInst*, 3>& slots = hint_slots_.at(access);
    llvm::Value* start = b_.CreateLoad(i64_, slots[0]);
    llvm::Value* limit = b_.CreateLoad(i64_, slots[1]);
    llvm::Value* delta = b_.CreateLoad(i64_, slots[2]);
    llvm::Value* first = b_.CreateExtractElement(addresses, uint64_t{0});
    llvm::Value* last = b_.CreateExtractElement(addresses, uint64_t{lanes_ - 1});
    llvm::Value* consecutive = b_.CreateAndReduce(b_.CreateICmpEQ(addresses, b_.CreateAdd(Splat(first), Steps(size))));
    llvm::Value* mask = Mask();
    // first and last in the allocation: every lane between is (the allocation ends below
    // 2^48, so first + 7 * size cannot wrap into it).
    llvm::Value* fast = b_.CreateAnd(b_.CreateAnd(consecutive, b_.CreateAndReduce(mask)),
                                     b_.CreateAnd(b_.CreateICmpULT(b_.CreateSub(first, start), limit),
                                                  b_.CreateICmpULT(b_.CreateSub(last, start), limit)));
    auto* whole = llvm::BasicBlock::Create(ctx_, "vector_whole", fn_);
    auto* each = llvm::BasicBlock::Create(ctx_, "vector_lanes", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "vector_join", fn_);
    b_.CreateCondBr(fast, whole, each, llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
    b_.SetInsertPoint(whole);
    llvm::Value* host = b_.CreateIntToPtr(b_.CreateAdd(first, delta), ptr_);
    llvm::Value* whole_value = nullptr;
    if (load) {
      whole_value = b_.CreateAlignedLoad(LlvmType(t), host, llvm::MaybeAlign(1));
    } else {
      b_.CreateAlignedStore(stored, host, llvm::MaybeAlign(1));
    }
    b_.CreateBr(join);
    b_.SetInsertPoint(each);
    // A loop over the lanes (a lane's thread is the chunk's x + k).
    llvm::BasicBlock* entered = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx_, "lane_head", fn_);
    auto* lane = llvm::BasicBlock::Create(ctx_, "lane", fn_);
    auto* next = llvm::BasicBlock::Create(ctx_, "lane_next", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "lanes_done", fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    llvm::PHINode* k = b_.CreatePHI(i32_, 2);
    llvm::PHINode* lanes_value = load ? b_.CreatePHI(LlvmType(t), 2) : nullptr;
    k->addIncoming(b_.getInt32(0), entered);
    if (load) lanes_value->addIncoming(llvm::Constant::getNullValue(LlvmType(t)), entered);
    b_.CreateCondBr(b_.CreateExtractElement(mask, k), lane, next);
    b_.SetInsertPoint(lane);
    llvm::Value* lane_host = CheckedAccess(b_.CreateExtractElement(addresses, k), access, k);
    llvm::Value* with_lane = lanes_value;
    if (load) {
      llvm::Value* element = b_.CreateAlignedLoad(ScalarType(t), lane_host, llvm::MaybeAlign(1));
      with_lane = b_.CreateInsertElement(lanes_value, element, k);
    } else {
      b_.CreateAlignedStore(b_.CreateExtractElement(stored, k), lane_host, llvm::MaybeAlign(1));
    }
    llvm::BasicBlock* ran = b_.GetInsertBlock();
    b_.CreateBr(next);
    b_.SetInsertPoint(next);
    llvm::PHINode* merged = nullptr;
    if (load) {
      merged = b_.CreatePHI(LlvmType(t), 2);
      merged->addIncoming(lanes_value, head);
      merged->addIncoming(with_lane, ran);
      lanes_value->addIncoming(merged, next);
    }
    llvm::Value* k_next = b_.CreateAdd(k, b_.getInt32(1));
    k->addIncoming(k_next, next);
    b_.CreateCondBr(b_.CreateICmpULT(k_next, b_.getInt32(lanes_)), head, done);
    b_.SetInsertPoint(done);
    llvm::BasicBlock* each_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    if (!load) return true;
    llvm::PHINode* loaded = b_.CreatePHI(LlvmType(t), 2);
    loaded->addIncoming(whole_value, whole);
    loaded->addIncoming(merged, each_end);
    return Dest(value, loaded, t, why);
  }

  bool Instruction(const RawStatement& s, std::string* refused) {
    std::vector<std::string_view> parts = SplitOpcode(s.opcode);
    const std::string_view op = parts[0];
    std::string why;
    auto refuse = [&](const std::string& text) { return Refuse(s.opcode + ": " + text, s.line, refused); };
    // Count it (each running thread), then run it under its guard.
    llvm::Value* counted = b_.getInt64(1);
    if (lanes_) {
      llvm::Value* bits = b_.CreateBitCast(b_.CreateLoad(Lanes(i1_), mask_slot_), b_.getIntNTy(lanes_));
      counted = b_.CreateZExt(b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, bits), i64_);
    }
    b_.CreateStore(b_.CreateAdd(b_.CreateLoad(i64_, count_slot_), counted), count_slot_);
    llvm::Value* guard = nullptr;
    if (!s.guard.empty()) {
      if (IsSpecialName(s.guard) || s.guard[0] != '%') return refuse("guard " + s.guard);
      guard = FromStorage(LoadRegister(s.guard), StorageBits(s.guard), Type{Kind::kPred, 1});
      if (s.guard_negated) guard = b_.CreateNot(guard);
    }
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
    if (op == "bar" || op == "barrier") {
      // bar.sync / barrier.sync (.aligned) ID: a barrier of every thread of the CTA. Not a
      // count of threads, arrive or red (producer-consumer patterns, left to the
      // interpreter), nor one under a guard.
      const bool sync = parts.size() >= 2 && parts[1] == "sync" &&
                        (parts.size() == 2 || (parts.size() == 3 && parts[2] == "aligned"));
      if (!sync || guard != nullptr || s.operands.size() != 1 || s.operands[0].kind != RawOperand::kInt) {
        return refuse("a barrier form the tier does not take");
      }
      auto* save = llvm::BasicBlock::Create(ctx_, "save", fn_);
      auto* resume = llvm::BasicBlock::Create(ctx_, "resume", fn_);
      resume_points_.push_back(resume);
      resume_live_.push_back(barrier_live_.at(instruction_index_));
      saves_.push_back({save, static_cast<int32_t>(resume_points_.size())});
      b_.CreateBr(save);
      b_.SetInsertPoint(resume);
      return true;
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

  bool Operation(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
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

    if (op == "ld" || op == "st") {
      if (!t.ok() || t.kind == Kind::kPred) return (*why = "type", false);
      std::string_view space = "generic";
      for (std::string_view qual : q) {
        if (qual == "global" || qual == "param" || qual == "shared") {
          space = qual;
        } else if (!IsCacheHint(qual)) {
          *why = "qualifier ." + std::string(qual);
          return false;
        }
      }
      if (!need(2)) return false;
      const RawOperand& address = op == "ld" ? o[1] : o[0];
      const RawOperand& value = op == "ld" ? o[0] : o[1];
      if (address.kind != RawOperand::kAddress) return (*why = "address operand", false);
      const uint32_t size = t.bits / 8;
      if (space == "param") {
        // [param+offset]: bounds known now.
        auto it = params_.find(address.name);
        if (op != "ld" || it == params_.end()) return (*why = "a .param access it does not take", false);
        const int64_t off = static_cast<int64_t>(address.bits);
        if (off < 0 || static_cast<uint64_t>(off) + size > it->second.size ||
            it->second.offset + off + size > param_size_) {
          return (*why = "a .param access outside the parameter", false);
        }
        llvm::Value* at = b_.CreateConstGEP1_64(b_.getInt8Ty(), params_arg_, it->second.offset + off);
        llvm::Value* v = Splat(b_.CreateAlignedLoad(ScalarType(t), at, llvm::MaybeAlign(1)));
        return Dest(value, v, t, why);
      }
      if (lanes_) return VectorMemory(address, space, t, op == "ld", value, why);
      llvm::Value* host = Address(address, space, size, op == "ld" ? "load" : "store", why);
      if (host == nullptr) return false;
      if (op == "ld") {
        llvm::LoadInst* v = b_.CreateAlignedLoad(LlvmType(t), host, llvm::MaybeAlign(1));
        return Dest(value, v, t, why);
      }
      llvm::Value* v = Source(value, t, why);
      if (v == nullptr) return false;
      b_.CreateAlignedStore(v, host, llvm::MaybeAlign(1));
      return true;
    }
    if (op == "atom" || op == "red") return Atomic(s, parts, why);
    if (op == "mov") {
      if (!t.ok() || !need(2) || !q.empty()) return (*why = why->empty() ? "form" : *why, false);
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
      if (std::find(q.begin(), q.end(), "shared") == q.end()) {
        return (*why = "a window other than global or shared", false);
      }
      // As the interpreter: to generic adds the window to the (32-bit: zero-extended)
      // offset, from generic subtracts it; a 32-bit result keeps the low half.
      llvm::Value* wide = b_.CreateZExtOrTrunc(v, i64_);
      if (!to) return Dest(o[0], b_.CreateAdd(wide, b_.getInt64(kSharedWindow)), Type{Kind::kUnsigned, 64}, why);
      llvm::Value* r = b_.CreateSub(wide, b_.getInt64(kSharedWindow));
      return Dest(o[0], b_.CreateZExtOrTrunc(r, LlvmType(t)), t, why);
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
    if (t.is_int()) return Integer(s, op, q, t, why);
    if (t.kind == Kind::kFloat) return Float(s, op, q, t, why);
    if (t.kind == Kind::kPred && (op == "and" || op == "or" || op == "xor" || op == "not")) {
      return Integer(s, op, q, t, why);
    }
    *why = "an instruction the tier does not take";
    return false;
  }

  bool Setp(const RawStatement& s, const std::vector<std::string_view>& q, Type t, std::string* why) {
    const std::vector<RawOperand>& o = s.operands;
    if (!t.ok() || t.kind == Kind::kPred || q.size() != 1 || o.size() != 3) {
      *why = "a form of setp the tier does not take";
      return false;
    }
    llvm::Value* a = Source(o[1], t, why);
    llvm::Value* c = Source(o[2], t, why);
    if (!a || !c) return false;
    const std::string_view cmp = q[0];
    llvm::Value* r = nullptr;
    if (t.kind == Kind::kFloat) {
      using P = llvm::CmpInst::Predicate;
      static const std::map<std::string_view, P> kFloat = {
          {"eq", P::FCMP_OEQ},  {"ne", P::FCMP_ONE},  {"lt", P::FCMP_OLT},  {"le", P::FCMP_OLE},  {"gt", P::FCMP_OGT},
          {"ge", P::FCMP_OGE},  {"equ", P::FCMP_UEQ}, {"neu", P::FCMP_UNE}, {"ltu", P::FCMP_ULT}, {"leu", P::FCMP_ULE},
          {"gtu", P::FCMP_UGT}, {"geu", P::FCMP_UGE}, {"num", P::FCMP_ORD}, {"nan", P::FCMP_UNO}};
      auto it = kFloat.find(cmp);
      if (it == kFloat.end()) return (*why = "comparison ." + std::string(cmp), false);
      r = b_.CreateFCmp(it->second, a, c);
    } else {
      using P = llvm::CmpInst::Predicate;
      const bool sign = t.kind == Kind::kSigned;
      std::map<std::string_view, P> kInt = {{"eq", P::ICMP_EQ},
                                            {"ne", P::ICMP_NE},
                                            {"lt", sign ? P::ICMP_SLT : P::ICMP_ULT},
                                            {"le", sign ? P::ICMP_SLE : P::ICMP_ULE},
                                            {"gt", sign ? P::ICMP_SGT : P::ICMP_UGT},
                                            {"ge", sign ? P::ICMP_SGE : P::ICMP_UGE},
                                            {"lo", P::ICMP_ULT},
                                            {"ls", P::ICMP_ULE},
                                            {"hi", P::ICMP_UGT},
                                            {"hs", P::ICMP_UGE}};
      auto it = kInt.find(cmp);
      if (it == kInt.end()) return (*why = "comparison ." + std::string(cmp), false);
      r = b_.CreateICmp(it->second, a, c);
    }
    return Dest(o[0], r, Type{Kind::kPred, 1}, why);
  }

  bool Cvt(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
    const std::vector<RawOperand>& o = s.operands;
    if (parts.size() < 3 || o.size() != 2) return (*why = "form", false);
    const Type to = TypeOf(parts[parts.size() - 2]);
    const Type from = TypeOf(parts.back());
    if (!to.ok() || !from.ok() || to.kind == Kind::kPred || from.kind == Kind::kPred) {
      return (*why = "types", false);
    }
    std::string_view rounding;
    for (size_t i = 1; i + 2 < parts.size(); ++i) {
      std::string_view qual = parts[i];
      if (qual == "rn" || qual == "rz" || qual == "rm" || qual == "rp" || qual == "rni" || qual == "rzi" ||
          qual == "rmi" || qual == "rpi") {
        rounding = qual;
      } else {
        return (*why = "qualifier ." + std::string(qual), false);
      }
    }
    llvm::Value* a = Source(o[1], from, why);
    if (a == nullptr) return false;
    llvm::Value* r = nullptr;
    if (to.is_int() && from.is_int()) {
      if (!rounding.empty()) return (*why = "rounding of an integer conversion", false);
      // Integer to integer: truncate or extend by the source's signedness, then the
      // destination register holds the value as `to` says.
      r = from.kind == Kind::kSigned ? b_.CreateSExtOrTrunc(a, LlvmType(to)) : b_.CreateZExtOrTrunc(a, LlvmType(to));
    } else if (to.kind == Kind::kFloat && from.is_int()) {
      // Only round-to-nearest (what sitofp/uitofp do); .rn is then required by PTX
      // unless exact.
      if (!rounding.empty() && rounding != "rn") return (*why = "rounding ." + std::string(rounding), false);
      r = from.kind == Kind::kSigned ? b_.CreateSIToFP(a, LlvmType(to)) : b_.CreateUIToFP(a, LlvmType(to));
    } else if (to.is_int() && from.kind == Kind::kFloat) {
      // .rzi saturating, NaN to 0, as PTX says (the fptosi.sat intrinsics do exactly that).
      if (rounding != "rzi") return (*why = "rounding ." + std::string(rounding), false);
      if (to.bits < 32) return (*why = "a narrow integer", false);
      auto id = to.kind == Kind::kSigned ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat;
      r = b_.CreateIntrinsic(id, {LlvmType(to), LlvmType(from)}, {a});
    } else {
      // Float to float: widening is exact; narrowing with .rn only.
      if (to.bits > from.bits) {
        if (!rounding.empty()) return (*why = "rounding of a widening conversion", false);
        r = b_.CreateFPExt(a, LlvmType(to));
      } else if (to.bits < from.bits) {
        if (rounding != "rn") return (*why = "rounding ." + std::string(rounding), false);
        r = b_.CreateFPTrunc(a, LlvmType(to));
      } else {
        return (*why = "a float conversion to its own type", false);
      }
    }
    return Dest(o[0], r, to, why);
  }

  bool Integer(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
               std::string* why) {
    const std::vector<RawOperand>& o = s.operands;
    auto src = [&](int i, Type type) { return Source(o[i], type, why); };
    auto done = [&](llvm::Value* v, Type type) { return v != nullptr && Dest(o[0], v, type, why); };
    const bool sign = t.kind == Kind::kSigned;
    if ((op == "add" || op == "sub") && q.empty() && o.size() == 3) {
      llvm::Value* a = src(1, t);
      llvm::Value* c = src(2, t);
      if (!a || !c) return false;
      return done(op == "add" ? b_.CreateAdd(a, c) : b_.CreateSub(a, c), t);
    }
    if ((op == "and" || op == "or" || op == "xor") && q.empty() && o.size() == 3) {
      llvm::Value* a = src(1, t);
      llvm::Value* c = src(2, t);
      if (!a || !c) return false;
      return done(op == "and" ? b_.CreateAnd(a, c) : op == "or" ? b_.CreateOr(a, c) : b_.CreateXor(a, c), t);
    }
    if (op == "not" && q.empty() && o.size() == 2) {
      llvm::Value* a = src(1, t);
      return a != nullptr && done(b_.CreateNot(a), t);
    }
    if (t.kind == Kind::kPred) return (*why = "form", false);
    if ((op == "neg" || op == "abs") && q.empty() && o.size() == 2 && t.kind == Kind::kSigned) {
      llvm::Value* a = src(1, t);
      if (!a) return false;
      if (op == "neg") return done(b_.CreateNeg(a), t);
      return done(b_.CreateSelect(b_.CreateICmpSLT(a, Int(t.bits, 0)), b_.CreateNeg(a), a), t);
    }
    if ((op == "min" || op == "max") && q.empty() && o.size() == 3 && t.kind != Kind::kBits) {
      llvm::Value* a = src(1, t);
      llvm::Value* c = src(2, t);
      if (!a || !c) return false;
      llvm::Value* less = sign ? b_.CreateICmpSLT(a, c) : b_.CreateICmpULT(a, c);
      return done(op == "min" ? b_.CreateSelect(less, a, c) : b_.CreateSelect(less, c, a), t);
    }
    if ((op == "shl" || op == "shr") && q.empty() && o.size() == 3) {
      // The shift amount is a u32; amounts past the width clamp to it (PTX).
      llvm::Value* a = src(1, t);
      llvm::Value* n = src(2, Type{Kind::kUnsigned, 32});
      if (!a || !n) return false;
      llvm::Value* wide = b_.CreateICmpUGE(n, Int(32, t.bits));
      llvm::Value* amount = b_.CreateZExtOrTrunc(b_.CreateSelect(wide, Int(32, t.bits - 1), n), LlvmType(t));
      llvm::Value* r;
      if (op == "shl") {
        r = b_.CreateSelect(wide, Int(t.bits, 0), b_.CreateShl(a, amount));
      } else if (sign) {
        r = b_.CreateAShr(a, amount);  // past the width: the sign fills it, as a shift by N-1
      } else {
        r = b_.CreateSelect(wide, Int(t.bits, 0), b_.CreateLShr(a, amount));
      }
      return done(r, t);
    }
    // mul.lo / mad.lo (any int type), mul.wide / mad.wide (16 and 32 bits), mul.hi / mad.hi.
    if ((op == "mul" || op == "mad") && q.size() == 1 && o.size() == (op == "mul" ? 3u : 4u)) {
      llvm::Value* a = src(1, t);
      llvm::Value* c = src(2, t);
      if (!a || !c) return false;
      if (q[0] == "lo") {
        llvm::Value* r = b_.CreateMul(a, c);
        if (op == "mad") {
          llvm::Value* e = src(3, t);
          if (!e) return false;
          r = b_.CreateAdd(r, e);
        }
        return done(r, t);
      }
      if (q[0] == "wide" && t.bits <= 32) {
        Type wide{t.kind, t.bits * 2};
        llvm::Value* wa = sign ? b_.CreateSExt(a, LlvmType(wide)) : b_.CreateZExt(a, LlvmType(wide));
        llvm::Value* wc = sign ? b_.CreateSExt(c, LlvmType(wide)) : b_.CreateZExt(c, LlvmType(wide));
        llvm::Value* r = b_.CreateMul(wa, wc);
        if (op == "mad") {
          llvm::Value* e = src(3, wide);
          if (!e) return false;
          r = b_.CreateAdd(r, e);
        }
        return done(r, wide);
      }
      if (q[0] == "hi") {
        Type wide{t.kind, t.bits * 2};
        llvm::Type* wt = Lanes(b_.getIntNTy(t.bits * 2));
        llvm::Value* wa = sign ? b_.CreateSExt(a, wt) : b_.CreateZExt(a, wt);
        llvm::Value* wc = sign ? b_.CreateSExt(c, wt) : b_.CreateZExt(c, wt);
        llvm::Value* r = b_.CreateTrunc(b_.CreateLShr(b_.CreateMul(wa, wc), Int(t.bits * 2, t.bits)), LlvmType(t));
        if (op == "mad") {
          llvm::Value* e = src(3, t);
          if (!e) return false;
          r = b_.CreateAdd(r, e);
        }
        (void)wide;
        return done(r, t);
      }
    }
    *why = "an integer instruction the tier does not take";
    return false;
  }

  bool Float(const RawStatement& s, std::string_view op, const std::vector<std::string_view>& q, Type t,
             std::string* why) {
    const std::vector<RawOperand>& o = s.operands;
    // Round-to-nearest only (no .ftz, .sat, .approx or directed roundings), which is what
    // IEEE arithmetic on the host does.
    for (std::string_view qual : q) {
      if (qual != "rn") return (*why = "qualifier ." + std::string(qual), false);
    }
    auto src = [&](int i) { return Source(o[i], t, why); };
    auto done = [&](llvm::Value* v) { return v != nullptr && Dest(o[0], v, t, why); };
    if ((op == "add" || op == "sub" || op == "mul" || op == "div") && o.size() == 3) {
      // div without .rn is .approx (f32) or refused by ptxas (f64): only div.rn here.
      if (op == "div" && q.empty()) return (*why = "div without .rn", false);
      llvm::Value* a = src(1);
      llvm::Value* c = src(2);
      if (!a || !c) return false;
      // An unrounded add/sub/mul may be fused with a later one by ptxas; .rn forbids it.
      // Both run here as separate IEEE operations, as the interpreter runs them.
      if (op == "add") return done(b_.CreateFAdd(a, c));
      if (op == "sub") return done(b_.CreateFSub(a, c));
      if (op == "mul") return done(b_.CreateFMul(a, c));
      return done(b_.CreateFDiv(a, c));
    }
    if ((op == "fma" || op == "mad") && o.size() == 4 && q.size() == 1) {
      llvm::Value* a = src(1);
      llvm::Value* c = src(2);
      llvm::Value* e = src(3);
      if (!a || !c || !e) return false;
      return done(b_.CreateIntrinsic(llvm::Intrinsic::fma, {LlvmType(t)}, {a, c, e}));
    }
    if ((op == "neg" || op == "abs") && o.size() == 2 && q.empty()) {
      llvm::Value* a = src(1);
      if (!a) return false;
      if (op == "neg") return done(b_.CreateFNeg(a));
      return done(b_.CreateIntrinsic(llvm::Intrinsic::fabs, {LlvmType(t)}, {a}));
    }
    if (op == "sqrt" && o.size() == 2 && q.size() == 1) {
      llvm::Value* a = src(1);
      if (!a) return false;
      return done(b_.CreateIntrinsic(llvm::Intrinsic::sqrt, {LlvmType(t)}, {a}));
    }
    *why = "a float instruction the tier does not take";
    return false;
  }

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
  const uint64_t shared_size_;
  bool has_shared_ = false;
  std::map<uint32_t, std::array<llvm::AllocaInst*, 3>> hint_slots_;  // per access: its hint
  // Vector code (lanes_ > 0): kVectorLanes threads of a row at once, x, x + 1, ...; the
  // lanes still running (not branched away, not ended), and the per-label lanes waiting
  // there (PTX branches of vector code go forward only: a label merges them back).
  uint32_t lanes_ = 0;
  llvm::AllocaInst* mask_slot_ = nullptr;
  llvm::Value* op_mask_ = nullptr;  // while an instruction runs: its lanes (mask & guard)
  std::map<std::string, llvm::AllocaInst*> pending_;
  uint32_t barriers_ = 0;
  std::vector<std::vector<std::string>> barrier_live_;        // per instruction: live after a barrier
  size_t instruction_index_ = 0;                              // of the instruction being emitted
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

void InitializeLlvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

std::string ErrorText(llvm::Error error) { return llvm::toString(std::move(error)); }

}  // namespace

namespace {

JitMode ModeFromEnvironment() {
  const char* value = std::getenv("GPUPOOL_PTX_JIT");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return JitMode::kAuto;
  if (std::strcmp(value, "off") == 0) return JitMode::kOff;
  if (std::strcmp(value, "always") == 0) return JitMode::kAlways;
  std::fprintf(stderr, "GPUPOOL_PTX_JIT='%s': expected off, auto or always; using auto\n", value);
  return JitMode::kAuto;
}

std::atomic<JitMode>& Mode() {
  static std::atomic<JitMode> mode{ModeFromEnvironment()};
  return mode;
}

}  // namespace

JitMode CurrentJitMode() { return Mode().load(std::memory_order_relaxed); }
void SetJitMode(JitMode mode) { Mode().store(mode); }

namespace {

std::shared_ptr<CompiledKernel> Compile(const RawFunction& entry, const SharedLayout& shared, uint32_t param_size,
                                        std::string* refused) {
  InitializeLlvm();
  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>("ptx_jit", *context);
  auto compiled = std::make_shared<CompiledKernel>();
  const bool dump = std::getenv("GPUPOOL_PTX_JIT_DUMP") != nullptr;
  Emitter emitter(entry, shared, param_size, *context, *module, 0);
  if (!emitter.Emit(compiled.get(), refused)) {
    if (dump) llvm::errs() << "jit refused " << entry.name << ": " << *refused << "\n";
    return nullptr;
  }
  // And the vector code, where the kernel allows it.
  std::string no_vector;
  bool vector = Emitter(entry, shared, param_size, *context, *module, kVectorLanes).Emit(compiled.get(), &no_vector);
  if (llvm::Function* partial = module->getFunction("cta_vector"); !vector && partial) {
    partial->eraseFromParent();
  }
  if (dump) {
    llvm::errs() << "jit compiling " << entry.name
                 << (vector ? " (and vector code)" : " (no vector code: " + no_vector + ")") << "\n";
  }

  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) {
    *refused = "no host target: " + ErrorText(builder.takeError());
    return nullptr;
  }
  builder->setCodeGenOptLevel(llvm::CodeGenOpt::Default);
  auto machine = builder->createTargetMachine();
  if (!machine) {
    *refused = "no target machine: " + ErrorText(machine.takeError());
    return nullptr;
  }
  module->setDataLayout((*machine)->createDataLayout());
  module->setTargetTriple((*machine)->getTargetTriple().str());
  std::string verify;
  llvm::raw_string_ostream verify_out(verify);
  if (llvm::verifyModule(*module, &verify_out)) {
    *refused = "made invalid IR (a bug of the tier): " + verify_out.str();
    return nullptr;
  }
  {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder passes(machine->get());
    passes.registerModuleAnalyses(mam);
    passes.registerCGSCCAnalyses(cgam);
    passes.registerFunctionAnalyses(fam);
    passes.registerLoopAnalyses(lam);
    passes.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager pipeline = passes.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
    pipeline.run(*module, mam);
  }
  if (std::getenv("GPUPOOL_PTX_JIT_DUMP_IR")) module->print(llvm::errs(), nullptr);
  auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(*builder)).create();
  if (!jit) {
    *refused = "no JIT: " + ErrorText(jit.takeError());
    return nullptr;
  }
  // fma and sqrt on a host without the instruction are calls into libm.
  auto process =
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess((*jit)->getDataLayout().getGlobalPrefix());
  if (!process) {
    *refused = "no process symbols: " + ErrorText(process.takeError());
    return nullptr;
  }
  (*jit)->getMainJITDylib().addGenerator(std::move(*process));
  if (llvm::Error error = (*jit)->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(context)))) {
    *refused = "compile failed: " + ErrorText(std::move(error));
    return nullptr;
  }
  auto address = (*jit)->lookup("cta");
  if (!address) {
    *refused = "compile failed: " + ErrorText(address.takeError());
    return nullptr;
  }
  compiled->cta = address->toPtr<CtaFunction>();
  if (vector) {
    auto vector_address = (*jit)->lookup("cta_vector");
    if (!vector_address) {
      *refused = "compile failed: " + ErrorText(vector_address.takeError());
      return nullptr;
    }
    compiled->cta_vector = vector_address->toPtr<CtaFunction>();
  }
  compiled->jit = std::move(*jit);
  return compiled;
}

}  // namespace

std::shared_ptr<CompiledKernel> CompileKernel(const RawFunction& entry, const SharedLayout& shared, uint32_t param_size,
                                              std::string* refused) {
  // The compile runs on a thread (the background compiler's, or a launch's) whose caller
  // expects no exception: out of memory or any other failure is a refusal, and the kernel
  // runs on the interpreter.
  try {
    return Compile(entry, shared, param_size, refused);
  } catch (const std::bad_alloc&) {
    *refused = "compile failed: out of memory";
  } catch (const std::exception& error) {
    *refused = std::string("compile failed: ") + error.what();
  }
  return nullptr;
}

namespace {

// One thread that compiles kernels for GPUPOOL_PTX_JIT=auto, in the order asked. At exit
// it finishes the compile at hand and drops the rest.
class BackgroundCompiler {
 public:
  static BackgroundCompiler& Get() {
    static BackgroundCompiler compiler;
    return compiler;
  }
  void Add(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    wake_.notify_one();
  }
  ~BackgroundCompiler() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    // Compiling is worth less than the work it would speed up: the launches running on
    // the interpreter meanwhile, and every other process of the host (on Linux, nice
    // applies to the calling thread).
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

void CompileInBackground(std::shared_ptr<JitSlot> slot, const RawFunction& entry, const SharedLayout& shared,
                         uint32_t param_size) {
  slot->compiling = true;
  BackgroundCompiler::Get().Add([slot, entry = entry, shared = shared, param_size]() {
    std::string refused;
    std::shared_ptr<CompiledKernel> compiled = CompileKernel(entry, shared, param_size, &refused);
    std::lock_guard<std::mutex> lock(slot->mu);
    slot->compiled = std::move(compiled);
    slot->refused = std::move(refused);
    slot->compiling = false;
    slot->compiled_cv.notify_all();
  });
}

void WaitForCompile(JitSlot& slot) {
  std::unique_lock<std::mutex> lock(slot.mu);
  slot.compiled_cv.wait(lock, [&] { return !slot.compiling; });
}

bool HasVectorCode(const CompiledKernel& kernel) { return kernel.cta_vector != nullptr; }

int32_t RunCompiled(const CompiledKernel& kernel, const LaunchSpec& spec, uint32_t workers) {
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  const uint32_t threads = spec.block[0] * spec.block[1] * spec.block[2];
  // RunKernel checked the decoder's layout, which the tier takes: checked again, so that
  // no launch of compiled code allocates what a launch of the interpreter may not.
  if (kernel.shared_bytes > kMaxSharedBytes || threads == 0 || threads > 1024) {
    if (spec.error_detail) {
      *spec.error_detail = "compiled kernel needs " + std::to_string(kernel.shared_bytes) +
                           " bytes of shared memory: more than " + std::to_string(kMaxSharedBytes);
    }
    return kLaunchOutOfResources;
  }
  struct alignas(64) Worker {
    Context context;
    std::vector<Hint> hints;
    std::vector<uint8_t> shared;
    std::vector<int32_t> resume;
    std::vector<uint64_t> saved;
    std::atomic<uint64_t> unwatched{0};  // progress of a launch nobody watches
    int32_t error = 0;
    uint64_t failed_cta = 0;
    bool out_of_memory = false;  // the worker's host memory could not be had
  };
  // A launch on one worker (most launches of small grids) runs on the calling thread's
  // kept scratch (kKeptScratchBytes): fresh vectors per launch cost a stream of small
  // launches a tenth of the agent's time (scripts/bench/remote).
  thread_local Worker kept;
  thread_local bool kept_in_use = false;
  std::vector<Worker> own;
  std::span<Worker> states;
  const bool keep = workers == 1 && !kept_in_use;
  if (keep) {
    kept.context = Context{};
    kept.unwatched.store(0, std::memory_order_relaxed);
    kept.error = 0;
    kept.out_of_memory = false;
    kept.failed_cta = 0;
    kept_in_use = true;
    states = std::span<Worker>(&kept, 1);
  } else {
    own = std::vector<Worker>(workers);
    states = own;
  }
  struct Release {
    bool keep;
    ~Release() {
      if (!keep) return;
      kept_in_use = false;
      const size_t held = kept.hints.capacity() * sizeof(Hint) + kept.shared.capacity() +
                          kept.resume.capacity() * sizeof(int32_t) + kept.saved.capacity() * sizeof(uint64_t);
      if (held > kKeptScratchBytes) {
        kept.hints = {};
        kept.shared = {};
        kept.resume = {};
        kept.saved = {};
      }
    }
  } release{keep};
  std::atomic<bool> stop{false};
  const CtaFunction run_cta =
      kernel.cta_vector != nullptr && spec.block[0] % kVectorLanes == 0 ? kernel.cta_vector : kernel.cta;
  auto run_or_fail = [&](uint32_t index) {
    Worker& worker = states[index];
    worker.hints.assign(kernel.accesses.size(), Hint{});
    worker.shared.assign(std::max<uint64_t>(kernel.shared_bytes, 1), 0);
    worker.resume.assign(threads, 0);
    if (kernel.barriers) worker.saved.assign(uint64_t{threads} * std::max(kernel.registers, 1u), 0);
    Context& context = worker.context;
    context.hints = worker.hints.data();
    context.translate = &Translate;
    context.progress = spec.progress != nullptr ? spec.progress : &worker.unwatched;
    context.cancel = spec.cancel != nullptr ? spec.cancel : &kNeverCancelled;
    context.spec = &spec;
    context.accesses = &kernel.accesses;
    for (int i = 0; i < 3; ++i) {
      context.ntid[i] = spec.block[i];
      context.nctaid[i] = spec.grid[i];
    }
    for (uint64_t cta = index; cta < ctas; cta += workers) {
      if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
      if (stop.load(std::memory_order_relaxed)) break;
      if (context.cancel->load(std::memory_order_relaxed)) {
        worker.error = kLaunchTimeout;
        worker.failed_cta = cta;
        stop.store(true);
        break;
      }
      const uint32_t x = static_cast<uint32_t>(cta % spec.grid[0]);
      const uint32_t y = static_cast<uint32_t>(cta / spec.grid[0] % spec.grid[1]);
      const uint32_t z = static_cast<uint32_t>(cta / spec.grid[0] / spec.grid[1]);
      if (kernel.barriers) std::fill(worker.resume.begin(), worker.resume.end(), 0);
      int32_t error =
          run_cta(&context, spec.params, x, y, z, worker.shared.data(), worker.resume.data(), worker.saved.data());
      if (error != 0) {
        worker.error = error;
        worker.failed_cta = cta;
        stop.store(true);
        break;
      }
    }
  };
  // No exception leaves a worker (a helper's would end the process): out of host memory
  // fails the launch.
  auto run = [&](uint32_t index) {
    try {
      run_or_fail(index);
    } catch (const std::exception&) {
      states[index].error = kLaunchOutOfResources;
      states[index].failed_cta = 0;
      states[index].out_of_memory = true;
      stop.store(true);
    }
  };
  RunOnWorkers(workers, [&](uint32_t index, bool) { run(index); });
  FirstFailure failure;
  for (Worker& worker : states) {
    if (spec.thread_instructions) *spec.thread_instructions += worker.context.instructions;
    if (failure.Offer(worker.error, worker.failed_cta)) {
      const int32_t error = worker.error;
      if (spec.error_detail && worker.out_of_memory) {
        *spec.error_detail = "the launch ran out of host memory";
      } else if (spec.error_detail && error == kLaunchTimeout) {
        *spec.error_detail = kCancelledDetail;
      } else if (spec.error_detail) {
        const Context& c = worker.context;
        const MemoryAccess& access = kernel.accesses[c.fault_access];
        *spec.error_detail =
            FaultText(access.what, access.size, c.fault_address, worker.failed_cta, c.fault_thread / 32);
      }
    }
  }
  return failure.error();
}

}  // namespace gpupool::sim

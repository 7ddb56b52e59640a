// Private to jit/: what the emitter, the compiler and the code that runs compiled kernels
// share (jit.h is the tier's interface). The function made for a kernel, its Context (the
// ABI between compiled code and the engine: offsets fixed for the IR) and CompiledKernel.
#pragma once

#include <llvm/ExecutionEngine/Orc/LLJIT.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "remote/protocol/protocol.h"
#include "remote/ptx/front/program.h"
#include "remote/ptx/ir/kernel.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim {

class CompiledKernel;

namespace jit {

// The CUresult values a launch ends with: the protocol's (remote/protocol/protocol.h).
constexpr int32_t kIllegalAddress = dataplane::kCuIllegalAddress;
constexpr int32_t kLaunchOutOfResources = dataplane::kCuLaunchOutOfResources;
constexpr int32_t kLaunchTimeout = dataplane::kCuLaunchTimeout;  // cancelled
constexpr int32_t kLaunchFailed = dataplane::kCuLaunchFailed;    // calls nested too deep
constexpr int32_t kAssertFailed = dataplane::kCuAssert;          // __assertfail
constexpr int32_t kCooperativeTooLarge = dataplane::kCuCooperativeLaunchTooLarge;
// A cooperative launch holds every CTA at once (RunCompiled): at most this many, and this
// many bytes of their states together, as the interpreter's (interp/internal.h).
constexpr uint64_t kMaxResidentGrid = uint64_t{1} << 16;
constexpr uint64_t kMaxResidentBytes = uint64_t{3} << 30;
// Kernels larger than this are left to the interpreter: LLVM's time grows faster than the
// code, and a launch waits for its compile.
constexpr size_t kMaxInstructions = 16384;
constexpr size_t kMaxRegisters = 4096;
// Threads vector code runs at once (8 floats fill an AVX register).
constexpr uint32_t kVectorLanes = 8;
// Local memory: what a launch allows per thread (RunKernel's kMaxLocalPerThread, CUDA's
// limit) and per CTA (its threads' slices together; RunKernel bounds a CTA's registers and
// local memory together by the same 1 GiB).
constexpr uint64_t kMaxLocalPerThread = 512 * 1024;
constexpr uint64_t kMaxLocalPerCta = uint64_t{1} << 30;

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

// Kernels with warp-level operations (shfl.sync, vote.sync, redux.sync, match.sync,
// activemask, bar.warp.sync, and the matrix operations mma.sync, ldmatrix and wmma):
// a thread stops at each as at a barrier, its operands in its warp slots (kWarpSlots words
// per thread, Context::slots), and Settle (run.cc) runs the operation for the lanes the interpreter would
// run it with, writing each lane's results into its slots, before those lanes go on.
// A stopped thread's resume point carries kStopped until Settle lets it go on.
constexpr int32_t kStopped = 0x40000000;
// kSlotPredicate: a vote's predicate, a redux's or a match's value. kSlotB and kSlotC:
// also wmma.load/store's address and stride. kSlotMatrix on: a matrix operation's registers
// (mma: d's, from Settle; ldmatrix: its elements' addresses, from Settle; wmma.store: its
// fragment, across its first stop), as many as a fragment has (matrix_ops.h:
// kMaxFragmentRegisters): a kernel with matrix operations has kMatrixWarpSlots per thread,
// the others kWarpSlots (CompiledKernel::warp_slots), which keeps the slots Settle reads for
// a shuffle or a vote as close together as they were.
enum WarpSlot : uint32_t {
  kSlotB,
  kSlotC,
  kSlotMember,
  kSlotPredicate,
  kSlotResult,
  kSlotResultPredicate,
  kWarpSlots,
  kSlotMatrix = kWarpSlots,
  kMatrixWarpSlots = kSlotMatrix + 8
};

// What stops a thread at resume point k (WarpOps()[k - 1]).
struct WarpOp {
  // kMatrixSync: before wmma.load/store's accesses, which wait for the whole warp;
  // kMatrixDone: after the accesses of those and of ldmatrix, so that no lane goes on
  // before each lane of the warp made its own (both: nothing to compute).
  enum Kind : uint8_t {
    kBarrier,
    kShfl,
    kVote,
    kActivemask,
    kSyncWarp,
    kRedux,
    kMatch,
    kMma,
    kLdmatrix,
    kMatrixSync,
    kMatrixDone,
    // Before a load a thread may spin on (emit_control.cc): Settle lets it go on and has
    // the CTA function return kCtaYielded, so that its worker runs its other CTAs first.
    kYield
  };
  Kind kind = kBarrier;
  // shfl: 0 idx, 1 up, 2 down, 3 bfly; vote: 0 all, 1 any, 2 uni, 3 ballot; redux: 0 add,
  // 1 min, 2 max, 3 and, 4 or, 5 xor, + 8 for signed min and max; match: 0 any, 1 all;
  // ldmatrix: its count of matrices, + 8 for .trans
  uint8_t mode = 0;
  bool member = false;  // a membermask in kSlotMember
  int32_t source = -1;  // shfl (ldmatrix): the shadow index of its source (address) register; -1: `value`
  uint64_t value = 0;   // shfl: its immediate source; ldmatrix: the address's offset
  // mma (mma.sync and wmma.mma): its shape, types and lane layout as the decoder's WmmaOp,
  // fragments[1..3] the shadow indices of
  // a's, b's and c's registers, fragments[0] as many entries as d has registers.
  std::shared_ptr<const WmmaOp> matrix;
  uint32_t pc = 0;  // the instruction's index in the kernel
};

// What compiled code reads and writes besides the kernel's memory; offsets are fixed for
// the IR (kOff* below).
struct Context;
// Runs the warp-level operations of a CTA whose threads all stopped (resume, saved: the
// CTA function's): 1 when some thread may go on, 0 when all ended, 2 when the threads that
// may go on waited at yields (the CTA function then returns kCtaYielded).
inline constexpr int32_t kSettleYield = 2;
// What a CTA function returns when its CTA yields its worker (before a load a thread may
// spin on): called again with the same resume points and saved registers, it goes on.
inline constexpr int32_t kCtaYielded = -1;
using SettleFunction = int32_t (*)(Context*, int32_t* resume, uint64_t* saved);

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
  uint64_t shared_size = 0;                                    // +80: static + dynamic bytes
  uint8_t* local = nullptr;                                    // +88: local_bytes per thread of the CTA
  int32_t trap_line = 0;                                       // +96: of a call nested too deep; -1: trap
  // +104: the shadows of the registers shuffles read, per lane of the CTA's warps (its
  // last value, kept from CTA to CTA as the interpreter keeps a warp's registers).
  uint64_t* shadow = nullptr;
  SettleFunction settle = nullptr;  // +112
  uint64_t* slots = nullptr;        // +120: CompiledKernel::warp_slots per thread of the CTA
  // +128: the launch's SMs (%nsmid; %smid is the CTA's linear index modulo it, as the
  // interpreter's StartCta sets it). At least 1: the sim executor's count is.
  uint32_t sm_count = 1;
  // +136: the launch's parameter bytes (LaunchSpec::param_size, at least the kernel's),
  // which ld.param through a register is checked against, as the interpreter checks it.
  uint64_t param_size = 0;
  // +144: %envreg1 (high half) and %envreg2 (low) of a cooperative launch: the grid's
  // workspace (LaunchSpec::grid_workspace), as the interpreter's StartCta fills them.
  uint64_t grid_workspace = 0;
  // Not read by compiled code.
  const LaunchSpec* spec = nullptr;
  const std::vector<MemoryAccess>* accesses = nullptr;
  const CompiledKernel* kernel = nullptr;
  // A fault of a texture or surface instruction (TextureLane): its size and name, which
  // depend on the object (no MemoryAccess holds them); nullptr for the others' faults.
  const char* fault_what = nullptr;
  uint32_t fault_size = 0;
  size_t texture_range = 0;  // TextureLane's last allocation among spec->memory (tried first)
  // Device printf text of the worker's CTAs, in the order its threads printed (PrintfLane,
  // AssertLane), and the bytes of it dropped (AppendPrintf).
  std::string printf_text;
  uint64_t printf_dropped = 0;
};
constexpr uint64_t kOffHints = 0, kOffTranslate = 8, kOffInstructions = 16, kOffFaultAddress = 24, kOffFaultAccess = 32,
                   kOffFaultThread = 36, kOffNtid = 40, kOffNctaid = 52, kOffProgress = 64, kOffCancel = 72,
                   kOffSharedSize = 80, kOffLocal = 88, kOffTrapLine = 96, kOffShadow = 104, kOffSettle = 112,
                   kOffSlots = 120, kOffSmCount = 128, kOffParamSize = 136, kOffGridWorkspace = 144;
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
static_assert(offsetof(Context, shared_size) == kOffSharedSize);
static_assert(offsetof(Context, local) == kOffLocal);
static_assert(offsetof(Context, trap_line) == kOffTrapLine);
static_assert(offsetof(Context, shadow) == kOffShadow);
static_assert(offsetof(Context, settle) == kOffSettle);
static_assert(offsetof(Context, slots) == kOffSlots);
static_assert(offsetof(Context, sm_count) == kOffSmCount);
static_assert(offsetof(Context, param_size) == kOffParamSize);
static_assert(offsetof(Context, grid_workspace) == kOffGridWorkspace);

// `entry` with the calls of device functions of `module` inlined (inline.cc), as the decoder
// inlines them: itself when it calls none, else the inlined function in *storage; nullptr
// with *refused saying why for a call the tier leaves to the interpreter (printf, assert,
// the device runtime, external functions, indirect calls) or a kernel too large once
// inlined. A call nested deeper than kMaxCallDepth becomes the statement
// kCallsTooDeepOpcode (no PTX opcode starts with $), which fails the launch where it runs
// as the decoder's trap does.
const RawFunction* InlineCalls(const ParsedModule& module, const RawFunction& entry, RawFunction* storage,
                               std::string* refused);
inline constexpr std::string_view kCallsTooDeepOpcode = "$calls_too_deep";
// The device runtime's calls the tier takes, as InlineCalls leaves them (a call site's
// guard kept): operands the call's .param variables, the argument first (then malloc's
// result); `size` the module's heap bytes. Each thread's call runs MallocLane or FreeLane.
inline constexpr std::string_view kMallocOpcode = "$malloc";
inline constexpr std::string_view kFreeOpcode = "$free";
// vprintf and __assertfail as InlineCalls leaves them (the guard kept): operands the call's
// .param variables (vprintf: format, arguments, then its result where the call takes one;
// __assertfail: message, file, line, function). PrintfLane, AssertLane.
inline constexpr std::string_view kPrintfOpcode = "$vprintf";
inline constexpr std::string_view kAssertOpcode = "$assertfail";
// cudaGraphSetConditional(handle, value) (operands: its two .param variables).
// SetConditionalLane.
inline constexpr std::string_view kSetConditionalOpcode = "$setconditional";
// CompileKernel of an entry InlineCalls made (one that calls nothing).
std::shared_ptr<CompiledKernel> CompileInlined(const RawFunction& entry, const SharedLayout& shared,
                                               uint32_t param_size, std::string* refused);

// A texture or surface instruction (tex, tld4, txq, suld.b, sust.b, suq) of one thread,
// called by compiled code: texture::RunLane, the interpreter's own per-lane code (interp/
// texture.h), over the launch's memory as the interpreter's handler gives it, so that the
// results are the interpreter's bit for bit. `op` the packed texture::Op, `coords` the four
// coordinate registers' values, `values` the data (sust: in; else out). Nonzero on a fault,
// with context->fault_address, fault_size and fault_what set.
int32_t TextureLane(Context* context, uint32_t op, uint64_t handle, const uint64_t* coords, uint64_t* values);

// Device-side malloc and free of one thread, called by compiled code: the interpreter's
// heap (remote/ptx/device_heap.h) in the module's heap variable at device address `heap`
// (`heap_size` bytes), under device_heap_mu as the interpreter's handlers take it. Nonzero
// on a fault (the heap outside the launch's memory; free of a pointer malloc did not give),
// with context->fault_address, fault_size and fault_what set as the interpreter names it.
int32_t MallocLane(Context* context, uint64_t heap, uint64_t heap_size, uint64_t bytes, uint64_t* address);
int32_t FreeLane(Context* context, uint64_t heap, uint64_t heap_size, uint64_t address);

// Device printf and a failed assert of one thread, called by compiled code: the
// interpreter's text (remote/ptx/device_printf.h), appended to context->printf_text.
// `local`: the thread's local memory, `shared`: its CTA's, `thread`: its index in the
// block, x fastest; PrintfLane returns the text's length (vprintf's result).
int32_t PrintfLane(Context* context, uint64_t format, uint64_t args, uint8_t* local, uint8_t* shared);
void AssertLane(Context* context, uint64_t message, uint64_t file, uint32_t line, uint64_t function, uint8_t* local,
                uint8_t* shared, uint32_t thread, uint32_t ctaid_x, uint32_t ctaid_y, uint32_t ctaid_z);

// cudaGraphSetConditional of one thread, called by compiled code: as the interpreter's
// HSetConditional, a store of `value` at the device address `handle` (the remoting
// library's handle is its condition's 4-byte slot), bounds-checked as any global store.
// Nonzero on a fault, with context->fault_address, fault_size and fault_what set.
int32_t SetConditionalLane(Context* context, uint64_t handle, uint32_t value);

// Runs one CTA: (context, parameters, ctaid x/y/z, shared memory, each thread's resume
// point (0: not started, -1: ended, k: after barrier k), each thread's saved registers).
using CtaFunction = int32_t (*)(Context*, const uint8_t* params, uint32_t, uint32_t, uint32_t, uint8_t* shared,
                                int32_t* resume, uint64_t* saved);

}  // namespace jit

class CompiledKernel {
 public:
  std::unique_ptr<llvm::orc::LLJIT> jit;
  jit::CtaFunction cta = nullptr;
  // The same over kVectorLanes threads of a row at once, for blocks whose x extent is a
  // multiple of it; nullptr where the kernel has what vector code does not take.
  jit::CtaFunction cta_vector = nullptr;
  std::vector<jit::MemoryAccess> accesses;
  uint32_t registers = 0;         // saved at a barrier, per thread (the most either code saves)
  uint32_t vector_registers = 0;  // ... of them, those vector code saves (Rematerialize)
  uint64_t shared_bytes = 0;      // of the CTA's static .shared variables (the launch adds its dynamic)
  uint64_t local_bytes = 0;       // of local memory per thread (the decoder's local_size)
  bool barriers = false;
  // Kernels with warp-level operations (warp_level): what stops a thread at each resume
  // point, and how many registers shuffles read (shadowed per lane).
  bool warp_level = false;
  std::vector<jit::WarpOp> warp_ops;
  // Whether a thread may stop at a yield (WarpOp::kYield): its CTAs may return
  // kCtaYielded, and RunCompiled keeps several resident per worker.
  bool yields = false;
  uint32_t shadows = 0;
  // Under GPUPOOL_PTX_JIT=auto, launches run on the interpreter: a kernel with warp-level
  // operations and no loop free of them, whose threads stop so often that compiled code is
  // slower (scripts/bench/ptx: WarpScan 2.7x slower compiled, WarpSum 2.1x faster).
  bool auto_interpreted = false;
  // Launches whose blocks are not whole warps run on the interpreter: a shuffle reads a
  // register the interpreter computes in every lane before the CTA runs, lanes past the
  // CTA's last thread included (emit_warp.cc).
  bool whole_warps = false;
  // Words of warp slots per thread (Context::slots): kWarpSlots, or kMatrixWarpSlots for a
  // kernel with matrix operations.
  uint32_t warp_slots = jit::kWarpSlots;
};

}  // namespace gpupool::sim

// The decoded kernel (remote/ptx/ir/): what the decoder (interp/decoder*.cc) makes of a
// parsed kernel (front/program.h) and the interpreter runs: the instructions (Inst), their
// operation modes (modes.h), the opcodes (opcodes.def), the operands of its matrix
// operations (WmmaOp) and device-runtime calls (DeviceRuntimeCall), and the limits a
// kernel is decoded under. launch.cc chooses a kernel's tier from it; the JIT tier takes
// only what both tiers must agree on (the shared-memory layout, the JIT slot).
//
// PtxModule (ptx_engine.h) owns its decoded kernels through a declaration of
// DecodedKernel alone, and is made and destroyed in ir/kernel.cc, which sees this header:
// front/ parses into a PtxModule without knowing what a decoded kernel holds.
//
// Who may use it: remote/ptx/ only (tests/remote/layering.sh); ir/ includes front/ and
// nothing else of the engine, and front/ does not include ir/.
#pragma once

#include <cstddef>
#include <array>
#include <cstdint>
#include <memory>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "remote/ptx/front/program.h"
#include "remote/ptx/ir/modes.h"

namespace gpupool::sim {

struct JitSlot;  // launch.h

// What the decoder sums local declarations up to before it refuses the kernel: far above
// what a launch allows, far below where a sum of declarations (each at most
// kMaxDeclarationBytes) could wrap.
inline constexpr uint64_t kMaxLocalSum = uint64_t{1} << 48;
// Bytes of an entry's parameters (CUDA 12.1 and later).
inline constexpr uint64_t kMaxParamBytes = 32764;
// Device functions are inlined at their call sites: calls nested deeper than this are a
// trap where they would run (recursion deeper than this, or a virtual call that could
// reach itself), and a kernel of more instructions than kMaxKernelInstructions once
// inlined (deep or branching recursion, or PTX made to be large) is refused at decode,
// so that no job's PTX holds the agent's memory.
inline constexpr int kMaxCallDepth = 16;
inline constexpr size_t kMaxKernelInstructions = size_t{1} << 17;
// The failure's text where such a trap runs (CUDA_ERROR_LAUNCH_FAILED), on either tier.
inline std::string CallsTooDeepDetail(int line) {
  return "device function calls nested deeper than " + std::to_string(kMaxCallDepth) + " (PTX line " +
         std::to_string(line) + "): recursion this deep is not run";
}

// The CTA's static shared memory as the decoder laid it out (DecodedKernel): the JIT tier
// takes it as it is, so that both tiers place, size and check shared memory alike and a
// launch's limits (RunKernel) hold for compiled code too. A name not here is no .shared
// variable of the kernel (one the decoder never placed, say a label of the same name).
// Dynamic shared memory (the launch's bytes) follows at `size`, where both tiers place the
// `.extern .shared` variables the kernel names.
struct SharedLayout {
  std::map<std::string, uint64_t> offsets;  // .shared variable -> offset in the CTA's
  uint64_t size = 0;                        // bytes (DecodedKernel::static_shared)
  std::set<std::string> dynamic;            // .extern .shared variables it names, at `size`
  // The module's .global and .const variables and its functions, by name, at the device
  // addresses the decoder gave them (PtxModule::Decode's `addresses`, those of the module's
  // load: a variable they do not name is at 0), which both tiers take as constants. A
  // kernel's JitSlot belongs to its DecodedKernel, one per load, so that no load's compiled
  // code holds another's addresses.
  std::map<std::string, uint64_t> globals;
};

struct Warp;
struct LaunchState;
struct Inst;
using Handler = void (*)(Warp& warp, const Inst& inst, uint32_t mask);

enum class Flow : uint8_t {
  kNext,     // every other instruction: the lanes move on
  kBranch,   // bra: executing lanes go to `target`
  kExit,     // ret/exit at kernel level: executing lanes end
  kBarrier,  // bar.sync: executing lanes wait for the CTA
  kTrap,     // trap/brkpt: the launch fails
  kAssert,   // __assertfail: the launch fails with CUDA_ERROR_ASSERT
};

enum class Space : uint8_t { kGeneric, kGlobal, kShared, kLocal, kParam, kConst };

struct Inst {
  Handler run = nullptr;
  Flow flow = Flow::kNext;
  Space space = Space::kGeneric;
  uint8_t width = 0;   // bytes per element (memory, some conversions)
  uint8_t vec = 1;     // elements of a vector access
  uint8_t mode = 0;    // op-specific: comparison, rounding, atomic op, shuffle mode...
  uint8_t mode2 = 0;   // op-specific: setp's bool op, cvt's source kind...
  uint8_t flags = 0;   // kFtz, kSat, ...
  int32_t guard = -1;  // predicate slot, -1: none
  bool guard_negated = false;
  bool uniform_address = false;  // memory: the address operand is a constant slot (same in
                                 // every lane and warp)
  // A lane function of sources a, b, c, e into d[0] (d[1]) that cannot fault or touch
  // anything else (mov, cvt, cvta, arithmetic but div/rem and carries, ld.param at a fixed
  // address): the decoder may run it once per warp before the CTAs (Hoist).
  bool pure = false;
  // A warp-synchronous instruction, which on a GPU waits for lanes (RunWarp lets lanes it
  // held back, so that spinning lanes let others progress, run again before it): kSyncNone,
  // kSyncWarp (wmma, mma, ldmatrix: the whole warp), kSyncMaskB (vote, match, redux,
  // bar.warp: the membermask in slot b), kSyncMaskE (shfl: in slot e).
  uint8_t collective = 0;
  int32_t d[4] = {-1, -1, -1, -1};         // destination slots
  int32_t a = -1, b = -1, c = -1, e = -1;  // source slots
  int32_t target = -1;                     // branch target
  int64_t offset = 0;                      // address offset
  uint32_t printf_args = 0;                // local offsets for vprintf (format, args)
  uint32_t printf_fmt = 0;                 // cp.async.bulk: its mbarrier operand's offset (int32)
  int line = 0;                            // PTX source line, for error messages
  uint32_t aux = 0;                        // wmma: its WmmaOp in DecodedKernel::wmma; cp.async: the source offset
};

// A call of the device runtime (dynamic parallelism, CUDA 12's CDP2 entry points), run by
// HDeviceRuntime: its arguments' and result's offsets in local memory, and the module's heap.
struct DeviceRuntimeCall {
  enum Op : uint8_t {
    kGetParameterBuffer,        // (func, grid[12], block[12], shared) -> buffer
    kLaunchDevice,              // (buffer, stream) -> error
    kGetLastError,              // () -> error, which it resets
    kStreamCreate,              // (stream*, flags) -> error
    kStreamDestroy,             // (stream) -> error
    kMalloc,                    // (pointer*, size) -> error
    kFree,                      // (pointer) -> error
    kPeekAtLastError,           // () -> error
    kEventCreate,               // (event*, flags) -> error
    kEventOrder,                // cudaEventRecord (event, stream), cudaStreamWaitEvent, cudaEventDestroy -> error
    kMemcpyAsync,               // (dst, src, bytes, kind, stream) -> error
    kMemcpy2DAsync,             // (dst, dpitch, src, spitch, width, height, kind, stream) -> error
    kMemsetAsync,               // (dst, value, bytes, stream) -> error
    kMemset2DAsync,             // (dst, pitch, value, width, height, stream) -> error
    kGetDevice,                 // (device*) -> error
    kDeviceGetAttribute,        // (value*, attribute, device) -> error
    kDeviceGetLimit,            // (value*, limit) -> error
    kMemcpy3DAsync,             // (const cudaMemcpy3DParms*, stream) -> error
    kMemset3DAsync,             // (cudaPitchedPtr, value, cudaExtent, stream) -> error
    kGetDeviceCount,            // (count*) -> error
    kFuncGetAttributes,         // (cudaFuncAttributes*, func) -> error
    kOccupancy,                 // (blocks*, func, block size, dynamic shared) -> error
    kOccupancyWithFlags,        // (blocks*, func, block size, dynamic shared, flags) -> error
    kDeviceGetCacheConfig,      // (cudaFuncCache*) -> error
    kDeviceGetSharedMemConfig,  // (cudaSharedMemConfig*) -> error
    kRuntimeGetVersion,         // (version*) -> error
    kGetErrorString,            // (error) -> const char*
    kGetErrorName,              // (error) -> const char*
  };
  Op op = kGetLastError;
  uint32_t args[8] = {};  // local offsets of the call's .param arguments
  uint32_t result = 0;
  uint32_t last_error = 0;           // local offset of the thread's last error and its CTA tag (8 bytes)
  uint64_t heap = 0, heap_size = 0;  // 0: the module has none (ops that need it fail)
  uint64_t strings = 0;              // kGetErrorString, kGetErrorName: kErrorStringsVariable's address (0: none)
};

// A kernel of the module a device-side launch may name: its address (a function pointer's
// value) and the bytes of its parameters.
struct LaunchableEntry {
  uint64_t address = 0;
  std::string name;
  uint32_t param_size = 0;
  uint32_t ptx_version = 0;  // its RawFunction's (cudaFuncGetAttributes, cudaRuntimeGetVersion)
  uint32_t target_arch = 0;
};

// One cp.async.bulk.tensor (HTensorCopy; Inst::aux indexes DecodedKernel::tensor_copies):
// the tensor map's address operand and the coordinates' slots (Inst::a + offset is the
// shared memory of the box, Inst::e + printf_fmt the mbarrier of a load).
struct TensorCopyOp {
  uint8_t rank = 0;    // 1 to 5: the instruction's .1d to .5d, checked against the map's
  bool store = false;  // .global.shared::cta (bulk_group), else a load into shared memory
  int32_t map = -1;    // slot of the map's generic address
  int64_t map_offset = 0;
  int32_t coords[5] = {-1, -1, -1, -1, -1};
};

// Element types of wmma fragments.
// kE4M3 and kE5M2: sm_89's 8-bit floats (mma.sync m16n8k32 only).
enum class WmmaType : uint8_t { kF16, kBF16, kTF32, kF32, kF64, kS8, kU8, kS32, kE4M3, kE5M2 };

// One wmma.load, wmma.store or wmma.mma (warp-wide matrix operations: a fragment is a
// list of registers in every lane, whose element layout PTX leaves to the implementation;
// the engine's is in docs/ptx-engine.md).
struct WmmaOp {
  enum Kind : uint8_t { kLoad, kStore, kMma };
  Kind kind = kLoad;
  char matrix = 'a';      // load/store: a, b, c or d
  bool row_major = true;  // load/store: the layout in memory
  uint32_t m = 0, n = 0, k = 0;
  // load/store: types[0] the element type; mma: d, a, b, c.
  WmmaType types[4] = {};
  bool satfinite = false;
  // mma.sync (not wmma): the fragments follow the lane layout PTX defines for its shape.
  bool ptx_layout = false;
  // load/store: fragments[0]; mma: d, a, b, c. Register slots, in order.
  std::vector<int32_t> fragments[4];
};

inline constexpr uint8_t kSyncNone = 0;
inline constexpr uint8_t kSyncWarp = 1;
inline constexpr uint8_t kSyncMaskB = 2;
inline constexpr uint8_t kSyncMaskE = 3;

inline constexpr uint8_t kFlagFtz = 1;
inline constexpr uint8_t kFlagSat = 2;
inline constexpr uint8_t kFlagCarryIn = 4;   // addc/subc/madc
inline constexpr uint8_t kFlagCarryOut = 8;  // .cc
inline constexpr uint8_t kFlagSigned = 16;
// Half arithmetic's .relu: a negative result becomes 0, a NaN the canonical NaN.
inline constexpr uint8_t kFlagRelu = 32;
// min/max.NaN: a NaN operand makes the result the canonical NaN.
inline constexpr uint8_t kFlagNaNOperand = 64;

struct DecodedKernel {
  std::string name;
  std::vector<Inst> code;
  // Handlers that a wrapper runs (Inst::aux indexes them): float arithmetic with a
  // directed rounding (.rz/.rm/.rp) runs its round-to-nearest handler in that mode.
  std::vector<Handler> inner;
  // Run once per warp (all 32 lanes) when a worker sets up its warps, after the special
  // registers: the instructions whose value is the same in every CTA (Hoist).
  std::vector<Inst> prologue;
  uint32_t slot_count = 0;
  // Slots whose value is the same in every lane and every warp (immediates,
  // symbol addresses), set when a warp starts: {slot, value}.
  std::vector<std::pair<int32_t, uint64_t>> constants;
  // Special-register slots, set per lane / per warp when a warp starts.
  int32_t tid[3] = {-1, -1, -1}, ntid[3] = {-1, -1, -1};
  int32_t ctaid[3] = {-1, -1, -1}, nctaid[3] = {-1, -1, -1};
  int32_t laneid = -1, warpid = -1, nwarpid = -1, smid = -1, nsmid = -1, gridid = -1;
  // Thread block clusters: %clusterid, %nclusterid, %cluster_ctaid, %cluster_nctaid (per
  // axis), %cluster_ctarank, %cluster_nctarank and %is_explicit_cluster.
  int32_t clusterid[3] = {-1, -1, -1}, nclusterid[3] = {-1, -1, -1};
  int32_t cluster_ctaid[3] = {-1, -1, -1}, cluster_nctaid[3] = {-1, -1, -1};
  int32_t cluster_ctarank = -1, cluster_nctarank = -1, is_explicit_cluster = -1;
  int32_t lanemask_eq = -1, lanemask_lt = -1, lanemask_le = -1, lanemask_gt = -1, lanemask_ge = -1;
  // %envreg0..31: 0, except %envreg1/%envreg2, the high and low halves of a cooperative
  // launch's grid workspace (what cooperative groups' grid.sync() counts on).
  int32_t envreg[32] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  int32_t carry_slot = -1;  // the .cc carry flag
  uint32_t param_size = 0;  // bytes of .entry parameters
  // Bytes of the .shared variables the kernel and its callees name: as declared, and
  // rounded up to 16 (where dynamic shared memory starts).
  uint64_t declared_shared = 0;
  uint64_t static_shared = 0;
  uint32_t dynamic_shared_align = 16;
  uint32_t max_threads = 0;  // RawFunction::max_threads of the entry
  // RawFunction's cluster shape (0, 0, 0: none) and .maxclusterrank.
  uint32_t required_cluster[3] = {0, 0, 0};
  uint32_t max_cluster_rank = 0;
  // It names its cluster (registers, barrier.cluster, .shared::cluster, mapa, getctarank):
  // the interpreter runs it (the JIT tier compiles none of that).
  bool names_cluster = false;
  uint64_t const_bytes = 0;                     // of the module's .const variables (one bank per module)
  uint64_t local_size = 0;                      // bytes of local memory per thread
  std::string unsupported;                      // non-empty: why this kernel cannot run (at launch)
  std::vector<WmmaOp> wmma;                     // the operands of its wmma instructions (Inst::aux)
  std::vector<DeviceRuntimeCall> device_calls;  // Inst::aux of HDeviceRuntime
  // tex.level's and tex.grad's operand slots (HTexture: Inst::printf_args, 1-based): the
  // level of detail, then the x and y gradients' components (-1: none).
  std::vector<std::array<int32_t, 7>> texture_lods;
  std::vector<TensorCopyOp> tensor_copies;  // HTensorCopy's operands (Inst::aux)
  std::vector<LaunchableEntry> entries;     // set when it calls the device runtime
  // The entry's parsed PTX (owned by its PtxModule), and its JIT tier (jit/jit.h): compiled
  // once the launches say it is worth it, or refused.
  const RawFunction* source = nullptr;
  const ParsedModule* module = nullptr;  // the module it is of (its device functions, for the JIT)
  SharedLayout shared_layout;            // the .shared variables it names, for the JIT tier
  std::shared_ptr<JitSlot> jit;          // made by PtxModule::Decode
};

}  // namespace gpupool::sim

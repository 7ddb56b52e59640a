// The PTX engine of the sim GPU: runs the PTX of any kernel with CUDA
// semantics.
//
// Three stages (docs/ptx-engine.md):
//   1. PtxModule::Parse reads PTX text into functions of statements (names
//   resolved per
//      `{ }` scope) and module variables (.global/.const with initialisers,
//      .shared).
//   2. PtxModule::Decode lowers one kernel, once, into a compact program:
//   device
//      functions (.func) are inlined at their call sites, every register,
//      immediate and symbol address becomes a slot of a per-warp register file,
//      branch targets are instruction indices, and each instruction carries the
//      handler that executes it.
//   3. RunKernel executes a launch: CTAs one after another, the warps of a CTA
//   one at a
//      time until each reaches a barrier or exits, each instruction on all
//      active lanes of a warp at once (lane loops over [slot][32] arrays).
//      Divergent lanes keep their own program counters; the lowest one runs
//      first, so lanes reconverge where paths meet.
//
// Memory: global (and .const) addresses are the session's device addresses,
// checked against its allocations on every access; shared, local and param
// memory have windows of their own in the generic address space. A stray access
// ends the launch with CUDA_ERROR_ILLEGAL_ADDRESS.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "remote/protocol/protocol.h"

namespace gpupool::sim {

// Generic-address windows of the non-global state spaces (global addresses stay
// below 2^48: the sim's device addresses start at 16 TiB per GPU).
inline constexpr uint64_t kSharedWindow = 1ull << 48;
inline constexpr uint64_t kLocalWindow = 2ull << 48;
inline constexpr uint64_t kParamWindow = 3ull << 48;
inline constexpr uint64_t kWindowSize = 1ull << 48;
// Addresses of device functions (function pointers, virtual tables): a window of their own,
// where no load or store reaches memory. A function's address is fixed by its module's PTX
// (FunctionAddress in front/module.cc), so it is the same on any GPU.
inline constexpr uint64_t kCodeWindow = 4ull << 48;

// Bounds on what a module's PTX declares (the PTX comes from a job; the parser refuses
// more with CUDA_ERROR_INVALID_PTX, naming the declaration): any one variable, array or
// initialiser at most kMaxDeclarationBytes, a .shared variable at most kMaxSharedBytes (a
// block's shared memory on sm_80 and later, which a launch may not exceed either), an
// `.align` a power of two of at most kMaxAlign. Sums of sizes (a module's variables, a
// kernel's local memory) are checked where they are made.
inline constexpr uint64_t kMaxDeclarationBytes = uint64_t{1} << 40;
inline constexpr uint64_t kMaxSharedBytes = 228 * 1024;
inline constexpr uint64_t kMaxAlign = uint64_t{1} << 16;

// Device printf text a session keeps between synchronising calls, as CUDA's printf buffer
// (cudaLimitPrintfFifoSize, 1 MiB by default) holds it: more is dropped, and the text
// ends with a note saying how many bytes were (AppendPrintf).
inline constexpr uint64_t kMaxPrintfBytes = uint64_t{1} << 20;

// Device-side malloc and free: a module that calls them gets a variable of this name, its
// heap, of the size the context's CU_LIMIT_MALLOC_HEAP_SIZE says at the module's load
// (8 MiB by default, as in CUDA), at most kMaxDeviceHeapBytes.
inline constexpr const char* kDeviceHeapVariable = "$gpupool_device_heap";
inline constexpr uint64_t kDeviceHeapBytes = uint64_t{8} << 20;
inline constexpr uint64_t kMaxDeviceHeapBytes = uint64_t{2} << 30;
// A module that calls cudaGetErrorName or cudaGetErrorString in device code gets a variable
// of this name holding CUDA's error names and texts (front/error_strings.h), as nvcc puts
// string literals in .global variables: the pointer those calls return is into it. The
// kernel may read it; it is the module's, as the device runtime's own strings are on a GPU.
inline constexpr const char* kErrorStringsVariable = "$gpupool_error_strings";

// An address in a variable's initialiser (`= {generic(x), f, 0xFF00(generic(s)+8)}`):
// `size` bytes at `offset` hold ((address of `symbol`) + addend) & mask, shifted down by the
// mask's trailing zero bits. `symbol` is a module variable or a device function.
struct Relocation {
  uint64_t offset = 0;
  uint32_t size = 8;
  std::string symbol;
  int64_t addend = 0;
  uint64_t mask = ~uint64_t{0};
};

struct ModuleVariable {
  std::string name;
  bool is_const = false;  // .const (read-only for kernels), else .global
  uint64_t size = 0;
  uint32_t align = 1;
  std::vector<uint8_t> init;            // initial bytes (shorter than size: the rest is zero)
  std::vector<Relocation> relocations;  // addresses within `init`, filled in at load
  bool is_declaration = false;          // `.extern` without an initialiser: defined in another module
};

struct DecodedKernel;  // ir/kernel.h
struct ParsedModule;   // front/program.h

class PtxModule {
 public:
  // Fails with InvalidArgument naming the line on text that is not PTX we can
  // read.
  // `device_heap`: the bytes of its device malloc heap, if it calls malloc or free
  // (rounded up to 16; at most kMaxDeviceHeapBytes).
  static Result<std::unique_ptr<PtxModule>> Parse(std::string_view text, uint64_t device_heap = kDeviceHeapBytes);
  // One module of the PTX of several translation units (nvcc -rdc=true), linked as a
  // driver JIT-links them: a declaration (`.extern`) takes another unit's definition, a
  // unit's own symbols (neither .visible, .weak nor .extern) that another unit also names
  // are renamed apart, and of several definitions of a name (.weak template code) the
  // first is kept. Identical texts count once.
  static Result<std::unique_ptr<PtxModule>> ParseLinked(const std::vector<std::string_view>& texts,
                                                        uint64_t device_heap = kDeviceHeapBytes);
  ~PtxModule();

  // .global and .const variables: the executor places them in device memory.
  const std::vector<ModuleVariable>& variables() const;
  // `variable`'s initial bytes with the addresses its initialiser names filled in, given
  // the device address of every module variable. Fails with InvalidArgument naming a
  // symbol that is neither a module variable nor a device function.
  Result<std::vector<uint8_t>> InitialBytes(const ModuleVariable& variable,
                                            const std::map<std::string, uint64_t>& addresses) const;
  bool HasKernel(const std::string& name) const;
  std::vector<std::string> KernelNames() const;

  // Lowers kernel `name` once (later calls return the same program).
  // `addresses` gives the device address of every module variable. Fails with
  // NotFound for an unknown kernel and Unimplemented (message naming the
  // instruction) for what the engine cannot run, such as textures and surfaces.
  Result<const DecodedKernel*> Decode(const std::string& name, const std::map<std::string, uint64_t>& addresses);

 private:
  // Made and destroyed where DecodedKernel is complete (ir/kernel.cc): the map of decoded
  // kernels is built and torn down there.
  PtxModule();
  std::unique_ptr<ParsedModule> parsed_;
  std::map<std::string, std::unique_ptr<DecodedKernel>> decoded_;
  std::map<std::string, Status> failed_;
};

// One allocation the launching session may reach.
struct MemoryRange {
  uint64_t start = 0;
  uint64_t size = 0;
  char* host = nullptr;
};

// A grid launched by a kernel (dynamic parallelism: the device runtime's
// __cudaCDP2LaunchDeviceV2, what `kernel<<<...>>>` in device code compiles to with
// -rdc=true). Queued while its parent runs; the executor runs it after the parent grid,
// as CUDA 12's device runtime allows (a parent cannot wait for its children); a tail
// launch after the parent's other children, at the parent's depth
// (interp/device_runtime.cc says how the streams are run).
// A copy or memset the kernel queued (cudaMemcpyAsync, cudaMemsetAsync, their 2D forms and
// cudaMemcpy3DAsync in device code) is one too, in the same stream order as the grids: the
// device runtime runs them as grids of its own. The executor runs them with RunDeviceCopy.
struct DeviceLaunch {
  enum Kind : uint8_t { kGrid, kCopy, kSet };
  Kind kind = kGrid;
  std::string kernel;  // kGrid: the entry's name in the parent's module; else the kernel that queued it
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t dynamic_shared = 0;
  bool tail = false;  // into cudaStreamTailLaunch: after the parent's other children, in its place
  std::vector<uint8_t> params;
  // kCopy and kSet: `depth` slices, `slice_pitch` apart, of `height` rows of `width` bytes,
  // `pitch` apart (a 1D one is one row, a 2D one one slice); kSet writes `value`. Checked
  // by the device runtime: width <= each pitch, and for 3D rows * pitch <= slice pitch.
  uint64_t dst = 0, dst_pitch = 0, src = 0, src_pitch = 0, width = 0, height = 0;
  uint64_t depth = 1, dst_slice_pitch = 0, src_slice_pitch = 0;
  uint8_t value = 0;
  uint8_t dimensions = 1;  // queued by the 1D, 2D (cudaMemcpy2DAsync...) or 3D call
};
struct DeviceLaunches {
  std::mutex mu;
  std::vector<DeviceLaunch> queued;  // in launch order
};
// CUDA's limits: grids nested this deep at most (cudaErrorLaunchMaxDepthExceeded beyond),
// and a grid's children queued at once (cudaLimitDevRuntimePendingLaunchCount's default;
// cudaErrorLaunchPendingCountExceeded beyond).
inline constexpr uint32_t kMaxLaunchDepth = 24;
inline constexpr size_t kDefaultPendingLaunches = 2048;
// The most a grid queues whatever the limit is set to: each queued launch holds up to 4 KiB
// of parameters in the agent until it runs, 24 grids deep.
inline constexpr size_t kMaxPendingLaunchLimit = 16384;
// A context's limits as CUDA sets them at first (by cudaLimit; the remoting library's too).
inline constexpr uint64_t kDefaultDeviceLimits[dataplane::kDeviceLimitCount] = {
    1024, uint64_t{1} << 20, kDeviceHeapBytes, 2, kDefaultPendingLaunches, 64, 0};

struct KernelNeeds;  // below

struct LaunchSpec {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t dynamic_shared = 0;
  const uint8_t* params = nullptr;
  size_t param_size = 0;
  std::vector<MemoryRange> memory;  // sorted by start, non-overlapping
  uint32_t sm_count = 108;
  std::string* printf_out = nullptr;        // device printf text is appended here (AppendPrintf)
  uint64_t* printf_dropped = nullptr;       // if set: increased by the bytes of text dropped
  std::string* error_detail = nullptr;      // why a launch failed, for the agent's log
  uint64_t* thread_instructions = nullptr;  // if set: increased by the lanes executed
  // If set: increased by one for each block of threads run, while the kernel runs (the
  // agent's watchdog tells a long kernel from a hung GPU by it).
  std::atomic<uint64_t>* progress = nullptr;
  // A cooperative launch: every CTA is resident at once (a CTA may wait for the others,
  // as grid.sync() does), and the kernel finds `grid_workspace` (zeroed device memory of
  // kGridWorkspaceBytes within `memory`) in %envreg1 (high half) and %envreg2 (low half).
  bool cooperative = false;
  uint64_t grid_workspace = 0;
  // Thread block clusters (sm_90): the shape the launch asked for; 1, 1, 1 for none, when a
  // kernel compiled with one (.reqnctapercluster) runs in that. A cluster's blocks are
  // resident together: they reach each other's shared memory (mapa, .shared::cluster) and
  // wait for each other (barrier.cluster). Not with `cooperative`.
  uint32_t cluster[3] = {1, 1, 1};
  // Where the grids this one launches are queued; nullptr: device-side launches fail
  // (the device runtime returns an error to the kernel).
  DeviceLaunches* device_launches = nullptr;
  uint32_t depth = 0;  // of nesting: 0 for a grid the host launched
  // The device runtime's limit on launches, copies and memsets queued by one grid
  // (cudaLimitDevRuntimePendingLaunchCount), and what cudaGetDevice says in device code.
  size_t pending_launch_limit = kDefaultPendingLaunches;
  int32_t device_ordinal = 0;
  // What cudaDeviceGetAttribute and cudaDeviceGetLimit say in device code (the executor's,
  // which outlive the launch); null: the defaults of kDefaultDeviceLimits and no attributes
  // (cudaDeviceGetAttribute is cudaErrorNotSupported). Its pending-launch limit is read from
  // pending_launch_limit, not from here.
  const dataplane::DeviceRuntimeFacts* device_facts = nullptr;
  // What the module's kernel `name` needs (NeedsOf), for cudaFuncGetAttributes and the
  // occupancy calculator in device code; false where it does not decode. Called from the
  // launch's worker threads at once (the executor's, thread-safe, outliving the launch);
  // null: those calls say cudaErrorNotSupported.
  const std::function<bool(const std::string& name, KernelNeeds* needs)>* entry_needs = nullptr;
  // If set: once true, the launch ends within a bounded time (the interpreter reads it
  // every round of a block's warps, compiled code every 2^16 backward branches and between
  // blocks) with CUDA_ERROR_LAUNCH_TIMEOUT and kCancelledDetail. Any thread may set it.
  const std::atomic<bool>* cancel = nullptr;
};

// The error detail of a launch ended by LaunchSpec::cancel.
inline constexpr const char* kCancelledDetail = "the launch was cancelled: its session is ending";

// Bytes of the grid workspace a cooperative launch needs (grid.sync() counts at +4).
inline constexpr uint64_t kGridWorkspaceBytes = 256;

// Appends device printf `text` to *out unless *out would then hold more than
// kMaxPrintfBytes (a kernel printing in a loop cannot make the process allocate without
// end); adds what it drops to *dropped. A line is kept or dropped whole.
void AppendPrintf(std::string* out, std::string_view text, uint64_t* dropped);

// Returns a CUresult: success, kCuLaunchTimeout (cancelled), kCuIllegalAddress (stray access),
// kCuLaunchFailed (trap), kCuAssert (failed device assert), kCuInvalidValue (a
// parameter buffer too small or too much shared memory),
// kCuLaunchOutOfResources.
int32_t RunKernel(const DecodedKernel& kernel, const LaunchSpec& spec);

// Runs a queued copy or memset (DeviceLaunch::kCopy, kSet) on `spec.memory`. Its span (first
// row to last) must lie within one allocation of the launch: otherwise nothing is written
// and it returns kCuIllegalAddress, with *spec.error_detail naming the call, its extent and
// the kernel that queued it. A tenant's fault: the executor fails the host's launch.
int32_t RunDeviceCopy(const DeviceLaunch& copy, const LaunchSpec& spec);

// What a kernel needs, as a driver reports it of a compiled kernel (cuFuncGetAttribute).
struct KernelNeeds {
  uint32_t max_threads = 1024;  // per block: .maxntid / .reqntid, else the device's 1024
  uint64_t static_shared = 0;   // of the .shared variables it or its callees name
  uint64_t const_bytes = 0;     // of its module's .const variables (one bank per module)
  uint64_t local_bytes = 0;     // of local memory per thread
  // Per thread, as the occupancy calculator is to count them (0: its assumption, 32). The sim
  // allocates no registers, but holds a cooperative grid's state in host memory: a kernel of
  // many PTX registers (a -G build's) reports more, so that the grid a program sizes by
  // occupancy (cudaOccupancyMaxActiveBlocksPerMultiprocessor x SMs) is one the sim runs.
  uint32_t registers = 0;
};
// `sm_count`: the multiprocessors of the sim GPU it runs on.
KernelNeeds NeedsOf(const DecodedKernel& kernel, uint32_t sm_count);

// Whether a cooperative launch of `kernel` over `ctas` blocks of `threads` threads and
// `shared_size` bytes of shared memory each fits what the interpreter holds at once (else
// RunKernel refuses it: kCuCooperativeLaunchTooLarge, "does not fit the sim GPU at once").
bool CooperativeGridFits(const DecodedKernel& kernel, uint64_t ctas, uint32_t threads, uint64_t shared_size);

}  // namespace gpupool::sim

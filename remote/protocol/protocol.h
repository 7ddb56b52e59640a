// The data-path protocol: operations the replacement libcuda.so.1 sends to the agent's
// dataplane server, with their argument and result structs (carried by transport/wire.h).
//
// Handles (streams, events, modules, functions) are chosen by the client, so creating one
// needs no round trip. Device pointers are the server's (real or simulated) device
// addresses; a client may choose them (MemAllocArgs::address, ModuleLoadArgs::globals_base)
// so that they stay the same when it moves to another GPU. The server answers with the
// address it used: a client must check it (an executor that cannot place memory ignores
// the request). Status values are CUresult numbers (defined here so the server side builds
// without cuda.h).
//
// Bump kProtocolVersion on any incompatible change: Hello refuses a mismatch.
#pragma once

#include <unistd.h>  // getpid, gethostname: who sends a hello (HelloArgs)

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace gpupool::dataplane {

inline constexpr uint32_t kProtocolVersion = 9;  // 9: DeviceRuntimeFacts carries the device count and cache config

// CUresult values used by the server (same numbers as cuda.h).
enum CuStatus : int32_t {
  kCuSuccess = 0,
  kCuInvalidValue = 1,
  kCuOutOfMemory = 2,
  kCuNotInitialized = 3,
  kCuNoDevice = 100,
  kCuInvalidDevice = 101,
  kCuInvalidImage = 200,
  kCuInvalidContext = 201,
  kCuNoBinaryForGpu = 209,
  kCuInvalidPtx = 218,
  kCuDeviceUnavailable = 46,
  kCuEccUncorrectable = 214,
  kCuInvalidHandle = 400,
  kCuNotFound = 500,
  kCuNotReady = 600,
  kCuIllegalAddress = 700,
  kCuLaunchOutOfResources = 701,
  kCuLaunchTimeout = 702,
  kCuAssert = 710,
  kCuLaunchFailed = 719,
  kCuCooperativeLaunchTooLarge = 720,
  kCuInvalidClusterSize = 912,
  kCuNotPermitted = 800,
  kCuNotSupported = 801,
  kCuUnknown = 999,
};

enum Op : uint32_t {
  kOpHello = 1,
  kOpMemAlloc,
  kOpMemFree,
  kOpMemGetInfo,
  kOpMemcpyHtoD,  // payload: the bytes
  kOpMemcpyDtoH,  // reply bulk: the bytes
  kOpMemcpyDtoD,
  kOpMemset,
  kOpModuleLoad,  // payload: ModuleImage (below)
  kOpModuleUnload,
  kOpGetFunction,
  kOpLaunch,  // payload: the packed kernel parameters
  kOpStreamCreate,
  kOpStreamDestroy,
  kOpStreamSynchronize,
  kOpStreamQuery,
  kOpStreamWaitEvent,
  kOpEventCreate,
  kOpEventDestroy,
  kOpEventRecord,
  kOpEventSynchronize,
  kOpEventQuery,
  kOpEventElapsed,
  kOpContextSynchronize,
  kOpModuleGetGlobal,  // ModuleGetGlobalArgs -> ModuleGetGlobalResult
  kOpRecovered,        // RecoveredArgs, one-way: this process recovered here (failover)
  // The handoff of a planned move (gpupool-remote(7), FAILOVER): device memory goes from
  // the old GPU's agent to the new one's, not through the compute node.
  kOpHandoffOffer,   // client -> old agent: -> HandoffOfferResult, then printf text
  kOpHandoffPull,    // client -> new agent: HandoffPullArgs -> HandoffPullResult
  kOpHandoffAttach,  // new agent -> old agent, a connection's first request: HandoffAttachArgs
  kOpHandoffRead,    // new agent -> old agent: HandoffReadArgs -> reply bulk: the bytes
  kOpHandoffDone,    // new agent -> old agent: the offered session is closed (memory freed)
  // ---- NVML in the job (issue 41): the session's own GPU as its job may see it ----
  kOpGpuStatus,  // GpuStatusArgs -> GpuStatusResult, then its GpuProcess records
  // ---- Texture objects on a GPU host's GPU (issue 41): the sim's are the library's own ----
  kOpTexObjectCreate,        // TexObjectCreateArgs -> the object's handle (uint64_t)
  kOpTexObjectDestroy,       // TexObjectDestroyArgs
  kOpArrayCreate,            // ArrayCreateArgs
  kOpArrayDestroy,           // ArrayDestroyArgs
  kOpArrayCopy,              // ArrayCopyArgs; payload (to an array from the host) or reply bulk
  kOpSurfObjectCreate,       // SurfObjectCreateArgs -> the object's handle (uint64_t)
  kOpSurfObjectDestroy,      // TexObjectDestroyArgs
  kOpMipmappedArrayCreate,   // MipmappedArrayCreateArgs
  kOpMipmappedArrayDestroy,  // ArrayDestroyArgs (the mipmapped array's id)
  kOpTensorMap,              // TensorMapArgs -> the map's 128 bytes
  // ---- A recovery's restore in parallel streams (issue 40) ----
  kOpRestoreOffer,   // client -> its new session: -> RestoreOfferResult
  kOpRestoreAttach,  // a restore stream's first request: RestoreAttachArgs
  kOpCount,
};

// Requests after which the GPU's earlier work has run (synchronisations, and a blocking
// device-to-host copy): device printf text comes back in their replies, checkpoints are
// taken at them, and managed memory is the host's again after them.
inline bool Synchronises(uint32_t op) {
  return op == kOpStreamSynchronize || op == kOpContextSynchronize || op == kOpEventSynchronize || op == kOpMemcpyDtoH;
}

// Fixed-size strings are NUL-terminated and NUL-padded.
// client_pid and client_host say which process sent the hello, as its own host knows it
// (getpid(), gethostname()). The constructor fills them, so that every client that builds
// a hello (libcuda.so.1, libnvidia-ml.so.1, the tests) says so without code of its own.
// They are the client's word: the agent only keeps them to show them back to processes
// of the same lease (kOpGpuStatus, the processes nvidia-smi lists), never trusts them.
struct HelloArgs {
  HelloArgs() {
    client_pid = static_cast<uint32_t>(::getpid());
    if (::gethostname(client_host, sizeof(client_host) - 1) != 0) client_host[0] = '\0';
  }
  uint32_t protocol_version = kProtocolVersion;
  uint32_t client_pid = 0;
  char lease_id[64] = {};
  char token[160] = {};
  char gpu_uuid[64] = {};
  char client_host[64] = {};
  uint32_t flags = 0;  // kHello* bits; a hello with others set is refused
  uint32_t reserved = 0;
};
// The session only watches its GPU (libnvidia-ml.so.1, as nvidia-smi's NVML makes no
// context): it is not one of the GPU's processes (kOpGpuStatus does not list it).
inline constexpr uint32_t kHelloMonitorOnly = 1u << 0;

// What the client needs to answer device queries (cuDeviceGetAttribute and friends).
struct DeviceDescription {
  char uuid[64] = {};  // "GPU-xxxxxxxx-xxxx-..."
  char name[96] = {};  // e.g. "NVIDIA A100-SXM4-80GB"
  char pci_bus_id[32] = {};
  uint64_t total_memory = 0;
  int32_t cc_major = 0, cc_minor = 0;
  int32_t multiprocessor_count = 0;
  int32_t driver_version = 0;  // of the GPU host's driver (cuda executor), else ours
  char executor[16] = {};      // "sim" or "cuda"
};

struct MemAllocArgs {
  uint64_t size;
  uint64_t address = 0;
};  // 0: the server chooses
struct MemAllocResult {
  uint64_t dptr;
};
struct MemFreeArgs {
  uint64_t dptr;
};
struct MemInfoResult {
  uint64_t free;
  uint64_t total;
};
struct MemcpyHtoDArgs {
  uint64_t dst;
  uint64_t size;
  uint64_t stream;
};
struct MemcpyDtoHArgs {
  uint64_t src;
  uint64_t size;
  uint64_t stream;
};
struct MemcpyDtoDArgs {
  uint64_t dst;
  uint64_t src;
  uint64_t size;
  uint64_t stream;
};
struct MemsetArgs {
  uint64_t dst;
  uint64_t count;  // elements
  uint32_t value;
  uint32_t element_size;  // 1, 2 or 4
  uint64_t stream;
};

// What the device runtime says of its device in device code (cudaDeviceGetAttribute,
// cudaDeviceGetLimit, cudaGetDeviceCount, cudaDeviceGetCacheConfig; the occupancy
// calculator reads the attributes), for executors that run the device runtime themselves
// (the sim): the client's own answers (cuDeviceGetAttribute, cuCtxGetLimit,
// cuDeviceGetCount, cuCtxGetCacheConfig) for the module's device and context when the
// client loaded the module. Numbers as in cuda.h (CUdevice_attribute and
// cudaDeviceAttr are the same numbers, and so are CUlimit's first and cudaLimit).
inline constexpr uint32_t kDeviceAttributeSlots = 192;  // CU_DEVICE_ATTRIBUTE_MAX is 148 in CUDA 13.0
inline constexpr uint32_t kDeviceLimitCount = 7;        // cudaLimitStackSize .. cudaLimitPersistingL2CacheSize
struct DeviceRuntimeFacts {
  uint64_t limits[kDeviceLimitCount] = {};  // by cudaLimit
  // attributes[a] for 0 < a < attribute_count (the client's CU_DEVICE_ATTRIBUTE_MAX);
  // 0: the client sent none.
  uint32_t attribute_count = 0;
  int32_t attributes[kDeviceAttributeSlots] = {};
  // cudaGetDeviceCount (0: the client sent none) and cudaDeviceGetCacheConfig (the
  // context's CUfunc_cache) in device code.
  int32_t device_count = 0;
  uint32_t cache_config = 0;
  // cudaFuncGetAttributes' binaryVersion for the module's kernels: what the client says on
  // the host (the SASS of the image a GPU of the device's model would run, else its
  // architecture); 0: none sent.
  int32_t binary_version = 0;
};

// ModuleLoad payload: ModuleImageHeader, the image bytes (fatbin or cubin as the client
// got it), then `kernel_count` KernelEntry records each followed by its name bytes.
// globals_base 0: the server chooses. device_heap: the bytes of the heap of device-side
// malloc for a module that calls it (the context's CU_LIMIT_MALLOC_HEAP_SIZE; 0: 8 MiB).
// pending_launches: the context's CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT (0: 2048);
// device_ordinal: the client's device, which cudaGetDevice says in device code; facts:
// what cudaDeviceGetAttribute and cudaDeviceGetLimit say there.
struct ModuleLoadArgs {
  uint64_t module;
  uint64_t globals_base = 0;
  uint64_t device_heap = 0;
  uint32_t pending_launches = 0;
  int32_t device_ordinal = 0;
  DeviceRuntimeFacts facts = {};
};
// Where the module's variables are: one range (size 0: none, or the executor keeps them
// apart, so the client cannot save them).
struct ModuleLoadResult {
  uint64_t globals_base;
  uint64_t globals_size;
};
struct ModuleImageHeader {
  uint64_t image_size;
  uint32_t kernel_count;
  uint32_t reserved;
};
struct KernelEntry {
  uint32_t name_len;
  uint32_t param_size;
};
// A kernel of a ModuleLoad payload: its name and the bytes of its parameters.
struct ModuleKernel {
  std::string_view name;
  uint32_t param_size;
};
// The ModuleLoad payload of `image` and `kernels`, for the tests and benchmarks that load a
// module by hand (the client's runtime builds its own from its module table). Names are
// kernel names, far below 4 GiB.
inline std::string ModuleLoadPayload(std::string_view image, std::initializer_list<ModuleKernel> kernels = {}) {
  ModuleImageHeader header{image.size(), static_cast<uint32_t>(kernels.size()), 0};
  std::string payload(reinterpret_cast<const char*>(&header), sizeof(header));
  payload.append(image);
  for (const ModuleKernel& kernel : kernels) {
    KernelEntry entry{static_cast<uint32_t>(kernel.name.size()), kernel.param_size};
    payload.append(reinterpret_cast<const char*>(&entry), sizeof(entry));
    payload.append(kernel.name);
  }
  return payload;
}
struct ModuleUnloadArgs {
  uint64_t module;
};
struct GetFunctionArgs {
  uint64_t module;
  uint64_t function;
  char name[512];
};
// GetFunction's reply, when the executor can say (else empty): what the kernel was
// compiled to need, for cuFuncGetAttribute and the occupancy calculators. Only about the
// session's own module, as every request. 0: unknown (the library assumes its defaults).
struct FunctionResources {
  int32_t max_threads_per_block = 0;  // a launch of more fails (.maxntid, registers)
  int32_t static_shared_bytes = 0;
  int32_t const_bytes = 0;
  int32_t local_bytes = 0;  // per thread
  int32_t registers = 0;    // per thread
  // The code the GPU runs, as its driver says (CU_FUNC_ATTRIBUTE_PTX_VERSION and
  // BINARY_VERSION, e.g. 90): libraries tune their host side by the PTX version, which must
  // be that of the device code that runs. 0 from the sim, whose choice the library makes
  // itself (image::ChooseCode), and from agents before these fields (the 4 bytes were
  // reserved and 0).
  int16_t ptx_version = 0;
  int16_t binary_version = 0;
};
static_assert(sizeof(FunctionResources) == 24, "FunctionResources is a wire format");

struct LaunchArgs {
  uint64_t function;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_mem;
  uint32_t param_size;
  uint64_t stream;
  uint32_t flags = 0;  // kLaunchCooperative, kLaunchCluster; other bits must be 0
  // With kLaunchCluster: the thread block cluster's blocks in x, y and z, each dividing the
  // grid's, together at most kMaxClusterBlocks; without it all 0. The executor runs the
  // launch in clusters of that shape or refuses it (the sim: the library runs a cluster
  // launch there as a plain one, where the kernel cannot tell).
  uint8_t cluster[3] = {0, 0, 0};
  uint8_t reserved = 0;
};
static_assert(sizeof(LaunchArgs) == 56, "LaunchArgs is a wire format");
inline constexpr uint32_t kLaunchCooperative = 1;  // cuLaunchCooperativeKernel
inline constexpr uint32_t kLaunchCluster = 2;      // cuLaunchKernelEx(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
// The most blocks of a cluster any GPU takes (16, non-portable, on compute capability 9.0).
inline constexpr uint32_t kMaxClusterBlocks = 16;

// kOpTexObjectCreate: a texture object over the session's own device memory, for executors
// whose GPU samples textures itself (the cuda executor; on the sim the library writes its
// own descriptors into device memory: remote/protocol/sim_texture.h). Any session may make
// them, over its own memory only: the agent refuses a range that is not inside one of the
// session's allocations (CUDA_ERROR_INVALID_VALUE), and destroys an object when the memory
// under it is freed. Linear (CU_RESOURCE_TYPE_LINEAR: size_bytes from device_ptr) or
// pitched 2D (CU_RESOURCE_TYPE_PITCH2D: height rows of width elements, pitch bytes apart)
// memory, or one of the session's CUDA arrays (CU_RESOURCE_TYPE_ARRAY: device_ptr is the
// array's id, kOpArrayCreate; CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: the mipmapped array's id,
// kOpMipmappedArrayCreate; the other resource fields 0). The texture fields are
// CUDA_TEXTURE_DESC's.
struct TexObjectCreateArgs {
  uint64_t device_ptr = 0;  // ARRAY: the array's id
  uint64_t size_bytes = 0;  // LINEAR
  uint64_t width = 0;       // PITCH2D, in elements
  uint64_t height = 0;      // PITCH2D, rows
  uint64_t pitch = 0;       // PITCH2D, bytes from one row to the next
  uint32_t resource_type = 0;
  uint32_t format = 0;  // CUarray_format: 8-, 16- and 32-bit integers, half, float
  uint32_t channels = 0;
  uint32_t address_mode[3] = {0, 0, 0};
  uint32_t filter_mode = 0;
  uint32_t flags = 0;  // CU_TRSF_READ_AS_INTEGER, NORMALIZED_COORDINATES, SRGB, ...
  uint32_t max_anisotropy = 0;
  uint32_t mipmap_filter_mode = 0;
  float mipmap_level_bias = 0;
  float min_mipmap_level_clamp = 0;
  float max_mipmap_level_clamp = 0;
  float border_color[4] = {0, 0, 0, 0};
  uint32_t reserved = 0;
};
static_assert(sizeof(TexObjectCreateArgs) == 112, "TexObjectCreateArgs is a wire format");
inline constexpr uint32_t kResourceTypeArray = 0;           // CU_RESOURCE_TYPE_ARRAY
inline constexpr uint32_t kResourceTypeMipmappedArray = 1;  // CU_RESOURCE_TYPE_MIPMAPPED_ARRAY
inline constexpr uint32_t kResourceTypeLinear = 2;          // CU_RESOURCE_TYPE_LINEAR
inline constexpr uint32_t kResourceTypePitch2D = 3;         // CU_RESOURCE_TYPE_PITCH2D
// CU_TRSF_READ_AS_INTEGER | NORMALIZED_COORDINATES | SRGB | DISABLE_TRILINEAR_OPTIMIZATION
// | SEAMLESS_CUBEMAP: the flags a texture object may have.
inline constexpr uint32_t kTextureFlagsKnown = 0x01 | 0x02 | 0x10 | 0x20 | 0x40;
// kOpTexObjectDestroy: one of the session's own objects (another's, or none: INVALID_HANDLE).
// kOpSurfObjectDestroy takes the same.
struct TexObjectDestroyArgs {
  uint64_t handle = 0;
};

// CUDA arrays on a GPU host's GPU (the cuda executor; on the sim an array is device memory
// the library lays out itself). Any session may make them; they are its own, named by ids
// the client chooses (nonzero, unused by the session), and go with the session.
// kOpArrayCreate: cuArray3DCreate's descriptor (CUDA_ARRAY3D_DESCRIPTOR), which the driver
// checks.
struct ArrayCreateArgs {
  uint64_t array = 0;
  uint64_t width = 0;
  uint64_t height = 0;
  uint64_t depth = 0;
  uint32_t format = 0;
  uint32_t channels = 0;
  uint32_t flags = 0;  // CUDA_ARRAY3D_LAYERED, SURFACE_LDST, CUBEMAP, TEXTURE_GATHER
  uint32_t reserved = 0;
};
// kOpArrayDestroy: one of the session's arrays; the texture and surface objects over it go
// first. A level of a mipmapped array goes only with it (CUDA_ERROR_INVALID_VALUE).
struct ArrayDestroyArgs {
  uint64_t array = 0;
};
// kOpMipmappedArrayCreate: cuMipmappedArrayCreate's descriptor (level 0's extent) and
// level count, which the driver checks. Its levels (cuMipmappedArrayGetLevel) become arrays
// of the session named first_level, first_level + 1, ..., which copies, texture and
// surface objects name as any array; ids the client chooses, nonzero and unused, as the
// mipmapped array's own (`descriptor.array`). Any session may make them; they are its own.
// kOpMipmappedArrayDestroy (ArrayDestroyArgs) destroys one, its levels, and the objects
// over it or them.
struct MipmappedArrayCreateArgs {
  ArrayCreateArgs descriptor;  // .array: the mipmapped array's id
  uint64_t first_level = 0;
  uint32_t levels = 0;  // 1 to kMaxMipmapLevels
  uint32_t reserved = 0;
};
static_assert(sizeof(MipmappedArrayCreateArgs) == 64, "MipmappedArrayCreateArgs is a wire format");
// Levels a mipmapped array may have: the most an extent of 2^17 (CUDA's largest 1D
// texture) halves to 1 in, plus one.
inline constexpr uint32_t kMaxMipmapLevels = 18;
// kOpArrayCopy: a region of one of the session's arrays (origin x in bytes, y rows, z
// slices; extent width bytes, height rows, depth slices, each at least 1) to or from
// (`to_array`) the host (rows packed: the payload to an array, the reply bulk from one),
// the session's device memory (`other` the address of the region's first byte, rows
// `other_pitch` bytes apart, slices `other_height` rows apart), or another of its arrays
// (`other` its id, the region at the other_* origin). Regions outside an array, device
// memory outside the session's, or a payload of another size: CUDA_ERROR_INVALID_VALUE.
struct ArrayCopyArgs {
  uint64_t array = 0;
  uint64_t x_bytes = 0, y = 0, z = 0;
  uint64_t width_bytes = 0, height = 0, depth = 0;
  uint64_t other = 0;
  uint64_t other_x_bytes = 0, other_y = 0, other_z = 0;  // another array's origin
  uint64_t other_pitch = 0, other_height = 0;            // device memory's layout
  uint64_t stream = 0;
  uint32_t to_array = 0;    // 1: into `array`; 0: out of it
  uint32_t other_kind = 0;  // kArrayCopyHost, kArrayCopyDevice, kArrayCopyArray
};
static_assert(sizeof(ArrayCopyArgs) == 120, "ArrayCopyArgs is a wire format");
inline constexpr uint32_t kArrayCopyHost = 0;
inline constexpr uint32_t kArrayCopyDevice = 1;
inline constexpr uint32_t kArrayCopyArray = 2;
// kOpSurfObjectCreate: a surface object over one of the session's arrays (made with
// CUDA_ARRAY3D_SURFACE_LDST; the driver checks).
struct SurfObjectCreateArgs {
  uint64_t array = 0;
};

// kOpTensorMap: a tensor map (CUtensorMap, for tensor copies: TMA) made by the GPU's driver,
// for executors whose GPU reads the driver's opaque layout (the cuda executor; on the sim
// the library writes its own: remote/protocol/sim_tensor_map.h). kTensorMapEncodeTiled:
// cuTensorMapEncodeTiled of these fields, which the driver checks; kTensorMapReplaceAddress:
// cuTensorMapReplaceAddress of `map` (one the driver made) to `address`. Any session may ask,
// over its own memory only: the agent refuses an address that is not inside one of the
// session's allocations (CUDA_ERROR_INVALID_VALUE). The reply's inline bytes are the map.
// A replaced map's bytes are the client's, which the driver parses: like everything of a
// session's, in that session's worker process.
struct TensorMapArgs {
  uint32_t kind = 0;  // kTensorMapEncodeTiled, kTensorMapReplaceAddress
  uint32_t data_type = 0;
  uint32_t rank = 0;  // 1 to 5
  uint32_t interleave = 0;
  uint32_t swizzle = 0;
  uint32_t l2_promotion = 0;
  uint32_t oob_fill = 0;
  uint32_t reserved = 0;
  uint64_t address = 0;
  uint64_t dims[5] = {};
  uint64_t strides[4] = {};  // of dimensions 1 to rank-1, bytes
  uint32_t box[5] = {};
  uint32_t element_strides[5] = {};
  uint8_t map[128] = {};  // kTensorMapReplaceAddress
};
static_assert(sizeof(TensorMapArgs) == 280, "TensorMapArgs is a wire format");
inline constexpr uint32_t kTensorMapEncodeTiled = 0;
inline constexpr uint32_t kTensorMapReplaceAddress = 1;
inline constexpr uint32_t kTensorMapMaxRank = 5;

struct StreamArgs {
  uint64_t stream;
  uint32_t flags;
  int32_t priority;
};
struct EventArgs {
  uint64_t event;
  uint32_t flags;
  uint32_t reserved;
};
struct EventRecordArgs {
  uint64_t event;
  uint64_t stream;
};
struct StreamWaitEventArgs {
  uint64_t stream;
  uint64_t event;
};
struct EventElapsedArgs {
  uint64_t start;
  uint64_t end;
};
struct EventElapsedResult {
  float milliseconds;
  uint32_t reserved;
};

// cuModuleGetGlobal: a module variable's device address and size.
struct ModuleGetGlobalArgs {
  uint64_t module;
  char name[512];
};
struct ModuleGetGlobalResult {
  uint64_t dptr;
  uint64_t size;
};

// After a recovery the client tells the replacement's agent (which tells gpupoold: a
// "recovered" event). The agent attaches the session's own lease and GPU to it.
struct RecoveredArgs {
  uint64_t pause_ms;
  uint64_t restored_bytes;  // from the process's checkpoint, through the compute node
  uint64_t replayed;
  char from[64];          // the GPU that was lost
  uint64_t copied_bytes;  // from the old GPU's agent, agent to agent (a handoff)
};

// Handoff. Who may do what:
//  - kOpHandoffOffer: only a session whose lease moved away from a healthy GPU (revoked
//    by the agent, its memory kept for agent.handoff window), once. The agent waits for
//    the session's work to finish and answers a ticket: 32 random bytes, in hex.
//  - kOpHandoffPull: an attached session (its lease holds this GPU). Its agent connects to
//    `endpoint` for GPU `gpu_uuid`, attaches with the ticket, and copies every range of
//    this session (its allocations and module variables, as the client created them again
//    here) from the offered session's memory at the same addresses.
//  - kOpHandoffAttach: the first request of a connection (instead of a hello); the ticket
//    is used up by it. The connection may then only read the offered session's memory
//    (kOpHandoffRead) and end the handoff (kOpHandoffDone); anything else closes it.
inline constexpr size_t kHandoffTicketSize = 65;  // 64 hex digits and NUL
struct HandoffOfferResult {
  char ticket[kHandoffTicketSize];
  char reserved[7];
  uint64_t last_seq;  // the transport seq of the last request the old GPU ran
};
struct HandoffPullArgs {
  char endpoint[256];
  char gpu_uuid[64];
  char ticket[kHandoffTicketSize];
  char reserved[7];
};
struct HandoffPullResult {
  uint64_t bytes;
  uint64_t ranges;
};
struct HandoffAttachArgs {
  uint32_t protocol_version = kProtocolVersion;
  uint32_t reserved = 0;
  char gpu_uuid[64] = {};
  char ticket[kHandoffTicketSize] = {};
  char padding[7] = {};
};
struct HandoffReadArgs {
  uint64_t src;
  uint64_t size;
};

// Restore streams (gpupool-remote(7), FAILOVER). A recovery sends the checkpoint's memory
// over several connections at once: one TCP stream, and the one thread that receives it,
// carries a few GiB/s at most. Who may do what:
//  - kOpRestoreOffer: an attached session (its lease holds this GPU) without a sticky
//    error. The agent answers a ticket (32 random bytes, in hex) and how many streams it
//    takes at most. Until the session's next request, which waits for the streams' copies
//    under way and ends the offer (as its revocation, its close and its end do), the
//    session runs nothing and up to `streams` connections may write its memory.
//  - A restore stream is a connection whose handshake names the lane key
//    "<GPU uuid>#restore" (kRestoreLaneSuffix) with the same lease credential: the agent
//    routes it only to a session worker that lease already has on that GPU. Its first
//    request is kOpRestoreAttach with the ticket; then it may only send kOpMemcpyHtoD on
//    stream 0 into that session's own allocations (the executor checks each range).
//    Anything else, a wrong ticket, an offer that ended, or more streams than offered
//    closes the connection with the reason. A one-way copy's error comes back in the next
//    reply's async_status.
inline constexpr const char* kRestoreLaneSuffix = "#restore";
// The GPU a handshake's lane key names: the key itself, or a restore stream's
// "<uuid>#restore" (*restore then true).
inline std::string GpuOfLaneKey(const std::string& key, bool* restore = nullptr) {
  const std::string_view suffix = kRestoreLaneSuffix;
  const bool ends = key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (restore != nullptr) *restore = ends;
  return ends ? key.substr(0, key.size() - suffix.size()) : key;
}
inline constexpr uint32_t kMaxRestoreStreams = 8;
struct RestoreOfferResult {
  char ticket[kHandoffTicketSize];
  char reserved[3];
  uint32_t streams;  // at most this many attach
};
struct RestoreAttachArgs {
  uint32_t protocol_version = kProtocolVersion;
  uint32_t reserved = 0;
  char ticket[kHandoffTicketSize] = {};
  char padding[7] = {};
};
static_assert(sizeof(RestoreOfferResult) == 72, "RestoreOfferResult is a wire format");
static_assert(sizeof(RestoreAttachArgs) == 80, "RestoreAttachArgs is a wire format");

// kOpGpuStatus (issue 41): what the replacement libnvidia-ml.so.1 answers for
// nvmlDeviceGetUtilizationRates, nvmlSystemGetDriverVersion and
// nvmlDeviceGetComputeRunningProcesses. Who may ask: a session attached to its GPU (its
// lease holds it), about that GPU only; the processes listed are the sessions of the
// asking session's own lease on that GPU, never another lease's. The reply's inline bytes
// are a GpuStatusResult followed by min(process_count, max_processes) GpuProcess records.
// A request of another size, reserved bits set or max_processes over kMaxGpuProcesses is
// refused with CUDA_ERROR_INVALID_VALUE and why.
inline constexpr uint32_t kMaxGpuProcesses = 1024;
struct GpuStatusArgs {
  uint32_t max_processes = 0;  // GpuProcess records wanted at most (0: only the count)
  uint32_t reserved = 0;
};
// Which figures the GPU's device reports (GpuStatusResult::reported); a figure whose bit
// is clear is unknown (NVML answers NOT_SUPPORTED for it).
inline constexpr uint32_t kGpuStatusUtilization = 1u << 0;
inline constexpr uint32_t kGpuStatusTemperature = 1u << 1;
inline constexpr uint32_t kGpuStatusPower = 1u << 2;
inline constexpr uint32_t kGpuStatusDriverVersion = 1u << 3;
struct GpuStatusResult {
  uint32_t reported = 0;          // kGpuStatus* bits
  uint32_t gpu_percent = 0;       // of the sample period: kernels ran
  uint32_t memory_percent = 0;    // of the sample period: device memory read or written
  uint32_t sample_period_ms = 0;  // the period the two percentages cover
  uint32_t temperature_c = 0;
  uint32_t power_mw = 0;
  uint32_t process_count = 0;       // the lease's sessions on this GPU (all of them)
  int32_t cuda_driver_version = 0;  // cuDriverGetVersion's number on the GPU's host
  char driver_version[80] = {};     // NVIDIA's driver ("580.65.06"), or "gpupool-sim 0.1"
  char why_not[160] = {};           // what the device cannot report, and why
};
// One session of the lease on the GPU: the process that opened it as it said at hello.
struct GpuProcess {
  uint32_t pid = 0;
  uint32_t reserved = 0;
  uint64_t used_bytes = 0;  // device memory the session holds (allocations, module variables)
  char host[64] = {};
};

// Device printf: the reply's inline bytes (`out`) of kOpStreamSynchronize,
// kOpContextSynchronize, kOpEventSynchronize and kOpMemcpyDtoH carry the text kernels
// printed since the previous such reply; the client writes it to its stdout.

}  // namespace gpupool::dataplane

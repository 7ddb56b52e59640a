// Runtime: the process-wide state of the replacement libcuda.so.1.
//
// Devices are the leased GPUs listed in GPUPOOL_GPUS (device i = entry i, filtered by
// CUDA_VISIBLE_DEVICES), each reached through its own RpcClient connection to the agent
// that hosts it. cuInit connects to all of them, presents the lease credential
// (GPUPOOL_LEASE_ID / GPUPOOL_LEASE_TOKEN) and fetches each GPU's description; nothing
// touches UCX before cuInit, so a process that never calls CUDA never loads a transport.
//
// CUDA handles given to the application (CUcontext, CUstream, CUevent, CUmodule,
// CUlibrary, CUfunction, CUkernel) point to the objects below; each starts with a magic
// number checked on every use. Each device has its primary context; cuCtxCreate makes
// further ones, which share the device's connection (the agent keeps one session per
// process and GPU) but own their allocations, streams and events: cuCtxDestroy frees them.
//
// Thread safety: mu_ guards the tables; per-device traffic is serialised by its RpcClient.
#pragma once

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "remote/client/failover/failover.h"
#include "remote/image/fatbin.h"
#include "remote/protocol/protocol.h"
#include "remote/transport/rpc_client.h"

// Whether this is a ThreadSanitizer build (GCC defines __SANITIZE_THREAD__, clang has the
// feature test).
#if defined(__SANITIZE_THREAD__)
#define GPUPOOL_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GPUPOOL_THREAD_SANITIZER 1
#endif
#endif
#ifndef GPUPOOL_THREAD_SANITIZER
#define GPUPOOL_THREAD_SANITIZER 0
#endif

namespace gpupool::client {

// Module image parsing lives in remote/image (shared with the sim's PTX engine).
using image::KernelLayout;
using image::ParamSlot;

constexpr uint32_t kContextMagic = 0x63747831;   // "ctx1"
constexpr uint32_t kStreamMagic = 0x73747231;    // "str1"
constexpr uint32_t kEventMagic = 0x65767431;     // "evt1"
constexpr uint32_t kModuleMagic = 0x6d6f6431;    // "mod1"
constexpr uint32_t kFunctionMagic = 0x666e6331;  // "fnc1"
// A destroyed context keeps its memory (other threads may still hold it on their context
// stacks) with this magic, so that using it answers CUDA_ERROR_CONTEXT_IS_DESTROYED.
constexpr uint32_t kDestroyedContextMagic = 0x64656164;  // "dead"

// Stream priorities (cuCtxGetStreamPriorityRange): lower numbers are greater priorities;
// a priority outside the range is clamped to it, as CUDA does.
constexpr int kLeastStreamPriority = 0;
constexpr int kGreatestStreamPriority = -5;

struct Stream;
struct Event;

struct ContextStorageEntry {
  void* value;
  void (*destructor)(CUcontext, void*, void*);
};

// cuCtxGetId values: unique in this process.
inline std::atomic<uint64_t> next_context_id{1};

struct Context {
  Context() : id(next_context_id.fetch_add(1)) {
    // A real driver's defaults (cuCtxGetLimit on a fresh context).
    limits[CU_LIMIT_STACK_SIZE] = 1024;
    limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
    limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
    limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
    limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
    limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
  }
  uint32_t magic = kContextMagic;
  int device = 0;
  unsigned flags = 0;
  bool is_primary = false;
  uint64_t id = 0;  // cuCtxGetId: unique in this process
  std::mutex storage_mu;
  std::map<void*, ContextStorageEntry> storage;  // the runtime's context-local storage
  // cuCtxGetLimit/SetLimit values; guarded by Runtime::mu_.
  size_t limits[CU_LIMIT_MAX] = {};
  // Streams and events created in this context; guarded by Runtime::mu_.
  std::set<Stream*> streams;
  std::set<Event*> events;
  // cuCtxSetCacheConfig's preference, read back as set (a hint here); Runtime::mu_.
  CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;
  // cuStreamSetAttribute values of this context's default stream; guarded by Runtime::mu_.
  std::map<int, CUstreamAttrValue> default_stream_attributes;
};

struct Stream {
  uint32_t magic = kStreamMagic;
  uint64_t id = 0;
  Context* context = nullptr;
  unsigned flags = 0;
  int priority = 0;
  // cuStreamSetAttribute values (hints a remote GPU does not act on, read back as set);
  // guarded by Runtime::mu_.
  std::map<int, CUstreamAttrValue> attributes;
};

struct Event {
  uint32_t magic = kEventMagic;
  uint64_t id = 0;
  Context* context = nullptr;
  unsigned flags = 0;
};

struct Function;

// What cuMemAdvise and cuMemPrefetchAsync said of one page of managed memory. Locations
// are device ordinals, CU_DEVICE_CPU for the host, CU_DEVICE_INVALID for none.
struct ManagedPageAdvice {
  bool read_mostly = false;
  int preferred = CU_DEVICE_INVALID;
  uint64_t accessed_by = 0;  // bit d: device d; bit 63: the host
  int last_prefetch = CU_DEVICE_INVALID;
};

// A loaded image: from cuModuleLoadData (bound to the current context's device) or
// cuLibraryLoadData (context-independent; loaded into a device on first use there).
struct Module {
  uint32_t magic = kModuleMagic;
  bool is_library = false;
  std::vector<uint8_t> image;                   // our copy of the image bytes
  std::map<std::string, KernelLayout> kernels;  // the driver's layouts (of the SASS, else the PTX)
  // Where a kernel's PTX lays its parameters out otherwise (image::ModuleImage::
  // ptx_kernels): that layout, which a sim GPU, running the PTX, reads (ops/launch.cc
  // repacks the arguments for it).
  std::map<std::string, KernelLayout> sim_layouts;
  std::vector<uint32_t> ptx_archs;               // targets of the image's PTX entries (0: unknown)
  std::vector<gpupool::image::SassTarget> sass;  // targets of its SASS entries (image::ChooseCode)
  // Its PTX names a thread block cluster (special registers, cluster barriers, another
  // block's shared memory): its kernels may tell a cluster launch from a plain one.
  bool ptx_names_clusters = false;
  // The clusters its kernels were compiled for (image::CompiledClusters of its PTX; empty
  // for a module of SASS alone, whose GPU's driver knows them).
  std::map<std::string, gpupool::image::CompiledCluster> compiled_clusters;
  std::map<int, uint64_t> remote_ids;  // device -> server module id
  std::map<std::string, std::unique_ptr<Function>> functions;
  bool load_failure_told = false;  // a failed load was logged (Runtime::EnsureFunction); mu_
  // Its __managed__ variables made managed ranges (cuLibraryGetManaged): their addresses,
  // forgotten when the module is unloaded. Guarded by Runtime::mu_.
  std::set<uint64_t> managed_variables;
};

// True when a module image has state a GPU's driver places itself: module-scope variables
// (printf's format strings aside) or device malloc, or no PTX to tell by (runtime.cc).
bool ModuleKeepsState(const std::vector<uint8_t>& image);

// CUfunction and CUkernel: the runtime passes a CUkernel where a CUfunction is expected,
// so both are this one object.
struct Function {
  uint32_t magic = kFunctionMagic;
  Module* module = nullptr;
  std::string name;
  KernelLayout layout;
  // The PTX's layout where it differs from `layout` (Module::sim_layouts), else none.
  std::optional<KernelLayout> sim_layout;
  std::map<int, uint64_t> remote_ids;  // device -> server function id
  // device -> what the compiled kernel needs there, as its agent said (GetFunction's reply)
  std::map<int, dataplane::FunctionResources> resources;
  // cuFuncSetAttribute values (api_function.cc); -1: the device's default.
  int max_dynamic_shared_bytes = -1;
  int preferred_shared_carveout = -1;
  // CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: clusters of up to 16 blocks where
  // the GPU runs them (api/clusters.h), else up to 8.
  bool non_portable_clusters = false;
  // The cluster it was compiled for (Module::compiled_clusters; dims 0: none), which the GPU
  // launches it in: a grid must be a multiple of it.
  gpupool::image::CompiledCluster compiled_cluster;
  // CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, _HEIGHT and _DEPTH set at run time (all 0:
  // none): the shape its plain launches run in (api_module.cc), where none was compiled in.
  // Atomic: every plain launch reads them, without the runtime's lock.
  std::atomic<unsigned> runtime_cluster[3] = {0, 0, 0};
};

struct Device {
  int ordinal = 0;
  int slot = 0;  // index in the lease's GPU list (GPUPOOL_GPUS, the lease file)
  // The connection, the GPU's uuid and endpoint as leased (after a recovery: the
  // replacement's) and its description.
  Failover::Channel channel;
  const std::string& uuid() const { return channel.location.uuid; }
  const std::string& endpoint() const { return channel.location.endpoint; }
  const dataplane::DeviceDescription& description() const { return channel.description; }
  CUuuid uuid_bytes{};
  int pci_domain = 0, pci_bus = 0, pci_device = 0;
  // Keeps the GPU's state recoverable and replaces the channel when the GPU fails
  // (failover.h); every request goes through it.
  std::unique_ptr<Failover> failover;
  Context primary;
  int primary_references = 0;  // guarded by Runtime::mu_
};

struct Allocation {
  uint64_t size;
  int device;
  Context* context = nullptr;  // the owning context (AddContextAllocation), if any
};

class Runtime {
 public:
  static Runtime& Get();

  // Idempotent; returns the status of the first initialisation.
  CUresult Init(unsigned flags);
  CUresult initialized() const { return init_status_; }  // CUDA_ERROR_NOT_INITIALIZED before

  int device_count() const { return static_cast<int>(devices_.size()); }
  Device* device(int ordinal);  // nullptr when out of range (or not initialised)

  // Sends a synchronous request to `device`; returns the request's CUresult, or the first
  // earlier asynchronous error, or CUDA_ERROR_DEVICE_UNAVAILABLE when the agent is gone.
  CUresult Call(int device, uint32_t op, const void* args, size_t args_len, const void* payload = nullptr,
                size_t payload_len = 0, void* result = nullptr, size_t result_capacity = 0, std::string* out = nullptr);
  // One-way request: errors show up at the next synchronising call. `payload_held_until_sync`:
  // an asynchronous copy from page-locked memory this library allocated, whose bytes the
  // failover journal may read as late as the next two-way request (transport::Request).
  CUresult Post(int device, uint32_t op, const void* args, size_t args_len, const void* payload = nullptr,
                size_t payload_len = 0, bool payload_held_until_sync = false);
  // Has every device's failover journal copy the uploads it holds by reference, before
  // the program may change or free their page-locked sources (cuMemFreeHost).
  void CaptureHeldUploads();
  // Request whose bulk reply lands in `result` by the next synchronising call.
  CUresult Start(int device, uint32_t op, const void* args, size_t args_len, void* result, size_t result_capacity);

  uint64_t NewId() { return next_id_.fetch_add(1); }
  // `count` consecutive new ids (a mipmapped array's levels): the first.
  uint64_t NewIds(uint64_t count) { return next_id_.fetch_add(count); }

  // Device addresses this process chooses (so that they stay the same on a replacement
  // GPU): one range for all its GPUs, so an address names its device. Freed ranges are
  // reused by allocations of the same rounded size.
  uint64_t ChooseAddress(uint64_t size);
  void ReleaseAddress(uint64_t address, uint64_t size);
  // The window a module's variables are placed in.
  static constexpr uint64_t kModuleGlobalsWindow = uint64_t{1} << 30;

  // Device allocations made through us, to classify pointers (cuMemcpy, attributes).
  // AddAllocation: memory no context owns (a module's globals, which the agent frees with
  // the module); AddContextAllocation: memory `context` owns (cuMemAlloc), freed when the
  // context is destroyed or reset.
  void AddAllocation(uint64_t dptr, uint64_t size, int device);
  void AddContextAllocation(uint64_t dptr, uint64_t size, int device, Context* context);
  bool RemoveAllocation(uint64_t dptr, int* device);
  // The allocation containing [ptr, ptr+size), if any: its start, size and device.
  bool FindAllocation(uint64_t ptr, uint64_t size, uint64_t* start, Allocation* found);

  // Page-locked host memory we handed out (cuMemHostAlloc) or that was registered.
  void AddHostRange(const void* ptr, size_t size, unsigned flags);
  bool RemoveHostRange(const void* ptr);
  bool FindHostRange(const void* ptr, unsigned* flags, uintptr_t* start = nullptr, size_t* size = nullptr);
  // Whether any host range shares a byte with [ptr, ptr + size).
  bool OverlapsHostRange(const void* ptr, size_t size);
  void AddHostRangeFlags(const void* start, unsigned flags);

  // Managed memory (managed.cc): the host's pages mapped at the device address, the two
  // kept coherent at call boundaries. ForgetManaged unmaps one (after the device freed it);
  // false when `address` is not a managed allocation's start.
  // `api` names the call in what it logs (cuMemHostAlloc makes mapped memory this way).
  CUresult AllocManaged(int device, size_t size, Context* context, CUdeviceptr* dptr,
                        const char* api = "cuMemAllocManaged");
  bool IsManaged(uint64_t ptr);
  bool ForgetManaged(uint64_t address);
  // cuMemAdvise and cuMemPrefetchAsync record what they say of the pages of
  // [ptr, ptr + count), which must be managed memory throughout (else
  // CUDA_ERROR_INVALID_VALUE); cuMemRangeGetAttribute reads it back (ManagedAdviceOf: one
  // entry per page of the range, in order).
  CUresult AdviseManaged(uint64_t ptr, size_t count, const std::function<void(ManagedPageAdvice*)>& change);
  CUresult ManagedAdviceOf(uint64_t ptr, size_t count, std::vector<ManagedPageAdvice>* pages);
  // A module's __managed__ variable, [address, address + size) in the module's globals on
  // `device`, made a managed range: host pages mapped at its address (pages it shares
  // with other such variables once), holding its value read from the device. Already one:
  // nothing to do. ForgetManaged ends it and leaves the pages.
  CUresult AddManagedVariable(int device, uint64_t address, size_t size);

  // Page-locked host memory (cuMemHostAlloc without DEVICEMAP, cuMemAllocHost) is mapped
  // in this process at addresses of a window of its own, [kPinnedWindow, kPinnedWindowEnd).
  // Under UVA every page-locked buffer is device-accessible, so a program may hand one to
  // a kernel; a launch finds such pointers among its arguments by that window, and the
  // buffer then becomes mapped memory of that device (a managed range, kept coherent at
  // call boundaries) for the rest of its life. Buffers never handed to a kernel cost
  // nothing. AllocPinned falls back to an address outside the window (then never mapped)
  // when the window is full or taken.
#if GPUPOOL_THREAD_SANITIZER
  // ThreadSanitizer lets a program map memory only in its application ranges, on x86-64
  // the lowest of them from 4 KiB to at least 512 GiB (the rest of 0-128 TiB holds its
  // shadow and metadata): it ended programs that mapped page-locked or managed memory at
  // 32-96 TiB ("mmap at bad address"). A ThreadSanitizer build places both windows there,
  // where a PIE program (its binary at 0x55..., its libraries at 0x7f...) has nothing.
  // Device addresses then meet the window after 192 GiB of allocations and module
  // windows: far above what the test programs use (the build is for them).
  static constexpr uint64_t kDeviceAddresses = uint64_t{64} << 30;
  static constexpr uint64_t kPinnedWindow = uint64_t{256} << 30;
  static constexpr uint64_t kPinnedWindowEnd = uint64_t{448} << 30;
#else
  static constexpr uint64_t kDeviceAddresses = uint64_t{32} << 40;
  static constexpr uint64_t kPinnedWindow = uint64_t{64} << 40;
  static constexpr uint64_t kPinnedWindowEnd = uint64_t{96} << 40;
#endif
  static bool InPinnedWindow(uint64_t address) { return address >= kPinnedWindow && address < kPinnedWindowEnd; }
  void* AllocPinned(size_t size);  // nullptr: out of memory
  void FreePinned(void* pointer, size_t size);
  // Maps the page-locked buffer holding `address` on `device`, once (success when there
  // is none, or it is mapped already). CUDA_ERROR_NOT_SUPPORTED, logged, where the GPU's
  // executor cannot place memory at this process's addresses.
  CUresult MapPinned(int device, Context* context, uint64_t address);
  // MapPinned for every 8-byte parameter word of a launch that lies in the window, and
  // MapRegisteredOnUse for every one once the program has registered memory.
  CUresult MapPinnedArguments(int device, Context* context, const char* params, size_t size);
  // Registered host memory mapped on `device` (cuMemHostRegister with DEVICEMAP, or a
  // registration whose device pointer was asked for): device memory placed over the
  // range's whole pages at their own addresses (so the host pointer is the device
  // pointer, as under UVA), and the range's own bytes [start, start + size) kept coherent
  // at call boundaries as mapped memory is (bytes of those pages outside it are never
  // copied either way). read_only: never read back (CU_MEMHOSTREGISTER_READ_ONLY: the
  // device does not write it). CUDA_ERROR_INVALID_VALUE when device memory cannot be
  // placed there (a page another mapped registration holds); CUDA_ERROR_NOT_SUPPORTED,
  // logged, where the GPU's executor cannot place memory at this process's addresses.
  CUresult MapRegistered(int device, Context* context, uintptr_t start, size_t size, bool read_only);
  // Ends MapRegistered's mapping of the range starting at `start`, if it has one: the
  // device's newer bytes are read back first, then its device memory is freed.
  CUresult UnmapRegistered(uintptr_t start);
  // The registration holding `address` (kRegisteredHostMemory), mapped on `device` if it
  // is not yet (every registration is mapped under unified addressing): when its device
  // pointer is asked for, or a launch's parameters point into it. Success when `address`
  // is in no registration; CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED when its pages are
  // another mapped registration's.
  CUresult MapRegisteredOnUse(int device, Context* context, uint64_t address);

  // Loads `module` into `device` if needed; returns the server's module id.
  CUresult EnsureModuleLoaded(Module* module, int device, uint64_t* remote_id);
  // Resolves `function` on `device` if needed; returns the server's function id.
  CUresult EnsureFunction(Function* function, int device, uint64_t* remote_id);

  std::mutex& mu() { return mu_; }

  // Frees what `context` owns (allocations, streams, events) on its device: cuCtxDestroy,
  // cuDevicePrimaryCtxReset. Waits for the device's queued work first.
  CUresult ReleaseContextResources(Context* context);

  // Host functions (cuLaunchHostFunc, cuStreamAddCallback) run in stream order on a
  // thread of this library: from the moment one is enqueued until it has run, later work
  // for that stream waits here, in this process (host_work.cc), and is sent in order after
  // it; queries of the stream or of events recorded behind it answer CUDA_ERROR_NOT_READY.
  // `work` gets the status of the stream's earlier work.
  CUresult EnqueueHostFunction(int device, uint64_t stream, std::function<void(CUresult)> work);

  // Closes every connection cleanly (after the queued work): at process exit. Later calls
  // answer CUDA_ERROR_DEINITIALIZED.
  void Shutdown();

 private:
  Runtime() = default;
  CUresult Connect();
  // A connection to `location` that has said hello; nullptr with *why otherwise
  // (*refusal: the agent's answer when it said no).
  std::unique_ptr<transport::ClientConnection> OpenSession(const GpuLocation& location,
                                                           dataplane::DeviceDescription* description, std::string* why,
                                                           int32_t* refusal);
  void DescribeDevice(Device* device);  // the fields derived from its description
  // One request through `d`'s failover: recovery and a retry when the GPU is lost.
  CUresult SendRequest(Device* d, Failover::Delivery how, const transport::Request& request, transport::Reply* reply);
  CUresult Transport(const Status& status, int device);
  // Device memory of `size` bytes on `device` at `address` (the process's own address);
  // where the executor places it elsewhere, it is freed and CUDA_ERROR_NOT_SUPPORTED
  // reported for `api` with `why` (managed.cc: managed, mapped and registered memory).
  CUresult AllocateAtOwnAddress(int device, uint64_t address, uint64_t size, const char* api, const char* why);
  // Managed memory's coherence (managed.cc): before a request that reaches device memory,
  // and after a synchronising call.
  CUresult ManagedBefore(int device, uint32_t op);
  CUresult ManagedAfter(int device, uint32_t op);
  // The device while its connection is open (also during Shutdown, unlike device()).
  Device* Connected(int ordinal);
  // The one admission path of Call, Post and Start, before a request is ordered or sent:
  // CUDA_ERROR_DEINITIALIZED after Shutdown; the capture check (InstallCaptureCheck)'s
  // refusal of a request on a capturing stream; managed memory made coherent for it.
  CUresult Admit(int device, uint32_t op, const void* args, size_t args_len);
  // The transport calls, without the host-work ordering of Call/Post/Start.
  CUresult CallNow(int device, uint32_t op, const void* args, size_t args_len, const void* payload, size_t payload_len,
                   void* result, size_t result_capacity, std::string* out);
  CUresult PostNow(int device, uint32_t op, const void* args, size_t args_len, const void* payload, size_t payload_len,
                   bool payload_held_until_sync = false);
  CUresult StartNow(int device, uint32_t op, const void* args, size_t args_len, void* result, size_t result_capacity);
  // Host-work ordering (host_work.cc). Before a request goes out: defers it behind the
  // stream's host work (true: queued, nothing to send now), or waits for the host work it
  // depends on, or answers for it (*answer: CUDA_ERROR_NOT_READY for a query).
  enum class Delivery { kWaitForReply, kOneWay, kReplyLater };  // Call, Post, Start
  bool DeferOrWait(int device, uint32_t op, const void* args, size_t args_len, const void* payload, size_t payload_len,
                   Delivery delivery, void* result, size_t result_capacity, CUresult* answer);
  void DrainHostQueue(int device, uint64_t stream);
  // Waits until `device` (-1: every device) has no host work left, at most `limit`;
  // false when some is left.
  bool WaitAllHostWork(int device, std::chrono::steady_clock::duration limit);

  struct DeferredRequest {
    uint32_t op = 0;
    std::string args, payload;
    // Page-locked source memory is read when the copy runs, as a GPU's DMA would.
    const void* pinned_payload = nullptr;
    size_t pinned_payload_len = 0;
    bool reply_later = false;  // a Start: the reply lands in `result`
    void* result = nullptr;
    size_t result_capacity = 0;
    std::function<void(CUresult)> host_work;  // a host function instead of a request
  };
  std::mutex host_mu_;
  std::condition_variable host_cv_;
  std::atomic<int> host_queue_count_{0};  // queues that exist: the fast path skips host_mu_
  std::map<std::pair<int, uint64_t>, std::deque<DeferredRequest>> host_queues_by_stream_;
  std::multiset<std::pair<int, uint64_t>> deferred_event_records_;  // (device, event)
  std::atomic<bool> shut_down_{false};
  // Application calls inside Call/Post/Start: Shutdown closes a connection only when no
  // other thread is still using it.
  std::atomic<int> calls_in_flight_{0};
  struct InFlight {
    explicit InFlight(std::atomic<int>& count) : count_(count) { count_.fetch_add(1); }
    ~InFlight() { count_.fetch_sub(1); }
    std::atomic<int>& count_;
  };

  std::mutex mu_;
  std::once_flag init_once_;
  CUresult init_status_ = CUDA_ERROR_NOT_INITIALIZED;
  std::vector<std::unique_ptr<Device>> devices_;
  std::atomic<uint64_t> next_id_{1};
  std::map<uint64_t, Allocation> allocations_;        // guarded by mu_
  uint64_t next_address_ = kDeviceAddresses;          // device addresses we chose; guarded by mu_
  std::multimap<uint64_t, uint64_t> free_addresses_;  // rounded size -> address; guarded by mu_
  struct HostRange {
    size_t size;
    unsigned flags;
  };
  std::map<uintptr_t, HostRange> host_ranges_;  // guarded by mu_
  struct ManagedRange {
    size_t size;
    int device;
    uint64_t reserved, reserved_size;  // the addresses ChooseAddress gave
    uint64_t mapped;                   // bytes of host pages mapped at the start
    // Advice and prefetches, per 4 KiB from the start (empty: none given yet).
    std::vector<ManagedPageAdvice> advice;
    // Registered host memory (MapRegistered): the program's pages, its device memory
    // from `reserved` for `reserved_size` bytes; read_only: never read back.
    bool registered = false;
    bool read_only = false;
  };
  std::mutex managed_mu_;                          // taken before a device's connection, never after
  std::map<uint64_t, ManagedRange> managed_;       // by start; guarded by managed_mu_
  std::atomic<int> managed_count_{0};              // managed_.size(): the fast path's test
  std::set<int> device_holds_managed_;             // devices whose copies are newer than the host's
  std::set<uint64_t> managed_variable_pages_;      // host pages mapped for __managed__ variables
  std::mutex pinned_mu_;                           // serialises MapPinned; taken before managed_mu_, never after
  uint64_t next_pinned_ = kPinnedWindow;           // guarded by mu_
  std::multimap<uint64_t, uint64_t> free_pinned_;  // page-rounded size -> address; mu_
  std::atomic<bool> any_pinned_{false};            // the launch's fast path's test
  std::atomic<bool> any_registered_{false};        // the same for registered memory
  // Failover on with GPUPOOL_COPY_ON_WRITE=on (Connect): the first page-locked allocation
  // turns copy-on-write snapshots on (pinned_snapshots.h), once.
  bool want_snapshots_ = false;
  std::once_flag snapshots_once_;
  void ReleasePinnedAddress(uint64_t address, uint64_t size);
};

// A host range's flag (besides cuMemHostAlloc's): a page-locked buffer mapped on a device
// since a kernel was handed it (Runtime::MapPinned), or a registration mapped since its
// device pointer was asked for or a kernel was handed it (Runtime::MapRegisteredOnUse).
inline constexpr unsigned kHostMappedOnUse = 0x40000000u;
// A host range's flag: the program's memory, registered (cuMemHostRegister).
inline constexpr unsigned kRegisteredHostMemory = 0x20000000u;

// The check every request passes (Runtime::Admit) against stream capture: it answers
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and invalidates the capture) for a request ordered
// on a capturing stream by a call that records nothing. graph/ owns captures and installs
// it when the library loads (graph/graphs.cc); core/ knows no graphs.
using CaptureCheck = CUresult (*)(int device, uint32_t op, const void* args, size_t args_len);
void InstallCaptureCheck(CaptureCheck check);

// The stream a request is ordered on, for the requests that have one (host_work.cc).
bool RequestStream(uint32_t op, const void* args, size_t args_len, uint64_t* stream);

// The current thread's context (nullptr if none): the top of its context stack.
Context* CurrentContext();
void SetCurrentContext(Context* context);  // replaces the top (cuCtxSetCurrent)
void PushContext(Context* context);        // cuCtxPushCurrent
Context* PopContext();                     // cuCtxPopCurrent; nullptr when the stack is empty
bool ContextStackEmpty();

// Validates handles; nullptr when the handle is not ours.
Context* AsContext(CUcontext context);
Stream* AsStream(CUstream stream);  // also nullptr for the default streams (0, legacy, per-thread)
bool IsDefaultStream(CUstream stream);
Event* AsEvent(CUevent event);
Module* AsModule(const void* handle);
Function* AsFunction(const void* handle);

// Resolves the context/device for a call: the stream's context, else the current one.
// Returns CUDA_ERROR_INVALID_CONTEXT when there is none.
CUresult ResolveDevice(CUstream stream, int* device, uint64_t* stream_id);

}  // namespace gpupool::client

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
// number checked on every use. Only primary contexts exist (one per device).
//
// Thread safety: mu_ guards the tables; per-device traffic is serialised by its RpcClient.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "remote/image/fatbin.h"
#include "remote/dataplane/protocol.h"
#include "remote/transport/rpc_client.h"

namespace gpupool::client {

// Module image parsing lives in remote/image (shared with the sim's PTX engine).
using image::KernelLayout;
using image::ParamSlot;

constexpr uint32_t kContextMagic = 0x63747831;   // "ctx1"
constexpr uint32_t kStreamMagic = 0x73747231;    // "str1"
constexpr uint32_t kEventMagic = 0x65767431;     // "evt1"
constexpr uint32_t kModuleMagic = 0x6d6f6431;    // "mod1"
constexpr uint32_t kFunctionMagic = 0x666e6331;  // "fnc1"

struct ContextStorageEntry {
  void* value;
  void (*destructor)(CUcontext, void*, void*);
};

struct Context {
  uint32_t magic = kContextMagic;
  int device = 0;
  unsigned flags = 0;
  std::mutex storage_mu;
  std::map<void*, ContextStorageEntry> storage;  // the runtime's context-local storage
};

struct Stream {
  uint32_t magic = kStreamMagic;
  uint64_t id = 0;
  Context* context = nullptr;
  unsigned flags = 0;
  int priority = 0;
};

struct Event {
  uint32_t magic = kEventMagic;
  uint64_t id = 0;
  Context* context = nullptr;
  unsigned flags = 0;
};

struct Function;

// A loaded image: from cuModuleLoadData (bound to the current context's device) or
// cuLibraryLoadData (context-independent; loaded into a device on first use there).
struct Module {
  uint32_t magic = kModuleMagic;
  bool is_library = false;
  std::vector<uint8_t> image;  // our copy of the image bytes
  std::map<std::string, KernelLayout> kernels;
  std::map<int, uint64_t> remote_ids;  // device -> server module id
  std::map<std::string, std::unique_ptr<Function>> functions;
};

// CUfunction and CUkernel: the runtime passes a CUkernel where a CUfunction is expected,
// so both are this one object.
struct Function {
  uint32_t magic = kFunctionMagic;
  Module* module = nullptr;
  std::string name;
  KernelLayout layout;
  std::map<int, uint64_t> remote_ids;  // device -> server function id
};

struct Device {
  int ordinal = 0;
  std::string uuid;      // as leased
  std::string endpoint;  // agent data-path address
  dataplane::DeviceDescription description;
  CUuuid uuid_bytes{};
  int pci_domain = 0, pci_bus = 0, pci_device = 0;
  std::unique_ptr<transport::ClientConnection> rpc;
  Context primary;
  int primary_references = 0;  // guarded by Runtime::mu_
};

struct Allocation {
  uint64_t size;
  int device;
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
  CUresult Call(int device, uint32_t op, const void* args, size_t args_len,
                const void* payload = nullptr, size_t payload_len = 0,
                void* result = nullptr, size_t result_capacity = 0,
                std::string* out = nullptr);
  // One-way request: errors show up at the next synchronising call.
  CUresult Post(int device, uint32_t op, const void* args, size_t args_len,
                const void* payload = nullptr, size_t payload_len = 0);
  // Request whose bulk reply lands in `result` by the next synchronising call.
  CUresult Start(int device, uint32_t op, const void* args, size_t args_len, void* result,
                 size_t result_capacity);

  uint64_t NewId() { return next_id_.fetch_add(1); }

  // Device allocations made through us, to classify pointers (cuMemcpy, attributes).
  void AddAllocation(uint64_t dptr, uint64_t size, int device);
  bool RemoveAllocation(uint64_t dptr, int* device);
  // The allocation containing [ptr, ptr+size), if any: its start, size and device.
  bool FindAllocation(uint64_t ptr, uint64_t size, uint64_t* start, Allocation* found);

  // Page-locked host memory we handed out (cuMemHostAlloc) or that was registered.
  void AddHostRange(const void* ptr, size_t size, unsigned flags);
  bool RemoveHostRange(const void* ptr);
  bool FindHostRange(const void* ptr, unsigned* flags, uintptr_t* start = nullptr,
                     size_t* size = nullptr);

  // Loads `module` into `device` if needed; returns the server's module id.
  CUresult EnsureModuleLoaded(Module* module, int device, uint64_t* remote_id);
  // Resolves `function` on `device` if needed; returns the server's function id.
  CUresult EnsureFunction(Function* function, int device, uint64_t* remote_id);

  std::mutex& mu() { return mu_; }

 private:
  Runtime() = default;
  CUresult Connect();
  CUresult Transport(const Status& status, int device);

  std::mutex mu_;
  std::once_flag init_once_;
  CUresult init_status_ = CUDA_ERROR_NOT_INITIALIZED;
  std::vector<std::unique_ptr<Device>> devices_;
  std::atomic<uint64_t> next_id_{1};
  std::map<uint64_t, Allocation> allocations_;  // guarded by mu_
  struct HostRange { size_t size; unsigned flags; };
  std::map<uintptr_t, HostRange> host_ranges_;  // guarded by mu_
};

// The current thread's context (nullptr if none).
Context* CurrentContext();
void SetCurrentContext(Context* context);
std::vector<Context*>& ContextStack();

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

// Executor: runs one client's device operations on one GPU.
//
// The dataplane server creates one Executor per client connection (a "session"), after
// the client proved its lease. The executor owns everything the client created (memory,
// modules, streams, events) and frees it all when destroyed, which is how a client that
// disappears (killed, crashed, network gone) gives its GPU memory back.
//
// Two implementations: SimExecutor (device memory in host RAM, kernels run from their PTX
// by the PTX engine, remote/devices/sim) and CudaExecutor (the driver API, remote/devices/cuda).
// Every method returns a CUresult number (protocol.h). Called from the server thread only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "remote/protocol/protocol.h"

namespace gpupool::device {

struct KernelInfo {
  std::string name;         // mangled name, e.g. "_Z6vecAddPKfS0_Pfi"
  uint32_t param_size = 0;  // bytes of the packed parameter buffer
};

struct LaunchConfig {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t shared_mem = 0;
  uint64_t stream = 0;
  bool cooperative = false;  // every block resident at once (cuLaunchCooperativeKernel)
  // Thread block clusters of this shape (1, 1, 1: none), checked against the grid and
  // dataplane::kMaxClusterBlocks by the session; an executor that runs no clusters refuses
  // any other shape.
  uint32_t cluster[3] = {1, 1, 1};
};

class Executor {
 public:
  virtual ~Executor() = default;

  virtual int32_t Allocate(uint64_t size, uint64_t* dptr) = 0;
  // An allocation at an address the client chose, so that its device pointers stay the same
  // when it moves to another GPU (gpupool-remote(7), FAILOVER). kCuNotSupported where the
  // executor cannot place memory there (the cuda executor without the driver's VMM API, or
  // when the driver grants another address): the session then allocates with Allocate.
  virtual int32_t AllocateAt(uint64_t /*address*/, uint64_t /*size*/) { return dataplane::kCuNotSupported; }
  virtual int32_t Free(uint64_t dptr) = 0;
  // Every device range this session owns (start, size): its allocations and its modules'
  // variables; what a handoff copies (protocol.h). Empty where the executor cannot say.
  virtual std::vector<std::pair<uint64_t, uint64_t>> Ranges() const { return {}; }
  virtual void MemoryInfo(uint64_t* free, uint64_t* total) = 0;

  // Host-addressable view of device range [dptr, dptr+size) when the executor keeps device
  // memory in host RAM: the server then moves bulk data in place. nullptr otherwise, or
  // when the range is not inside one allocation.
  virtual void* HostView(uint64_t dptr, uint64_t size) = 0;
  // HostView for a host-to-device copy whose `size` bytes the transport is about to
  // receive there, in place, before CopyToDevice runs with it. An executor may make ready
  // for the write meanwhile (the sim faults the pages in on helper threads: SimDeviceMemory
  // ::PopulateForWrite); it must not change a byte the range holds.
  virtual void* ReceiveView(uint64_t dptr, uint64_t size) { return HostView(dptr, size); }

  virtual int32_t CopyToDevice(uint64_t dst, const void* src, uint64_t size, uint64_t stream) = 0;
  // On success *data points to the bytes, valid until the next call on this executor.
  virtual int32_t CopyFromDevice(uint64_t src, uint64_t size, uint64_t stream, const void** data) = 0;
  virtual int32_t CopyDeviceToDevice(uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) = 0;
  virtual int32_t Memset(uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count, uint64_t stream) = 0;

  // `globals_base` nonzero: the module's variables are placed from that address on, in
  // declaration order, so that the same image loaded at the same base on another GPU has
  // its variables at the same addresses (executors that cannot place memory ignore it).
  // `device_heap`: the size of the heap of device-side malloc (0: 8 MiB, CUDA's default),
  // for executors that make one per module (the sim); a GPU's driver keeps its own.
  // `pending_launches` (0: 2048, CUDA's default) and `device_ordinal`: the device runtime's
  // pending-launch limit and what its cudaGetDevice says, and `facts` (null: none) what its
  // cudaDeviceGetAttribute and cudaDeviceGetLimit say, for executors that provide the
  // device runtime themselves (the sim).
  virtual int32_t LoadModule(uint64_t module, const void* image, size_t image_size,
                             const std::vector<KernelInfo>& kernels, uint64_t globals_base = 0,
                             uint64_t device_heap = 0, uint32_t pending_launches = 0, int32_t device_ordinal = 0,
                             const dataplane::DeviceRuntimeFacts* facts = nullptr) = 0;
  // The one range that holds a loaded module's variables; false when the executor does not
  // keep them in one range (then the client cannot save them for failover).
  virtual bool GlobalsRange(uint64_t /*module*/, uint64_t* /*base*/, uint64_t* /*size*/) { return false; }
  virtual int32_t UnloadModule(uint64_t module) = 0;
  virtual int32_t GetFunction(uint64_t module, uint64_t function, const std::string& name) = 0;
  // What a function GetFunction made needs (protocol.h); false when the executor cannot
  // say (then the library assumes its defaults).
  virtual bool Resources(uint64_t /*function*/, dataplane::FunctionResources* /*resources*/) { return false; }
  virtual int32_t Launch(uint64_t function, const LaunchConfig& config, const void* params, size_t param_size) = 0;

  virtual int32_t CreateStream(uint64_t stream, uint32_t flags, int32_t priority) = 0;
  virtual int32_t DestroyStream(uint64_t stream) = 0;
  virtual int32_t SynchronizeStream(uint64_t stream) = 0;  // stream 0: the whole context
  virtual int32_t QueryStream(uint64_t stream) = 0;
  virtual int32_t StreamWaitEvent(uint64_t stream, uint64_t event) = 0;

  virtual int32_t CreateEvent(uint64_t event, uint32_t flags) = 0;
  virtual int32_t DestroyEvent(uint64_t event) = 0;
  virtual int32_t RecordEvent(uint64_t event, uint64_t stream) = 0;
  virtual int32_t SynchronizeEvent(uint64_t event) = 0;
  virtual int32_t QueryEvent(uint64_t event) = 0;
  virtual int32_t ElapsedTime(uint64_t start, uint64_t end, float* milliseconds) = 0;

  // cuModuleGetGlobal: device address and size of module variable `name`.
  virtual int32_t GetGlobal(uint64_t module, const std::string& name, uint64_t* dptr, uint64_t* size) = 0;
  // Device printf text produced since the last call (taken at synchronising calls).
  virtual std::string TakeOutput() { return {}; }
  // The executor adds its progress inside an operation to `*counter` (the sim: each block
  // of threads a kernel runs), so that the server's watchdog can tell a long kernel from a
  // hung GPU. False when it cannot (the cuda executor, whose kernels run asynchronously):
  // the watchdog then leaves its operations alone.
  virtual bool SetProgressCounter(std::atomic<uint64_t>* /*counter*/) { return false; }
  // A texture object over [start, start+bytes) of this session's memory, as `args` (checked
  // by the session: dataplane::TexObjectCreateArgs) describe it: its handle, which the
  // session's kernels take. The cuda executor's driver makes it; kCuNotSupported where the
  // library makes texture objects itself (the sim). CUDA_ERROR_INVALID_VALUE for a range
  // that is not inside one of the session's allocations.
  virtual int32_t CreateTextureObject(const dataplane::TexObjectCreateArgs& /*args*/, uint64_t /*start*/,
                                      uint64_t /*bytes*/, uint64_t* /*handle*/) {
    return dataplane::kCuNotSupported;
  }
  // Destroys one of this session's texture objects (CUDA_ERROR_INVALID_HANDLE for another).
  virtual int32_t DestroyTextureObject(uint64_t /*handle*/) { return dataplane::kCuNotSupported; }
  // CUDA arrays of the GPU's driver (dataplane::ArrayCreateArgs and ArrayCopyArgs, their
  // shapes checked by the session), and surface objects over them; kCuNotSupported where the
  // library lays arrays out in device memory itself (the sim). CopyArray's *bulk (a copy to
  // the host) stays valid until the next call on this executor.
  virtual int32_t CreateArray(const dataplane::ArrayCreateArgs& /*args*/) { return dataplane::kCuNotSupported; }
  virtual int32_t DestroyArray(uint64_t /*array*/) { return dataplane::kCuNotSupported; }
  virtual int32_t CopyArray(const dataplane::ArrayCopyArgs& /*args*/, const void* /*payload*/, const void** /*bulk*/,
                            uint64_t* /*bulk_len*/) {
    return dataplane::kCuNotSupported;
  }
  // Mipmapped arrays of the GPU's driver (dataplane::MipmappedArrayCreateArgs, checked by
  // the session): their levels are arrays of the session under the ids the client chose,
  // which DestroyArray refuses (CUDA_ERROR_INVALID_VALUE) and DestroyMipmappedArray takes
  // with the mipmapped array; kCuNotSupported on the sim.
  virtual int32_t CreateMipmappedArray(const dataplane::MipmappedArrayCreateArgs& /*args*/) {
    return dataplane::kCuNotSupported;
  }
  virtual int32_t DestroyMipmappedArray(uint64_t /*mipmapped*/) { return dataplane::kCuNotSupported; }
  virtual int32_t CreateSurfaceObject(uint64_t /*array*/, uint64_t* /*handle*/) { return dataplane::kCuNotSupported; }
  virtual int32_t DestroySurfaceObject(uint64_t /*handle*/) { return dataplane::kCuNotSupported; }
  // A tensor map of the GPU's driver (dataplane::TensorMapArgs, its rank checked by the
  // session) into `map` (128 bytes); CUDA_ERROR_INVALID_VALUE for an address that is not
  // inside one of this session's allocations; kCuNotSupported where the library writes its
  // own maps (the sim).
  virtual int32_t TensorMap(const dataplane::TensorMapArgs& /*args*/, uint8_t* /*map*/) {
    return dataplane::kCuNotSupported;
  }
  // Why the last failing call failed ("" if there is nothing to add), for the agent's log.
  virtual std::string TakeErrorDetail() { return {}; }
};

}  // namespace gpupool::device

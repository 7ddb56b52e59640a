// CudaExecutor: runs one client's operations on a real GPU through the CUDA driver API.
//
// The driver (libcuda.so.1 of the GPU host) is loaded with dlopen when the first client
// attaches, so gpupool-agentd starts on machines without one. Every client session uses
// the device's primary context; its streams and events are real CUDA streams and events,
// and every operation is issued on the stream the client named, so stream order holds.
// Copies go through a host buffer of the server (received data, or data to send back);
// each copy completes before its request is answered or the next one starts, because the
// server reuses that buffer. Kernel parameters arrive packed, as the client laid them out
// from the image, and are passed with CU_LAUNCH_PARAM_BUFFER_POINTER.
//
// Isolation: every device range a copy or memset names is checked against this session's
// own allocations before the driver sees it, so a client cannot read or write memory that
// another session allocated (CUDA_ERROR_INVALID_VALUE). Kernels are the limit: their
// pointer arguments are opaque bytes, and all sessions share the primary context, so a
// kernel could reach other sessions' memory on this GPU. That is why the dataplane never
// lets sessions of two leases run on one GPU at once (server.cc), and closes a session
// whose lease lost the GPU.
//
// Placed allocations (AllocateAt, for failover's stable device addresses): where the
// driver has the virtual memory management API and the device supports it, the client's
// address is backed by cuMemCreate and mapped read/write for this GPU inside a window of
// kAddressWindow bytes that the session reserves with cuMemAddressReserve at the window's
// base. The address is only a hint to the driver: on an H100 with driver 580 a fresh
// process was granted a 64 GiB reservation at the client's base (0x200000000000), but
// never a 2 MiB one there, hence windows. The driver works in granules
// (cuMemGetAllocationGranularity, typically 2 MiB) while the client packs its allocations 512 bytes
// apart, so the executor maps the granules an allocation touches and shares the ones it already
// mapped for this session's earlier allocations (refcounted, released when their last allocation is
// freed). Copies and memsets are still checked against the size the client asked for, not
// the granules. A hint the driver does not honour (another session's memory there, a
// driver without VMM) makes AllocateAt answer CUDA_ERROR_NOT_SUPPORTED after undoing
// everything: the session then allocates with cuMemAlloc and the client reports itself
// unprotected, as before.
//
// Hang watchdog: SetProgressCounter stays false. The driver cannot tell a kernel that runs
// long from one that never ends (cuStreamQuery answers CUDA_ERROR_NOT_READY for both), so
// any progress this executor could report would either be missing during a long kernel (a
// healthy GPU reported FAILED) or be counted while waiting (a hung GPU never reported).
//
// RUN on one H100 (driver 580) by scripts/test --gpu: 56 of the 70 test programs pass,
// every allocation placed at the client's address, and a kill -9 of the agent recovered
// through a second one. The VMM path is also tested against a fake driver
// (tests/remote/fake_cuda_driver.cc). See man/gpupool-remote.7.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "remote/device/executor.h"
#include "remote/image/fatbin.h"

namespace gpupool::devices {

struct CudaDriver;  // the driver entry points, resolved with dlsym

class CudaExecutor : public device::Executor {
 public:
  // Loads the driver (once per process) and retains the primary context of the GPU whose
  // UUID is `gpu_uuid`. Unavailable when there is no driver or no such GPU.
  static Result<std::unique_ptr<device::Executor>> Create(const std::string& gpu_uuid);
  // The GPU host's CUDA driver version (cuDriverGetVersion, e.g. 13000) once a session
  // loaded the driver in this process; 0 before, or when the driver cannot say.
  static int32_t DriverVersion();
  ~CudaExecutor() override;

  int32_t Allocate(uint64_t size, uint64_t* dptr) override;
  // [address, address+size) at exactly `address` (see the VMM note above). CUDA_ERROR_
  // NOT_SUPPORTED when this GPU or driver cannot place memory or the driver would put it
  // elsewhere; CUDA_ERROR_INVALID_VALUE when it overlaps this session's own allocations.
  int32_t AllocateAt(uint64_t address, uint64_t size) override;
  int32_t Free(uint64_t dptr) override;
  // The allocations (a handoff copies them). Not the modules' variables: the driver places
  // those, at other addresses on another GPU.
  std::vector<std::pair<uint64_t, uint64_t>> Ranges() const override {
    return {allocations_.begin(), allocations_.end()};
  }
  void MemoryInfo(uint64_t* free, uint64_t* total) override;
  void* HostView(uint64_t dptr, uint64_t size) override { return nullptr; }
  int32_t CopyToDevice(uint64_t dst, const void* src, uint64_t size, uint64_t stream) override;
  int32_t CopyFromDevice(uint64_t src, uint64_t size, uint64_t stream, const void** data) override;
  int32_t CopyDeviceToDevice(uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) override;
  int32_t Memset(uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count, uint64_t stream) override;
  int32_t LoadModule(uint64_t module, const void* image, size_t image_size,
                     const std::vector<device::KernelInfo>& kernels, uint64_t globals_base = 0,
                     uint64_t device_heap = 0, uint32_t pending_launches = 0, int32_t device_ordinal = 0,
                     const dataplane::DeviceRuntimeFacts* facts = nullptr) override;
  int32_t UnloadModule(uint64_t module) override;
  int32_t GetFunction(uint64_t module, uint64_t function, const std::string& name) override;
  bool Resources(uint64_t function, dataplane::FunctionResources* resources) override;
  int32_t Launch(uint64_t function, const device::LaunchConfig& config, const void* params, size_t param_size) override;
  int32_t CreateStream(uint64_t stream, uint32_t flags, int32_t priority) override;
  int32_t DestroyStream(uint64_t stream) override;
  int32_t SynchronizeStream(uint64_t stream) override;
  int32_t QueryStream(uint64_t stream) override;
  int32_t StreamWaitEvent(uint64_t stream, uint64_t event) override;
  int32_t CreateEvent(uint64_t event, uint32_t flags) override;
  int32_t DestroyEvent(uint64_t event) override;
  int32_t RecordEvent(uint64_t event, uint64_t stream) override;
  int32_t SynchronizeEvent(uint64_t event) override;
  int32_t QueryEvent(uint64_t event) override;
  int32_t ElapsedTime(uint64_t start, uint64_t end, float* milliseconds) override;
  int32_t GetGlobal(uint64_t module, const std::string& name, uint64_t* dptr, uint64_t* size) override;
  // Texture objects of the driver's, over this session's memory; destroyed with the memory
  // under them (Free) and with the session.
  int32_t CreateTextureObject(const dataplane::TexObjectCreateArgs& args, uint64_t start, uint64_t bytes,
                              uint64_t* handle) override;
  int32_t DestroyTextureObject(uint64_t handle) override;
  // CUDA arrays of the driver's, by the client's ids; surface objects over them. An array
  // takes the objects over it with it; the session takes everything.
  int32_t CreateArray(const dataplane::ArrayCreateArgs& args) override;
  int32_t CreateMipmappedArray(const dataplane::MipmappedArrayCreateArgs& args) override;
  int32_t DestroyMipmappedArray(uint64_t mipmapped) override;
  int32_t DestroyArray(uint64_t array) override;
  int32_t CopyArray(const dataplane::ArrayCopyArgs& args, const void* payload, const void** bulk,
                    uint64_t* bulk_len) override;
  int32_t CreateSurfaceObject(uint64_t array, uint64_t* handle) override;
  int32_t TensorMap(const dataplane::TensorMapArgs& args, uint8_t* map) override;
  int32_t DestroySurfaceObject(uint64_t handle) override;
  std::string TakeErrorDetail() override;

 private:
  // `granularity`: of VMM allocations on this device; 0 when AllocateAt cannot be served.
  CudaExecutor(const CudaDriver* driver, int device, void* context, uint64_t granularity);
  // Makes the primary context current on the calling (server) thread.
  int32_t Enter();
  // Unlists `handle` from `table` (a texture or surface object's) and has the driver
  // destroy it; CUDA_ERROR_INVALID_HANDLE when the table has none.
  template <typename Table, typename Destroy>
  int32_t DestroyListed(Table* table, uint64_t handle, Destroy destroy);
  // Destroys the texture objects `reads` (a TextureObject predicate) picks and the surface
  // objects over the arrays `writes` (a predicate on an array's id) picks, after the GPU's
  // queued work, which may still read them: what the program frees takes the objects over
  // it along. The context is current.
  template <typename Reads, typename Writes>
  void DestroyObjectsOver(Reads reads, Writes writes);
  // The CUstream for a client stream id (0: the legacy default stream); false if unknown.
  bool StreamFor(uint64_t id, void** stream);
  // JITs the PTX `ptx` holds for this GPU (its newest units not newer than the GPU): one
  // unit with cuModuleLoadData of its text, several linked with the driver's JIT linker.
  // CUDA_ERROR_NOT_FOUND when there are fewer than `at_least` such units.
  int32_t JitPtx(const std::vector<image::PtxEntry>& ptx, void** loaded, size_t at_least = 1);

  const CudaDriver* driver_;
  int device_;
  void* context_;  // CUcontext (primary)
  // True when [dptr, dptr+size) lies inside one allocation of this session.
  bool Owns(uint64_t dptr, uint64_t size) const;
  // True when [dptr, dptr+size) meets an allocation of this session.
  bool Overlaps(uint64_t dptr, uint64_t size) const;

  // Granules [start, start+size) inside a window, backed and mapped for AllocateAt.
  struct VmmRun {
    uint64_t size;
    uint64_t handle;  // CUmemGenericAllocationHandle
    uint32_t users;   // placed allocations that touch it
  };
  // Reserves the window holding `address` at its base, unless this session has; answers
  // CUDA_ERROR_NOT_SUPPORTED (having freed what the driver granted) when the driver grants
  // another address.
  int32_t ReserveWindow(uint64_t address);
  // Backs, maps and opens [start, start+size) (granule multiples, inside one window) and
  // adds it to runs_ with no users; on failure undoes what it did and returns the error.
  int32_t MapRun(uint64_t start, uint64_t size);
  // Unmaps and releases a run (the first error, having tried both).
  int32_t UnmapRun(uint64_t start, const VmmRun& run);

  const uint64_t granularity_;
  std::map<uint64_t, uint64_t> allocations_;          // start -> size asked, this session's only
  std::map<uint64_t, VmmRun> runs_;                   // start -> run, this session's only
  std::set<uint64_t> windows_;                        // bases of this session's reserved windows
  std::map<uint64_t, std::vector<uint64_t>> placed_;  // AllocateAt start -> its runs' starts
  std::string error_detail_;                          // for TakeErrorDetail
  std::map<uint64_t, void*> modules_;                 // client id -> CUmodule
  struct ModuleGlobal {
    uint64_t size;
    uint64_t module;
  };
  std::map<uint64_t, ModuleGlobal> module_globals_;  // start -> variable of our modules
  std::map<uint64_t, void*> functions_;              // client id -> CUfunction
  std::map<uint64_t, void*> streams_;                // client id -> CUstream
  std::map<uint64_t, void*> events_;                 // client id -> CUevent
  // What a texture object reads: a range of this session's memory, or one of its arrays.
  struct TextureObject {
    uint64_t start = 0;
    uint64_t bytes = 0;
    uint64_t array = 0;  // the array's id; 0: memory
  };
  std::map<uint64_t, TextureObject> texture_objects_;  // CUtexObject -> what it reads
  struct ArrayRecord {
    void* handle = nullptr;  // CUarray
    uint64_t row_bytes = 0;  // Width * element bytes
    uint64_t rows = 1;       // Height, at least 1
    uint64_t slices = 1;     // Depth (layers, faces), at least 1
    uint64_t mipmapped = 0;  // the mipmapped array's id whose level it is; 0: none
  };
  std::map<uint64_t, ArrayRecord> arrays_;  // client id -> array (a mipmapped array's levels too)
  struct MipmappedRecord {
    void* handle = nullptr;  // CUmipmappedArray
    uint64_t first_level = 0;
    uint32_t levels = 0;
  };
  std::map<uint64_t, MipmappedRecord> mipmapped_;  // client id -> mipmapped array
  std::map<uint64_t, uint64_t> surface_objects_;   // CUsurfObject -> its array's id
  std::vector<char> staging_;                      // device-to-host data waiting to be sent
};

}  // namespace gpupool::devices

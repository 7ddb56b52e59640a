// SimExecutor: runs one client's operations on a simulated GPU (sim_memory.h for device
// memory, ptx_engine.h for kernels: the PTX in the module images the client loads).
//
// Everything executes synchronously, in request order, on the server thread: stream order
// holds trivially, events complete when recorded, and an event's time is the moment its
// record request ran. Memory the session allocated is released when it is destroyed.
// Copies, memsets and kernels reach only this session's own allocations: any other
// address, even one another session of the same GPU allocated, is invalid here.
// A module's .global/.const variables are allocations of the session too. Device printf
// text is kept until the next synchronising call takes it (TakeOutput).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "remote/device/activity.h"
#include "remote/device/executor.h"
#include "remote/devices/sim/sim_memory.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::devices {

class SimExecutor : public device::Executor {
 public:
  // `memory` is the GPU's shared device memory; it must outlive the executor.
  // `arch`: the GPU's compute capability (e.g. 80), which decides the PTX a module runs
  // (image::ChoosePtx); 0: the newest PTX.
  // `meter` (may be null; must outlive the executor): the GPU's, told each span of wall
  // time this session's kernels, copies and memsets ran, for the GPU's utilisation.
  explicit SimExecutor(SimDeviceMemory* memory, uint32_t sm_count = 108, uint32_t arch = 0,
                       device::BusyMeter* meter = nullptr);
  ~SimExecutor() override;

  int32_t Allocate(uint64_t size, uint64_t* dptr) override;
  int32_t AllocateAt(uint64_t address, uint64_t size) override;
  bool GlobalsRange(uint64_t module, uint64_t* base, uint64_t* size) override;
  int32_t Free(uint64_t dptr) override;
  void MemoryInfo(uint64_t* free, uint64_t* total) override;
  std::vector<std::pair<uint64_t, uint64_t>> Ranges() const override {
    return {allocations_.begin(), allocations_.end()};
  }
  void* HostView(uint64_t dptr, uint64_t size) override;
  void* ReceiveView(uint64_t dptr, uint64_t size) override;
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
  bool SetProgressCounter(std::atomic<uint64_t>* counter) override {
    progress_ = counter;
    return true;
  }
  std::string TakeOutput() override;
  std::string TakeErrorDetail() override;

  // Ends this session's kernels: a launch under way ends within a bounded time (about a
  // millisecond of the engine's work; sim::LaunchSpec::cancel) with
  // CUDA_ERROR_LAUNCH_TIMEOUT (702) and sim::kCancelledDetail, and every later Launch fails
  // so at once. For the caller that ends a session (its lease released, expired, moved or
  // its job cancelled) while the session's own thread may be inside Launch: thread-safe,
  // callable from any thread, and final (the session is being ended; other calls still
  // work, so its memory can be freed as usual). A module being parsed is not interrupted.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }

 private:
  struct Event {
    uint32_t flags = 0;
    bool recorded = false;
    std::chrono::steady_clock::time_point when;
  };
  struct Module {
    std::unique_ptr<sim::PtxModule> ptx;
    std::map<std::string, uint64_t> globals;  // variable -> device address
    std::map<std::string, uint64_t> global_sizes;
    uint64_t globals_base = 0;  // the one allocation holding every variable (0: none)
    uint64_t globals_size = 0;
    // The device runtime's settings when it was loaded (LoadModule): its limits as the
    // module has them (its heap, its pending launches), the device's attributes as the
    // client sent them.
    size_t pending_launches = sim::kDefaultPendingLaunches;
    int32_t device_ordinal = 0;
    dataplane::DeviceRuntimeFacts facts;
    // What a kernel of the module needs (LaunchSpec::entry_needs), decoding it under
    // *decode_mu: the launch's worker threads ask at once. Made once the module is in
    // modules_ (it names the module's place there).
    std::unique_ptr<std::mutex> decode_mu = std::make_unique<std::mutex>();
    std::function<bool(const std::string&, sim::KernelNeeds*)> entry_needs;
  };
  struct Function {
    uint64_t module = 0;
    const sim::DecodedKernel* kernel = nullptr;
  };
  std::atomic<uint64_t>* progress_ = nullptr;  // the watchdog's (SetProgressCounter)
  device::BusyMeter* meter_ = nullptr;         // the GPU's utilisation (may be null)
  std::atomic<bool> cancelled_{false};         // set by Cancel(), from any thread
  void ChunkedCopy(char* to, const char* from, uint64_t size);
  bool KnownStream(uint64_t stream) const;
  // Runs the grids launched by a grid (dynamic parallelism), each after its parent; tail
  // launches after the others, in the parent's place.
  int32_t RunChildren(uint64_t module, const sim::LaunchSpec& parent, std::vector<sim::DeviceLaunch> queued);
  void FreeModule(Module& module);
  // In a catch handler of an entry point: the exception as a CUresult (kCuOutOfMemory for
  // std::bad_alloc, else `otherwise`) with error_detail_ naming `call` and why. No
  // exception leaves an entry point: the session's caller (the agent's request handler)
  // gets an error it can send.
  int32_t Failed(const char* call, int32_t otherwise) noexcept;

  SimDeviceMemory* memory_;
  const SimDeviceMemory::Owner owner_;  // tags this session's allocations in memory_
  const uint32_t sm_count_;
  const uint32_t arch_;
  std::map<uint64_t, uint64_t> allocations_;     // start -> size: what this session must free
  std::vector<sim::MemoryRange> launch_memory_;  // allocations_ translated; empty: to make
  std::map<uint64_t, Module> modules_;
  std::map<uint64_t, Function> functions_;
  std::string output_;           // device printf text not yet delivered (sim::AppendPrintf)
  uint64_t output_dropped_ = 0;  // bytes of it dropped over kMaxPrintfBytes since then
  std::string error_detail_;     // why the last call failed
  std::set<uint64_t> streams_;
  std::map<uint64_t, Event> events_;
};

}  // namespace gpupool::devices

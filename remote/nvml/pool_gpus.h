// PoolGpus: the job's leased GPUs as the replacement libnvidia-ml.so.1 sees them, each
// described by the agent that serves it (the data path's Hello), in CUDA's device order.
//
// Which GPUs: GPUPOOL_GPUS (UUID@HOST:PORT,..., set by spank_gpupool), filtered and
// ordered by CUDA_VISIBLE_DEVICES exactly as the replacement libcuda.so.1 does
// (remote/client/core/runtime.cc, Runtime::Connect: an index list; parsing stops at the first
// item that is not a leased index), so NVML device i is CUDA device i. Each GPU is reached
// through its own data-path session, opened with the job's lease (GPUPOOL_LEASE_ID,
// GPUPOOL_LEASE_TOKEN): the agent answers only for GPUs that lease holds, so a job sees
// its own GPUs and nothing else (an entry of GPUPOOL_GPUS the lease does not hold is
// refused by its agent).
//
// The transport module (libgpupool-ucx-client.so) is dlopened from this library's own
// directory, the way libcuda.so.1 loads it: UCX is loaded only at nvmlInit.
//
// Thread safety: Open and Close are not concurrent with anything (the API layer holds its
// lock); Gpu::MemoryInfo serialises on the GPU's own mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "remote/protocol/protocol.h"
#include "remote/transport/rpc_client.h"

namespace gpupool::nvml {

struct PoolGpu {
  int index = 0;  // NVML and CUDA device index
  std::string uuid;
  std::string endpoint;
  // Empty when the agent could not be reached: the GPU is counted but lost
  // (NVML_ERROR_GPU_IS_LOST), as a real driver counts a GPU that fell off the bus.
  std::unique_ptr<transport::ClientConnection> session;
  dataplane::DeviceDescription description{};
  unsigned pci_domain = 0, pci_bus = 0, pci_device = 0;
  std::string why_lost;
  std::mutex mu;  // serialises requests on `session`
};

// Why Open failed, in NVML's terms.
enum class OpenError { kNone, kNoGpus, kBadEnvironment, kRefused, kTransport };

class PoolGpus {
 public:
  // Reads the environment and opens a session on every visible GPU. On a refusal (the
  // lease's credential is not accepted) or a malformed environment, returns that error
  // and keeps nothing; an unreachable agent only marks its GPU lost.
  OpenError Open(std::string* why);
  void Close();
  // In a child after fork(): the parent's sessions (its UCX state) must not be used or
  // closed here, so they are let go of unclosed; each GPU then answers as lost. Takes no
  // lock (the child has one thread; a lock another parent thread held stays held).
  void AbandonAfterFork();
  // Whether the transport module is loaded in this process (by this library or by
  // libcuda.so.1): then UCX holds state a forked child cannot use (a new connection from
  // the child hangs), and a child refuses to connect, as libcuda.so.1 does.
  static bool TransportLoaded();

  size_t count() const { return gpus_.size(); }
  // The GPU at `index`, or nullptr past the end.
  PoolGpu* at(size_t index) { return index < gpus_.size() ? gpus_[index].get() : nullptr; }
  // Whether `candidate` is one of this table's GPUs (a handle the caller passed in may be
  // anything: it is compared, never dereferenced, before this says yes).
  PoolGpu* Find(const void* candidate);

  // The agent's figures for the GPU's memory (kOpMemGetInfo). False when the session
  // broke; *why says how.
  static bool MemoryInfo(PoolGpu* gpu, uint64_t* free, uint64_t* total, std::string* why);
  // The agent's figures for the GPU's activity, driver and the lease's processes on it
  // (kOpGpuStatus), at most `max_processes` of them (the count is all of them). False when
  // the session broke or the agent refused; *why says how.
  static bool GpuStatus(PoolGpu* gpu, uint32_t max_processes, dataplane::GpuStatusResult* result,
                        std::vector<dataplane::GpuProcess>* processes, std::string* why);

 private:
  std::vector<std::unique_ptr<PoolGpu>> gpus_;
};

// "GPUPOOL_GPUS" and "CUDA_VISIBLE_DEVICES" parsed into (uuid, endpoint) pairs in device
// order; false with *why on a malformed entry, or when nothing is visible. Pure, for the
// unit test.
bool VisibleGpus(const char* gpupool_gpus, const char* cuda_visible_devices,
                 std::vector<std::pair<std::string, std::string>>* visible, std::string* why);

}  // namespace gpupool::nvml

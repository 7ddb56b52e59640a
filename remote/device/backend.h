// GpuBackend: what gpupool-agentd knows about the GPUs of its host.
//
// Two implementations: "sim" (simulated GPUs with fault injection, for machines without a
// GPU) and "cuda" (NVML/CUDA discovery and NVML Xid events). The agent uses a backend to
// register and heartbeat its GPUs with gpupoold; the data path (remote/dataplane) asks it
// before every device operation whether the GPU is still usable, and tells it when an
// operation saw the GPU fail.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/gpu_models.h"
#include "common/status.h"
#include "remote/device/fault.h"

namespace gpupool::device {

struct GpuInfo {
  std::string uuid;   // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  int index = 0;      // host-local index, 0..N-1
  std::string model;  // e.g. "A100-SXM4-80GB"
  uint64_t memory_bytes = 0;
  std::string pci_bus_id;          // "0000:07:00.0"
  int numa_node = -1;              // from hwloc; -1 when unknown
  int cc_major = 8, cc_minor = 0;  // compute capability
  int multiprocessor_count = 108;
};

// A simulated GPU of a model gpupool knows (common/gpu_models.h) has that model's compute
// capability (the newest PTX the sim accepts) and SM count; an unknown model keeps the
// defaults above (an A100's).
inline void SimulateKnownModel(GpuInfo* gpu) {
  if (const GpuModel* model = FindGpuModel(gpu->model.c_str())) {
    gpu->cc_major = model->cc_major;
    gpu->cc_minor = model->cc_minor;
    gpu->multiprocessor_count = model->multiprocessors;
  }
}

enum class Health { kOk, kFailed };
// "OK" or "FAILED", as in gpupoold's API.
inline const char* HealthName(Health h) { return h == Health::kOk ? "OK" : "FAILED"; }

struct HealthState {
  Health health = Health::kOk;
  std::string reason;  // e.g. "Xid 79: GPU has fallen off the bus" or "injected"
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  virtual std::string name() const = 0;  // "sim" or "cuda"
  virtual std::vector<GpuInfo> Discover() = 0;
  virtual HealthState Health(int index) = 0;

  // Called by the data path before each operation on GPU `index`. Returns OK when the
  // operation may proceed; an error when the GPU has failed (the caller maps it to
  // CUDA_ERROR_ECC_UNCORRECTABLE/999-style errors). May block when a hang is injected.
  virtual Status BeforeOperation(int index) = 0;

  // The data path (or a watchdog) saw GPU `index` fail in-band.
  virtual void ReportFailure(int index, const std::string& reason) = 0;

  // Invoked (from any thread) when a GPU's health changes, so the agent can heartbeat at
  // once instead of waiting for the next period.
  virtual void SetHealthListener(std::function<void(int index)> listener) = 0;

  // ---- Fault injection and local inspection (the agent's control API). ----
  // Backends that cannot inject faults (cuda) keep these defaults.

  // Sets (or, with FaultMode::kNone, clears) the injected fault of GPU `index`. Clearing
  // also recovers a GPU that an injected or reported failure had marked FAILED.
  virtual Status InjectFault(int index, const Fault& fault) {
    return Status::InvalidArgument("backend '" + name() + "' does not support fault injection");
  }
  virtual Fault CurrentFault(int index) { return Fault{}; }
  // Number of BeforeOperation calls on GPU `index` since the backend started.
  virtual uint64_t OperationCount(int index) { return 0; }

  // The agent is stopping: release every BeforeOperation blocked by a hang (they return
  // Unavailable) and stop background threads. Idempotent.
  virtual void Stop() {}
};

}  // namespace gpupool::device

// SimBackend: simulated GPUs for machines without one, with fault injection.
//
// The inventory comes from AgentConfig.sim_gpus (model, memory, count per entry); UUIDs and
// PCI bus ids are derived from the host name and index (gpu_identity.h), so they are stable
// across restarts; NUMA nodes spread the GPUs over this machine's NUMA nodes (hwloc).
// Faults (fault.h) are set at start from the config/CLI and at run time through the
// agent's control API. Thread-safe. Before destroying it, call Stop() and let every
// BeforeOperation caller return (Stop() releases the ones a hang blocks).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/config.h"
#include "remote/device/backend.h"

namespace gpupool::devices {

class SimBackend : public device::GpuBackend {
 public:
  // Fails (InvalidArgument naming the entry) on a count < 1, an empty model or zero memory.
  // An empty `gpus` list means the default inventory: 4 x A100-SXM4-80GB.
  static Result<std::unique_ptr<SimBackend>> Create(const std::string& host, const std::vector<SimGpuConfig>& gpus,
                                                    int numa_nodes);
  ~SimBackend() override;

  std::string name() const override { return "sim"; }
  std::vector<device::GpuInfo> Discover() override;
  device::HealthState Health(int index) override;
  Status BeforeOperation(int index) override;
  void ReportFailure(int index, const std::string& reason) override;
  void SetHealthListener(std::function<void(int index)> listener) override;

  Status InjectFault(int index, const device::Fault& fault) override;
  device::Fault CurrentFault(int index) override;
  uint64_t OperationCount(int index) override;
  void Stop() override;

  // Number of BeforeOperation calls currently blocked by a hang on GPU `index` (tests).
  int HungCalls(int index);

 private:
  struct Gpu {
    device::GpuInfo info;
    device::HealthState health;
    device::Fault fault;
    uint64_t operations = 0;
    int hung_calls = 0;
  };

  explicit SimBackend(std::vector<Gpu> gpus);
  Status CheckIndex(int index) const;  // REQUIRES: nothing (gpus_ never resizes)
  // Marks GPU `index` failed; returns whether its health changed. REQUIRES: mu_ held.
  bool MarkFailedLocked(int index, const std::string& reason);
  void NotifyHealthChanged(int index);  // REQUIRES: mu_ NOT held

  std::mutex mu_;
  std::condition_variable hang_released_;  // signalled on clear, fault change and Stop()
  std::vector<Gpu> gpus_;                  // size fixed at construction; contents guarded by mu_
  bool stopped_ = false;                   // guarded by mu_
  std::function<void(int)> listener_;      // guarded by mu_; called without mu_
};

}  // namespace gpupool::devices

// WorkerBackend: the GpuBackend a session worker runs its one GPU's sessions on.
//
// It knows one GPU (the one its supervisor named) under its host index. Its health and
// injected fault are the supervisor's (GpuState, read-only here); its operation count is
// its own (GpuCounters). BeforeOperation waits while a hang is injected (the supervisor's
// watchdog and health probe see it), counts down an injected fail_after, and refuses once
// the GPU is FAILED. A failure the worker itself sees (a fail_after that ran out, an
// in-band GPU error) goes to the supervisor through `report` and is not believed there
// without a check (session_broker.h).
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "remote/device/backend.h"
#include "remote/worker/gpu_status.h"

namespace gpupool::worker {

class WorkerBackend : public device::GpuBackend {
 public:
  WorkerBackend(std::string kind, device::GpuInfo gpu, const GpuState* state, GpuCounters* counters,
                std::function<void(const std::string& reason)> report)
      : kind_(std::move(kind)), gpu_(std::move(gpu)), state_(state), counters_(counters), report_(std::move(report)) {}

  std::string name() const override { return kind_; }
  std::vector<device::GpuInfo> Discover() override { return {gpu_}; }
  device::HealthState Health(int index) override;
  Status BeforeOperation(int index) override;
  void ReportFailure(int index, const std::string& reason) override;
  void SetHealthListener(std::function<void(int index)>) override {}
  device::Fault CurrentFault(int index) override;
  uint64_t OperationCount(int) override { return counters_->operations.load(); }
  void Stop() override { stopping_ = true; }

 private:
  std::string Reason() const;

  const std::string kind_;
  const device::GpuInfo gpu_;
  const GpuState* const state_;
  GpuCounters* const counters_;
  const std::function<void(const std::string&)> report_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> failed_here_{false};           // a fail_after ran out in this worker
  uint64_t fail_after_generation_ = ~uint64_t{0};  // the injection being counted down
  std::atomic<uint64_t> fail_after_left_{0};
};

}  // namespace gpupool::worker

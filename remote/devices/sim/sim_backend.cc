#include "remote/devices/sim/sim_backend.h"

#include "remote/device/topology.h"
#include "remote/devices/sim/gpu_identity.h"

namespace gpupool::devices {

Result<std::unique_ptr<SimBackend>> SimBackend::Create(const std::string& host, const std::vector<SimGpuConfig>& config,
                                                       int numa_nodes) {
  std::vector<SimGpuConfig> entries = config;
  if (entries.empty()) entries.push_back(SimGpuConfig{"A100-SXM4-80GB", 81920, 4});
  int total = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const SimGpuConfig& e = entries[i];
    std::string where = "sim_gpus[" + std::to_string(i) + "]";
    if (e.model.empty()) return Status::InvalidArgument(where + ": empty model");
    if (e.memory_mib == 0) return Status::InvalidArgument(where + ": memory must be > 0");
    if (e.count < 1) {
      return Status::InvalidArgument(where + ": count must be >= 1, got " + std::to_string(e.count));
    }
    if (e.count > 1024 || total + e.count > 1024) {
      return Status::InvalidArgument(where + ": more than 1024 simulated GPUs on one host");
    }
    total += e.count;
  }
  std::vector<Gpu> gpus;
  gpus.reserve(total);
  for (const SimGpuConfig& e : entries) {
    for (int k = 0; k < e.count; ++k) {
      Gpu g;
      g.info.index = static_cast<int>(gpus.size());
      g.info.uuid = DeterministicGpuUuid(host, g.info.index);
      g.info.model = e.model;
      device::SimulateKnownModel(&g.info);
      g.info.memory_bytes = e.memory_mib * 1024ULL * 1024ULL;
      g.info.pci_bus_id = SimPciBusId(g.info.index);
      g.info.numa_node = device::SimNumaNode(g.info.index, total, numa_nodes);
      gpus.push_back(std::move(g));
    }
  }
  return std::unique_ptr<SimBackend>(new SimBackend(std::move(gpus)));
}

SimBackend::SimBackend(std::vector<Gpu> gpus) : gpus_(std::move(gpus)) {}

SimBackend::~SimBackend() { Stop(); }

Status SimBackend::CheckIndex(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= gpus_.size()) {
    return Status::NotFound("no GPU with index " + std::to_string(index) + " (this host has " +
                            std::to_string(gpus_.size()) + ")");
  }
  return Status::OK();
}

std::vector<device::GpuInfo> SimBackend::Discover() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<device::GpuInfo> out;
  for (const Gpu& g : gpus_) out.push_back(g.info);
  return out;
}

device::HealthState SimBackend::Health(int index) {
  if (!CheckIndex(index).ok()) return device::HealthState{device::Health::kFailed, "no such GPU"};
  std::lock_guard<std::mutex> l(mu_);
  return gpus_[index].health;
}

Status SimBackend::BeforeOperation(int index) {
  GPUPOOL_RETURN_IF_ERROR(CheckIndex(index));
  bool changed = false;
  Status result;
  {
    std::unique_lock<std::mutex> l(mu_);
    Gpu& g = gpus_[index];
    ++g.operations;
    while (g.fault.mode == device::FaultMode::kHang && !stopped_) {
      ++g.hung_calls;
      hang_released_.wait(l);
      --g.hung_calls;
    }
    if (stopped_) return Status::Unavailable("agent stopping");
    if (g.fault.mode == device::FaultMode::kFailAfter && g.health.health == device::Health::kOk) {
      if (g.fault.ops == 0) {
        changed = MarkFailedLocked(index, g.fault.reason);
      } else {
        --g.fault.ops;
      }
    }
    if (g.health.health == device::Health::kFailed) {
      result =
          Status::Unavailable("GPU " + std::to_string(index) + " (" + g.info.uuid + ") has failed: " + g.health.reason);
    }
  }
  if (changed) NotifyHealthChanged(index);
  return result;
}

void SimBackend::ReportFailure(int index, const std::string& reason) {
  if (!CheckIndex(index).ok()) return;
  bool changed;
  {
    std::lock_guard<std::mutex> l(mu_);
    changed = MarkFailedLocked(index, reason.empty() ? "reported by the data path" : reason);
  }
  if (changed) NotifyHealthChanged(index);
}

bool SimBackend::MarkFailedLocked(int index, const std::string& reason) {
  Gpu& g = gpus_[index];
  if (g.health.health == device::Health::kFailed) return false;
  g.health = device::HealthState{device::Health::kFailed, reason};
  return true;
}

void SimBackend::SetHealthListener(std::function<void(int index)> listener) {
  std::lock_guard<std::mutex> l(mu_);
  listener_ = std::move(listener);
}

void SimBackend::NotifyHealthChanged(int index) {
  std::function<void(int)> listener;
  {
    std::lock_guard<std::mutex> l(mu_);
    listener = listener_;
  }
  if (listener) listener(index);
}

Status SimBackend::InjectFault(int index, const device::Fault& fault) {
  GPUPOOL_RETURN_IF_ERROR(CheckIndex(index));
  bool changed = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    Gpu& g = gpus_[index];
    g.fault = fault;
    switch (fault.mode) {
      case device::FaultMode::kNone:
        changed = g.health.health != device::Health::kOk;
        g.health = device::HealthState{};
        break;
      case device::FaultMode::kFail:
        g.fault.reason = fault.reason.empty() ? "injected" : fault.reason;
        changed = MarkFailedLocked(index, g.fault.reason);
        break;
      case device::FaultMode::kFailAfter:
        if (g.fault.reason.empty()) {
          g.fault.reason = "injected: failed after " + std::to_string(fault.ops) + " operations";
        }
        break;
      case device::FaultMode::kHang:
        break;
    }
  }
  // Any change of fault re-evaluates blocked calls: a clear lets them proceed, a fail makes
  // them return the failure.
  hang_released_.notify_all();
  if (changed) NotifyHealthChanged(index);
  return Status::OK();
}

device::Fault SimBackend::CurrentFault(int index) {
  if (!CheckIndex(index).ok()) return device::Fault{};
  std::lock_guard<std::mutex> l(mu_);
  return gpus_[index].fault;
}

uint64_t SimBackend::OperationCount(int index) {
  if (!CheckIndex(index).ok()) return 0;
  std::lock_guard<std::mutex> l(mu_);
  return gpus_[index].operations;
}

int SimBackend::HungCalls(int index) {
  if (!CheckIndex(index).ok()) return 0;
  std::lock_guard<std::mutex> l(mu_);
  return gpus_[index].hung_calls;
}

void SimBackend::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
  }
  hang_released_.notify_all();
}

}  // namespace gpupool::devices

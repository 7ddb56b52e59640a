#include "remote/dataplane/executor_factory.h"

#include <cstdio>
#include <cstring>

namespace gpupool::dataplane {
namespace {

// What the sim reports as its driver version: the CUDA release our client targets.
constexpr int32_t kSimDriverVersion = 13000;

void CopyString(char* to, size_t capacity, const std::string& from) { std::snprintf(to, capacity, "%s", from.c_str()); }

}  // namespace

ExecutorFactory::ExecutorFactory(device::GpuBackend* backend) : backend_(backend) {
  if (backend_ == nullptr) return;  // the server refuses to start without one
  if (const device::DeviceKind* kind = device::FindDeviceKind(backend_->name())) {
    executors_ = kind->NewExecutorSource();
  }
}

Result<std::unique_ptr<device::Executor>> ExecutorFactory::Create(const device::GpuInfo& gpu) {
  if (!executors_) {
    return Status::Unavailable("no device kind '" + backend_->name() +
                               "' in this process (there are: " + device::DeviceKindNames() + ")");
  }
  return executors_->Create(gpu);
}

device::GpuActivity ExecutorFactory::Activity(const device::GpuInfo& gpu) {
  if (!executors_) {
    device::GpuActivity none;
    none.why_not = "no device kind '" + backend_->name() + "' in this process";
    return none;
  }
  return executors_->Activity(gpu);
}

DeviceDescription ExecutorFactory::Describe(const device::GpuInfo& gpu) const {
  DeviceDescription description;
  CopyString(description.uuid, sizeof(description.uuid), gpu.uuid);
  std::string name = gpu.model.rfind("NVIDIA", 0) == 0 ? gpu.model : "NVIDIA " + gpu.model;
  CopyString(description.name, sizeof(description.name), name);
  CopyString(description.pci_bus_id, sizeof(description.pci_bus_id), gpu.pci_bus_id);
  description.total_memory = gpu.memory_bytes;
  description.cc_major = gpu.cc_major;
  description.cc_minor = gpu.cc_minor;
  description.multiprocessor_count = gpu.multiprocessor_count;
  description.driver_version = kSimDriverVersion;
  CopyString(description.executor, sizeof(description.executor), backend_->name());
  return description;
}

}  // namespace gpupool::dataplane

#include "remote/dataplane/executor_factory.h"

#include <cstdio>
#include <cstring>

#include "remote/sim/sim_executor.h"

#ifdef GPUPOOL_HAVE_CUDA_EXECUTOR
#include "remote/dataplane/cuda_executor.h"
#endif

namespace gpupool::dataplane {
namespace {

// What the sim reports as its driver version: the CUDA release our client targets.
constexpr int32_t kSimDriverVersion = 13000;

void CopyString(char* to, size_t capacity, const std::string& from) {
  std::snprintf(to, capacity, "%s", from.c_str());
}

}  // namespace

Result<std::unique_ptr<Executor>> ExecutorFactory::Create(const backend::GpuInfo& gpu) {
  if (backend_->name() == "cuda") {
#ifdef GPUPOOL_HAVE_CUDA_EXECUTOR
    return CudaExecutor::Create(gpu.uuid);
#else
    return Status::Unavailable("this agent was built without the cuda executor");
#endif
  }
  // One GPU's memory is used by that GPU's thread only (SimDeviceMemory is not
  // thread-safe); the map itself is shared.
  std::lock_guard<std::mutex> lock(mu_);
  auto& memory = sim_memory_[gpu.index];
  if (!memory) memory = std::make_unique<SimDeviceMemory>(gpu.index, gpu.memory_bytes);
  return std::unique_ptr<Executor>(std::make_unique<SimExecutor>(
      memory.get(), gpu.multiprocessor_count, gpu.cc_major * 10 + gpu.cc_minor));
}

DeviceDescription ExecutorFactory::Describe(const backend::GpuInfo& gpu) const {
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

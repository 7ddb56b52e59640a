// ExecutorFactory: makes the Executor for a new client session on one GPU,
// matching the backend ("sim" -> SimExecutor over that GPU's shared
// SimDeviceMemory; "cuda" -> CudaExecutor when built with the CUDA toolkit),
// and describes the GPU to clients. Thread-safe: the dataplane's GPU threads
// share one.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "common/status.h"
#include "remote/backend/backend.h"
#include "remote/dataplane/executor.h"
#include "remote/dataplane/protocol.h"
#include "remote/sim/sim_memory.h"

namespace gpupool::dataplane {

class ExecutorFactory {
 public:
  explicit ExecutorFactory(backend::GpuBackend* backend) : backend_(backend) {}

  Result<std::unique_ptr<Executor>> Create(const backend::GpuInfo& gpu);
  DeviceDescription Describe(const backend::GpuInfo& gpu) const;

 private:
  backend::GpuBackend* backend_;
  std::mutex mu_;
  std::map<int, std::unique_ptr<SimDeviceMemory>> sim_memory_;  // by GPU index; guarded by mu_
};

}  // namespace gpupool::dataplane

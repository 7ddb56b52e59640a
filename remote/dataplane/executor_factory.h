// ExecutorFactory: makes the Executor for a new client session on one GPU, through the
// device kind the backend names (remote/device/device_kind.h: "sim" -> a SimExecutor over
// that GPU's shared device memory, "cuda" -> a CudaExecutor), and describes the GPU to
// clients. Thread-safe: the dataplane's GPU threads share one.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "remote/device/backend.h"
#include "remote/device/device_kind.h"
#include "remote/device/executor.h"
#include "remote/protocol/protocol.h"

namespace gpupool::dataplane {

class ExecutorFactory {
 public:
  // The kind is looked up once, here: it must be registered before (the agent's main).
  explicit ExecutorFactory(device::GpuBackend* backend);

  // Unavailable, naming the kinds there are, when the backend's kind is not registered in
  // this process.
  Result<std::unique_ptr<device::Executor>> Create(const device::GpuInfo& gpu);
  DeviceDescription Describe(const device::GpuInfo& gpu) const;
  // The device's own figures for `gpu` (device_kind.h, ExecutorSource::Activity).
  device::GpuActivity Activity(const device::GpuInfo& gpu);

 private:
  device::GpuBackend* backend_;
  std::unique_ptr<device::ExecutorSource> executors_;  // null: no such kind registered
};

}  // namespace gpupool::dataplane

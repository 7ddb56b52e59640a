// TestBackend: a trivial GpuBackend for the data-path tests: `count` healthy GPUs with
// fixed UUIDs ("GPU-5e1f0a11-0000-4000-8000-00000000000<i>") and memory, and a switch that
// makes every later operation fail (to test the in-band failure path). Thread-safe.
#pragma once

#include <atomic>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "remote/device/backend.h"

namespace gpupool::testing {

inline std::string TestGpuUuid(int index) {
  char uuid[64];
  std::snprintf(uuid, sizeof(uuid), "GPU-5e1f0a11-0000-4000-8000-%012d", index);
  return uuid;
}

class TestBackend : public device::GpuBackend {
 public:
  // `model`: the device name's model part; a known model gives the GPUs its compute
  // capability and SM count (device::SimulateKnownModel), as the sim backend does.
  TestBackend(int count, uint64_t memory_bytes, std::string model = "A100-SXM4-80GB")
      : count_(count), memory_bytes_(memory_bytes), model_(std::move(model)) {}

  std::string name() const override { return "sim"; }
  std::vector<device::GpuInfo> Discover() override {
    std::vector<device::GpuInfo> gpus;
    for (int i = 0; i < count_; ++i) {
      device::GpuInfo gpu;
      gpu.uuid = TestGpuUuid(i);
      gpu.index = i;
      gpu.model = model_;
      device::SimulateKnownModel(&gpu);
      gpu.memory_bytes = memory_bytes_;
      char bus[32];
      std::snprintf(bus, sizeof(bus), "0000:%02x:00.0", 7 + i);
      gpu.pci_bus_id = bus;
      gpus.push_back(gpu);
    }
    return gpus;
  }
  device::HealthState Health(int index) override {
    device::HealthState state;
    if (failed_) state.health = device::Health::kFailed;
    return state;
  }
  Status BeforeOperation(int index) override {
    operations_++;
    if (failed_) return Status::Unavailable("GPU " + std::to_string(index) + " failed (test)");
    return Status::OK();
  }
  void ReportFailure(int index, const std::string& reason) override { reported_failures_++; }
  void SetHealthListener(std::function<void(int index)> listener) override {}

  void Fail() { failed_ = true; }
  int operations() const { return operations_; }
  int reported_failures() const { return reported_failures_; }

 private:
  const int count_;
  const uint64_t memory_bytes_;
  const std::string model_;
  std::atomic<bool> failed_{false};
  std::atomic<int> operations_{0};
  std::atomic<int> reported_failures_{0};
};

}  // namespace gpupool::testing

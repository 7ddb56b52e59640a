#include "remote/devices/sim/sim_kind.h"

#include <unistd.h>

#include <map>
#include <mutex>

#include "remote/device/topology.h"
#include "remote/devices/sim/sim_backend.h"
#include "remote/devices/sim/sim_executor.h"
#include "remote/devices/sim/sim_memory.h"

// The version the sim reports as its driver's (the build's, set by CMake).
#ifndef GPUPOOL_SIM_VERSION
#define GPUPOOL_SIM_VERSION "unknown"
#endif

namespace gpupool::devices {
namespace {

// One server's sim executors: the sessions of one GPU share its device memory (capacity
// is per GPU, as on a real one), made when the GPU's first session starts.
class SimExecutors : public device::ExecutorSource {
 public:
  Result<std::unique_ptr<device::Executor>> Create(const device::GpuInfo& gpu) override {
    // One GPU's memory is used by that GPU's thread only (SimDeviceMemory's sessions are);
    // the map itself is shared.
    std::lock_guard<std::mutex> lock(mu_);
    auto& memory = memory_[gpu.index];
    if (!memory) memory = std::make_unique<SimDeviceMemory>(gpu.index, gpu.memory_bytes);
    return std::unique_ptr<device::Executor>(std::make_unique<SimExecutor>(
        memory.get(), gpu.multiprocessor_count, gpu.cc_major * 10 + gpu.cc_minor, MeterLocked(gpu.index)));
  }

  // Utilisation as the sim measures it: the fraction of the last second its engine ran
  // this GPU's kernels (gpu) and copies and memsets (memory), over every session of the
  // GPU in this process. A sim has no temperature or power, and no NVIDIA driver: its
  // "driver" is gpupool's own.
  device::GpuActivity Activity(const device::GpuInfo& gpu) override {
    device::GpuActivity activity;
    const device::BusyMeter::Reading reading = MeterOf(gpu.index)->Read(device::BusyMeter::NowNs());
    activity.has_utilization = true;
    activity.gpu_percent = reading.kernels_percent;
    activity.memory_percent = reading.copies_percent;
    activity.sample_period_ms = static_cast<uint32_t>(reading.window_ns / 1'000'000);
    activity.driver_version = std::string("gpupool-sim ") + GPUPOOL_SIM_VERSION;
    activity.why_not = "a simulated GPU has no temperature or power";
    return activity;
  }

 private:
  device::BusyMeter* MeterOf(int index) {
    std::lock_guard<std::mutex> lock(mu_);
    return MeterLocked(index);
  }
  device::BusyMeter* MeterLocked(int index) {  // REQUIRES: mu_ held
    auto& meter = meters_[index];
    if (!meter) meter = std::make_unique<device::BusyMeter>();
    return meter.get();
  }

  std::mutex mu_;
  std::map<int, std::unique_ptr<SimDeviceMemory>> memory_;    // by GPU index; mu_
  std::map<int, std::unique_ptr<device::BusyMeter>> meters_;  // by GPU index; mu_ (the map)
};

class SimKind : public device::DeviceKind {
 public:
  std::string name() const override { return "sim"; }

  // `config.host` seeds the GPUs' UUIDs (gethostname() when empty).
  Result<std::unique_ptr<device::GpuBackend>> OpenBackend(const AgentConfig& config) const override {
    std::string host = config.host;
    if (host.empty()) {
      char buf[256] = {};
      gethostname(buf, sizeof(buf) - 1);
      host = buf;
    }
    int numa_nodes = device::Topology::Load(/*with_pci=*/false)->NumaNodeCount();
    Result<std::unique_ptr<SimBackend>> sim = SimBackend::Create(host, config.sim_gpus, numa_nodes);
    if (!sim.ok()) return sim.status();
    return std::unique_ptr<device::GpuBackend>(std::move(sim.value()));
  }

  std::unique_ptr<device::ExecutorSource> NewExecutorSource() const override {
    return std::make_unique<SimExecutors>();
  }
};

}  // namespace

std::unique_ptr<device::DeviceKind> MakeSimKind() { return std::make_unique<SimKind>(); }

}  // namespace gpupool::devices

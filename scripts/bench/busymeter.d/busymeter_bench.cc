// The cost of the sim's utilisation meter (remote/device/activity.h) on the operations it
// times, side by side in one run: a SimExecutor without a meter (arg 0, the baseline, as
// before issue 41) and with one (arg 1), on small operations, where a fixed cost shows
// most: a 4 KiB memset and a 4 KiB device-to-device copy. Reading the meter (what each
// kOpGpuStatus does) is timed too.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>

#include "remote/device/activity.h"
#include "remote/devices/sim/sim_executor.h"
#include "remote/devices/sim/sim_memory.h"

namespace {

using gpupool::device::BusyMeter;
constexpr uint64_t kBytes = 4096;

struct Setup {
  gpupool::devices::SimDeviceMemory memory{0, uint64_t{1} << 30};
  BusyMeter meter;
  std::unique_ptr<gpupool::devices::SimExecutor> executor;
  uint64_t a = 0, b = 0;
  explicit Setup(bool metered) {
    executor = std::make_unique<gpupool::devices::SimExecutor>(&memory, 108, 80, metered ? &meter : nullptr);
    if (executor->Allocate(kBytes, &a) != 0 || executor->Allocate(kBytes, &b) != 0) std::abort();
  }
};

void BM_Memset4K(benchmark::State& state) {
  Setup setup(state.range(0) != 0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(setup.executor->Memset(setup.a, 0x5a, 1, kBytes, 0));
  }
}
BENCHMARK(BM_Memset4K)->Arg(0)->Arg(1);

void BM_CopyDtoD4K(benchmark::State& state) {
  Setup setup(state.range(0) != 0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(setup.executor->CopyDeviceToDevice(setup.b, setup.a, kBytes, 0));
  }
}
BENCHMARK(BM_CopyDtoD4K)->Arg(0)->Arg(1);

void BM_MeterRead(benchmark::State& state) {
  BusyMeter meter;
  for (auto _ : state) benchmark::DoNotOptimize(meter.Read(BusyMeter::NowNs()));
}
BENCHMARK(BM_MeterRead);

}  // namespace

BENCHMARK_MAIN();

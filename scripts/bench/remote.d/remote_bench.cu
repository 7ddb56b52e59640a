// Data-path benchmark, run by scripts/bench/remote against a dataplane server through the
// replacement libcuda.so.1: an ordinary CUDA program (static cudart), like a user's.
//   HostToDevice/N, DeviceToHost/N  cudaMemcpy of N bytes from/to pinned host memory
//   HostToDeviceAsync/N             cudaMemcpyAsync of N bytes from pinned host memory, then
//                                   cudaStreamSynchronize (scripts/bench/failover --uploads)
//   HostToDeviceFilled/N            memset of the pinned buffer, then cudaMemcpy of it (the
//                                   fill timed too: scripts/bench/failover --uploads)
//   SyncRoundTrip                   cudaDeviceSynchronize with nothing pending: one round trip
//   LaunchRate                      empty kernel launches (one-way), synchronised per batch
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void noop() {}

namespace {

void Check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

struct Buffers {
  void* host = nullptr;
  void* device = nullptr;
  explicit Buffers(size_t size) {
    Check(cudaMallocHost(&host, size), "cudaMallocHost");
    Check(cudaMalloc(&device, size), "cudaMalloc");
    // Data, as a program uploads: a source never written reads every page as the kernel's
    // one zero page, always in the caches, which made uploads look faster than any program's.
    std::memset(host, 0x5a, size);
  }
  ~Buffers() {
    cudaFreeHost(host);
    cudaFree(device);
  }
};

void HostToDevice(benchmark::State& state) {
  size_t size = static_cast<size_t>(state.range(0));
  Buffers buffers(size);
  // Warm-up, as ucx_perftest's: the first touch of new memory (page faults on both
  // ends, and in the failover journal: one buffer becomes the checkpoint's image at
  // the synchronisation, the next copy's is new) is not the transfer being measured.
  Check(cudaMemcpy(buffers.device, buffers.host, size, cudaMemcpyHostToDevice), "warm-up");
  Check(cudaDeviceSynchronize(), "sync");
  Check(cudaMemcpy(buffers.device, buffers.host, size, cudaMemcpyHostToDevice), "warm-up");
  for (auto _ : state) {
    Check(cudaMemcpy(buffers.device, buffers.host, size, cudaMemcpyHostToDevice), "H2D");
  }
  Check(cudaDeviceSynchronize(), "sync");  // the last copies have reached the device
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(size));
}

// An asynchronous upload and the wait for it: the failover journal copies the bytes of one
// under 64 KiB at the wait rather than at the call, a larger one's while they are in flight
// (gpupool-remote(7), FAILOVER).
void HostToDeviceAsync(benchmark::State& state) {
  size_t size = static_cast<size_t>(state.range(0));
  Buffers buffers(size);
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  for (int i = 0; i < 2; ++i) {  // warm-up, as HostToDevice's
    Check(cudaMemcpyAsync(buffers.device, buffers.host, size, cudaMemcpyHostToDevice, stream), "warm-up");
    Check(cudaStreamSynchronize(stream), "sync");
  }
  for (auto _ : state) {
    Check(cudaMemcpyAsync(buffers.device, buffers.host, size, cudaMemcpyHostToDevice, stream), "H2D async");
    Check(cudaStreamSynchronize(stream), "sync");
  }
  Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(size));
}

// A program that fills its buffer before each upload (a loader's next batch): the fill is
// timed too. With failover on, the journal keeps an upload from page-locked memory as a
// copy-on-write snapshot (gpupool-remote(7), FAILOVER): the fill's first write to it copies
// the previous upload's bytes, so this is where the journal's copy shows.
void HostToDeviceFilled(benchmark::State& state) {
  size_t size = static_cast<size_t>(state.range(0));
  Buffers buffers(size);
  int round = 0;
  for (int i = 0; i < 2; ++i) {  // warm-up, as HostToDevice's
    std::memset(buffers.host, ++round, size);
    Check(cudaMemcpy(buffers.device, buffers.host, size, cudaMemcpyHostToDevice), "warm-up");
  }
  Check(cudaDeviceSynchronize(), "sync");
  for (auto _ : state) {
    std::memset(buffers.host, ++round, size);
    Check(cudaMemcpy(buffers.device, buffers.host, size, cudaMemcpyHostToDevice), "H2D");
  }
  Check(cudaDeviceSynchronize(), "sync");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(size));
}

void DeviceToHost(benchmark::State& state) {
  size_t size = static_cast<size_t>(state.range(0));
  Buffers buffers(size);
  Check(cudaMemcpy(buffers.host, buffers.device, size, cudaMemcpyDeviceToHost), "warm-up");
  for (auto _ : state) {
    Check(cudaMemcpy(buffers.host, buffers.device, size, cudaMemcpyDeviceToHost), "D2H");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(size));
}

void SyncRoundTrip(benchmark::State& state) {
  for (auto _ : state) Check(cudaDeviceSynchronize(), "sync");
}

void LaunchRate(benchmark::State& state) {
  const int batch = 1000;
  for (auto _ : state) {
    for (int i = 0; i < batch; ++i) noop<<<1, 1>>>();
    Check(cudaDeviceSynchronize(), "sync");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * batch);
}

}  // namespace

BENCHMARK(HostToDevice)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20)->Arg(256 << 20)->UseRealTime();
BENCHMARK(HostToDeviceAsync)->Arg(16 << 10)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20)->Arg(256 << 20)->UseRealTime();
BENCHMARK(HostToDeviceFilled)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();
BENCHMARK(DeviceToHost)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20)->Arg(256 << 20)->UseRealTime();
BENCHMARK(SyncRoundTrip)->UseRealTime();
BENCHMARK(LaunchRate)->UseRealTime();

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // A flag Google Benchmark refused (a bad value) is left in argv: stop, do not measure
  // with its default.
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  Check(cudaFree(nullptr), "init");  // context creation outside the measurements
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

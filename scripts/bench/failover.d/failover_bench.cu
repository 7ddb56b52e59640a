// The failover benchmark's program (scripts/bench/failover), built with nvcc and run
// against gpupool's libcuda.so.1 and dataplane test servers.
//
//   failover_bench steady [google benchmark flags]
//       One iteration of an iterative program (4 KiB of host input, two kernels over 4 MiB
//       of state, a value read back), per Google Benchmark; the script runs it with
//       GPUPOOL_FAILOVER=replay and =off.
//   failover_bench recover MIB SERVER_PID LEASE_FILE UUID ENDPOINT
//       MIB of device state, checkpointed; a plain host-to-device cudaMemcpy of the same
//       bytes (the restore copy's baseline) and ten small kernels (the work a recovery
//       replays) timed on the healthy GPU; then the server is killed (SIGKILL), the lease
//       file names UUID@ENDPOINT, and the time from the failure to the next completed
//       synchronisation is the recovery. Prints "RecoveryMs= RestoreCopyMs= ReplayedWorkMs=".
//   failover_bench pinned MIB SERVER_PID LEASE_FILE UUID ENDPOINT
//       As `recover`, the state uploaded from page-locked memory (cudaMallocHost) and not
//       written by a kernel: the checkpoint keeps that upload's copy-on-write snapshot as
//       its image, and the recovery sends it from the program's pages.
//   failover_bench move MIB SERVER_PID LEASE_FILE UUID ENDPOINT
//       The same, for a planned move (gpupoolctl migrate, or a drain of a movable lease),
//       with the ten kernels run before it (the pause is the move's own, not queued work):
//       the lease file names UUID@ENDPOINT first, then the old server revokes the session
//       (SIGUSR1, as an agent does when gpupoold moves the lease), and the time the next
//       call then takes is the pause.
//   failover_bench recover2 MIB SERVER_PID LEASE_FILE UUID0 UUID1 ENDPOINT
//       Two GPUs of one server (GPUPOOL_GPUS names both), MIB of state and ten kernels to
//       replay on each, as `recover`; then the server is killed, the lease file names
//       UUID0 and UUID1 at ENDPOINT, and the program calls device 0, then device 1 (as a
//       program that drives its GPUs in turn). Prints "RecoveryMs=" (the failure to device
//       1's answer: both GPUs' recovery) and "FirstMs=" (to device 0's).
#include <signal.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s failed: %s (%d)\n", #call, cudaGetErrorString(e_), e_); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

constexpr unsigned kInput = 1024;

__global__ void evolve(unsigned* state, unsigned n, const unsigned* input, unsigned k) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) state[i] = state[i] * 1664525u + 1013904223u + input[i % kInput] + k;
}

__global__ void mix(unsigned* mixed, const unsigned* state, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) mixed[i] ^= state[(i * 7u) % n];
}

static void Iteration(benchmark::State& state) {
  const unsigned n = static_cast<unsigned>(state.range(0) * (1 << 20) / 8);
  unsigned *d_state, *d_mixed, *d_input;
  CHECK(cudaMalloc(&d_state, n * 4));
  CHECK(cudaMalloc(&d_mixed, n * 4));
  CHECK(cudaMalloc(&d_input, kInput * 4));
  CHECK(cudaMemset(d_state, 1, n * 4));
  CHECK(cudaMemset(d_mixed, 0, n * 4));
  std::vector<unsigned> input(kInput);
  unsigned k = 0;
  for (auto _ : state) {
    ++k;
    for (unsigned j = 0; j < kInput; ++j) input[j] = k * 31 + j;
    CHECK(cudaMemcpy(d_input, input.data(), kInput * 4, cudaMemcpyHostToDevice));
    evolve<<<(n + 255) / 256, 256>>>(d_state, n, d_input, k);
    mix<<<(n + 255) / 256, 256>>>(d_mixed, d_state, n);
    unsigned probe = 0;
    CHECK(cudaMemcpy(&probe, d_state + (k % n), 4, cudaMemcpyDeviceToHost));
    benchmark::DoNotOptimize(probe);
  }
  CHECK(cudaFree(d_state));
  CHECK(cudaFree(d_mixed));
  CHECK(cudaFree(d_input));
}
BENCHMARK(Iteration)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();

using Clock = std::chrono::steady_clock;
static double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

__global__ void touch(unsigned char* p, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i * 4096] += 1;
}

// Names UUID@ENDPOINT in the lease file, atomically (what spank_gpupool's watcher does).
static bool NameInLease(const char* lease_file, const char* uuid, const char* endpoint) {
  std::string tmp = std::string(lease_file) + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "{\"generation\": 2, \"gpus\": [{\"uuid\": \"%s\", \"endpoint\": \"%s\"}]}\n", uuid, endpoint);
  std::fclose(f);
  return std::rename(tmp.c_str(), lease_file) == 0;
}

// Names UUID0 and UUID1 at ENDPOINT in the lease file, atomically.
static bool NameBothInLease(const char* lease_file, const char* uuid0, const char* uuid1, const char* endpoint) {
  std::string tmp = std::string(lease_file) + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f,
               "{\"generation\": 2, \"gpus\": [{\"uuid\": \"%s\", \"endpoint\": \"%s\"}, "
               "{\"uuid\": \"%s\", \"endpoint\": \"%s\"}]}\n",
               uuid0, endpoint, uuid1, endpoint);
  std::fclose(f);
  return std::rename(tmp.c_str(), lease_file) == 0;
}

static int RecoverTwo(size_t mib, pid_t server, const char* lease_file, const char* uuid0, const char* uuid1,
                      const char* endpoint) {
  const size_t bytes = mib << 20;
  std::vector<unsigned char> host(bytes, 7);
  unsigned char* d[2] = {nullptr, nullptr};
  unsigned* small[2] = {nullptr, nullptr};
  for (int device = 0; device < 2; ++device) {
    CHECK(cudaSetDevice(device));
    CHECK(cudaMalloc(&d[device], bytes));
    CHECK(cudaMalloc(&small[device], 1 << 20));
    CHECK(cudaMemset(small[device], 0, 1 << 20));
    CHECK(cudaMemcpy(d[device], host.data(), bytes, cudaMemcpyHostToDevice));
    touch<<<static_cast<unsigned>((bytes / 4096 + 255) / 256), 256>>>(d[device], bytes / 4096);
    CHECK(cudaDeviceSynchronize());  // a checkpoint (GPUPOOL_CHECKPOINT_INTERVAL=0)
    for (int i = 0; i < 10; ++i) {   // in the log: replayed
      evolve<<<(1 << 18) / 256, 256>>>(small[device], 1 << 18, small[device], static_cast<unsigned>(i));
    }
  }
  kill(server, SIGKILL);
  const Clock::time_point failed = Clock::now();
  if (!NameBothInLease(lease_file, uuid0, uuid1, endpoint)) return 1;
  unsigned probe = 0;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMemcpy(&probe, small[0], 4, cudaMemcpyDeviceToHost));
  const double first_ms = Ms(Clock::now() - failed);
  CHECK(cudaSetDevice(1));
  CHECK(cudaMemcpy(&probe, small[1], 4, cudaMemcpyDeviceToHost));
  const double recovery_ms = Ms(Clock::now() - failed);
  std::vector<unsigned char> back(bytes);
  for (int device = 0; device < 2; ++device) {
    CHECK(cudaSetDevice(device));
    CHECK(cudaMemcpy(back.data(), d[device], bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < bytes; ++i) {
      unsigned char want = i % 4096 == 0 ? 8 : 7;
      if (back[i] != want) {
        std::fprintf(stderr, "device %d: byte %zu is %u after the recovery, expected %u\n", device, i, back[i], want);
        return 1;
      }
    }
  }
  std::printf("RecoveryMs=%.1f FirstMs=%.1f\n", recovery_ms, first_ms);
  return 0;
}

static int Recover(size_t mib, pid_t server, const char* lease_file, const char* uuid, const char* endpoint,
                   bool planned, bool pinned) {
  const size_t bytes = mib << 20;
  std::vector<unsigned char> pageable(pinned ? 0 : bytes, 7);
  unsigned char* host = pageable.data();
  if (pinned) {
    CHECK(cudaMallocHost(&host, bytes));
    std::memset(host, 7, bytes);
  }
  unsigned char* d = nullptr;
  unsigned* small = nullptr;
  CHECK(cudaMalloc(&d, bytes));
  CHECK(cudaMalloc(&small, 1 << 20));
  CHECK(cudaMemset(small, 0, 1 << 20));
  // The restore copy's baseline: the same bytes host to device, on the same transport.
  auto t0 = Clock::now();
  CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaDeviceSynchronize());
  double copy_ms = Ms(Clock::now() - t0);
  if (!pinned) touch<<<static_cast<unsigned>((bytes / 4096 + 255) / 256), 256>>>(d, bytes / 4096);
  CHECK(cudaDeviceSynchronize());  // a checkpoint (GPUPOOL_CHECKPOINT_INTERVAL=0)
  // The work the recovery replays, timed on the healthy GPU.
  auto t1 = Clock::now();
  for (int i = 0; i < 10; ++i) {
    evolve<<<(1 << 18) / 256, 256>>>(small, 1 << 18, small, static_cast<unsigned>(i));
  }
  unsigned probe = 0;
  CHECK(cudaMemcpy(&probe, small, 4, cudaMemcpyDeviceToHost));
  double work_ms = Ms(Clock::now() - t1);
  // (Nothing synchronises between these launches and a failure: they are in the log, and
  // the recovery replays them. A planned move finds them run: its pause is the move alone,
  // not kernels the application queued before it.)
  for (int i = 0; i < 10; ++i) {
    evolve<<<(1 << 18) / 256, 256>>>(small, 1 << 18, small, static_cast<unsigned>(i + 10));
  }
  Clock::time_point failed;
  if (planned) {
    CHECK(cudaDeviceSynchronize());
    if (!NameInLease(lease_file, uuid, endpoint)) return 1;
    kill(server, SIGUSR1);
    // The server revokes the session at its next tick (100 ms, as an agent): the pause is
    // what the application's next call meets from there, not the wait for that tick.
    usleep(300 * 1000);
    failed = Clock::now();
  } else {
    kill(server, SIGKILL);
    failed = Clock::now();
    if (!NameInLease(lease_file, uuid, endpoint)) return 1;
  }
  CHECK(cudaMemcpy(&probe, small, 4, cudaMemcpyDeviceToHost));
  double recovery_ms = Ms(Clock::now() - failed);
  // The state came across: every touched byte is 8.
  std::vector<unsigned char> back(bytes);
  CHECK(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost));
  if (pinned) CHECK(cudaFreeHost(host));
  for (size_t i = 0; i < bytes; ++i) {
    unsigned char want = i % 4096 == 0 && !pinned ? 8 : 7;
    if (back[i] != want) {
      std::fprintf(stderr, "byte %zu is %u after the recovery, expected %u\n", i, back[i], want);
      return 1;
    }
  }
  std::printf("RecoveryMs=%.1f RestoreCopyMs=%.1f ReplayedWorkMs=%.1f\n", recovery_ms, copy_ms, work_ms);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "recover2") == 0) {
    if (argc != 8) {
      std::fprintf(stderr, "usage: failover_bench recover2 MIB SERVER_PID LEASE_FILE UUID0 UUID1 ENDPOINT\n");
      return 2;
    }
    return RecoverTwo(std::strtoul(argv[2], nullptr, 10), static_cast<pid_t>(std::atoi(argv[3])), argv[4], argv[5],
                      argv[6], argv[7]);
  }
  if (argc >= 2 && (std::strcmp(argv[1], "recover") == 0 || std::strcmp(argv[1], "move") == 0 ||
                    std::strcmp(argv[1], "pinned") == 0)) {
    if (argc != 7) {
      std::fprintf(stderr, "usage: failover_bench recover|pinned|move MIB SERVER_PID LEASE_FILE UUID ENDPOINT\n");
      return 2;
    }
    return Recover(std::strtoul(argv[2], nullptr, 10), static_cast<pid_t>(std::atoi(argv[3])), argv[4], argv[5],
                   argv[6], std::strcmp(argv[1], "move") == 0, std::strcmp(argv[1], "pinned") == 0);
  }
  if (argc >= 2 && std::strcmp(argv[1], "steady") == 0) {
    argv[1] = argv[0];
    ++argv;
    --argc;
  }
  benchmark::Initialize(&argc, argv);
  // A flag Google Benchmark refused (a bad value) is left in argv: stop, do not measure
  // with its default.
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}

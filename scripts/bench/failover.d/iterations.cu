// The Slurm-job program of scripts/bench/failover --slurm: an iterative CUDA program that
// prints the wall-clock time at which each iteration completed, so that the benchmark can
// tell the time from a fault it caused to the next completed iteration.
//
//   iterations SECONDS [STATE_MIB]   (defaults 60 4)
//
// Each iteration: host input copied in, a kernel evolving the state, one value read back
// (the synchronisation that completes it), then "it N UNIX_MS" on stdout, then 10 ms idle.
// The values read back are checked against a CPU reference: a wrong one ends the program
// with "iterations: FAIL".
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

__global__ void evolve(unsigned* state, unsigned n, unsigned input) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) state[i] = state[i] * 1664525u + 1013904223u + input;
}

static long long NowMs() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<long long>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

#define CHECK(call)                                                            \
  do {                                                                         \
    cudaError_t e = (call);                                                    \
    if (e != cudaSuccess) {                                                    \
      std::printf("iterations: FAIL: %s: %s\n", #call, cudaGetErrorString(e)); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

int main(int argc, char** argv) {
  const long long seconds = argc > 1 ? std::atoll(argv[1]) : 60;
  const size_t state_mib = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 4;
  const unsigned n = static_cast<unsigned>(state_mib * (1 << 20) / sizeof(unsigned));
  unsigned* state = nullptr;
  unsigned* input = nullptr;
  CHECK(cudaMalloc(&state, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&input, sizeof(unsigned)));
  CHECK(cudaMemset(state, 0, n * sizeof(unsigned)));
  unsigned expected = 0;  // state[n - 1] on the CPU
  const long long end = NowMs() + seconds * 1000;
  for (unsigned it = 1; NowMs() < end; ++it) {
    unsigned host_input = it * 2654435761u;
    CHECK(cudaMemcpy(input, &host_input, sizeof(host_input), cudaMemcpyHostToDevice));
    evolve<<<(n + 255) / 256, 256>>>(state, n, host_input);
    CHECK(cudaGetLastError());
    unsigned last = 0;
    CHECK(cudaMemcpy(&last, state + n - 1, sizeof(last), cudaMemcpyDeviceToHost));
    expected = expected * 1664525u + 1013904223u + host_input;
    if (last != expected) {
      std::printf("iterations: FAIL at iteration %u: %u, expected %u\n", it, last, expected);
      return 1;
    }
    std::printf("it %u %lld\n", it, NowMs());
    std::fflush(stdout);
    usleep(10000);
  }
  std::printf("iterations: PASS\n");
  return 0;
}

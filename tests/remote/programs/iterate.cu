// An iterative program for the failover tests: evolving state on the GPU, host input every
// iteration, and a large allocation written once and read at the end; a CPU reference
// decides PASS. Its GPU may be failed, hung or drained while it runs: with failover it
// prints "iterate: PASS" all the same.
//
//   iterate [ITERATIONS [MS_BETWEEN [STATE_MIB [BIG_MIB]]]]   (defaults 200 25 4 32)
//
// Prints "iterate: running" once some iterations are done (the tests fail the GPU after
// that), "iterate: iteration N" every 50, then "iterate: PASS" or what was wrong.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

constexpr unsigned kInput = 1024;  // host input elements per iteration

// state[i] = state[i] * 1664525 + 1013904223 + input[i % kInput] + iteration
__global__ void evolve(unsigned* state, unsigned n, const unsigned* input, unsigned iteration) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) state[i] = state[i] * 1664525u + 1013904223u + input[i % kInput] + iteration;
}

// mix[i] ^= state[(i * 7) % n]: a second kernel reading what the first wrote.
__global__ void mix(unsigned* mixed, const unsigned* state, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) mixed[i] ^= state[(i * 7u) % n];
}

__global__ void fill(unsigned* big, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) big[i] = static_cast<unsigned>(i * 2654435761u);
}

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  const int pause_ms = argc > 2 ? std::atoi(argv[2]) : 25;
  const size_t state_mib = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 4;
  const size_t big_mib = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 32;
  EXPECT(iterations > 0 && pause_ms >= 0 && state_mib > 0);
  // Two arrays of state: state_mib in all.
  const unsigned n = static_cast<unsigned>(state_mib * (1 << 20) / 8);
  const size_t big_n = big_mib * (1 << 20) / 4;

  std::vector<unsigned> state(n), mixed(n, 0), input(kInput);
  for (unsigned i = 0; i < n; ++i) state[i] = i;
  unsigned *d_state = nullptr, *d_mixed = nullptr, *d_input = nullptr, *d_big = nullptr;
  CHECK(cudaMalloc(&d_state, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&d_mixed, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&d_input, kInput * sizeof(unsigned)));
  CHECK(cudaMemcpy(d_state, state.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_mixed, 0, n * sizeof(unsigned)));
  if (big_n > 0) {
    CHECK(cudaMalloc(&d_big, big_n * sizeof(unsigned)));
    fill<<<static_cast<unsigned>((big_n + 255) / 256), 256>>>(d_big, big_n);
    CHECK(cudaGetLastError());
  }

  const unsigned blocks = (n + 255) / 256;
  for (int it = 1; it <= iterations; ++it) {
    for (unsigned j = 0; j < kInput; ++j) input[j] = static_cast<unsigned>(it * 31 + j * 17);
    CHECK(cudaMemcpy(d_input, input.data(), kInput * sizeof(unsigned), cudaMemcpyHostToDevice));
    evolve<<<blocks, 256>>>(d_state, n, d_input, static_cast<unsigned>(it));
    CHECK(cudaGetLastError());
    mix<<<blocks, 256>>>(d_mixed, d_state, n);
    CHECK(cudaGetLastError());
    // A value back every iteration, as an iterative solver reads its residual.
    unsigned probe = 0;
    CHECK(cudaMemcpy(&probe, d_state + (it % n), sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < n; ++i) {
      state[i] = state[i] * 1664525u + 1013904223u + input[i % kInput] + static_cast<unsigned>(it);
    }
    for (unsigned i = 0; i < n; ++i) mixed[i] ^= state[(i * 7u) % n];
    if (probe != state[it % n]) {
      std::printf("iterate: FAIL at iteration %d: probe %u, expected %u\n", it, probe,
                  state[it % n]);
      return 1;
    }
    if (it == 10) std::printf("iterate: running\n");
    if (it % 50 == 0) std::printf("iterate: iteration %d\n", it);
    std::fflush(stdout);
    if (pause_ms > 0) usleep(pause_ms * 1000);
  }

  std::vector<unsigned> got_state(n), got_mixed(n);
  CHECK(cudaMemcpy(got_state.data(), d_state, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_mixed.data(), d_mixed, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (unsigned i = 0; i < n; ++i) wrong += got_state[i] != state[i] || got_mixed[i] != mixed[i];
  size_t big_wrong = 0;
  if (big_n > 0) {
    std::vector<unsigned> big(big_n);
    CHECK(cudaMemcpy(big.data(), d_big, big_n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < big_n; ++i) big_wrong += big[i] != static_cast<unsigned>(i * 2654435761u);
  }
  CHECK(cudaFree(d_state));
  CHECK(cudaFree(d_mixed));
  CHECK(cudaFree(d_input));
  if (d_big != nullptr) CHECK(cudaFree(d_big));
  if (wrong != 0 || big_wrong != 0) {
    std::printf("iterate: FAIL: %zu of %u state elements and %zu of %zu big elements wrong\n",
                wrong, n, big_wrong, big_n);
    return 1;
  }
  std::printf("iterate: PASS (%d iterations, %zu MiB state, %zu MiB written once)\n", iterations,
              state_mib, big_mib);
  return 0;
}

// An iterative program for the failover tests: evolving state on the GPU, host input every
// iteration, and a large allocation written once and read at the end; a CPU reference
// decides PASS. Its GPU may be failed, hung or drained while it runs: with failover it
// prints "iterate: PASS" all the same.
//
//   iterate [ITERATIONS [MS_BETWEEN [STATE_MIB [BIG_MIB [DEVICES]]]]]   (defaults 200 25 4 32 1)
//
// With DEVICES > 1 every device runs the same work on state of its own (a failure of one
// GPU of a multi-GPU lease, then of another).
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
  const int devices = argc > 5 ? std::atoi(argv[5]) : 1;
  EXPECT(iterations > 0 && pause_ms >= 0 && state_mib > 0 && devices > 0);
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT(count >= devices);
  // Two arrays of state: state_mib in all.
  const unsigned n = static_cast<unsigned>(state_mib * (1 << 20) / 8);
  const size_t big_n = big_mib * (1 << 20) / 4;

  std::vector<unsigned> state(n), mixed(n, 0), input(kInput);
  for (unsigned i = 0; i < n; ++i) state[i] = i;
  // Each device: the same arrays, its own copies.
  std::vector<unsigned*> d_state(devices), d_mixed(devices), d_input(devices), d_big(devices);
  for (int d = 0; d < devices; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMalloc(&d_state[d], n * sizeof(unsigned)));
    CHECK(cudaMalloc(&d_mixed[d], n * sizeof(unsigned)));
    CHECK(cudaMalloc(&d_input[d], kInput * sizeof(unsigned)));
    CHECK(cudaMemcpy(d_state[d], state.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d_mixed[d], 0, n * sizeof(unsigned)));
    d_big[d] = nullptr;
    if (big_n > 0) {
      CHECK(cudaMalloc(&d_big[d], big_n * sizeof(unsigned)));
      fill<<<static_cast<unsigned>((big_n + 255) / 256), 256>>>(d_big[d], big_n);
      CHECK(cudaGetLastError());
    }
  }

  const unsigned blocks = (n + 255) / 256;
  for (int it = 1; it <= iterations; ++it) {
    for (unsigned j = 0; j < kInput; ++j) input[j] = static_cast<unsigned>(it * 31 + j * 17);
    std::vector<unsigned> probe(devices, 0);
    for (int d = 0; d < devices; ++d) {
      CHECK(cudaSetDevice(d));
      CHECK(cudaMemcpy(d_input[d], input.data(), kInput * sizeof(unsigned), cudaMemcpyHostToDevice));
      evolve<<<blocks, 256>>>(d_state[d], n, d_input[d], static_cast<unsigned>(it));
      CHECK(cudaGetLastError());
      mix<<<blocks, 256>>>(d_mixed[d], d_state[d], n);
      CHECK(cudaGetLastError());
      // A value back every iteration, as an iterative solver reads its residual.
      CHECK(cudaMemcpy(&probe[d], d_state[d] + (it % n), sizeof(unsigned), cudaMemcpyDeviceToHost));
    }
    for (unsigned i = 0; i < n; ++i) {
      state[i] = state[i] * 1664525u + 1013904223u + input[i % kInput] + static_cast<unsigned>(it);
    }
    for (unsigned i = 0; i < n; ++i) mixed[i] ^= state[(i * 7u) % n];
    for (int d = 0; d < devices; ++d) {
      if (probe[d] != state[it % n]) {
        std::printf("iterate: FAIL at iteration %d on device %d: probe %u, expected %u\n", it, d, probe[d],
                    state[it % n]);
        return 1;
      }
    }
    if (it == 10) std::printf("iterate: running\n");
    if (it % 50 == 0) std::printf("iterate: iteration %d\n", it);
    std::fflush(stdout);
    if (pause_ms > 0) usleep(pause_ms * 1000);
  }

  size_t wrong = 0, big_wrong = 0;
  for (int d = 0; d < devices; ++d) {
    CHECK(cudaSetDevice(d));
    std::vector<unsigned> got_state(n), got_mixed(n);
    CHECK(cudaMemcpy(got_state.data(), d_state[d], n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got_mixed.data(), d_mixed[d], n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < n; ++i) wrong += got_state[i] != state[i] || got_mixed[i] != mixed[i];
    if (big_n > 0) {
      std::vector<unsigned> big(big_n);
      CHECK(cudaMemcpy(big.data(), d_big[d], big_n * sizeof(unsigned), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < big_n; ++i) {
        big_wrong += big[i] != static_cast<unsigned>(i * 2654435761u);
      }
      CHECK(cudaFree(d_big[d]));
    }
    CHECK(cudaFree(d_state[d]));
    CHECK(cudaFree(d_mixed[d]));
    CHECK(cudaFree(d_input[d]));
  }
  if (wrong != 0 || big_wrong != 0) {
    std::printf(
        "iterate: FAIL: %zu of %u state elements and %zu of %zu big elements wrong "
        "(all devices)\n",
        wrong, n, big_wrong, big_n);
    return 1;
  }
  std::printf("iterate: PASS (%d iterations, %zu MiB state, %zu MiB written once, %d device(s))\n", iterations,
              state_mib, big_mib, devices);
  return 0;
}

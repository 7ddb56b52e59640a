// An iterative program built on CUDA graphs and stream-ordered memory, for the failover
// tests: its state lives in graph memory (an allocation node that no graph frees, launched
// once), a second array comes from the device's memory pool (cudaMallocAsync), and every
// iteration launches a graph captured from a stream that allocates a scratch buffer,
// uploads host input into it, updates both arrays and frees the scratch. A CPU reference
// decides PASS. Its GPU may fail while it runs: with failover it prints "iterate: PASS"
// all the same, so the graph memory, the pool memory and the graphs came through.
//
//   graph_iterate [ITERATIONS [MS_BETWEEN [STATE_MIB]]]   (defaults 200 25 4)
//
// Prints "iterate: running" once some iterations are done (the tests fail the GPU after
// that), "iterate: iteration N" every 50, then "iterate: PASS" or what was wrong.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

constexpr unsigned kInput = 1024;  // host input elements per iteration

// state[i] = state[i] * 1664525 + 1013904223 + input[i % kInput]
__global__ void evolve(unsigned* state, unsigned n, const unsigned* input) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) state[i] = state[i] * 1664525u + 1013904223u + input[i % kInput];
}

// mixed[i] ^= state[(i * 7) % n]
__global__ void mix(unsigned* mixed, const unsigned* state, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) mixed[i] ^= state[(i * 7u) % n];
}

__global__ void count_up(unsigned* state, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) state[i] = i;
}

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  const int pause_ms = argc > 2 ? std::atoi(argv[2]) : 25;
  const size_t state_mib = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 4;
  EXPECT(iterations > 0 && pause_ms >= 0 && state_mib > 0);
  const unsigned n = static_cast<unsigned>(state_mib * (1 << 20) / 8);
  const unsigned blocks = (n + 255) / 256;
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // The state: graph memory, left in use by one launch of its graph (no free node).
  cudaGraph_t setup = nullptr;
  CHECK(cudaGraphCreate(&setup, 0));
  cudaMemAllocNodeParams alloc = {};
  alloc.poolProps.allocType = cudaMemAllocationTypePinned;
  alloc.poolProps.location.type = cudaMemLocationTypeDevice;
  alloc.poolProps.location.id = 0;
  alloc.bytesize = n * sizeof(unsigned);
  cudaGraphNode_t alloc_node = nullptr, init_node = nullptr;
  CHECK(cudaGraphAddMemAllocNode(&alloc_node, setup, nullptr, 0, &alloc));
  unsigned* d_state = static_cast<unsigned*>(alloc.dptr);
  void* init_args[] = {&d_state, const_cast<unsigned*>(&n)};
  cudaKernelNodeParams init = KernelNodeParams(reinterpret_cast<void*>(count_up), blocks, 256, init_args);
  CHECK(cudaGraphAddKernelNode(&init_node, setup, &alloc_node, 1, &init));
  cudaGraphExec_t setup_exec = nullptr;
  CHECK(cudaGraphInstantiate(&setup_exec, setup, 0));
  CHECK(cudaGraphLaunch(setup_exec, stream));
  // The mixed array: from the device's pool.
  unsigned* d_mixed = nullptr;
  CHECK(cudaMallocAsync(&d_mixed, n * sizeof(unsigned), stream));
  CHECK(cudaMemsetAsync(d_mixed, 0, n * sizeof(unsigned), stream));

  // One iteration, captured: scratch allocated, input uploaded, both arrays updated,
  // scratch freed. The host input is read when the graph runs.
  unsigned* input = nullptr;
  CHECK(cudaMallocHost(&input, kInput * sizeof(unsigned)));
  cudaGraph_t step = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  unsigned* scratch = nullptr;
  CHECK(cudaMallocAsync(&scratch, kInput * sizeof(unsigned), stream));
  CHECK(cudaMemcpyAsync(scratch, input, kInput * sizeof(unsigned), cudaMemcpyHostToDevice, stream));
  evolve<<<blocks, 256, 0, stream>>>(d_state, n, scratch);
  mix<<<blocks, 256, 0, stream>>>(d_mixed, d_state, n);
  CHECK(cudaFreeAsync(scratch, stream));
  CHECK(cudaStreamEndCapture(stream, &step));
  cudaGraphExec_t step_exec = nullptr;
  CHECK(cudaGraphInstantiate(&step_exec, step, 0));

  std::vector<unsigned> state(n), mixed(n, 0);
  for (unsigned i = 0; i < n; ++i) state[i] = i;
  unsigned probe = 0;
  for (int it = 1; it <= iterations; ++it) {
    for (unsigned j = 0; j < kInput; ++j) input[j] = static_cast<unsigned>(it * 31 + j * 17);
    CHECK(cudaGraphLaunch(step_exec, stream));
    // A value back every iteration, as an iterative solver reads its residual.
    CHECK(cudaMemcpyAsync(&probe, d_state + (it % n), sizeof(unsigned), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    for (unsigned i = 0; i < n; ++i) state[i] = state[i] * 1664525u + 1013904223u + input[i % kInput];
    for (unsigned i = 0; i < n; ++i) mixed[i] ^= state[(i * 7u) % n];
    if (probe != state[it % n]) {
      std::printf("iterate: FAIL at iteration %d: probe %u, expected %u\n", it, probe, state[it % n]);
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
  // The graph memory and the pool memory free as usual.
  CHECK(cudaFree(d_state));
  CHECK(cudaFreeAsync(d_mixed, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaGraphExecDestroy(step_exec));
  CHECK(cudaGraphDestroy(step));
  CHECK(cudaGraphExecDestroy(setup_exec));
  CHECK(cudaGraphDestroy(setup));
  CHECK(cudaFreeHost(input));
  if (wrong != 0) {
    std::printf("iterate: FAIL: %zu of %u elements differ from the CPU reference\n", wrong, n);
    return 1;
  }
  std::printf("iterate: PASS (%d iterations)\n", iterations);
  return 0;
}

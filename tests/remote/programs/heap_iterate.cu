// An iterative program whose state lives on the device heap (device-side malloc, as `new`
// in a kernel compiles to), for the failover tests: a kernel allocates one chunk per
// thread and keeps the pointers in an ordinary allocation; each iteration updates every
// chunk through its pointer, and every 10th iteration frees a third of the chunks and
// allocates them again with their contents carried over (the heap's free list at work).
// A CPU reference decides PASS. Its GPU may fail while it runs: with failover it prints
// "iterate: PASS" all the same, so the heap, its bookkeeping and the pointers into it came
// through.
//
//   heap_iterate [ITERATIONS [MS_BETWEEN]]   (defaults 120 20)
//
// Prints "iterate: running" once some iterations are done (the tests fail the GPU after
// that), "iterate: iteration N" every 50, then "iterate: PASS" or what was wrong.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

constexpr unsigned kChunks = 2048;  // one per thread
constexpr unsigned kWords = 64;     // per chunk: 512 KiB of the 8 MiB heap in all

// Allocates every chunk, filled with its number and word index; failed[0] counts NULLs.
__global__ void allocate(unsigned** chunks, unsigned* failed) {
  unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= kChunks) return;
  unsigned* chunk = static_cast<unsigned*>(malloc(kWords * sizeof(unsigned)));
  chunks[c] = chunk;
  if (chunk == nullptr) {
    atomicAdd(failed, 1u);
    return;
  }
  for (unsigned w = 0; w < kWords; ++w) chunk[w] = c * kWords + w;
}

// chunk[w] = chunk[w] * 1664525 + 1013904223 + iteration + c
__global__ void evolve(unsigned** chunks, unsigned iteration) {
  unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= kChunks || chunks[c] == nullptr) return;
  for (unsigned w = 0; w < kWords; ++w) {
    chunks[c][w] = chunks[c][w] * 1664525u + 1013904223u + iteration + c;
  }
}

// Chunks c % 3 == phase move to a new allocation with their contents.
__global__ void reallocate(unsigned** chunks, unsigned phase, unsigned* failed) {
  unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= kChunks || c % 3 != phase || chunks[c] == nullptr) return;
  unsigned* moved = static_cast<unsigned*>(malloc(kWords * sizeof(unsigned)));
  if (moved == nullptr) {
    atomicAdd(failed, 1u);
    return;
  }
  for (unsigned w = 0; w < kWords; ++w) moved[w] = chunks[c][w];
  free(chunks[c]);
  chunks[c] = moved;
}

// Copies every chunk out to `out` and frees it.
__global__ void gather(unsigned** chunks, unsigned* out) {
  unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= kChunks || chunks[c] == nullptr) return;
  for (unsigned w = 0; w < kWords; ++w) out[c * kWords + w] = chunks[c][w];
  free(chunks[c]);
  chunks[c] = nullptr;
}

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 120;
  const int pause_ms = argc > 2 ? std::atoi(argv[2]) : 20;
  EXPECT(iterations > 0 && pause_ms >= 0);
  const unsigned blocks = (kChunks + 127) / 128;
  unsigned** d_chunks = nullptr;
  unsigned* d_failed = nullptr;
  unsigned* d_out = nullptr;
  CHECK(cudaMalloc(&d_chunks, kChunks * sizeof(unsigned*)));
  CHECK(cudaMalloc(&d_failed, sizeof(unsigned)));
  CHECK(cudaMalloc(&d_out, kChunks * kWords * sizeof(unsigned)));
  CHECK(cudaMemset(d_failed, 0, sizeof(unsigned)));
  allocate<<<blocks, 128>>>(d_chunks, d_failed);
  CHECK(cudaGetLastError());

  std::vector<unsigned> state(kChunks * kWords);
  for (unsigned i = 0; i < kChunks * kWords; ++i) state[i] = i;
  for (int it = 1; it <= iterations; ++it) {
    evolve<<<blocks, 128>>>(d_chunks, static_cast<unsigned>(it));
    CHECK(cudaGetLastError());
    if (it % 10 == 0) {
      reallocate<<<blocks, 128>>>(d_chunks, static_cast<unsigned>(it / 10 % 3), d_failed);
      CHECK(cudaGetLastError());
    }
    for (unsigned c = 0; c < kChunks; ++c) {
      for (unsigned w = 0; w < kWords; ++w) {
        unsigned& v = state[c * kWords + w];
        v = v * 1664525u + 1013904223u + static_cast<unsigned>(it) + c;
      }
    }
    // A value back every iteration, as an iterative solver reads its residual.
    unsigned failed = 0;
    CHECK(cudaMemcpy(&failed, d_failed, sizeof(failed), cudaMemcpyDeviceToHost));
    if (failed != 0) {
      std::printf("iterate: FAIL at iteration %d: %u device malloc(s) returned NULL\n", it, failed);
      return 1;
    }
    if (it == 10) std::printf("iterate: running\n");
    if (it % 50 == 0) std::printf("iterate: iteration %d\n", it);
    std::fflush(stdout);
    if (pause_ms > 0) usleep(pause_ms * 1000);
  }
  gather<<<blocks, 128>>>(d_chunks, d_out);
  CHECK(cudaGetLastError());
  std::vector<unsigned> got(kChunks * kWords);
  CHECK(cudaMemcpy(got.data(), d_out, got.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != state[i];
  CHECK_FREE(d_chunks, d_failed, d_out);
  if (wrong != 0) {
    std::printf("iterate: FAIL: %zu of %zu words on the device heap wrong\n", wrong, got.size());
    return 1;
  }
  std::printf("iterate: PASS (%d iterations, %u chunks of %u words on the device heap)\n", iterations, kChunks, kWords);
  return 0;
}

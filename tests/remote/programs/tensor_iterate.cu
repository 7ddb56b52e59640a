// An iterative program that moves its state with tensor copies (TMA, compute capability
// 9.0), for the failover tests: two matrices of unsigned ints with a tensor map each (made
// by cuTensorMapEncodeTiled, one passed as a __grid_constant__ parameter, the other read
// from device memory); every iteration each block loads its 32 x 8 tile of one matrix into
// shared memory, mixes each element with its neighbour across the tile's columns, and
// stores the tile into the other matrix, then they swap. The matrix is no multiple of the
// tile, so the edge tiles read zeros outside it and write only inside it. A CPU reference
// decides PASS. Its GPU may fail while it runs: with failover it prints "iterate: PASS" all
// the same, so the matrices and the map in device memory came through (a map's bytes name
// device addresses, which a replacement GPU keeps).
//
//   tensor_iterate [ITERATIONS [MS_BETWEEN]]   (defaults 120 20)
//
// Prints "iterate: running" once some iterations are done (the tests fail the GPU after
// that), "iterate: iteration N" every 50, then "iterate: PASS" or what was wrong. On a GPU
// older than compute capability 9.0 it says so and fails.
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"
#include "tensor_tiles.cuh"

constexpr int kWidth = 100, kHeight = 30;  // no multiple of the tile
constexpr int kPitch = 112;                // elements a row: a multiple of 16 bytes
constexpr int kTileX = 32, kTileY = 8;

// next(x, y) = now(x, y) * 1664525 + now(x ^ 1, y) + iteration, where x ^ 1 is inside the
// matrix (else 0: the tile's zeros outside it).
__global__ void step(const __grid_constant__ CUtensorMap now, const CUtensorMap* next, unsigned iteration) {
  __shared__ alignas(128) unsigned tile[kTileY][kTileX];
  __shared__ alignas(128) unsigned out[kTileY][kTileX];
  __shared__ TileBarrier barrier;
  const int x = blockIdx.x * kTileX, y = blockIdx.y * kTileY;
  LoadTile(&tile, &now, x, y, barrier);
  for (int i = threadIdx.x; i < kTileX * kTileY; i += blockDim.x) {
    const int r = i / kTileX, c = i % kTileX;
    out[r][c] = tile[r][c] * 1664525u + tile[r][c ^ 1] + iteration;
  }
  StoreTile(next, x, y, &out);
}

void Encode(CUtensorMap* map, unsigned* base) {
  const cuuint64_t dims[2] = {kWidth, kHeight};
  const cuuint64_t strides[1] = {kPitch * sizeof(unsigned)};
  const cuuint32_t box[2] = {kTileX, kTileY};
  const cuuint32_t steps[2] = {1, 1};
  const CUresult status = cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, base, dims, strides, box,
                                                 steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                                 CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) {
    std::printf("iterate: FAIL: cuTensorMapEncodeTiled: %d\n", static_cast<int>(status));
    std::exit(1);
  }
}

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 120;
  const int pause_ms = argc > 2 ? std::atoi(argv[2]) : 20;
  EXPECT(iterations > 0 && pause_ms >= 0);
  cudaDeviceProp properties;
  CHECK(cudaGetDeviceProperties(&properties, 0));
  if (properties.major < 9) {
    std::printf("iterate: FAIL: %s is compute capability %d.%d; tensor copies need 9.0\n", properties.name,
                properties.major, properties.minor);
    return 1;
  }
  std::vector<unsigned> state(kPitch * kHeight, 0);
  for (int y = 0; y < kHeight; ++y) {
    for (int x = 0; x < kWidth; ++x) state[y * kPitch + x] = (y * kWidth + x) * 2654435761u;
  }
  unsigned* matrices[2];
  alignas(64) CUtensorMap maps[2];
  CUtensorMap* device_maps = nullptr;
  CHECK(cudaMalloc(&device_maps, sizeof(maps)));
  for (int i = 0; i < 2; ++i) {
    CHECK(cudaMalloc(&matrices[i], state.size() * sizeof(unsigned)));
    CHECK(cudaMemset(matrices[i], 0, state.size() * sizeof(unsigned)));
    Encode(&maps[i], matrices[i]);
  }
  CHECK(cudaMemcpy(device_maps, maps, sizeof(maps), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(matrices[0], state.data(), state.size() * sizeof(unsigned), cudaMemcpyHostToDevice));
  const dim3 grid((kWidth + kTileX - 1) / kTileX, (kHeight + kTileY - 1) / kTileY);
  for (int it = 1; it <= iterations; ++it) {
    const int now = (it - 1) % 2;
    step<<<grid, 64>>>(maps[now], device_maps + (1 - now), it);
    CHECK(cudaGetLastError());
    std::vector<unsigned> next(state.size(), 0);
    for (int y = 0; y < kHeight; ++y) {
      for (int x = 0; x < kWidth; ++x) {
        const unsigned neighbour = (x ^ 1) < kWidth ? state[y * kPitch + (x ^ 1)] : 0u;
        next[y * kPitch + x] = state[y * kPitch + x] * 1664525u + neighbour + static_cast<unsigned>(it);
      }
    }
    state.swap(next);
    // An element back every iteration, as an iterative solver reads its residual.
    unsigned corner = 0;
    CHECK(cudaMemcpy(&corner, matrices[1 - now] + (kHeight - 1) * kPitch + kWidth - 1, 4, cudaMemcpyDeviceToHost));
    if (corner != state[(kHeight - 1) * kPitch + kWidth - 1]) {
      std::printf("iterate: FAIL at iteration %d: the last element is %u, not %u\n", it, corner,
                  state[(kHeight - 1) * kPitch + kWidth - 1]);
      return 1;
    }
    if (it == 10) std::printf("iterate: running\n");
    if (it % 50 == 0) std::printf("iterate: iteration %d\n", it);
    std::fflush(stdout);
    if (pause_ms > 0) usleep(pause_ms * 1000);
  }
  std::vector<unsigned> got(state.size());
  CHECK(cudaMemcpy(got.data(), matrices[iterations % 2], got.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (int y = 0; y < kHeight; ++y) {
    for (int x = 0; x < kPitch; ++x) {
      // The padding past each row stays 0: stores write only inside the matrix.
      wrong += got[y * kPitch + x] != (x < kWidth ? state[y * kPitch + x] : 0u);
    }
  }
  CHECK_FREE(matrices[0], matrices[1], device_maps);
  if (wrong != 0) {
    std::printf("iterate: FAIL: %zu of %zu elements wrong\n", wrong, got.size());
    return 1;
  }
  std::printf("iterate: PASS (%d iterations, two %dx%d matrices through tensor copies)\n", iterations, kWidth, kHeight);
  return 0;
}

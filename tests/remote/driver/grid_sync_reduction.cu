// A grid-wide reduction with cooperative groups' grid.sync() over 2^25 elements (issue 41:
// such a program hung the sim and then the pool). The grid is sized as public programs size
// it: the occupancy calculator's blocks per SM times the SMs, launched cooperatively. Each
// block reduces its grid-stride share into partial[block]; grid.sync(); block 0 sums the
// partials; grid.sync(); every thread then scales its elements by the total's low bits,
// and a second reduction after another grid.sync() checks that every block saw the total.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace cg = cooperative_groups;

namespace {

constexpr int kThreads = 256;

__device__ unsigned long long BlockSum(cg::thread_block block, unsigned long long mine) {
  __shared__ unsigned long long warp_sums[kThreads / 32];
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  mine = cg::reduce(warp, mine, cg::plus<unsigned long long>());
  if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = mine;
  block.sync();
  unsigned long long sum = 0;
  if (block.thread_rank() == 0) {
    for (unsigned w = 0; w < block.size() / 32; ++w) sum += warp_sums[w];
  }
  block.sync();
  return sum;
}

__global__ void ReduceScaleReduce(unsigned* data, size_t n, unsigned long long* partial, unsigned long long* totals) {
  cg::grid_group grid = cg::this_grid();
  cg::thread_block block = cg::this_thread_block();
  unsigned long long mine = 0;
  for (size_t i = grid.thread_rank(); i < n; i += grid.size()) mine += data[i];
  unsigned long long sum = BlockSum(block, mine);
  if (block.thread_rank() == 0) partial[blockIdx.x] = sum;
  grid.sync();
  if (grid.thread_rank() == 0) {
    unsigned long long total = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) total += partial[b];
    totals[0] = total;
  }
  grid.sync();
  const unsigned scale = static_cast<unsigned>(totals[0] & 7) + 1;
  mine = 0;
  for (size_t i = grid.thread_rank(); i < n; i += grid.size()) {
    data[i] *= scale;
    mine += data[i];
  }
  sum = BlockSum(block, mine);
  if (block.thread_rank() == 0) partial[blockIdx.x] = sum;
  grid.sync();
  if (grid.thread_rank() == 0) {
    unsigned long long total = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) total += partial[b];
    totals[1] = total;
  }
}

}  // namespace

int main() {
  int device = 0, sms = 0, per_sm = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ReduceScaleReduce, kThreads, 0));
  EXPECT(per_sm > 0);
  const int blocks = per_sm * sms;
  const size_t n = size_t{1} << 25;
  std::vector<unsigned> host(n);
  unsigned long long want = 0;
  for (size_t i = 0; i < n; ++i) {
    host[i] = static_cast<unsigned>((i * 2654435761u) >> 20);  // 12-bit values
    want += host[i];
  }
  const unsigned long long scale = (want & 7) + 1;
  unsigned* data = nullptr;
  unsigned long long *partial = nullptr, *totals = nullptr;
  CHECK(cudaMalloc(&data, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&partial, blocks * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&totals, 2 * sizeof(unsigned long long)));
  CHECK(cudaMemcpy(data, host.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  size_t n_arg = n;
  void* args[] = {&data, &n_arg, &partial, &totals};
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(ReduceScaleReduce), blocks, kThreads, args, 0, nullptr));
  CHECK(cudaDeviceSynchronize());
  unsigned long long got[2] = {0, 0};
  CHECK(cudaMemcpy(got, totals, sizeof(got), cudaMemcpyDeviceToHost));
  if (got[0] != want || got[1] != want * scale) {
    std::fprintf(stderr, "FAIL: %d blocks: totals %llu %llu, want %llu %llu\n", blocks, got[0], got[1], want,
                 want * scale);
    return 1;
  }
  // Spot-check the scaled data.
  std::vector<unsigned> back(n);
  CHECK(cudaMemcpy(back.data(), data, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i += 4099) {
    if (back[i] != host[i] * scale) {
      std::fprintf(stderr, "FAIL: element %zu: %u, want %llu\n", i, back[i], host[i] * scale);
      return 1;
    }
  }
  std::printf("grid sync reduction: ok (2^25 elements, %d blocks of %d threads)\n", blocks, kThreads);
  return 0;
}

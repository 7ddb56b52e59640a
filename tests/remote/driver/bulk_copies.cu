// Bulk asynchronous copies and transaction counts (compute capability 9.0), as CUDA 12 and
// 13 compile them: cuda::memcpy_async of a cuda::aligned_size_t<16> size with a cuda::barrier
// (cp.async.bulk into shared memory, mbarrier.expect_tx), from the whole block and from one
// thread; the same spelled with cuda::ptx (cp_async_bulk, mbarrier_arrive_expect_tx,
// try_wait.parity over several phases); shared memory back to global memory in a bulk
// async-group (cp.async.bulk.global.shared::cta, commit_group, wait_group.read); and a
// block copying into the shared memory of the other block of its cluster, completing on
// that block's barrier; and stores and reductions into it that complete there too
// (st.async, red.async). On an older GPU (the sim's A100) the sm_90 code has nothing to run
// on: an error, none runs wrong. Exits 0 only if every result matches a CPU reference.
#include <cooperative_groups.h>

#include <cstdio>
#include <cuda/barrier>
#include <cuda/ptx>
#include <vector>

#include "../programs/check.h"

namespace cg = cooperative_groups;

// A __shared__ cuda::barrier is initialised by init(), not by a constructor (CUDA's own idiom).
#pragma nv_diag_suppress static_var_with_dynamic_init

namespace {

constexpr int kThreads = 256;

// The whole block copies its 4 KiB tile in one memcpy_async, then reads it reversed.
__global__ void BlockCopy(const float4* in, float4* out) {
  __shared__ alignas(16) float4 tile[kThreads];
  __shared__ cuda::barrier<cuda::thread_scope_block> barrier;
  cg::thread_block block = cg::this_thread_block();
  if (block.thread_rank() == 0) init(&barrier, block.size());
  block.sync();
  cuda::memcpy_async(block, tile, in + blockIdx.x * kThreads, cuda::aligned_size_t<16>(sizeof(tile)), barrier);
  barrier.arrive_and_wait();
  out[blockIdx.x * kThreads + threadIdx.x] = tile[kThreads - 1 - threadIdx.x];
}

// Thread 0 alone copies two halves, in two phases of the same barrier.
__global__ void ThreadCopy(const float4* in, float4* out) {
  __shared__ alignas(16) float4 tile[kThreads];
  __shared__ cuda::barrier<cuda::thread_scope_block> barrier;
  if (threadIdx.x == 0) init(&barrier, blockDim.x);
  __syncthreads();
  for (int half = 0; half < 2; ++half) {
    if (threadIdx.x == 0) {
      cuda::memcpy_async(tile + half * kThreads / 2, in + blockIdx.x * kThreads + half * kThreads / 2,
                         cuda::aligned_size_t<16>(sizeof(tile) / 2), barrier);
    }
    barrier.arrive_and_wait();
  }
  out[blockIdx.x * kThreads + threadIdx.x] = tile[(threadIdx.x + 1) % kThreads];
}

// cuda::ptx: thread 0 expects the bytes and copies; every thread waits for the phase's
// parity; three tiles through one buffer. Then the block's sums go back to global memory in
// one bulk copy of its own.
__global__ void PtxPhases(const float* in, float* sums, int tiles) {
  __shared__ alignas(16) float tile[kThreads];
  __shared__ alignas(16) float out[kThreads];
  __shared__ alignas(8) uint64_t barrier;
  if (threadIdx.x == 0) {
    cuda::ptx::mbarrier_init(&barrier, 1);
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  __syncthreads();
  float sum = 0;
  for (int t = 0; t < tiles; ++t) {
    if (threadIdx.x == 0) {
      cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared,
                                           &barrier, sizeof(tile));
      cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, tile,
                               in + (blockIdx.x * tiles + t) * kThreads, sizeof(tile), &barrier);
    }
    while (!cuda::ptx::mbarrier_try_wait_parity(&barrier, t % 2)) {
    }
    sum += tile[threadIdx.x];
    __syncthreads();  // every thread read this tile before the next overwrites it
  }
  out[threadIdx.x] = sum;
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
  __syncthreads();
  if (threadIdx.x == 0) {
    cuda::ptx::cp_async_bulk(cuda::ptx::space_global, cuda::ptx::space_shared, sums + blockIdx.x * kThreads, out,
                             sizeof(out));
    cuda::ptx::cp_async_bulk_commit_group();
    cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<0>());
  }
}

// Rank 0 of each cluster of two copies its tile into rank 1's shared memory, completing on
// rank 1's barrier; rank 1 waits there and writes what it got.
__global__ void __cluster_dims__(2, 1, 1) ToTheOtherBlock(const float* in, float* out) {
  __shared__ alignas(16) float mine[kThreads];
  __shared__ alignas(16) float received[kThreads];
  __shared__ alignas(8) uint64_t barrier;
  cg::cluster_group cluster = cg::this_cluster();
  mine[threadIdx.x] = in[blockIdx.x * kThreads + threadIdx.x];
  if (threadIdx.x == 0) {
    cuda::ptx::mbarrier_init(&barrier, 1);
    if (cluster.block_rank() == 1) {
      cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cluster, cuda::ptx::space_shared,
                                           &barrier, sizeof(received));
    }
  }
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
  cluster.sync();
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_shared, cluster.map_shared_rank(received, 1),
                             mine, sizeof(mine), cluster.map_shared_rank(&barrier, 1));
  }
  if (cluster.block_rank() == 1) {
    while (!cuda::ptx::mbarrier_try_wait_parity(&barrier, 0)) {
    }
    out[blockIdx.x / 2 * kThreads + threadIdx.x] = received[threadIdx.x];
  }
  cluster.sync();
}

// Rank 0 of each cluster of two stores a word per thread into rank 1's shared memory and
// adds into its counter, each completing its bytes on rank 1's barrier (st.async,
// red.async); rank 1 waits for all of them there.
__global__ void __cluster_dims__(2, 1, 1) AsyncStores(unsigned* out) {
  __shared__ alignas(16) unsigned words[kThreads];
  __shared__ unsigned counter;
  __shared__ alignas(8) uint64_t barrier;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) {
    counter = 0;
    cuda::ptx::mbarrier_init(&barrier, 1);
    if (cluster.block_rank() == 1) {
      cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cluster, cuda::ptx::space_shared,
                                           &barrier, 2 * kThreads * sizeof(unsigned));
    }
  }
  cluster.sync();
  if (cluster.block_rank() == 0) {
    uint64_t* remote_barrier = cluster.map_shared_rank(&barrier, 1);
    cuda::ptx::st_async(cluster.map_shared_rank(words, 1) + threadIdx.x, threadIdx.x * 3u + 1u, remote_barrier);
    cuda::ptx::red_async(cuda::ptx::op_add_t{}, cluster.map_shared_rank(&counter, 1),
                         static_cast<uint32_t>(threadIdx.x), remote_barrier);
  } else {
    while (!cuda::ptx::mbarrier_try_wait_parity(&barrier, 0)) {
    }
    out[blockIdx.x / 2 * (kThreads + 1) + threadIdx.x] = words[threadIdx.x];
    if (threadIdx.x == 0) out[blockIdx.x / 2 * (kThreads + 1) + kThreads] = counter;
  }
  cluster.sync();
}

}  // namespace

int main() {
  const cudaDeviceProp properties = DescribeDeviceExpectingModel();
  const int blocks = 8, tiles = 3;
  const int n = blocks * kThreads * tiles;
  std::vector<float> host(n * 4);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 977) * 0.25f;
  float* in = nullptr;
  float* out = nullptr;
  CHECK(cudaMalloc(&in, host.size() * sizeof(float)));
  CHECK(cudaMalloc(&out, host.size() * sizeof(float)));
  CHECK(cudaMemcpy(in, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  const float4* in4 = reinterpret_cast<const float4*>(in);
  float4* out4 = reinterpret_cast<float4*>(out);
  if (properties.major < 9) {
    BlockCopy<<<blocks, kThreads>>>(in4, out4);
    ExpectNoCodeForAnOlderGpu(properties, cudaGetLastError());
    return 0;
  }
  std::vector<float4> got(blocks * kThreads);
  const float4* host4 = reinterpret_cast<const float4*>(host.data());
  auto same = [](const float4& a, const float4& b) { return a.x == b.x && a.y == b.y && a.z == b.z && a.w == b.w; };

  BlockCopy<<<blocks, kThreads>>>(in4, out4);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(got.data(), out4, got.size() * sizeof(float4), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < kThreads; ++t) wrong += !same(got[b * kThreads + t], host4[b * kThreads + kThreads - 1 - t]);
  }
  std::printf("block-wide memcpy_async: %d wrong\n", wrong);
  EXPECT(wrong == 0);

  ThreadCopy<<<blocks, kThreads>>>(in4, out4);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(got.data(), out4, got.size() * sizeof(float4), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < kThreads; ++t) {
      wrong += !same(got[b * kThreads + t], host4[b * kThreads + (t + 1) % kThreads]);
    }
  }
  std::printf("one thread's memcpy_async in two phases: %d wrong\n", wrong);
  EXPECT(wrong == 0);

  CHECK(cudaMemset(out, 0, blocks * kThreads * sizeof(float)));
  PtxPhases<<<blocks, kThreads>>>(in, out, tiles);
  CHECK(cudaGetLastError());
  std::vector<float> sums(blocks * kThreads);
  CHECK(cudaMemcpy(sums.data(), out, sums.size() * sizeof(float), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < kThreads; ++t) {
      float want = 0;
      for (int k = 0; k < tiles; ++k) want += host[(b * tiles + k) * kThreads + t];
      wrong += sums[b * kThreads + t] != want;
    }
  }
  std::printf("cuda::ptx bulk copies over %d phases, sums back by a bulk copy: %d wrong (sum[5] %g)\n", tiles, wrong,
              sums[5]);
  EXPECT(wrong == 0);

  CHECK(cudaMemset(out, 0, blocks / 2 * kThreads * sizeof(float)));
  ToTheOtherBlock<<<blocks, kThreads>>>(in, out);
  CHECK(cudaGetLastError());
  std::vector<float> received(blocks / 2 * kThreads);
  CHECK(cudaMemcpy(received.data(), out, received.size() * sizeof(float), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int c = 0; c < blocks / 2; ++c) {
    for (int t = 0; t < kThreads; ++t) wrong += received[c * kThreads + t] != host[2 * c * kThreads + t];
  }
  std::printf("bulk copy into the other block of the cluster: %d wrong\n", wrong);
  EXPECT(wrong == 0);

  unsigned* stored = nullptr;
  const int clusters = blocks / 2;
  CHECK(cudaMalloc(&stored, clusters * (kThreads + 1) * sizeof(unsigned)));
  CHECK(cudaMemset(stored, 0, clusters * (kThreads + 1) * sizeof(unsigned)));
  AsyncStores<<<blocks, kThreads>>>(stored);
  CHECK(cudaGetLastError());
  std::vector<unsigned> words(clusters * (kThreads + 1));
  CHECK(cudaMemcpy(words.data(), stored, words.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int c = 0; c < clusters; ++c) {
    for (int t = 0; t < kThreads; ++t) wrong += words[c * (kThreads + 1) + t] != t * 3u + 1u;
    wrong += words[c * (kThreads + 1) + kThreads] != kThreads * (kThreads - 1) / 2;
  }
  std::printf("st.async and red.async into the other block: %d wrong (counter %u)\n", wrong, words[kThreads]);
  EXPECT(wrong == 0);
  CHECK(cudaFree(stored));

  CHECK(cudaFree(in));
  CHECK(cudaFree(out));
  std::printf("PASS\n");
  return 0;
}

// Asynchronous copies from global to shared memory (sm_80's cp.async, as CUDA's pipeline
// primitives, cooperative groups' memcpy_async and cuda::pipeline compile them) and
// cuda::barrier (mbarrier) through the sim GPU: 4-, 8- and 16-byte copies, zero fill,
// commits and waits over several stages, a barrier that completes a copy and then serves
// several phases. Exits 0 only if every result matches a CPU reference.
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cuda_pipeline.h>

#include <cstdio>
#include <cuda/barrier>
#include <cuda/pipeline>
#include <vector>

#include "../programs/check.h"

namespace cg = cooperative_groups;

// A __shared__ cuda::barrier is initialised by init(), not by a constructor (CUDA's own idiom).
#pragma nv_diag_suppress static_var_with_dynamic_init

namespace {

constexpr int kThreads = 64;

// 16 bytes per thread with the pipeline primitives; the upper half of every odd thread's
// copy is zero filled (zfill). Each thread then reads another thread's copy.
__global__ void primitives(const float4* in, float4* out) {
  __shared__ float4 staged[kThreads];
  const int t = threadIdx.x;
  __pipeline_memcpy_async(&staged[t], &in[t], sizeof(float4), t % 2 ? 8 : 0);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  out[t] = staged[kThreads - 1 - t];
}

// A whole block copies n ints with cooperative groups, then reverses them.
__global__ void groups(const int* in, int* out, int n) {
  extern __shared__ int shared[];
  auto block = cg::this_thread_block();
  cg::memcpy_async(block, shared, in, sizeof(int) * n);
  cg::wait(block);
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = shared[n - 1 - i];
}

// A two-stage cuda::pipeline: both stages in flight, then consumed in order.
__global__ void pipeline(const int2* in, int2* out) {
  __shared__ int2 stage[2][kThreads];
  auto pipe = cuda::make_pipeline();
  const int t = threadIdx.x;
  for (int s = 0; s < 2; ++s) {
    pipe.producer_acquire();
    cuda::memcpy_async(&stage[s][t], &in[s * kThreads + t], cuda::aligned_size_t<8>(8), pipe);
    pipe.producer_commit();
  }
  int2 sum = {0, 0};
  for (int s = 0; s < 2; ++s) {
    pipe.consumer_wait();
    __syncthreads();
    int2 v = stage[s][kThreads - 1 - t];
    sum.x += v.x;
    sum.y += v.y;
    pipe.consumer_release();
  }
  out[t] = sum;
}

// A block-scoped cuda::barrier: memcpy_async completes on it, then three more phases, one
// with a split arrive and wait.
__global__ void barrier(const int* in, int* out) {
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  __shared__ int staged[kThreads];
  const int t = threadIdx.x;
  if (t == 0) init(&bar, blockDim.x);
  __syncthreads();
  cuda::memcpy_async(&staged[t], &in[t], sizeof(int), bar);
  bar.arrive_and_wait();
  int v = staged[kThreads - 1 - t];
  bar.arrive_and_wait();
  staged[t] = v * 2;
  auto token = bar.arrive();
  bar.wait(std::move(token));
  out[t] = staged[(t + 1) % kThreads];
}

}  // namespace

int main() {
  bool ok = true;
  {
    std::vector<float4> in(kThreads), out(kThreads);
    for (int i = 0; i < kThreads; ++i) in[i] = {i + 0.5f, -i * 1.0f, i * 2.0f, 7.0f};
    float4 *din = nullptr, *dout = nullptr;
    CHECK(cudaMalloc(&din, sizeof(float4) * kThreads));
    CHECK(cudaMalloc(&dout, sizeof(float4) * kThreads));
    CHECK(cudaMemcpy(din, in.data(), sizeof(float4) * kThreads, cudaMemcpyHostToDevice));
    primitives<<<1, kThreads>>>(din, dout);
    CHECK(cudaMemcpy(out.data(), dout, sizeof(float4) * kThreads, cudaMemcpyDeviceToHost));
    for (int t = 0; t < kThreads; ++t) {
      int from = kThreads - 1 - t;
      float4 want = in[from];
      if (from % 2) want.z = want.w = 0.0f;  // zero filled
      if (out[t].x != want.x || out[t].y != want.y || out[t].z != want.z || out[t].w != want.w) {
        std::fprintf(stderr, "primitives[%d] = {%g %g %g %g}, want {%g %g %g %g}\n", t, out[t].x, out[t].y, out[t].z,
                     out[t].w, want.x, want.y, want.z, want.w);
        ok = false;
        break;
      }
    }
    std::printf("pipeline primitives with zero fill: %s\n", ok ? "ok" : "WRONG");
  }
  {
    const int n = 1000;
    std::vector<int> in(n), out(n);
    for (int i = 0; i < n; ++i) in[i] = i * 31 - 7;
    int *din = nullptr, *dout = nullptr;
    CHECK(cudaMalloc(&din, sizeof(int) * n));
    CHECK(cudaMalloc(&dout, sizeof(int) * n));
    CHECK(cudaMemcpy(din, in.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
    groups<<<1, 128, sizeof(int) * n>>>(din, dout, n);
    CHECK(cudaMemcpy(out.data(), dout, sizeof(int) * n, cudaMemcpyDeviceToHost));
    bool here = true;
    for (int i = 0; i < n && here; ++i) {
      if (out[i] != in[n - 1 - i]) {
        std::fprintf(stderr, "groups[%d] = %d, want %d\n", i, out[i], in[n - 1 - i]);
        here = false;
      }
    }
    std::printf("cooperative groups memcpy_async: %s\n", here ? "ok" : "WRONG");
    ok &= here;
  }
  {
    std::vector<int2> in(2 * kThreads), out(kThreads);
    for (int i = 0; i < 2 * kThreads; ++i) in[i] = {i, 1000 - 3 * i};
    int2 *din = nullptr, *dout = nullptr;
    CHECK(cudaMalloc(&din, sizeof(int2) * 2 * kThreads));
    CHECK(cudaMalloc(&dout, sizeof(int2) * kThreads));
    CHECK(cudaMemcpy(din, in.data(), sizeof(int2) * 2 * kThreads, cudaMemcpyHostToDevice));
    pipeline<<<1, kThreads>>>(din, dout);
    CHECK(cudaMemcpy(out.data(), dout, sizeof(int2) * kThreads, cudaMemcpyDeviceToHost));
    bool here = true;
    for (int t = 0; t < kThreads && here; ++t) {
      int from = kThreads - 1 - t;
      int2 want = {in[from].x + in[kThreads + from].x, in[from].y + in[kThreads + from].y};
      if (out[t].x != want.x || out[t].y != want.y) {
        std::fprintf(stderr, "pipeline[%d] = {%d %d}, want {%d %d}\n", t, out[t].x, out[t].y, want.x, want.y);
        here = false;
      }
    }
    std::printf("cuda::pipeline, two stages: %s\n", here ? "ok" : "WRONG");
    ok &= here;
  }
  {
    std::vector<int> in(kThreads), out(kThreads);
    for (int i = 0; i < kThreads; ++i) in[i] = i * 3 + 1;
    int *din = nullptr, *dout = nullptr;
    CHECK(cudaMalloc(&din, sizeof(int) * kThreads));
    CHECK(cudaMalloc(&dout, sizeof(int) * kThreads));
    CHECK(cudaMemcpy(din, in.data(), sizeof(int) * kThreads, cudaMemcpyHostToDevice));
    barrier<<<1, kThreads>>>(din, dout);
    CHECK(cudaMemcpy(out.data(), dout, sizeof(int) * kThreads, cudaMemcpyDeviceToHost));
    bool here = true;
    for (int t = 0; t < kThreads && here; ++t) {
      int want = 2 * in[kThreads - 1 - (t + 1) % kThreads];
      if (out[t] != want) {
        std::fprintf(stderr, "barrier[%d] = %d, want %d\n", t, out[t], want);
        here = false;
      }
    }
    std::printf("cuda::barrier with memcpy_async, three phases: %s\n", here ? "ok" : "WRONG");
    ok &= here;
  }
  return FinishProgram("async_copies", ok);
}

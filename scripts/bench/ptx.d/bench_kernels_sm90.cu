// Kernels of ptx_bench that need compute capability 9.0: a 32x32 tile of floats per block,
// scaled (x * 2 + 1) from one matrix into another, its tiles moved by tensor copies (TMA:
// tensor_tiles, the maps as __grid_constant__ parameters) and, as the baseline in the same
// run, by plain loads and stores through the same shared memory (shared_tiles).
#include <cuda.h>

#include <cuda/barrier>

using Barrier = cuda::barrier<cuda::thread_scope_block>;
namespace cde = cuda::device::experimental;

// A __shared__ cuda::barrier is initialised by init(), not by a constructor (CUDA's own idiom).
#pragma nv_diag_suppress static_var_with_dynamic_init

constexpr int kTile = 32;

extern "C" __global__ void tensor_tiles(const __grid_constant__ CUtensorMap in,
                                        const __grid_constant__ CUtensorMap out) {
  __shared__ alignas(128) float tile[kTile][kTile];
  __shared__ Barrier barrier;
  const int x = blockIdx.x * kTile, y = blockIdx.y * kTile;
  if (threadIdx.x == 0) {
    init(&barrier, blockDim.x);
    cde::fence_proxy_async_shared_cta();
  }
  __syncthreads();
  Barrier::arrival_token token;
  if (threadIdx.x == 0) {
    cde::cp_async_bulk_tensor_2d_global_to_shared(&tile, &in, x, y, barrier);
    token = cuda::device::barrier_arrive_tx(barrier, 1, sizeof(tile));
  } else {
    token = barrier.arrive();
  }
  barrier.wait(std::move(token));
  for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
    float& v = tile[i / kTile][i % kTile];
    v = v * 2 + 1;
  }
  cde::fence_proxy_async_shared_cta();
  __syncthreads();
  if (threadIdx.x == 0) {
    cde::cp_async_bulk_tensor_2d_shared_to_global(&out, x, y, &tile);
    cde::cp_async_bulk_commit_group();
    cde::cp_async_bulk_wait_group_read<0>();
  }
}

extern "C" __global__ void shared_tiles(const float* in, float* out, int width) {
  __shared__ float tile[kTile][kTile];
  const int x = blockIdx.x * kTile, y = blockIdx.y * kTile;
  for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
    tile[i / kTile][i % kTile] = in[(y + i / kTile) * width + x + i % kTile];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
    float& v = tile[i / kTile][i % kTile];
    v = v * 2 + 1;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
    out[(y + i / kTile) * width + x + i % kTile] = tile[i / kTile][i % kTile];
  }
}

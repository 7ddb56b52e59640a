// Tensor copies (TMA, compute capability 9.0) of a block's 2D tile, as CUDA's programming
// guide writes them, for the test programs that move their data so (tensor_copies.cu,
// tensor_iterate.cu): a cuda::barrier the block initialises, thread 0 starting the copy
// and expecting its bytes, every thread waiting; and a store of the tile back once the
// block's writes to it are visible to the copy.
#pragma once

#include <cuda.h>

#include <cuda/barrier>

// A __shared__ cuda::barrier is initialised by init(), not by a constructor (CUDA's own idiom).
#pragma nv_diag_suppress static_var_with_dynamic_init

using TileBarrier = cuda::barrier<cuda::thread_scope_block>;

// Loads the box of `map` at (x, y) into `tile` (its size the box's bytes); every thread of
// the block returns once it is there. `barrier` is the block's, used once.
template <typename Tile>
__device__ void LoadTile(Tile* tile, const CUtensorMap* map, int x, int y, TileBarrier& barrier) {
  namespace cde = cuda::device::experimental;
  if (threadIdx.x == 0) {
    init(&barrier, blockDim.x);
    cde::fence_proxy_async_shared_cta();
  }
  __syncthreads();
  TileBarrier::arrival_token token;
  if (threadIdx.x == 0) {
    cde::cp_async_bulk_tensor_2d_global_to_shared(tile, map, x, y, barrier);
    token = cuda::device::barrier_arrive_tx(barrier, 1, sizeof(Tile));
  } else {
    token = barrier.arrive();
  }
  barrier.wait(std::move(token));
}

// Stores `tile` into the box of `map` at (x, y) once every thread of the block wrote its
// part; thread 0 waits until the copy has read the tile.
template <typename Tile>
__device__ void StoreTile(const CUtensorMap* map, int x, int y, Tile* tile) {
  namespace cde = cuda::device::experimental;
  cde::fence_proxy_async_shared_cta();
  __syncthreads();
  if (threadIdx.x == 0) {
    cde::cp_async_bulk_tensor_2d_shared_to_global(map, x, y, tile);
    cde::cp_async_bulk_commit_group();
    cde::cp_async_bulk_wait_group_read<0>();
  }
}

// Kernels of tensor_copy_test.cc (compute capability 9.0): tensor copies (TMA,
// cp.async.bulk.tensor) of a box at the coordinates the test gives, with the tensor map a
// __grid_constant__ parameter (as CUDA's programming guide passes it) or in global memory.
// A load's box goes to `out` byte for byte as it lies in shared memory (swizzled or not);
// a store's box comes from `in` the same way.
#include <cuda.h>

#include <cstdint>

namespace {

constexpr int kBoxBytes = 16384;

__device__ void LoadBox(const void* map, const int* c, int rank, uint32_t box, uint32_t barrier, uint32_t bytes) {
  const uint64_t m = reinterpret_cast<uint64_t>(map);
  switch (rank) {
    case 1:  // the .shared::cta form (PTX ISA 8.6)
      asm volatile(
          "cp.async.bulk.tensor.1d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];" ::"r"(
              box),
          "l"(m), "r"(barrier), "r"(c[0])
          : "memory");
      break;
    case 2:  // after a prefetch of the box into L2 (nothing to do on the sim)
      asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(m), "r"(c[0]), "r"(c[1])
                   : "memory");
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
          "[%2];" ::"r"(box),
          "l"(m), "r"(barrier), "r"(c[0]), "r"(c[1])
          : "memory");
      break;
    case 3:
      asm volatile(
          "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
          "[%2];" ::"r"(box),
          "l"(m), "r"(barrier), "r"(c[0]), "r"(c[1]), "r"(c[2])
          : "memory");
      break;
    case 4:
      asm volatile(
          "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
          "%6}], [%2];" ::"r"(box),
          "l"(m), "r"(barrier), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3])
          : "memory");
      break;
    default:
      asm volatile(
          "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
          "{%3, %4, %5, %6, %7}], [%2], %8;" ::"r"(box),
          "l"(m), "r"(barrier), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "l"(uint64_t{0})
          : "memory");
  }
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes) : "memory");
}

__device__ void StoreBox(const void* map, const int* c, int rank, uint32_t box) {
  const uint64_t m = reinterpret_cast<uint64_t>(map);
  switch (rank) {
    case 1:
      asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%0, {%2}], [%1];" ::"l"(m), "r"(box),
                   "r"(c[0])
                   : "memory");
      break;
    case 2:
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(m),
                   "r"(box), "r"(c[0]), "r"(c[1])
                   : "memory");
      break;
    default:
      asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(m), "r"(box),
                   "r"(c[0]), "r"(c[1]), "r"(c[2])
                   : "memory");
  }
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Thread 0 starts the copy of `bytes` into the block's 1024-aligned box at `offset` bytes
// (a misaligned box when it is no multiple of 128); every thread waits on the mbarrier,
// then the block copies the box to `out`.
__device__ void LoadAndPublish(const void* map, const int* coords, int rank, int bytes, int offset, uint32_t* out) {
  __shared__ alignas(1024) unsigned char box[kBoxBytes + 1024];
  __shared__ alignas(8) uint64_t barrier;
  const uint32_t barrier_at = static_cast<uint32_t>(__cvta_generic_to_shared(&barrier));
  const uint32_t box_at = static_cast<uint32_t>(__cvta_generic_to_shared(box)) + offset;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(barrier_at) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
    LoadBox(map, coords, rank, box_at, barrier_at, bytes);
  }
  uint32_t done = 0;
  while (!done) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(barrier_at)
                 : "memory");
  }
  const uint32_t* words = reinterpret_cast<const uint32_t*>(box + offset);
  for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x) out[i] = words[i];
}

}  // namespace

struct Coords {
  int c[5];
};

extern "C" __global__ void LoadTile(const __grid_constant__ CUtensorMap map, Coords coords, int rank, int bytes,
                                    int offset, uint32_t* out) {
  LoadAndPublish(&map, coords.c, rank, bytes, offset, out);
}

// The map in global memory (written there by the host, or by another kernel).
extern "C" __global__ void LoadTileGlobalMap(const CUtensorMap* map, Coords coords, int rank, int bytes,
                                             uint32_t* out) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(map) : "memory");
  LoadAndPublish(map, coords.c, rank, bytes, 0, out);
}

// The block writes `in` into its box in shared memory, then thread 0 stores the box.
extern "C" __global__ void StoreTile(const __grid_constant__ CUtensorMap map, Coords coords, int rank, int bytes,
                                     const uint32_t* in) {
  __shared__ alignas(1024) uint32_t box[kBoxBytes / 4];
  for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x) box[i] = in[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    StoreBox(&map, coords.c, rank, static_cast<uint32_t>(__cvta_generic_to_shared(box)));
  }
}

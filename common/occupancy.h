// The occupancy calculator (cuOccupancy*): how many blocks of a kernel fit on one SM of a
// GPU model, by the same rules as NVIDIA's calculator: warps, blocks, registers and shared
// memory per SM, each with its allocation granularity. The client library's (on the host)
// and the sim's device runtime (cudaOccupancyMaxActiveBlocksPerMultiprocessor in device
// code) share it, so that both say the same.
#pragma once

#include <cstddef>

#include "common/gpu_models.h"

namespace gpupool {

// What the calculator needs to know about a kernel.
struct KernelResources {
  int registers_per_thread = 32;
  int static_shared_bytes = 0;
  int max_threads_per_block = 1024;
};

// Resident blocks per SM (0 when one block does not fit).
int ActiveBlocksPerMultiprocessor(const GpuModel& model, const KernelResources& kernel, int block_size,
                                  size_t dynamic_shared_bytes);

// The dynamic shared memory each of `blocks` resident blocks of `block_size` threads can
// have (0 when that many blocks cannot be resident at all).
size_t AvailableDynamicSharedPerBlock(const GpuModel& model, const KernelResources& kernel, int blocks, int block_size);

// The block size with the highest occupancy and the grid size that fills every SM with it.
// `shared_for_block_size` (nullable) gives the dynamic shared memory a block size needs;
// else `dynamic_shared_bytes` is used for all. `block_size_limit` 0: no limit.
void MaxPotentialBlockSize(const GpuModel& model, const KernelResources& kernel, size_t (*shared_for_block_size)(int),
                           size_t dynamic_shared_bytes, int block_size_limit, int* min_grid_size, int* block_size);

}  // namespace gpupool

#include "common/occupancy.h"

#include <algorithm>

namespace gpupool {
namespace {

constexpr int kWarpSize = 32;
constexpr int kRegisterAllocationUnit = 256;  // registers, per warp
constexpr int kSharedAllocationUnit = 128;    // bytes, per block

int RoundUp(int value, int unit) { return (value + unit - 1) / unit * unit; }

}  // namespace

int ActiveBlocksPerMultiprocessor(const GpuModel& model, const KernelResources& kernel, int block_size,
                                  size_t dynamic_shared_bytes) {
  if (block_size <= 0 || block_size > kernel.max_threads_per_block) return 0;
  const int warps_per_block = (block_size + kWarpSize - 1) / kWarpSize;
  // Warps and blocks.
  int blocks =
      std::min(model.max_blocks_per_multiprocessor, model.max_threads_per_multiprocessor / kWarpSize / warps_per_block);
  // Registers: allocated per warp.
  if (kernel.registers_per_thread > 0) {
    const int registers_per_warp = RoundUp(kernel.registers_per_thread * kWarpSize, kRegisterAllocationUnit);
    if (registers_per_warp * warps_per_block > model.registers_per_block) return 0;
    const int warps_by_registers = model.registers_per_multiprocessor / registers_per_warp;
    blocks = std::min(blocks, warps_by_registers / warps_per_block);
  }
  // Shared memory: the kernel's, plus what the system reserves per block.
  const size_t shared = dynamic_shared_bytes + static_cast<size_t>(kernel.static_shared_bytes);
  if (shared > static_cast<size_t>(model.shared_per_block_optin)) return 0;
  const int per_block = RoundUp(static_cast<int>(shared) + model.reserved_shared_per_block, kSharedAllocationUnit);
  if (per_block > 0) blocks = std::min(blocks, model.shared_per_multiprocessor / per_block);
  return std::max(blocks, 0);
}

size_t AvailableDynamicSharedPerBlock(const GpuModel& model, const KernelResources& kernel, int blocks,
                                      int block_size) {
  if (blocks <= 0 || ActiveBlocksPerMultiprocessor(model, kernel, block_size, 0) < blocks) {
    return 0;
  }
  int per_block = model.shared_per_multiprocessor / blocks / kSharedAllocationUnit * kSharedAllocationUnit -
                  model.reserved_shared_per_block - kernel.static_shared_bytes;
  per_block = std::min(per_block, model.shared_per_block_optin - kernel.static_shared_bytes);
  return per_block > 0 ? static_cast<size_t>(per_block) : 0;
}

void MaxPotentialBlockSize(const GpuModel& model, const KernelResources& kernel, size_t (*shared_for_block_size)(int),
                           size_t dynamic_shared_bytes, int block_size_limit, int* min_grid_size, int* block_size) {
  int limit = std::min(kernel.max_threads_per_block, 1024);
  if (block_size_limit > 0) limit = std::min(limit, block_size_limit);
  int best_threads = 0, best_size = 0, best_blocks = 0;
  // From the largest block down, in whole warps (the largest first wins ties).
  for (int size = limit / kWarpSize * kWarpSize; size > 0; size -= kWarpSize) {
    size_t shared = shared_for_block_size ? shared_for_block_size(size) : dynamic_shared_bytes;
    int blocks = ActiveBlocksPerMultiprocessor(model, kernel, size, shared);
    if (blocks * size > best_threads) {
      best_threads = blocks * size;
      best_size = size;
      best_blocks = blocks;
    }
    if (best_threads == model.max_threads_per_multiprocessor) break;
  }
  if (best_size == 0 && limit > 0 && limit < kWarpSize) {
    // A limit below one warp: the only candidate is the limit itself.
    size_t shared = shared_for_block_size ? shared_for_block_size(limit) : dynamic_shared_bytes;
    best_blocks = ActiveBlocksPerMultiprocessor(model, kernel, limit, shared);
    if (best_blocks > 0) best_size = limit;
  }
  *block_size = best_size;
  *min_grid_size = best_blocks * model.multiprocessors;
}

}  // namespace gpupool

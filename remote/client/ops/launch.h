// Kernel launches: the one implementation. The exported launch functions
// (api/api_module.cc) validate, record a kernel node when the stream captures, then call
// LaunchKernel; a graph launch's kernel nodes call LaunchPacked (graph/graphs.cc). A
// launch's execution errors arrive at the next synchronising call; configuration errors
// are answered here, at launch time, as a real driver does.
#pragma once

#include <cuda.h>

#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/client/core/occupancy.h"
#include "remote/client/core/runtime.h"

namespace gpupool::client::ops {

// The blocks of a thread block cluster of shape x, y, z, saturated at UINT32_MAX: each
// dimension is the program's 32-bit number, and no product of them may wrap to a small one.
inline unsigned ClusterBlockCount(unsigned x, unsigned y, unsigned z) {
  uint64_t product = uint64_t{x} * y;  // at most (2^32 - 1)^2
  product = product > UINT32_MAX ? UINT32_MAX : product * z;
  return product > UINT32_MAX ? UINT32_MAX : static_cast<unsigned>(product);
}

// What the agent said `function` needs on device `ordinal` (all 0: nothing known).
dataplane::FunctionResources KnownResources(const Function& function, int ordinal);

// What the occupancy calculator needs of `function` on device `ordinal`, resolving it there
// first (as a launch would); 32 registers a thread where the agent cannot say (the sim
// allocates none), or it does not resolve.
KernelResources ResourcesOf(Function& function, int ordinal);

// A launch's block and shared memory against what `function` (resolved on `device`)
// allows: more threads than it was compiled for fail with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
// more dynamic shared memory than its limit (48 KiB unless raised with cuFuncSetAttribute,
// up to the model's opt-in limit) with CUDA_ERROR_INVALID_VALUE, as on a GPU.
CUresult CheckLaunchResources(Function& function, int device, unsigned threads, unsigned shared_bytes);

// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE when a cooperative launch has more blocks than
// `device`'s SMs hold at once (the occupancy calculator's blocks per SM times the SMs), as a
// GPU answers.
CUresult CheckCooperativeGrid(Function& function, int device, const unsigned grid[3], const unsigned block[3],
                              unsigned shared_bytes);

// Refuses cuLaunchKernelEx attributes that cannot work remotely (clusters,
// kernel-triggered events) with CUDA_ERROR_NOT_SUPPORTED naming them; accepts the
// cooperative attribute and the scheduling hints.
CUresult CheckLaunchAttributes(const CUlaunchConfig& config);

// Packs kernel arguments (kernelParams or `extra`) into the layout `function` expects.
CUresult PackParams(const Function& function, void** params, void** extra, std::vector<char>* packed);
CUresult PackKernelParams(CUfunction function, void** params, void** extra, std::vector<char>* packed);

// The checks every launch makes first, captured or not: initialised, `handle` a kernel
// (*function), a block and a grid a GPU takes. Inline: it is the first step of every
// launch (LaunchKernel) and of every captured one (api/).
inline CUresult CheckLaunch(CUfunction handle, const unsigned grid[3], const unsigned block[3], Function** function) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  *function = AsFunction(handle);
  if (*function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  uint64_t threads = uint64_t{block[0]} * block[1] * block[2];
  if (threads == 0 || threads > 1024 || block[0] > 1024 || block[1] > 1024 || block[2] > 64 || grid[0] == 0 ||
      grid[1] == 0 || grid[2] == 0 || grid[0] > 2147483647u || grid[1] > 65535 || grid[2] > 65535) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A kernel compiled for clusters runs in them: its grid a multiple of their shape.
  if (const uint32_t* cluster = (*function)->compiled_cluster.dims;
      cluster[0] != 0 && (grid[0] % cluster[0] != 0 || grid[1] % cluster[1] != 0 || grid[2] % cluster[2] != 0)) {
    return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  return CUDA_SUCCESS;
}

// Launches `handle` on `stream`. `cooperative`: every block resident at once, so that
// blocks may wait for each other (cuLaunchCooperativeKernel; grid.sync()). `cluster`: the
// thread block cluster's shape, checked by the caller, for a GPU whose driver runs clusters
// (api/clusters.h); nullptr or 1, 1, 1: none.
CUresult LaunchKernel(CUfunction handle, const unsigned grid[3], const unsigned block[3], unsigned shared_mem,
                      CUstream stream, void** params, void** extra, bool cooperative,
                      const unsigned* cluster = nullptr);

// Launches `function` with arguments already packed in its layout, as a kernel node does.
CUresult LaunchPacked(CUfunction function, const unsigned grid[3], const unsigned block[3], unsigned shared_mem,
                      CUstream stream, const std::vector<char>& params, bool cooperative,
                      const unsigned* cluster = nullptr);

}  // namespace gpupool::client::ops

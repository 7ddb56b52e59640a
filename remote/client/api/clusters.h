// Thread block clusters (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) on pool GPUs: what
// cuLaunchKernelEx (api_module.cc, which defines these) and the cluster occupancy queries
// (api_function.cc) share. A GPU host's GPU of compute capability 9.0 or later runs them:
// the library forwards the cluster's shape (dataplane::kLaunchCluster) to its driver. The
// sim runs no clusters: from 9.0 on it runs a cluster launch as a plain one where the
// kernel cannot tell the difference (gpupool-remote(7), DRIVER COVERAGE, Launches).
#pragma once

#include <cuda.h>

#include <vector>

#include "remote/client/core/runtime.h"

namespace gpupool::client {

// The most blocks a cluster may have without CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED;
// with it, on a GPU that forwards clusters, dataplane::kMaxClusterBlocks (16, as an H100).
inline constexpr unsigned kPortableClusterBlocks = 8;

// The blocks of `config`'s cluster (1 when it names none; 0 when a dimension is 0), and its
// other attributes in *others (when not null). CUDA_ERROR_INVALID_VALUE for attributes
// without an array.
CUresult ClusterBlocks(const CUlaunchConfig& config, unsigned* blocks, std::vector<CUlaunchAttribute>* others);

// True when `device` runs launches of `function` in clusters of more than one block: one
// that forwards them (ForwardsClusterLaunches, core/device_attributes.h), or a sim GPU of compute capability 9.0 or
// later and a kernel whose module's PTX names no cluster state (Module::ptx_names_clusters),
// which therefore computes the same in a plain launch.
bool RunsClusterLaunches(const Device& device, const Function& function);

// The most blocks a cluster of `function` may have on `device` (kPortableClusterBlocks, or
// 16 where the program allowed non-portable sizes and the GPU's driver runs clusters).
unsigned MaxClusterBlocks(const Device& device, const Function& function);

}  // namespace gpupool::client

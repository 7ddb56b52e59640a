// Thread block clusters (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) on pool GPUs: what
// cuLaunchKernelEx (api_module.cc, which defines these) and the cluster occupancy queries
// (api_function.cc) share. GPUs of compute capability 9.0 or later run them
// (RunsClusterLaunches, core/device_attributes.h): the library sends the cluster's shape
// (dataplane::kLaunchCluster) to a GPU host's driver or to the sim's engine, which keeps a
// cluster's blocks resident together (gpupool-remote(7), DRIVER COVERAGE, Launches).
#pragma once

#include <cuda.h>

#include <vector>

#include "remote/client/core/runtime.h"

namespace gpupool::client {

// The most blocks a cluster may have without CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED;
// with it, dataplane::kMaxClusterBlocks (16, as an H100).
inline constexpr unsigned kPortableClusterBlocks = 8;

// The blocks of `config`'s cluster (1 when it names none; 0 when a dimension is 0), and its
// other attributes in *others (when not null). CUDA_ERROR_INVALID_VALUE for attributes
// without an array.
CUresult ClusterBlocks(const CUlaunchConfig& config, unsigned* blocks, std::vector<CUlaunchAttribute>* others);

// `config`'s attributes without its cluster dimension (*plain), after checking the cluster
// as a driver checks it for `function` (the grid a multiple of it, at most 8 blocks or 16
// where allowed, a GPU of 9.0 or later: else CUDA_ERROR_INVALID_CLUSTER_SIZE or
// CUDA_ERROR_NOT_SUPPORTED); *cluster: the shape to send with the launch (1, 1, 1: a plain
// launch, which computes the same).
CUresult WithoutClusterDimension(const CUlaunchConfig& config, CUfunction function,
                                 std::vector<CUlaunchAttribute>* plain, unsigned cluster[3]);

// The most blocks a cluster of `function` may have on `device` (kPortableClusterBlocks, or
// 16 where the program allowed non-portable sizes and the GPU runs clusters).
unsigned MaxClusterBlocks(const Device& device, const Function& function);

}  // namespace gpupool::client

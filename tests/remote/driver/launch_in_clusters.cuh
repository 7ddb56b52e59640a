// A launch in thread block clusters through the runtime (cudaLaunchKernelEx with
// cudaLaunchAttributeClusterDimension), as cuBLAS launches its kernels from compute
// capability 9.0 on: `blocks` blocks of `threads`, in clusters of `cluster` along x, with
// `shared` bytes of dynamic shared memory (LaunchInClustersWithShared).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

template <typename... Params, typename... Args>
cudaError_t LaunchInClustersWithShared(void (*kernel)(Params...), unsigned blocks, unsigned threads, unsigned cluster,
                                       size_t shared, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = shared;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

template <typename... Params, typename... Args>
cudaError_t LaunchInClusters(void (*kernel)(Params...), unsigned blocks, unsigned threads, unsigned cluster,
                             Args... args) {
  return LaunchInClustersWithShared(kernel, blocks, threads, cluster, 0, args...);
}

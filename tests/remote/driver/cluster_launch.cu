// Launches with a thread block cluster dimension (cudaLaunchKernelEx, as cuBLAS launches its
// norms on GPUs of compute capability 9.0 and later), on the sim GPU of the model ctest
// names, or a GPU host's GPU (scripts/test --gpu). On 9.0 and later the clusters run, with
// their shape: clusters of 2, 8 and, once allowed, 16 blocks give the plain launch's answer;
// the shape is checked as a driver checks it (the grid a multiple of it, at most 8 blocks
// until non-portable sizes are allowed); a kernel that reads its cluster (%cluster_ctarank)
// gets each block's rank in it, and in a plain launch the cluster of one block each block
// is. Older GPUs have no clusters: the launch is refused, and a cluster of one block is a
// plain launch.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../programs/check.h"
#include "launch_in_clusters.cuh"

// The kernel's name and PTX do not name clusters (the library tells by its module's PTX).
__global__ void IndexTimesThree(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3 + static_cast<int>(blockIdx.x);
}

// Each block writes its rank in its cluster: what a plain launch would get wrong.
constexpr char kRankPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry rank_of_block(.param .u64 out)\n{\n"
    "  .reg .b32 %r<3>;\n  .reg .b64 %rd<4>;\n"
    "  ld.param.u64 %rd1, [out];\n  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mov.u32 %r1, %cluster_ctarank;\n  mov.u32 %r2, %ctaid.x;\n"
    "  mul.wide.u32 %rd3, %r2, 4;\n  add.s64 %rd2, %rd2, %rd3;\n"
    "  st.global.u32 [%rd2], %r1;\n  ret;\n}\n"
    // What each block of a plain launch reads of its cluster (itself): rank 0 of 1, the
    // cluster's place and count in the grid being the block's.
    ".visible .entry cluster_shape(.param .u64 out)\n{\n"
    "  .reg .b32 %r<8>;\n  .reg .b64 %rd<4>;\n"
    "  ld.param.u64 %rd1, [out];\n  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mov.u32 %r7, %ctaid.x;\n  mul.wide.u32 %rd3, %r7, 24;\n  add.s64 %rd2, %rd2, %rd3;\n"
    "  mov.u32 %r1, %cluster_ctarank;\n  mov.u32 %r2, %cluster_nctarank;\n"
    "  mov.u32 %r3, %clusterid.x;\n  mov.u32 %r4, %nclusterid.x;\n"
    "  mov.u32 %r5, %cluster_ctaid.x;\n  mov.u32 %r6, %cluster_nctaid.x;\n"
    "  st.global.u32 [%rd2], %r1;\n  st.global.u32 [%rd2+4], %r2;\n  st.global.u32 [%rd2+8], %r3;\n"
    "  st.global.u32 [%rd2+12], %r4;\n  st.global.u32 [%rd2+16], %r5;\n  st.global.u32 [%rd2+20], %r6;\n"
    "  ret;\n}\n";

cudaError_t LaunchInClusters(int* out, int n, unsigned blocks, unsigned cluster) {
  return LaunchInClusters(IndexTimesThree, blocks, 64, cluster, out, n);
}

int main() {
  const cudaDeviceProp properties = DescribeDeviceExpectingModel();
  const int n = 8 * 64;
  int* out = nullptr;
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  CHECK(cudaMemset(out, 0xff, n * sizeof(int)));
  std::vector<int> got(n);

  // A cluster of one block is a plain launch, on any GPU.
  CHECK(LaunchInClusters(out, n, 8, 1));
  CHECK(cudaMemcpy(got.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(got[i] == i * 3 + i / 64);

  // What the occupancy calculator says of clusters of 2 (cuBLAS asks before it launches).
  cudaLaunchConfig_t query = {};
  query.gridDim = dim3(8);
  query.blockDim = dim3(64);
  cudaLaunchAttribute pair;
  pair.id = cudaLaunchAttributeClusterDimension;
  pair.val.clusterDim.x = 2;
  pair.val.clusterDim.y = 1;
  pair.val.clusterDim.z = 1;
  query.attrs = &pair;
  query.numAttrs = 1;
  int active_clusters = -1, potential = -1;
  const cudaError_t active = cudaOccupancyMaxActiveClusters(&active_clusters, IndexTimesThree, &query);
  CHECK(cudaOccupancyMaxPotentialClusterSize(&potential, IndexTimesThree, &query));
  std::printf("clusters of 2: %s, %d at once; largest cluster %d\n", cudaGetErrorName(active), active_clusters,
              potential);

  if (properties.major < 9) {
    if (OnTheSim()) EXPECT(active == cudaErrorNotSupported && potential == 1);
    const cudaError_t refused = LaunchInClusters(out, n, 8, 2);
    std::printf("clusters of 2 on %d.%d: %s\n", properties.major, properties.minor, cudaGetErrorName(refused));
    EXPECT(refused != cudaSuccess);
    if (OnTheSim()) EXPECT(refused == cudaErrorNotSupported);
    CHECK(cudaDeviceSynchronize());  // nothing sticky
  } else {
    // 9.0 and later: the sim's engine and a GPU host's driver run the clusters, with their
    // shape, up to 16 blocks once the kernel allows non-portable sizes. 32 blocks of 64
    // threads per SM (by threads: 2048), in pairs.
    EXPECT(active == cudaSuccess && active_clusters > 0 && potential == 8);
    if (OnTheSim()) EXPECT(active_clusters == 16 * properties.multiProcessorCount);
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrClusterLaunch, 0));
    EXPECT(supported == 1);
    for (unsigned cluster : {2u, 8u}) {
      CHECK(cudaMemset(out, 0, n * sizeof(int)));
      CHECK(LaunchInClusters(out, n, 8, cluster));
      CHECK(cudaMemcpy(got.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; ++i) EXPECT(got[i] == i * 3 + i / 64);
    }
    // As a driver checks the shape: the grid a multiple of the cluster, at most 8 blocks
    // until the kernel allows more.
    EXPECT(LaunchInClusters(out, n, 7, 2) == cudaErrorInvalidClusterSize);
    EXPECT(LaunchInClusters(out, n, 16, 16) == cudaErrorInvalidClusterSize);
    EXPECT(cudaFuncSetAttribute(IndexTimesThree, cudaFuncAttributeNonPortableClusterSizeAllowed, 2) ==
           cudaErrorInvalidValue);
    CHECK(cudaFuncSetAttribute(IndexTimesThree, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaFuncAttributes attributes;
    CHECK(cudaFuncGetAttributes(&attributes, IndexTimesThree));
    EXPECT(attributes.nonPortableClusterSizeAllowed == 1);
    CHECK(cudaMemset(out, 0, n * sizeof(int)));
    CHECK(LaunchInClusters(out, n, 16, 16));
    CHECK(cudaMemcpy(got.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) EXPECT(got[i] == i * 3 + i / 64);
    CHECK(cudaFuncSetAttribute(IndexTimesThree, cudaFuncAttributeNonPortableClusterSizeAllowed, 0));
    std::printf("clusters of 2, 8 and 16 blocks ran\n");

    // A kernel that reads its cluster: each block its rank in it, in clusters of 2 and 4.
    CUmodule module;
    CUfunction rank;
    EXPECT(cuModuleLoadData(&module, kRankPtx) == CUDA_SUCCESS);
    EXPECT(cuModuleGetFunction(&rank, module, "rank_of_block") == CUDA_SUCCESS);
    CUdeviceptr pointer = reinterpret_cast<CUdeviceptr>(out);
    void* params[] = {&pointer};
    for (unsigned cluster : {2u, 4u}) {
      CUlaunchAttribute attribute = {};
      attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attribute.value.clusterDim.x = cluster;
      attribute.value.clusterDim.y = 1;
      attribute.value.clusterDim.z = 1;
      CUlaunchConfig config = {};
      config.gridDimX = 8, config.gridDimY = 1, config.gridDimZ = 1;
      config.blockDimX = 32, config.blockDimY = 1, config.blockDimZ = 1;
      config.attrs = &attribute;
      config.numAttrs = 1;
      CHECK(cudaMemset(out, 0xff, 8 * sizeof(int)));
      EXPECT(cuLaunchKernelEx(&config, rank, params, nullptr) == CUDA_SUCCESS);
      unsigned ranks[8];
      CHECK(cudaMemcpy(ranks, out, sizeof(ranks), cudaMemcpyDeviceToHost));
      for (unsigned block = 0; block < 8; ++block) EXPECT(ranks[block] == block % cluster);
      std::printf("clusters of %u: block 7 has rank %u\n", cluster, ranks[7]);
    }
    // A plain launch of a kernel that reads its cluster: each block is its own.
    CUfunction shape;
    EXPECT(cuModuleGetFunction(&shape, module, "cluster_shape") == CUDA_SUCCESS);
    EXPECT(cuLaunchKernel(shape, 3, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr) == CUDA_SUCCESS);
    unsigned read[3][6];
    CHECK(cudaMemcpy(read, out, sizeof(read), cudaMemcpyDeviceToHost));
    for (unsigned block = 0; block < 3; ++block) {
      const unsigned want[6] = {0, 1, block, 3, 0, 1};
      for (int i = 0; i < 6; ++i) EXPECT(read[block][i] == want[i]);
    }
    std::printf("block 2 of a plain launch: rank %u of %u, cluster %u of %u\n", read[2][0], read[2][1], read[2][2],
                read[2][3]);
    EXPECT(cuModuleUnload(module) == CUDA_SUCCESS);
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaFree(out));
  std::printf("PASS\n");
  return 0;
}

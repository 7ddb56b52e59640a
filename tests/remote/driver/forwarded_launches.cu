// What the library forwards of a kernel to a GPU host's GPU, through the test server's cuda
// backend on the stand-in driver (tests/remote/fake_cuda_driver.cc, which runs no kernels):
// the PTX and binary versions are its driver's answers (80 and 86 there), not what the
// library would choose from the image (cuSPARSE tunes its host side by them, issue 41);
// on compute capability 9.0 (GPUPOOL_FAKE_CUDA_CC=9.0) launches in thread block clusters
// reach the driver with their shape, up to 16 blocks once the kernel allows non-portable
// sizes (the stand-in refuses more than 8 without the opt-in, as a driver does), also from
// a graph captured from a stream; with GPUPOOL_FAKE_CUDA_REFUSE_CLUSTERS the stand-in
// refuses every cluster launch (INVALID_VALUE), which shows the shape was not dropped.
#include <cstdio>
#include <cstdlib>

#include "../programs/check.h"
#include "launch_in_clusters.cuh"

__global__ void Nothing(int* out) {
  if (out != nullptr) out[blockIdx.x] = 1;
}

cudaError_t LaunchInClusters(unsigned blocks, unsigned cluster) {
  return LaunchInClusters(Nothing, blocks, 32, cluster, static_cast<int*>(nullptr));
}

int main() {
  const cudaDeviceProp properties = DescribeDeviceExpectingModel();
  cudaFuncAttributes attributes;
  CHECK(cudaFuncGetAttributes(&attributes, Nothing));
  std::printf("ptxVersion %d, binaryVersion %d\n", attributes.ptxVersion, attributes.binaryVersion);
  EXPECT(attributes.ptxVersion == 80 && attributes.binaryVersion == 86);
  Nothing<<<2, 32>>>(nullptr);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  int clusters = 0;
  CHECK(cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, 0));
  if (properties.major >= 9 && std::getenv("GPUPOOL_FAKE_CUDA_REFUSE_CLUSTERS") != nullptr) {
    EXPECT(clusters == 1);
    CHECK(LaunchInClusters(8, 2));  // posted: the driver's answer comes at the wait
    EXPECT(cudaDeviceSynchronize() == cudaErrorInvalidValue);
    cudaGetLastError();
    // Captured into a graph: the node keeps the shape.
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(8);
    config.blockDim = dim3(32);
    config.stream = stream;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = 4;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&config, Nothing, static_cast<int*>(nullptr)));
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphLaunch(exec, stream);
    EXPECT(cudaStreamSynchronize(stream) == cudaErrorInvalidValue);
    cudaGetLastError();
    std::printf("the stand-in refused the clusters it was sent, directly and from a graph\n");
  } else if (properties.major >= 9) {
    EXPECT(clusters == 1);
    CHECK(LaunchInClusters(8, 2));
    CHECK(LaunchInClusters(16, 8));
    EXPECT(LaunchInClusters(16, 16) == cudaErrorInvalidClusterSize);  // not allowed yet
    cudaGetLastError();
    CHECK(cudaFuncSetAttribute(Nothing, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CHECK(LaunchInClusters(16, 16));
    // The launches' own errors (the stand-in's refusal of a shape) come at the wait.
    CHECK(cudaDeviceSynchronize());
    std::printf("clusters of 2, 8 and 16 blocks reached the driver\n");
  } else {
    EXPECT(clusters == 0);
    EXPECT(LaunchInClusters(8, 2) == cudaErrorNotSupported);
    cudaGetLastError();
  }
  std::printf("PASS\n");
  return 0;
}

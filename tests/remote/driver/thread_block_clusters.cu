// Thread block clusters with distributed shared memory (compute capability 9.0), as CUDA's
// programming guide writes them: a histogram whose bins are spread over the shared memory
// of a cluster's blocks (cluster.map_shared_rank, atomics into another block's shared
// memory, cluster.sync), blocks reading their neighbours' shared memory in 2D clusters,
// split arrive and wait, the same as a graph's kernel node given its cluster by
// cudaGraphKernelNodeSetAttribute or by cudaFuncSetAttribute for <<<>>>, a kernel compiled for its clusters
// (__cluster_dims__) launched with <<<>>> and its attributes, and the shapes a driver refuses. On a GPU of an older
// model (the sim's A100) the sm_90 code has nothing to run on: every launch fails with an
// error, none runs wrong. Exits 0 only if every result matches a CPU reference.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "../programs/check.h"
#include "launch_in_clusters.cuh"

namespace cg = cooperative_groups;

namespace {

// Bins spread over the blocks of a cluster, bins_per_block each.
__global__ void ClusterHistogram(int* bins, int nbins, int bins_per_block, const int* input, int n) {
  extern __shared__ int slice[];
  cg::cluster_group cluster = cg::this_cluster();
  for (int i = threadIdx.x; i < bins_per_block; i += blockDim.x) slice[i] = 0;
  cluster.sync();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    const int bin = min(max(input[i], 0), nbins - 1);
    int* owner = cluster.map_shared_rank(slice, bin / bins_per_block);
    atomicAdd(owner + bin % bins_per_block, 1);
  }
  cluster.sync();
  int* mine = bins + cluster.block_rank() * bins_per_block;
  for (int i = threadIdx.x; i < bins_per_block; i += blockDim.x) atomicAdd(&mine[i], slice[i]);
}

// Each block fills its shared words, arrives, does other work, waits, then reads the next
// rank's words and the rank that owns them; its place in its cluster, from thread 0.
__global__ void Neighbours(unsigned* words, unsigned* places) {
  __shared__ unsigned values[64];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  values[threadIdx.x] = rank * 100 + threadIdx.x;
  auto token = cluster.barrier_arrive();
  const unsigned block = blockIdx.x + gridDim.x * blockIdx.y;
  if (threadIdx.x == 0) {
    const dim3 shape = cluster.dim_blocks(), index = cluster.block_index();
    places[block * 4] = cluster.num_blocks();
    places[block * 4 + 1] = shape.x * 10 + shape.y;
    places[block * 4 + 2] = index.x * 10 + index.y;
    places[block * 4 + 3] = rank;
  }
  cluster.barrier_wait(std::move(token));
  const unsigned next = (rank + 1) % cluster.num_blocks();
  unsigned* theirs = cluster.map_shared_rank(values, next);
  words[(block * blockDim.x + threadIdx.x) * 2] = theirs[blockDim.x - 1 - threadIdx.x];
  words[(block * blockDim.x + threadIdx.x) * 2 + 1] = cluster.query_shared_rank(theirs);
  cluster.sync();  // no block leaves while another may still read its shared memory
}

// Compiled for clusters of 2 blocks along x: it swaps a word with its partner block.
__global__ void __cluster_dims__(2, 1, 1) Partners(int* out) {
  __shared__ int word;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) word = blockIdx.x * 7;
  cluster.sync();
  if (threadIdx.x == 0) out[blockIdx.x] = *cluster.map_shared_rank(&word, cluster.block_rank() ^ 1);
  cluster.sync();
}

cudaError_t LaunchHistogram(int* bins, int nbins, int per_block, const int* input, int n, unsigned blocks,
                            unsigned cluster) {
  return LaunchInClustersWithShared(ClusterHistogram, blocks, 128, cluster, per_block * sizeof(int), bins, nbins,
                                    per_block, input, n);
}

}  // namespace

int main() {
  const cudaDeviceProp properties = DescribeDeviceExpectingModel();
  const int nbins = 512, n = 1 << 18;
  std::vector<int> input(n), expected(nbins);
  for (int i = 0; i < n; ++i) {
    input[i] = static_cast<int>((static_cast<unsigned>(i) * 2654435761u) >> 22) % 560 - 24;
    ++expected[std::clamp(input[i], 0, nbins - 1)];
  }
  int *bins = nullptr, *device_input = nullptr;
  CHECK(cudaMalloc(&bins, nbins * sizeof(int)));
  CHECK(cudaMalloc(&device_input, n * sizeof(int)));
  CHECK(cudaMemcpy(device_input, input.data(), n * sizeof(int), cudaMemcpyHostToDevice));

  if (properties.major < 9) {
    // A cluster launch (no clusters before 9.0), and a kernel of sm_90 code alone.
    const cudaError_t refused = LaunchHistogram(bins, nbins, nbins / 4, device_input, n, 32, 4);
    std::printf("clusters on %d.%d: %s\n", properties.major, properties.minor, cudaGetErrorName(refused));
    EXPECT(refused != cudaSuccess);
    Partners<<<4, 32>>>(bins);
    ExpectNoCodeForAnOlderGpu(properties, cudaGetLastError());
    return 0;
  }

  // Clusters of 2, 4 and 8 blocks, the bins spread over each cluster's blocks.
  for (unsigned cluster : {2u, 4u, 8u}) {
    CHECK(cudaMemset(bins, 0, nbins * sizeof(int)));
    CHECK(LaunchHistogram(bins, nbins, nbins / static_cast<int>(cluster), device_input, n, 64, cluster));
    std::vector<int> got(nbins);
    CHECK(cudaMemcpy(got.data(), bins, nbins * sizeof(int), cudaMemcpyDeviceToHost));
    int wrong = 0;
    // Each cluster counts the elements its blocks stride over into bins of its own, then
    // adds them to the global ones: every element once.
    for (int b = 0; b < nbins; ++b) wrong += got[b] != expected[b];
    std::printf("histogram in clusters of %u: %d of %d bins wrong (bin 0: %d, want %d)\n", cluster, wrong, nbins,
                got[0], expected[0]);
    EXPECT(wrong == 0);
  }

  // 2D clusters of 2x2 over a 4x4 grid.
  const unsigned threads = 64, blocks = 16;
  unsigned *words = nullptr, *places = nullptr;
  CHECK(cudaMalloc(&words, blocks * threads * 2 * sizeof(unsigned)));
  CHECK(cudaMalloc(&places, blocks * 4 * sizeof(unsigned)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(4, 4);
  config.blockDim = dim3(threads);
  cudaLaunchAttribute square;
  square.id = cudaLaunchAttributeClusterDimension;
  square.val.clusterDim.x = 2;
  square.val.clusterDim.y = 2;
  square.val.clusterDim.z = 1;
  config.attrs = &square;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, Neighbours, words, places));
  auto check_neighbours = [&](const char* how) {
    std::vector<unsigned> got_words(blocks * threads * 2), got_places(blocks * 4);
    CHECK(cudaMemcpy(got_words.data(), words, got_words.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got_places.data(), places, got_places.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (unsigned y = 0; y < 4; ++y) {
      for (unsigned x = 0; x < 4; ++x) {
        const unsigned block = x + 4 * y, rank = x % 2 + 2 * (y % 2), next = (rank + 1) % 4;
        EXPECT(got_places[block * 4] == 4 && got_places[block * 4 + 1] == 22);
        EXPECT(got_places[block * 4 + 2] == (x % 2) * 10 + y % 2 && got_places[block * 4 + 3] == rank);
        for (unsigned t = 0; t < threads; ++t) {
          EXPECT(got_words[(block * threads + t) * 2] == next * 100 + threads - 1 - t);
          EXPECT(got_words[(block * threads + t) * 2 + 1] == next);
        }
      }
    }
    std::printf("%s: block (3,3) rank %u of %u, read rank %u's word %u\n", how, got_places[15 * 4 + 3],
                got_places[15 * 4], got_words[15 * threads * 2 + 1], got_words[15 * threads * 2]);
  };
  check_neighbours("cudaLaunchKernelEx");

  // The same kernel as a graph's node, given its cluster by cudaGraphKernelNodeSetAttribute
  // (a plain launch of it would read its own block's words).
  CHECK(cudaMemset(words, 0, blocks * threads * 2 * sizeof(unsigned)));
  CHECK(cudaMemset(places, 0, blocks * 4 * sizeof(unsigned)));
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  void* args[] = {&words, &places};
  cudaKernelNodeParams node_params = {};
  node_params.func = reinterpret_cast<void*>(Neighbours);
  node_params.gridDim = dim3(4, 4);
  node_params.blockDim = dim3(threads);
  node_params.kernelParams = args;
  cudaGraphNode_t node;
  CHECK(cudaGraphAddKernelNode(&node, graph, nullptr, 0, &node_params));
  cudaLaunchAttributeValue odd_shape = {};
  odd_shape.clusterDim.x = 3;
  odd_shape.clusterDim.y = 1;
  odd_shape.clusterDim.z = 1;
  EXPECT(cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributeClusterDimension, &odd_shape) ==
         cudaErrorInvalidClusterSize);
  EXPECT(cudaGetLastError() == cudaErrorInvalidClusterSize);
  CHECK(cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributeClusterDimension, &square.val));
  cudaLaunchAttributeValue read_back = {};
  CHECK(cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributeClusterDimension, &read_back));
  EXPECT(read_back.clusterDim.x == 2 && read_back.clusterDim.y == 2 && read_back.clusterDim.z == 1);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaStreamSynchronize(0));
  check_neighbours("a graph's kernel node");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));

  // Given its cluster shape at run time (cudaFuncSetAttribute), <<<>>> runs it in that.
  CHECK(cudaMemset(words, 0, blocks * threads * 2 * sizeof(unsigned)));
  CHECK(cudaFuncSetAttribute(Neighbours, cudaFuncAttributeRequiredClusterWidth, 2));
  CHECK(cudaFuncSetAttribute(Neighbours, cudaFuncAttributeRequiredClusterHeight, 2));
  CHECK(cudaFuncSetAttribute(Neighbours, cudaFuncAttributeRequiredClusterDepth, 1));
  cudaFuncAttributes neighbours;
  CHECK(cudaFuncGetAttributes(&neighbours, Neighbours));
  EXPECT(neighbours.requiredClusterWidth == 2 && neighbours.requiredClusterHeight == 2 &&
         neighbours.clusterDimMustBeSet == 0);
  Neighbours<<<dim3(4, 4), threads>>>(words, places);
  CHECK(cudaGetLastError());
  check_neighbours("<<<>>> after cudaFuncSetAttribute");
  // A grid the shape does not divide: refused at the launch.
  Neighbours<<<dim3(3, 4), threads>>>(words, places);
  EXPECT(cudaGetLastError() == cudaErrorInvalidClusterSize);

  // A kernel compiled for clusters of 2: <<<>>> runs it in them; its attributes say so.
  cudaFuncAttributes attributes;
  CHECK(cudaFuncGetAttributes(&attributes, Partners));
  std::printf("Partners: required cluster %dx%dx%d, must be set %d\n", attributes.requiredClusterWidth,
              attributes.requiredClusterHeight, attributes.requiredClusterDepth, attributes.clusterDimMustBeSet);
  EXPECT(attributes.requiredClusterWidth == 2 && attributes.requiredClusterHeight == 1 &&
         attributes.requiredClusterDepth == 1);
  EXPECT(cudaFuncSetAttribute(Partners, cudaFuncAttributeRequiredClusterWidth, 4) == cudaErrorNotPermitted);
  EXPECT(cudaGetLastError() == cudaErrorNotPermitted);  // the runtime keeps it as the last error
  int* swapped = nullptr;
  CHECK(cudaMalloc(&swapped, 8 * sizeof(int)));
  Partners<<<8, 32>>>(swapped);
  CHECK(cudaGetLastError());
  std::vector<int> partners(8);
  CHECK(cudaMemcpy(partners.data(), swapped, 8 * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < 8; ++b) EXPECT(partners[b] == (b ^ 1) * 7);
  // A grid its clusters do not divide: refused, as a driver refuses it.
  Partners<<<7, 32>>>(swapped);
  const cudaError_t odd = cudaGetLastError();
  std::printf("7 blocks in clusters of 2: %s\n", cudaGetErrorName(odd));
  EXPECT(odd == cudaErrorInvalidClusterSize);
  CHECK(cudaDeviceSynchronize());  // nothing sticky

  // How many clusters of 4 fit at once (the occupancy calculator's word).
  cudaLaunchConfig_t query = {};
  query.gridDim = dim3(64);
  query.blockDim = dim3(128);
  query.dynamicSmemBytes = 128 * sizeof(int);
  cudaLaunchAttribute four = square;
  four.val.clusterDim.x = 4;
  four.val.clusterDim.y = 1;
  query.attrs = &four;
  query.numAttrs = 1;
  int active = 0;
  CHECK(cudaOccupancyMaxActiveClusters(&active, ClusterHistogram, &query));
  std::printf("clusters of 4 at once: %d\n", active);
  EXPECT(active > 0);

  CHECK(cudaFree(swapped));
  CHECK(cudaFree(words));
  CHECK(cudaFree(places));
  CHECK(cudaFree(bins));
  CHECK(cudaFree(device_input));
  std::printf("PASS\n");
  return 0;
}

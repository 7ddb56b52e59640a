// A quadtree built by recursive device launches (dynamic parallelism, -rdc=true
// -lcudadevrt), in the manner of NVIDIA's cdpQuadtree sample: one block per node counts
// its points per quadrant with warp votes, scans the counts in dynamic shared memory,
// moves the points into the other of two buffers (a stable partition), and its last
// thread launches a grid of four blocks for the four children, with dynamic shared
// memory, until a node is deep enough or holds few enough points. The host builds the
// same tree (a stable partition gives one answer) and checks every node's range and box
// and the final order of the points.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace cg = cooperative_groups;

namespace {

constexpr int kPoints = 6000;
constexpr int kMaxDepth = 6;  // levels 0..kMaxDepth
constexpr int kMinPoints = 24;
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

struct Node {
  float x0, y0, x1, y1;  // the box: [x0, x1) x [y0, y1)
  int begin, end;        // its points, in the buffer the build ends in
  int split;             // 1: it has four children
};

// Nodes of level L start at LevelStart(L): 1 + 4 + ... + 4^(L-1).
__host__ __device__ constexpr int LevelStart(int level) {
  int start = 0, width = 1;
  for (int l = 0; l < level; ++l, width *= 4) start += width;
  return start;
}

__host__ __device__ inline int Quadrant(float x, float y, float cx, float cy) {
  return (x >= cx ? 1 : 0) + (y >= cy ? 2 : 0);
}

// Builds node `first + blockIdx.x` of `level` from the points in buffer `from`.
__global__ void Build(Node* nodes, float2* buffers, int level, int first, int from, int* launch_errors) {
  extern __shared__ int counts[];  // [4][kWarps]: then each warp's start per quadrant
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  const int id = first + static_cast<int>(blockIdx.x);
  Node& node = nodes[LevelStart(level) + id];
  const float2* in = buffers + from * kPoints;
  float2* out = buffers + (1 - from) * kPoints;
  const int count = node.end - node.begin;
  if (level == kMaxDepth || count <= kMinPoints) {
    // A leaf: its points go to buffer 0, where the whole build ends.
    if (from == 1) {
      for (int i = node.begin + threadIdx.x; i < node.end; i += blockDim.x) buffers[i] = in[i];
    }
    return;
  }
  const float cx = 0.5f * (node.x0 + node.x1), cy = 0.5f * (node.y0 + node.y1);
  const int warp_id = threadIdx.x / 32;
  const int per_warp = (count + kWarps - 1) / kWarps;
  const int range_begin = node.begin + warp_id * per_warp;
  const int range_end = min(range_begin + per_warp, node.end);
  int mine[4] = {0, 0, 0, 0};
  for (int i = range_begin + static_cast<int>(warp.thread_rank()); warp.any(i < range_end); i += 32) {
    const bool active = i < range_end;
    const float2 p = active ? in[i] : make_float2(0.f, 0.f);
    const int q = Quadrant(p.x, p.y, cx, cy);
    for (int k = 0; k < 4; ++k) mine[k] += __popc(warp.ballot(active && q == k));
  }
  if (warp.thread_rank() == 0) {
    for (int k = 0; k < 4; ++k) counts[k * kWarps + warp_id] = mine[k];
  }
  block.sync();
  // An exclusive scan over quadrant-major order: where each warp's points of each
  // quadrant go.
  if (threadIdx.x == 0) {
    int at = node.begin;
    for (int k = 0; k < 4 * kWarps; ++k) {
      const int c = counts[k];
      counts[k] = at;
      at += c;
    }
  }
  block.sync();
  int next[4];
  for (int k = 0; k < 4; ++k) next[k] = counts[k * kWarps + warp_id];
  const unsigned below = (1u << warp.thread_rank()) - 1u;
  for (int i = range_begin + static_cast<int>(warp.thread_rank()); warp.any(i < range_end); i += 32) {
    const bool active = i < range_end;
    const float2 p = active ? in[i] : make_float2(0.f, 0.f);
    const int q = Quadrant(p.x, p.y, cx, cy);
    for (int k = 0; k < 4; ++k) {
      const unsigned vote = warp.ballot(active && q == k);
      if (active && q == k) out[next[k] + __popc(vote & below)] = p;
      next[k] += __popc(vote);
    }
  }
  block.sync();
  if (threadIdx.x == blockDim.x - 1) {
    Node* children = nodes + LevelStart(level + 1) + 4 * id;
    const int starts[5] = {counts[0], counts[kWarps], counts[2 * kWarps], counts[3 * kWarps], node.end};
    for (int k = 0; k < 4; ++k) {
      Node child;
      child.x0 = (k & 1) ? cx : node.x0;
      child.x1 = (k & 1) ? node.x1 : cx;
      child.y0 = (k & 2) ? cy : node.y0;
      child.y1 = (k & 2) ? node.y1 : cy;
      child.begin = starts[k];
      child.end = starts[k + 1];
      child.split = 0;
      children[k] = child;
    }
    node.split = 1;
    Build<<<4, kThreads, 4 * kWarps * sizeof(int)>>>(nodes, buffers, level + 1, 4 * id, 1 - from, launch_errors);
    if (cudaError_t error = cudaGetLastError(); error != cudaSuccess)
      atomicExch(launch_errors, static_cast<int>(error));
  }
}

// The host's tree: the same stable partition, node by node.
void BuildOnHost(std::vector<Node>& nodes, std::vector<float2>& points, int level, int id) {
  Node& node = nodes[LevelStart(level) + id];
  if (level == kMaxDepth || node.end - node.begin <= kMinPoints) return;
  const float cx = 0.5f * (node.x0 + node.x1), cy = 0.5f * (node.y0 + node.y1);
  std::vector<float2> parts[4];
  for (int i = node.begin; i < node.end; ++i) parts[Quadrant(points[i].x, points[i].y, cx, cy)].push_back(points[i]);
  int at = node.begin;
  for (int k = 0; k < 4; ++k) {
    Node& child = nodes[LevelStart(level + 1) + 4 * id + k];
    child.x0 = (k & 1) ? cx : node.x0;
    child.x1 = (k & 1) ? node.x1 : cx;
    child.y0 = (k & 2) ? cy : node.y0;
    child.y1 = (k & 2) ? node.y1 : cy;
    child.begin = at;
    std::copy(parts[k].begin(), parts[k].end(), points.begin() + at);
    at += static_cast<int>(parts[k].size());
    child.end = at;
    child.split = 0;
  }
  node.split = 1;
  for (int k = 0; k < 4; ++k) BuildOnHost(nodes, points, level + 1, 4 * id + k);
}

}  // namespace

int main() {
  // Clustered points, so that the tree is deep in places and shallow in others.
  std::vector<float2> points(kPoints);
  unsigned state = 12345;
  auto uniform = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.0f;
  };
  for (int i = 0; i < kPoints; ++i) {
    if (i % 3 == 0) {
      points[i] = make_float2(0.1f + 0.05f * uniform(), 0.7f + 0.05f * uniform());
    } else {
      points[i] = make_float2(uniform(), uniform());
    }
  }
  const int node_count = LevelStart(kMaxDepth + 1);
  std::vector<Node> host_nodes(node_count, Node{0, 0, 0, 0, 0, 0, 0});
  host_nodes[0] = Node{0.f, 0.f, 1.f, 1.f, 0, kPoints, 0};
  std::vector<Node> device_start = host_nodes;

  Node* nodes = nullptr;
  float2* buffers = nullptr;
  int* launch_errors = nullptr;
  CHECK(cudaMalloc(&nodes, node_count * sizeof(Node)));
  CHECK(cudaMalloc(&buffers, 2 * kPoints * sizeof(float2)));
  CHECK(cudaMalloc(&launch_errors, sizeof(int)));
  CHECK(cudaMemcpy(nodes, device_start.data(), node_count * sizeof(Node), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(buffers, points.data(), kPoints * sizeof(float2), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(buffers + kPoints, 0, kPoints * sizeof(float2)));
  CHECK(cudaMemset(launch_errors, 0, sizeof(int)));
  Build<<<1, kThreads, 4 * kWarps * sizeof(int)>>>(nodes, buffers, 0, 0, 0, launch_errors);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  std::vector<Node> device_nodes(node_count);
  std::vector<float2> device_points(kPoints);
  int errors = 0;
  CHECK(cudaMemcpy(device_nodes.data(), nodes, node_count * sizeof(Node), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(device_points.data(), buffers, kPoints * sizeof(float2), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&errors, launch_errors, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT(errors == cudaSuccess);

  std::vector<float2> host_points = points;
  BuildOnHost(host_nodes, host_points, 0, 0);
  int splits = 0, leaves_checked = 0, deepest = 0;
  for (int level = 0; level <= kMaxDepth; ++level) {
    for (int id = 0; id < LevelStart(level + 1) - LevelStart(level); ++id) {
      const Node& want = host_nodes[LevelStart(level) + id];
      const Node& got = device_nodes[LevelStart(level) + id];
      if (want.begin != got.begin || want.end != got.end || want.split != got.split || want.x0 != got.x0 ||
          want.y1 != got.y1) {
        std::fprintf(stderr, "node %d of level %d: [%d, %d) split %d on the GPU, [%d, %d) split %d expected\n", id,
                     level, got.begin, got.end, got.split, want.begin, want.end, want.split);
        EXPECT(false);
      }
      if (want.split) ++splits;
      if (want.end > want.begin && !want.split) {
        ++leaves_checked;
        deepest = std::max(deepest, level);
        for (int i = got.begin; i < got.end; ++i) {
          const float2 p = device_points[i];
          EXPECT(p.x >= got.x0 && p.x < got.x1 && p.y >= got.y0 && p.y < got.y1);
        }
      }
    }
  }
  for (int i = 0; i < kPoints; ++i) {
    EXPECT(device_points[i].x == host_points[i].x && device_points[i].y == host_points[i].y);
  }
  std::printf("quadtree of %d points: %d nodes split, %d non-empty leaves, deepest leaf at level %d\n", kPoints, splits,
              leaves_checked, deepest);
  EXPECT(deepest == kMaxDepth && splits > 20);

  CHECK(cudaFree(nodes));
  CHECK(cudaFree(buffers));
  CHECK(cudaFree(launch_errors));
  std::printf("quadtree: PASS\n");
  return 0;
}

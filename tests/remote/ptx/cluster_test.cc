// The PTX engine's tests: thread block clusters (sm_90). A cluster's blocks run resident
// together: their special registers, distributed shared memory (mapa, getctarank,
// .shared::cluster), the cluster's barrier, shapes compiled into a kernel, the shapes a
// driver refuses, and a deadlock at the cluster's barrier told as the tenant's. The kernels:
// kernels/ThreadBlockClusters.ptx (its CUDA source in its comment).
#include <array>

#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

class Clusters : public ptx_test::Engine {
 protected:
  void SetUp() override {
    ptx_test::Engine::SetUp();
    const std::string text = ptx_test::KernelText("ThreadBlockClusters.ptx");
    ASSERT_EQ(executor_.LoadModule(kModule, text.c_str(), text.size() + 1, {}), kCuSuccess)
        << executor_.TakeErrorDetail();
  }

  // Launches `kernel` with `params` (its parameters' bytes) over `grid` blocks of `block`
  // threads in clusters of `cluster` blocks (1, 1, 1: a launch that names none).
  template <typename Params>
  int32_t Launch(const std::string& kernel, std::array<uint32_t, 3> grid, uint32_t block,
                 std::array<uint32_t, 3> cluster, const Params& params, uint32_t shared = 0) {
    const uint64_t function = ++next_function_;
    EXPECT_EQ(executor_.GetFunction(kModule, function, kernel), kCuSuccess) << executor_.TakeErrorDetail();
    device::LaunchConfig config;
    for (int axis = 0; axis < 3; ++axis) {
      config.grid[axis] = grid[axis];
      config.cluster[axis] = cluster[axis];
    }
    config.block[0] = block;
    config.shared_mem = shared;
    const int32_t status = executor_.Launch(function, config, &params, sizeof(params));
    last_detail_ = executor_.TakeErrorDetail();
    return status;
  }

  static constexpr uint64_t kModule = 20;
};

TEST_F(Clusters, BlocksReadTheirPlaceInTheirCluster) {
  // A 6x2 grid in clusters of 3x2: two clusters along x.
  const uint32_t blocks = 12;
  const uint64_t out = Zeros<uint32_t>(blocks * 8);
  ASSERT_EQ(Launch("cluster_places", {6, 2, 1}, 32, {3, 2, 1}, out), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, blocks * 8);
  for (uint32_t y = 0; y < 2; ++y) {
    for (uint32_t x = 0; x < 6; ++x) {
      SCOPED_TRACE(testing::Message() << "block (" << x << "," << y << ")");
      const uint32_t* place = &got[(x + 6 * y) * 8];
      EXPECT_EQ(place[0], x / 3);          // %clusterid.x
      EXPECT_EQ(place[1], 2u);             // %nclusterid.x
      EXPECT_EQ(place[2], x % 3);          // %cluster_ctaid.x
      EXPECT_EQ(place[3], y);              // %cluster_ctaid.y
      EXPECT_EQ(place[4], 3u);             // %cluster_nctaid.x
      EXPECT_EQ(place[5], x % 3 + 3 * y);  // %cluster_ctarank
      EXPECT_EQ(place[6], 6u);             // %cluster_nctarank
      EXPECT_EQ(place[7], 1u);             // %is_explicit_cluster
    }
  }
  // Without a cluster each block is a cluster of its own, not an explicit one.
  const uint64_t plain = Zeros<uint32_t>(4 * 8);
  ASSERT_EQ(Launch("cluster_places", {4, 1, 1}, 32, {1, 1, 1}, plain), kCuSuccess) << last_detail_;
  auto alone = Download<uint32_t>(plain, 4 * 8);
  for (uint32_t x = 0; x < 4; ++x) {
    EXPECT_EQ(std::vector<uint32_t>(alone.begin() + x * 8, alone.begin() + x * 8 + 8),
              (std::vector<uint32_t>{x, 4, 0, 0, 1, 0, 1, 0}))
        << "block " << x;
  }
}

TEST_F(Clusters, DistributedSharedMemoryHistogram) {
  // The programming guide's histogram: 4 blocks of a cluster hold 64 bins each; 8 clusters.
  const int nbins = 256, per_block = 64, n = 100000;
  std::vector<int> input(n), expected(nbins);
  for (int i = 0; i < n; ++i) {
    input[i] = static_cast<int>((uint32_t{static_cast<uint32_t>(i)} * 2654435761u) % 300) - 20;
    ++expected[std::clamp(input[i], 0, nbins - 1)];
  }
  const uint64_t bins = Zeros<int>(nbins), in = Upload(input);
  struct {
    uint64_t bins;
    int32_t nbins, per_block;
    uint64_t input;
    int32_t n;
  } params{bins, nbins, per_block, in, n};
  ASSERT_EQ(Launch("cluster_histogram", {32, 1, 1}, 128, {4, 1, 1}, params, per_block * 4), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int>(bins, nbins), expected);
}

TEST_F(Clusters, BlocksReadEachOthersSharedMemoryAndItsRank) {
  // Clusters of 2x2 (ranks 0..3 in x-fastest order); each block reads the next rank's words.
  const uint32_t threads = 128, blocks = 8;
  const uint64_t out = Zeros<uint32_t>(blocks * threads * 2);
  ASSERT_EQ(Launch("cluster_ring", {4, 2, 1}, threads, {2, 2, 1}, out), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, blocks * threads * 2);
  for (uint32_t y = 0; y < 2; ++y) {
    for (uint32_t x = 0; x < 4; ++x) {
      const uint32_t rank = x % 2 + 2 * y, next = (rank + 1) % 4;
      for (uint32_t t = 0; t < threads; ++t) {
        const uint32_t at = ((x + 4 * y) * threads + t) * 2;
        ASSERT_EQ(got[at], next * 1000 + (t + 1) % threads) << "block (" << x << "," << y << ") thread " << t;
        ASSERT_EQ(got[at + 1], next) << "block (" << x << "," << y << ") thread " << t;
      }
    }
  }
}

TEST_F(Clusters, ABlockArrivesAtAnotherBlocksMemoryBarrier) {
  // Two clusters of two: in each, rank 1 fills rank 0's words and arrives at its mbarrier.
  const uint64_t out = Zeros<uint32_t>(32);
  ASSERT_EQ(Launch("cluster_mbarrier", {4, 1, 1}, 64, {2, 1, 1}, out), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, 32);
  for (uint32_t t = 0; t < 32; ++t) EXPECT_EQ(got[t], 1000 + t) << t;
}

TEST_F(Clusters, AKernelRunsInTheClustersItWasCompiledFor) {
  const uint64_t out = Zeros<uint32_t>(8 * 2);
  ASSERT_EQ(Launch("compiled_pairs", {8, 1, 1}, 64, {1, 1, 1}, out), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, 16);
  for (uint32_t b = 0; b < 8; ++b) {
    EXPECT_EQ(got[b * 2], b % 2) << b;
    EXPECT_EQ(got[b * 2 + 1], (b ^ 1) * 10) << b;  // its partner's shared word
  }
  // Its own shape named again is fine; another, or a grid it does not divide, is refused.
  EXPECT_EQ(Launch("compiled_pairs", {8, 1, 1}, 64, {2, 1, 1}, out), kCuSuccess) << last_detail_;
  EXPECT_EQ(Launch("compiled_pairs", {8, 1, 1}, 64, {4, 1, 1}, out), kCuInvalidClusterSize);
  EXPECT_NE(last_detail_.find("compiled for clusters of 2x1x1 blocks, launched with clusters of 4x1x1"),
            std::string::npos)
      << last_detail_;
  EXPECT_EQ(Launch("compiled_pairs", {7, 1, 1}, 64, {1, 1, 1}, out), kCuInvalidClusterSize);
  EXPECT_NE(last_detail_.find("a grid of 7x1x1 blocks in clusters of 2x1x1"), std::string::npos) << last_detail_;
}

// A module whose kernel names a cluster shape no GPU has does not load, naming it.
TEST_F(Clusters, AModuleWithAnImpossibleCompiledShapeDoesNotLoad) {
  for (const char* shape : {"17, 1, 1", "0", "2, 2, 2, 2"}) {
    const std::string text = std::string(".version 8.0\n.target sm_90\n.address_size 64\n") +
                             ".visible .entry k() .reqnctapercluster " + shape + "\n{\n  ret;\n}\n";
    EXPECT_NE(executor_.LoadModule(kModule + 1, text.c_str(), text.size() + 1, {}), kCuSuccess) << shape;
    EXPECT_NE(executor_.TakeErrorDetail().find(".reqnctapercluster"), std::string::npos) << shape;
  }
}

TEST_F(Clusters, ShapesADriverRefusesAreRefused) {
  const uint64_t out = Zeros<uint32_t>(64 * 8);
  EXPECT_EQ(Launch("cluster_places", {34, 1, 1}, 32, {17, 1, 1}, out), kCuInvalidClusterSize);
  EXPECT_NE(last_detail_.find("more than 16 blocks"), std::string::npos) << last_detail_;
  EXPECT_EQ(Launch("cluster_places", {8, 8, 1}, 32, {8, 4, 1}, out), kCuInvalidClusterSize);
  EXPECT_NE(last_detail_.find("(at most 16)"), std::string::npos) << last_detail_;
  EXPECT_EQ(Launch("cluster_places", {6, 1, 1}, 32, {4, 1, 1}, out), kCuInvalidClusterSize);
  EXPECT_EQ(Launch("cluster_places", {6, 1, 1}, 32, {0, 1, 1}, out), kCuInvalidClusterSize);
  // A cluster whose blocks' memory together is more than the sim holds at once: refused
  // before anything is allocated (each block alone would fit).
  const std::string heavy = std::string(".version 8.0\n.target sm_90\n.address_size 64\n") +
                            ".visible .entry heavy(.param .u64 out)\n{\n  .local .align 4 .b8 scratch[400000];\n"
                            "  ret;\n}\n";
  ASSERT_EQ(executor_.LoadModule(kModule + 2, heavy.c_str(), heavy.size() + 1, {}), kCuSuccess)
      << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(kModule + 2, 7, "heavy"), kCuSuccess) << executor_.TakeErrorDetail();
  device::LaunchConfig config;
  config.grid[0] = 8;
  config.block[0] = 1024;
  config.cluster[0] = 8;
  EXPECT_EQ(executor_.Launch(7, config, &out, sizeof(out)), kCuLaunchOutOfResources);
  EXPECT_NE(executor_.TakeErrorDetail().find("a cluster of 8 blocks does not fit the sim GPU at once"),
            std::string::npos);
  // Sixteen blocks, the most an H100 allows with non-portable sizes: runs.
  EXPECT_EQ(Launch("cluster_places", {32, 1, 1}, 32, {16, 1, 1}, out), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<uint32_t>(out, 32 * 8)[31 * 8 + 5], 15u);
}

TEST_F(Clusters, ADeadlockAtTheClusterBarrierFailsTheLaunchNamingIt) {
  const uint64_t out = Zeros<uint32_t>(64);
  // Both clusters deadlock; which one's worker tells it first (the other is then abandoned)
  // is the threads' race.
  EXPECT_EQ(Launch("cluster_deadlock", {4, 1, 1}, 64, {2, 1, 1}, out), kCuLaunchFailed);
  EXPECT_TRUE(last_detail_.find("deadlock: every running thread of the cluster of block (0,0,0) waits") == 0 ||
              last_detail_.find("deadlock: every running thread of the cluster of block (2,0,0) waits") == 0)
      << last_detail_;
  EXPECT_NE(last_detail_.find("(96 at the cluster's barrier, 32 at barriers of their block) and none can complete"),
            std::string::npos)
      << last_detail_;
  // In clusters of one block every block is rank 0, which waits at no named barrier: the
  // cluster's barrier is the block's own, and every block passes it.
  EXPECT_EQ(Launch("cluster_deadlock", {4, 1, 1}, 64, {1, 1, 1}, out), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, 64);
  EXPECT_EQ(std::count(got.begin(), got.end(), 1u), 64);
}

}  // namespace
}  // namespace gpupool::dataplane

// The PTX engine's tests: shuffles, votes, matches and reductions across a warp (interp/warp_ops.cc).
// The fixture and helpers: engine_fixture.h.
#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

using ptx_test::Engine;
using ptx_test::KernelText;

// vote, match and redux .sync over each lane's own membermask: the lanes of one warp run
// converged, even lanes naming the even lanes and odd lanes the odd ones (as
// cooperative_groups' labeled_partition and its reduce, ballot and all do). Each group
// gets its own answer, not the warp's.
TEST_F(Engine, WarpCollectivesFollowEachLanesMembermask) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(14, 96, "WarpCollectivesFollowEachLanesMembermask.ptx", "member_groups"));
  const auto got = LaunchForOutput<uint32_t>(96, 1, 32, 4 * 32);
  ASSERT_FALSE(got.empty());
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const bool odd = lane % 2;
    EXPECT_EQ(got[4 * lane], odd ? 0x0000aaaau : 0x00005555u) << lane;              // ballot: lane < 16
    EXPECT_EQ(got[4 * lane + 1], odd ? 1u : 0u) << lane;                            // all(odd or lane < 16)
    EXPECT_EQ(got[4 * lane + 2], odd ? 256u : 240u) << lane;                        // sum of the group's lane ids
    EXPECT_EQ(got[4 * lane + 3], (odd ? 0xau : 0x5u) << (4 * (lane / 4))) << lane;  // lane / 4
  }
}

// A loop whose back edge leads to a block placed before its head, as nvcc lays out a
// warp's ballot-and-scatter loop: even lanes go around at once, odd lanes after one more
// block placed after the branch. The next iteration's vote.sync waits for the odd lanes,
// though they stand at a higher PC: every lane sees the whole warp's ballot each time.
TEST_F(Engine, WarpVoteWaitsForLanesStillInTheLoopsLastBlock) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(15, 97, "WarpVoteWaitsForLanesStillInTheLoopsLastBlock.ptx", "late_lanes"));
  const auto got = LaunchForOutput<uint32_t>(97, 1, 32, 4 * 32);
  ASSERT_FALSE(got.empty());
  for (uint32_t lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(got[4 * lane], 0x000000ffu) << lane;
    EXPECT_EQ(got[4 * lane + 1], 0x0000ffffu) << lane;
    EXPECT_EQ(got[4 * lane + 2], 0x00ffffffu) << lane;
    EXPECT_EQ(got[4 * lane + 3], lane % 2 ? 3u : 0u) << lane;
  }
}

// redux.sync (sm_80; __reduce_*_sync and cooperative groups' reduce on integers): each
// lane gets the warp's add, signed min, unsigned max, and, or and xor. Hand-written, like
// the test above.
// elect.sync picks the lowest lane of each membermask's running members; griddepcontrol
// (programmatic dependent launch) runs as nothing, the sim's grids running in stream order.
TEST_F(Engine, ElectPicksTheLowestMemberAndDependentLaunchesWaitForNothing) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(15, 97, "ElectAndDependentLaunches.ptx", "elect_leaders"));
  const auto got = LaunchForOutput<uint32_t>(97, 1, 32, 2 * 32);
  ASSERT_FALSE(got.empty());
  for (uint32_t lane = 0; lane < 32; ++lane) {
    if (lane < 5) {
      EXPECT_EQ(got[2 * lane], 99u) << lane;  // did not run it
      EXPECT_EQ(got[2 * lane + 1], 7u) << lane;
      continue;
    }
    const uint32_t leader = lane % 2 ? 5 : 6;
    EXPECT_EQ(got[2 * lane], leader) << lane;
    EXPECT_EQ(got[2 * lane + 1], lane == leader ? 1u : 0u) << lane;
  }
}

TEST_F(Engine, WarpReductions) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(3, 98, "WarpReductions.ptx", "reduce_warp"));
  std::vector<int32_t> in(32);
  int32_t add = 0, min = INT32_MAX;
  uint32_t max = 0, all = ~0u, any = 0, x = 0;
  for (int i = 0; i < 32; ++i) {
    in[i] = (i * 37) % 23 - 5 + (i == 9 ? 1 << 30 : 0);
    add += in[i];
    min = std::min(min, in[i]);
    max = std::max(max, static_cast<uint32_t>(in[i]));
    all &= static_cast<uint32_t>(in[i]);
    any |= static_cast<uint32_t>(in[i]);
    x ^= static_cast<uint32_t>(in[i]);
  }
  uint64_t din = Upload(in), out = Zeros<uint32_t>(32 * 6);
  struct {
    uint64_t in, out;
  } params{din, out};
  ASSERT_EQ(LaunchLoaded(98, 1, 32, params), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(out, 32 * 6);
  for (int lane : {0, 13, 31}) {
    EXPECT_EQ(static_cast<int32_t>(got[6 * lane]), add) << lane;
    EXPECT_EQ(static_cast<int32_t>(got[6 * lane + 1]), min) << lane;
    EXPECT_EQ(got[6 * lane + 2], max) << lane;
    EXPECT_EQ(got[6 * lane + 3], all) << lane;
    EXPECT_EQ(got[6 * lane + 4], any) << lane;
    EXPECT_EQ(got[6 * lane + 5], x) << lane;
  }
}

TEST_F(Engine, WarpShufflesVotesAndMatch) {
  const int n = 64;
  uint64_t out = Zeros<int>(8 * n);
  ASSERT_EQ(Run("warp_ops", {1}, {n}, 0, out), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, 8 * n);
  for (int t = 0; t < n; ++t) {
    int lane = t & 31, base = t - lane;
    auto v = [&](int l) { return (base + l) * 3 + 1; };
    int sum = 0;
    for (int l = 0; l < 32; ++l) sum += v(l);
    const int* o = &got[8 * t];
    EXPECT_EQ(o[0], sum) << t;
    EXPECT_EQ(o[1], lane >= 1 ? v(lane - 1) : v(lane)) << t;
    EXPECT_EQ(o[2], lane + 2 <= 31 ? v(lane + 2) : v(lane)) << t;
    EXPECT_EQ(o[3], v(5)) << t;
    EXPECT_EQ(o[4], 1) << t;
    EXPECT_EQ(o[5], base == 0 ? 1 : 0) << t;  // v == 10 at thread 3 only
    EXPECT_EQ(static_cast<uint32_t>(o[6]), 0xfu << (lane / 4 * 4)) << t;
    EXPECT_EQ(static_cast<uint32_t>(o[7]), (lane & 1) ? 0xaaaaaaaau : 0u) << t;
  }
}

}  // namespace
}  // namespace gpupool::dataplane

// The PTX engine's tests: launches and scheduling: grids, divergence, barriers, special registers, traps, forward
// progress of waiting lanes and CTAs. The fixture and helpers: engine_fixture.h.
#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

using ptx_test::Engine;
using ptx_test::KernelText;

TEST_F(Engine, GridAndBlockDimensions) {
  // One warp per block; then blocks of several warps whose warps start inside a row and
  // a plane (7x5x3 = 105 threads: warp 1 begins at x=4, y=1, z=0, the last is partial).
  const uint32_t shapes[2][2][3] = {{{3, 2, 2}, {4, 3, 2}}, {{2, 1, 2}, {7, 5, 3}}};
  for (const auto& [grid, block] : shapes) {
    SCOPED_TRACE(testing::Message() << "block " << block[0] << "x" << block[1] << "x" << block[2]);
    const uint32_t threads = block[0] * block[1] * block[2];
    const uint32_t total = grid[0] * grid[1] * grid[2] * threads;
    uint64_t out = Zeros<uint32_t>(4 * total);
    ASSERT_EQ(Run("dims", {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, 0, out), kCuSuccess)
        << last_detail_;
    auto got = Download<uint32_t>(out, 4 * total);
    std::vector<bool> seen(total);
    for (uint32_t bz = 0; bz < grid[2]; ++bz)
      for (uint32_t by = 0; by < grid[1]; ++by)
        for (uint32_t bx = 0; bx < grid[0]; ++bx)
          for (uint32_t tz = 0; tz < block[2]; ++tz)
            for (uint32_t ty = 0; ty < block[1]; ++ty)
              for (uint32_t tx = 0; tx < block[0]; ++tx) {
                uint32_t b = bx + grid[0] * (by + grid[1] * bz);
                uint32_t id = b * threads + tx + block[0] * (ty + block[1] * tz);
                ASSERT_EQ(got[4 * id], id);
                EXPECT_EQ(got[4 * id + 1], tx | (ty << 10) | (tz << 20));
                EXPECT_EQ(got[4 * id + 2], bx | (by << 10) | (bz << 20));
                EXPECT_EQ(got[4 * id + 3], block[0] | (block[1] << 10) | (grid[2] << 20));
                seen[id] = true;
              }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), total);
  }
}

TEST_F(Engine, DivergenceAndReconvergence) {
  const int n = 96;  // three warps, the last one full too
  uint64_t out = Zeros<int>(2 * n);
  ASSERT_EQ(Run("diverge", {1}, {n}, 0, out), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, 2 * n);
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) {
    if (i % 3 == 0) {
      for (int k = 0; k < i % 7; ++k) v[i] += k * i;
    } else if (i % 3 == 1) {
      v[i] = -i;
    } else {
      while (v[i] < i) v[i] += 5;
    }
  }
  for (int i = 0; i < n; ++i) {
    uint32_t ballot = 0;
    for (int lane = 0; lane < 32; ++lane) ballot |= static_cast<uint32_t>(v[i / 32 * 32 + lane] > 10) << lane;
    EXPECT_EQ(got[2 * i], v[i]) << i;
    EXPECT_EQ(static_cast<uint32_t>(got[2 * i + 1]), ballot) << i;
  }
}

TEST_F(Engine, StaticAndDynamicSharedMemoryWithBarriers) {
  const int blocks = 4, threads = 256;
  std::vector<float> in(blocks * threads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 7) % 13);
  uint64_t din = Upload(in), reversed = Zeros<float>(in.size()), sums = Zeros<float>(blocks);
  ASSERT_EQ(Run("shared_reduce", {blocks}, {threads}, threads * 4, din, reversed, sums), kCuSuccess) << last_detail_;
  auto r = Download<float>(reversed, in.size());
  auto s = Download<float>(sums, blocks);
  for (int b = 0; b < blocks; ++b) {
    float sum = 0;
    for (int t = 0; t < threads; ++t) {
      sum += in[b * threads + t];
      EXPECT_EQ(r[b * threads + t], in[b * threads + threads - 1 - t]);
    }
    EXPECT_EQ(s[b], sum) << b;
  }
  // Not enough dynamic shared memory for the kernel's accesses: a stray shared
  // access.
  EXPECT_EQ(Run("shared_reduce", {blocks}, {threads}, 16, din, reversed, sums), kCuIllegalAddress);
}

TEST_F(Engine, BlockWideVotes) {
  const int blocks = 3, threads = 100;  // the last warp of each block is partial
  std::vector<int> in(blocks * threads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i % 7) - 2;
  in[150] = 5000;  // block 1 only
  uint64_t din = Upload(in), out = Zeros<int>(3 * in.size());
  ASSERT_EQ(Run("block_votes", {blocks}, {threads}, 0, din, out), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, 3 * in.size());
  for (int b = 0; b < blocks; ++b) {
    int count = 0, any = 0;
    for (int t = 0; t < threads; ++t) {
      count += in[b * threads + t] > 0;
      any |= in[b * threads + t] > 1000;
    }
    for (int t = 0; t < threads; ++t) {
      int i = b * threads + t;
      EXPECT_EQ(got[3 * i], count) << i;
      EXPECT_NE(got[3 * i + 1], 0) << i;
      EXPECT_EQ(got[3 * i + 2] != 0, any != 0) << i;
    }
  }
}

TEST_F(Engine, SpecialRegistersAndClocks) {
  const int n = 64;
  uint64_t out = Zeros<unsigned>(4 * n), clocks = Zeros<long long>(2 * n);
  auto before = std::chrono::system_clock::now().time_since_epoch();
  ASSERT_EQ(Run("specials", {1}, {n}, 0, out, clocks), kCuSuccess) << last_detail_;
  auto after = std::chrono::system_clock::now().time_since_epoch();
  auto got = Download<unsigned>(out, 4 * n);
  auto c = Download<long long>(clocks, 2 * n);
  for (int t = 0; t < n; ++t) {
    EXPECT_EQ(got[4 * t], static_cast<unsigned>(t % 32));
    EXPECT_EQ(got[4 * t + 1], static_cast<unsigned>(t / 32));
    EXPECT_EQ(got[4 * t + 2], 1u);  // %smid < %nsmid
    EXPECT_EQ(got[4 * t + 3], 4950u);
    EXPECT_GT(c[2 * t], 0) << "clock64 did not advance";
    EXPECT_GE(c[2 * t + 1], std::chrono::duration_cast<std::chrono::nanoseconds>(before).count());
    EXPECT_LE(c[2 * t + 1], std::chrono::duration_cast<std::chrono::nanoseconds>(after).count());
  }
}

TEST_F(Engine, TrapsAssertionsAndTextures) {
  EXPECT_EQ(Run("trap_kernel", {1}, {32}, 0), kCuLaunchFailed);
  EXPECT_EQ(Run("assert_kernel", {1}, {4}, 0, 1), kCuSuccess) << last_detail_;
  EXPECT_EQ(executor_.TakeOutput(), "");
  EXPECT_EQ(Run("assert_kernel", {2}, {4}, 0, 3), kCuAssert);
  std::string text = executor_.TakeOutput();
  EXPECT_NE(text.find("Assertion `v != 3` failed."), std::string::npos) << text;
  EXPECT_NE(text.find("engine_kernels.cu"), std::string::npos) << text;
  // Textures (texture_test.cc runs them): a handle that is no texture object of the
  // session faults the launch as an illegal address.
  uint64_t out = Zeros<float>(32);
  EXPECT_EQ(Run("texture_kernel", {1}, {32}, 0, uint64_t{1}, out), kCuIllegalAddress);
  EXPECT_NE(last_detail_.find("texture object"), std::string::npos) << last_detail_;
}

// What a kernel needs, as a driver reports it of compiled code: only the module's .shared
// variables the kernel or a function it calls names (here 1024 + 64 bytes, not the other
// kernel's 8192), its .maxntid bound (a bigger block fails with
// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), the module's .const bytes, its local memory.
TEST_F(Engine, KernelsNeedTheirOwnSharedMemoryAndThreadBound) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(13, 91, "KernelsNeedTheirOwnSharedMemoryAndThreadBound.ptx", "bounded"));
  FunctionResources resources;
  ASSERT_TRUE(executor_.Resources(91, &resources));
  EXPECT_EQ(resources.static_shared_bytes, 1024 + 64);
  EXPECT_EQ(resources.max_threads_per_block, 128);
  EXPECT_EQ(resources.const_bytes, 96);
  EXPECT_EQ(resources.local_bytes, 48);  // 40, in 16-byte units
  ASSERT_EQ(executor_.GetFunction(13, 92, "other"), kCuSuccess);
  ASSERT_TRUE(executor_.Resources(92, &resources));
  EXPECT_EQ(resources.static_shared_bytes, 8192);
  EXPECT_EQ(resources.max_threads_per_block, 1024);
  EXPECT_FALSE(executor_.Resources(93, &resources));  // no such function

  uint64_t out = Zeros<uint32_t>(1);
  device::LaunchConfig config;
  config.block[0] = 64;
  config.block[1] = 2;
  EXPECT_EQ(executor_.Launch(91, config, &out, sizeof(out)), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_GE(Download<uint32_t>(out, 1)[0], 7u);
  config.block[1] = 3;  // 192 threads
  EXPECT_EQ(executor_.Launch(91, config, &out, sizeof(out)), kCuLaunchOutOfResources);
  EXPECT_NE(executor_.TakeErrorDetail().find("at most 128 threads"), std::string::npos);
}

// Lanes of a warp waiting for each other make progress, as on sm_70 and later GPUs: an
// intra-warp spin lock without the "done flag" idiom, lane 0 spinning on lane 31's flag
// (each ran for ever with the lowest PC always first), and a long divergent loop before a
// whole-warp shuffle, which must still see every lane.
TEST_F(Engine, LanesOfAWarpWaitingForEachOtherProgress) {
  uint64_t lock = Zeros<int32_t>(1), counter = Zeros<int32_t>(1);
  ASSERT_EQ(Run("intra_warp_lock", {4}, {64}, 0, lock, counter), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int32_t>(counter, 1)[0], 4 * 64);
  uint64_t flags = Zeros<int32_t>(8), out = Zeros<int32_t>(256);
  ASSERT_EQ(Run("intra_warp_flag", {2}, {128}, 0, flags, out), kCuSuccess) << last_detail_;
  auto got = Download<int32_t>(out, 256);
  int work = 0;
  for (int i = 0; i < 2000; ++i) work += i % 7;
  for (int warp = 0; warp < 8; ++warp) {
    EXPECT_EQ(got[warp * 32], 1) << "warp " << warp;
    EXPECT_EQ(got[warp * 32 + 31], work) << "warp " << warp;
  }
  ASSERT_EQ(Run("long_divergent_loop_then_shuffle", {1}, {64}, 0, out), kCuSuccess) << last_detail_;
  auto counts = Download<uint32_t>(out, 64);
  uint32_t sum = 0;
  for (uint32_t lane = 0; lane < 32; ++lane) {
    uint32_t count = 0;
    for (uint32_t i = 0; i < (lane >= 16 ? 20000 + lane : lane); ++i) count = count * 3 + (i & 7);
    sum += count;
  }
  for (int t = 0; t < 64; ++t) EXPECT_EQ(counts[t], sum) << "thread " << t;
}

// Named barriers keep their own thread counts: a producer warp arrives (bar.arrive) and
// goes on while its consumer waits (bar.sync) for that barrier only, and another pair of
// warps passes a third barrier meanwhile. Every barrier was CTA-wide: bar.arrive did not
// count and the consumer was released with the producer's next wait, reading the next
// round's row.
TEST_F(Engine, NamedBarriersCountTheirOwnThreads) {
  const int rounds = 6;
  uint64_t out = Zeros<int32_t>(rounds * 32 + 3);
  ASSERT_EQ(Run("named_barriers", {2}, {128}, 0, out, rounds, 5), kCuSuccess) << last_detail_;
  auto got = Download<int32_t>(out, rounds * 32 + 3);
  for (int r = 0; r < rounds; ++r) {
    for (int lane = 0; lane < 32; ++lane) {
      ASSERT_EQ(got[r * 32 + lane], r * 100 + lane) << "round " << r << " lane " << lane;
    }
  }
  EXPECT_EQ(got[rounds * 32], 2 * rounds);  // warp 2 of both CTAs, every round
  EXPECT_EQ(got[rounds * 32 + 1], 2 * rounds);
  EXPECT_EQ(got[rounds * 32 + 2], 1);
}

// A barrier that can never complete is the tenant's deadlock: the launch fails with
// CUDA_ERROR_LAUNCH_FAILED naming the block and the barrier, instead of hanging or running
// on with the threads released (wrong answers). Mode 0: half of the threads wait for a
// count of 128 that only 64 reach (the others exited). Mode 1: warp 0 waits at barrier 0,
// warp 1 at barrier 1, each for every thread. Mode 2: the same barrier with counts that
// complete runs to the end. The executor serves the next launch as before.
TEST_F(Engine, BarrierDeadlockFailsTheLaunchNamingIt) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(12, 96, "BarrierDeadlockFailsTheLaunchNamingIt.ptx", "barrier_deadlock"));
  uint64_t out = Zeros<uint32_t>(128);
  auto launch = [&](uint32_t mode, uint32_t blocks) {
    struct {
      uint64_t out;
      uint32_t mode;
    } params{out, mode};
    device::LaunchConfig config;
    config.grid[0] = blocks;
    config.block[0] = mode == 1 ? 64 : 128;
    int32_t status = executor_.Launch(96, config, &params, sizeof(params));
    last_detail_ = executor_.TakeErrorDetail();
    return status;
  };
  EXPECT_EQ(launch(0, 3), kCuLaunchFailed);
  EXPECT_NE(last_detail_.find("deadlock"), std::string::npos) << last_detail_;
  EXPECT_NE(last_detail_.find("barrier 1: 64 threads waiting, 64 of the 128"), std::string::npos) << last_detail_;
  EXPECT_EQ(launch(1, 1), kCuLaunchFailed);
  EXPECT_NE(last_detail_.find("block (0,0,0)"), std::string::npos) << last_detail_;
  EXPECT_NE(last_detail_.find("barrier 0: 32 threads waiting, all 64 running threads needed"), std::string::npos)
      << last_detail_;
  EXPECT_NE(last_detail_.find("barrier 1: 32 threads waiting"), std::string::npos) << last_detail_;
  ASSERT_EQ(launch(2, 2), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, 128);
  for (int t = 0; t < 128; ++t) ASSERT_EQ(got[t], 1u) << "thread " << t;
}

// CTAs waiting for other CTAs of their grid run, as on a GPU that holds the grid at once: a
// CTA that runs long makes its worker start the following CTAs beside it. Each of these
// ran for ever when a worker ran its CTAs one at a time to completion.
TEST_F(Engine, CtasWaitingForOtherCtasOfTheirGridProgress) {
  const int blocks = 64, threads = 64;
  uint64_t counter = Zeros<int32_t>(1), values = Zeros<int32_t>(blocks);
  uint64_t out = Zeros<int32_t>(blocks * threads);
  ASSERT_EQ(Run("software_grid_barrier", {blocks}, {threads}, 0, counter, values, out), kCuSuccess) << last_detail_;
  auto got = Download<int32_t>(out, blocks * threads);
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < threads; ++t) {
      ASSERT_EQ(got[b * threads + t], ((b + 1) % blocks) * 3 + 1) << "block " << b;
    }
  }
  EXPECT_EQ(Download<int32_t>(counter, 1)[0], blocks);

  uint64_t flag = Zeros<int32_t>(1), pair = Zeros<int32_t>(2);
  ASSERT_EQ(Run("first_waits_for_last", {40}, {32}, 0, flag, pair), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int32_t>(pair, 2), (std::vector<int32_t>{42, 41}));

  // A failure while others wait ends the launch (the waiting CTAs are abandoned).
  uint64_t count = Zeros<int32_t>(1);
  EXPECT_EQ(Run("trap_while_others_wait", {16}, {32}, 0, count), kCuLaunchFailed);
}

}  // namespace
}  // namespace gpupool::dataplane

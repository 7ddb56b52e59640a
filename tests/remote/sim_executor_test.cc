#include "remote/dataplane/sim_executor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "remote/dataplane/protocol.h"

namespace gpupool::dataplane {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(SimDeviceMemory, AccountsAndTranslatesWithinAllocations) {
  SimDeviceMemory memory(0, 4 * kMiB);
  uint64_t a = 0, b = 0, c = 0;
  ASSERT_EQ(memory.Allocate(kMiB, &a), kCuSuccess);
  ASSERT_EQ(memory.Allocate(2 * kMiB, &b), kCuSuccess);
  EXPECT_EQ(memory.used(), 3 * kMiB);
  EXPECT_EQ(memory.Allocate(2 * kMiB, &c), kCuOutOfMemory);
  EXPECT_EQ(memory.Allocate(0, &c), kCuInvalidValue);
  EXPECT_NE(memory.Translate(a, kMiB), nullptr);
  EXPECT_EQ(memory.Translate(a, kMiB + 1), nullptr);   // runs past the end
  EXPECT_EQ(memory.Translate(a - 1, 1), nullptr);      // before the start
  EXPECT_EQ(memory.Translate(b + 2 * kMiB, 1), nullptr);
  EXPECT_EQ(memory.Release(a + 8), kCuInvalidValue);   // not an allocation's start
  EXPECT_EQ(memory.Release(a), kCuSuccess);
  EXPECT_EQ(memory.Translate(a, 1), nullptr);          // freed: no longer valid
  EXPECT_EQ(memory.used(), 2 * kMiB);
  // Device addresses are not where the client's host memory lives.
  EXPECT_GE(b, uint64_t{16} << 40);
}

TEST(SimExecutor, CopiesMemsetsAndRunsVecAdd) {
  SimDeviceMemory memory(0, 64 * kMiB);
  SimExecutor executor(&memory);
  const int n = 1000;
  uint64_t a, b, c;
  ASSERT_EQ(executor.Allocate(n * 4, &a), kCuSuccess);
  ASSERT_EQ(executor.Allocate(n * 4, &b), kCuSuccess);
  ASSERT_EQ(executor.Allocate(n * 4, &c), kCuSuccess);
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.5f;
  }
  ASSERT_EQ(executor.CopyToDevice(a, x.data(), n * 4, 0), kCuSuccess);
  ASSERT_EQ(executor.CopyToDevice(b, y.data(), n * 4, 0), kCuSuccess);
  ASSERT_EQ(executor.LoadModule(1, "", 0, {{"_Z6vecAddPKfS0_Pfi", 28}, {"_Z7unknownv", 0}}),
            kCuSuccess);
  EXPECT_EQ(executor.GetFunction(1, 10, "_Z7unknownv"), kCuNotFound);  // no CPU twin
  EXPECT_EQ(executor.GetFunction(1, 10, "_Z5otherv"), kCuNotFound);    // not in module
  ASSERT_EQ(executor.GetFunction(1, 10, "_Z6vecAddPKfS0_Pfi"), kCuSuccess);
  uint8_t params[28];
  std::memcpy(params, &a, 8);
  std::memcpy(params + 8, &b, 8);
  std::memcpy(params + 16, &c, 8);
  std::memcpy(params + 24, &n, 4);
  LaunchConfig config;
  config.grid[0] = (n + 255) / 256;
  config.block[0] = 256;
  ASSERT_EQ(executor.Launch(10, config, params, sizeof(params)), kCuSuccess);
  const void* out = nullptr;
  ASSERT_EQ(executor.CopyFromDevice(c, n * 4, 0, &out), kCuSuccess);
  const float* sum = static_cast<const float*>(out);
  for (int i = 0; i < n; ++i) ASSERT_EQ(sum[i], x[i] + 1.5f) << i;

  ASSERT_EQ(executor.Memset(c, 0x01020304, 4, n, 0), kCuSuccess);
  ASSERT_EQ(executor.CopyFromDevice(c, 4, 0, &out), kCuSuccess);
  EXPECT_EQ(*static_cast<const uint32_t*>(out), 0x01020304u);
  ASSERT_EQ(executor.CopyDeviceToDevice(a, c, n * 4, 0), kCuSuccess);
  ASSERT_EQ(executor.CopyFromDevice(a + 4 * (n - 1), 4, 0, &out), kCuSuccess);
  EXPECT_EQ(*static_cast<const uint32_t*>(out), 0x01020304u);

  // Errors: too many threads, short parameters, a pointer outside any allocation.
  config.block[0] = 2048;
  EXPECT_EQ(executor.Launch(10, config, params, sizeof(params)), kCuInvalidValue);
  config.block[0] = 256;
  EXPECT_EQ(executor.Launch(10, config, params, 20), kCuInvalidValue);
  uint64_t wild = c + (uint64_t{1} << 36);
  std::memcpy(params + 16, &wild, 8);
  EXPECT_EQ(executor.Launch(10, config, params, sizeof(params)), kCuIllegalAddress);
  EXPECT_EQ(executor.CopyToDevice(wild, x.data(), 4, 0), kCuInvalidValue);
  EXPECT_EQ(executor.Free(wild), kCuInvalidValue);
}

TEST(SimExecutor, FreesEverythingWhenDestroyed) {
  SimDeviceMemory memory(0, 64 * kMiB);
  {
    SimExecutor executor(&memory);
    uint64_t p;
    ASSERT_EQ(executor.Allocate(8 * kMiB, &p), kCuSuccess);
    ASSERT_EQ(executor.Allocate(kMiB, &p), kCuSuccess);
    EXPECT_EQ(memory.used(), 9 * kMiB);
    uint64_t free_bytes = 0, total = 0;
    executor.MemoryInfo(&free_bytes, &total);
    EXPECT_EQ(total, 64 * kMiB);
    EXPECT_EQ(free_bytes, 55 * kMiB);
  }
  EXPECT_EQ(memory.used(), 0u);
}

TEST(SimExecutor, StreamsAndEvents) {
  SimDeviceMemory memory(0, kMiB);
  SimExecutor executor(&memory);
  EXPECT_EQ(executor.CreateStream(5, 0, 0), kCuSuccess);
  EXPECT_EQ(executor.CreateStream(5, 0, 0), kCuInvalidValue);  // id taken
  EXPECT_EQ(executor.CreateEvent(7, 0), kCuSuccess);
  EXPECT_EQ(executor.CreateEvent(8, 0), kCuSuccess);
  EXPECT_EQ(executor.CreateEvent(9, 0x2 /* disable timing */), kCuSuccess);
  float ms = -1;
  EXPECT_EQ(executor.ElapsedTime(7, 8, &ms), kCuInvalidHandle);  // not recorded yet
  EXPECT_EQ(executor.RecordEvent(7, 5), kCuSuccess);
  EXPECT_EQ(executor.RecordEvent(8, 0), kCuSuccess);
  EXPECT_EQ(executor.RecordEvent(9, 0), kCuSuccess);
  EXPECT_EQ(executor.RecordEvent(8, 99), kCuInvalidHandle);  // unknown stream
  EXPECT_EQ(executor.ElapsedTime(7, 8, &ms), kCuSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(executor.ElapsedTime(7, 9, &ms), kCuInvalidHandle);
  EXPECT_EQ(executor.StreamWaitEvent(5, 8), kCuSuccess);
  EXPECT_EQ(executor.SynchronizeStream(5), kCuSuccess);
  EXPECT_EQ(executor.DestroyStream(5), kCuSuccess);
  EXPECT_EQ(executor.SynchronizeStream(5), kCuInvalidHandle);
  EXPECT_EQ(executor.DestroyEvent(7), kCuSuccess);
  EXPECT_EQ(executor.QueryEvent(7), kCuInvalidHandle);
}

}  // namespace
}  // namespace gpupool::dataplane

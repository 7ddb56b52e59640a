#include "remote/sim/sim_executor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "remote/dataplane/protocol.h"

namespace gpupool::dataplane {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// The PTX nvcc emits for vecAdd and scale of tests/remote/programs/kernels.cuh.
const char kKernelsPtx[] =
    ".version 9.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "	// .globl	_Z6vecAddPKfS0_Pfi\n"
    ".visible .entry _Z6vecAddPKfS0_Pfi(\n"
    "	.param .u64 _Z6vecAddPKfS0_Pfi_param_0,\n"
    "	.param .u64 _Z6vecAddPKfS0_Pfi_param_1,\n"
    "	.param .u64 _Z6vecAddPKfS0_Pfi_param_2,\n"
    "	.param .u32 _Z6vecAddPKfS0_Pfi_param_3\n"
    ")\n"
    "{\n"
    "	.reg .pred 	%p<2>;\n"
    "	.reg .f32 	%f<4>;\n"
    "	.reg .b32 	%r<6>;\n"
    "	.reg .b64 	%rd<11>;\n"
    "	ld.param.u64 	%rd1, [_Z6vecAddPKfS0_Pfi_param_0];\n"
    "	ld.param.u64 	%rd2, [_Z6vecAddPKfS0_Pfi_param_1];\n"
    "	ld.param.u64 	%rd3, [_Z6vecAddPKfS0_Pfi_param_2];\n"
    "	ld.param.u32 	%r2, [_Z6vecAddPKfS0_Pfi_param_3];\n"
    "	mov.u32 	%r3, %ctaid.x;\n"
    "	mov.u32 	%r4, %ntid.x;\n"
    "	mov.u32 	%r5, %tid.x;\n"
    "	mad.lo.s32 	%r1, %r3, %r4, %r5;\n"
    "	setp.ge.s32 	%p1, %r1, %r2;\n"
    "	@%p1 bra 	$L__BB0_2;\n"
    "	cvta.to.global.u64 	%rd4, %rd1;\n"
    "	mul.wide.s32 	%rd5, %r1, 4;\n"
    "	add.s64 	%rd6, %rd4, %rd5;\n"
    "	cvta.to.global.u64 	%rd7, %rd2;\n"
    "	add.s64 	%rd8, %rd7, %rd5;\n"
    "	ld.global.f32 	%f1, [%rd8];\n"
    "	ld.global.f32 	%f2, [%rd6];\n"
    "	add.f32 	%f3, %f2, %f1;\n"
    "	cvta.to.global.u64 	%rd9, %rd3;\n"
    "	add.s64 	%rd10, %rd9, %rd5;\n"
    "	st.global.f32 	[%rd10], %f3;\n"
    "$L__BB0_2:\n"
    "	ret;\n"
    "}\n"
    "	// .globl	_Z5scalePffi\n"
    ".visible .entry _Z5scalePffi(\n"
    "	.param .u64 _Z5scalePffi_param_0,\n"
    "	.param .f32 _Z5scalePffi_param_1,\n"
    "	.param .u32 _Z5scalePffi_param_2\n"
    ")\n"
    "{\n"
    "	.reg .pred 	%p<2>;\n"
    "	.reg .f32 	%f<4>;\n"
    "	.reg .b32 	%r<6>;\n"
    "	.reg .b64 	%rd<5>;\n"
    "	ld.param.u64 	%rd1, [_Z5scalePffi_param_0];\n"
    "	ld.param.f32 	%f1, [_Z5scalePffi_param_1];\n"
    "	ld.param.u32 	%r2, [_Z5scalePffi_param_2];\n"
    "	mov.u32 	%r3, %ctaid.x;\n"
    "	mov.u32 	%r4, %ntid.x;\n"
    "	mov.u32 	%r5, %tid.x;\n"
    "	mad.lo.s32 	%r1, %r3, %r4, %r5;\n"
    "	setp.ge.s32 	%p1, %r1, %r2;\n"
    "	@%p1 bra 	$L__BB1_2;\n"
    "	cvta.to.global.u64 	%rd2, %rd1;\n"
    "	mul.wide.s32 	%rd3, %r1, 4;\n"
    "	add.s64 	%rd4, %rd2, %rd3;\n"
    "	ld.global.f32 	%f2, [%rd4];\n"
    "	mul.f32 	%f3, %f2, %f1;\n"
    "	st.global.f32 	[%rd4], %f3;\n"
    "$L__BB1_2:\n"
    "	ret;\n"
    "}\n";

int32_t LoadKernels(SimExecutor& executor, uint64_t module) {
  int32_t status = executor.LoadModule(module, kKernelsPtx, sizeof(kKernelsPtx), {});
  EXPECT_EQ(status, kCuSuccess) << executor.TakeErrorDetail();
  return status;
}

TEST(SimDeviceMemory, AccountsAndTranslatesWithinAllocations) {
  SimDeviceMemory memory(0, 4 * kMiB);
  const SimDeviceMemory::Owner me = memory.NewOwner();
  uint64_t a = 0, b = 0, c = 0;
  ASSERT_EQ(memory.Allocate(kMiB, me, &a), kCuSuccess);
  ASSERT_EQ(memory.Allocate(2 * kMiB, me, &b), kCuSuccess);
  EXPECT_EQ(memory.used(), 3 * kMiB);
  EXPECT_EQ(memory.Allocate(2 * kMiB, me, &c), kCuOutOfMemory);
  EXPECT_EQ(memory.Allocate(0, me, &c), kCuInvalidValue);
  EXPECT_NE(memory.Translate(a, kMiB, me), nullptr);
  EXPECT_EQ(memory.Translate(a, kMiB + 1, me), nullptr);   // runs past the end
  EXPECT_EQ(memory.Translate(a - 1, 1, me), nullptr);      // before the start
  EXPECT_EQ(memory.Translate(b + 2 * kMiB, 1, me), nullptr);
  EXPECT_EQ(memory.Translate(a, UINT64_MAX, me), nullptr);  // size that wraps around
  EXPECT_EQ(memory.Release(a + 8, me), kCuInvalidValue);   // not an allocation's start
  EXPECT_EQ(memory.Release(a, me), kCuSuccess);
  EXPECT_EQ(memory.Translate(a, 1, me), nullptr);          // freed: no longer valid
  EXPECT_EQ(memory.used(), 2 * kMiB);
  // Device addresses are not where the client's host memory lives.
  EXPECT_GE(b, uint64_t{16} << 40);
}

TEST(SimDeviceMemory, AnOwnerReachesOnlyItsOwnAllocations) {
  SimDeviceMemory memory(0, 4 * kMiB);
  const SimDeviceMemory::Owner first = memory.NewOwner();
  const SimDeviceMemory::Owner second = memory.NewOwner();
  ASSERT_NE(first, second);
  uint64_t mine = 0;
  ASSERT_EQ(memory.Allocate(kMiB, first, &mine), kCuSuccess);
  EXPECT_NE(memory.Translate(mine, kMiB, first), nullptr);
  EXPECT_EQ(memory.Translate(mine, 1, second), nullptr);
  EXPECT_EQ(memory.Translate(mine + 4096, 16, second), nullptr);
  EXPECT_EQ(memory.Release(mine, second), kCuInvalidValue);
  EXPECT_EQ(memory.used(), kMiB);  // the failed release changed nothing
  EXPECT_EQ(memory.Release(mine, first), kCuSuccess);
}

// Two sessions of one GPU (e.g. two clients, or a lease's successor): the second cannot
// read, write, copy, memset, free or hand to a kernel the first one's memory.
TEST(SimExecutor, ASessionCannotTouchAnotherSessionsMemory) {
  SimDeviceMemory memory(0, 64 * kMiB);
  SimExecutor owner(&memory);
  SimExecutor intruder(&memory);
  const uint32_t n = 256;
  uint64_t secret = 0, own = 0;
  ASSERT_EQ(owner.Allocate(n * 4, &secret), kCuSuccess);
  ASSERT_EQ(intruder.Allocate(n * 4, &own), kCuSuccess);
  std::vector<uint32_t> data(n, 0x5ec2e7u);
  ASSERT_EQ(owner.CopyToDevice(secret, data.data(), n * 4, 0), kCuSuccess);

  const void* out = nullptr;
  EXPECT_EQ(intruder.CopyFromDevice(secret, n * 4, 0, &out), kCuInvalidValue);
  EXPECT_EQ(intruder.CopyFromDevice(secret + 64, 4, 0, &out), kCuInvalidValue);
  EXPECT_EQ(intruder.HostView(secret, n * 4), nullptr);  // no in-place receive either
  std::vector<uint32_t> junk(n, 0xbad);
  EXPECT_EQ(intruder.CopyToDevice(secret, junk.data(), n * 4, 0), kCuInvalidValue);
  EXPECT_EQ(intruder.CopyDeviceToDevice(own, secret, n * 4, 0), kCuInvalidValue);  // read
  EXPECT_EQ(intruder.CopyDeviceToDevice(secret, own, n * 4, 0), kCuInvalidValue);  // write
  EXPECT_EQ(intruder.Memset(secret, 0, 4, n, 0), kCuInvalidValue);
  EXPECT_EQ(intruder.Free(secret), kCuInvalidValue);

  // Kernels: scale(secret) and vecAdd(own, own, secret) fault instead of touching it.
  ASSERT_EQ(LoadKernels(intruder, 1), kCuSuccess);
  ASSERT_EQ(intruder.GetFunction(1, 10, "_Z5scalePffi"), kCuSuccess);
  ASSERT_EQ(intruder.GetFunction(1, 11, "_Z6vecAddPKfS0_Pfi"), kCuSuccess);
  LaunchConfig config;
  config.block[0] = n;
  uint8_t scale[16];
  float factor = 0.0f;
  int count = static_cast<int>(n);
  std::memcpy(scale, &secret, 8);
  std::memcpy(scale + 8, &factor, 4);
  std::memcpy(scale + 12, &count, 4);
  EXPECT_EQ(intruder.Launch(10, config, scale, sizeof(scale)), kCuIllegalAddress);
  uint8_t add[28];
  std::memcpy(add, &own, 8);
  std::memcpy(add + 8, &own, 8);
  std::memcpy(add + 16, &secret, 8);
  std::memcpy(add + 24, &count, 4);
  EXPECT_EQ(intruder.Launch(11, config, add, sizeof(add)), kCuIllegalAddress);
  std::memcpy(add, &secret, 8);  // reading it as an input
  std::memcpy(add + 16, &own, 8);
  EXPECT_EQ(intruder.Launch(11, config, add, sizeof(add)), kCuIllegalAddress);

  // What the owner's kernels need is the owner's to ask: another session's function ids
  // name nothing in the intruder's session.
  ASSERT_EQ(LoadKernels(owner, 1), kCuSuccess);
  ASSERT_EQ(owner.GetFunction(1, 20, "_Z5scalePffi"), kCuSuccess);
  FunctionResources resources;
  EXPECT_TRUE(owner.Resources(20, &resources));
  EXPECT_FALSE(intruder.Resources(20, &resources));

  // The owner's data is intact.
  ASSERT_EQ(owner.CopyFromDevice(secret, n * 4, 0, &out), kCuSuccess);
  EXPECT_EQ(std::memcmp(out, data.data(), n * 4), 0);
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
  ASSERT_EQ(LoadKernels(executor, 1), kCuSuccess);
  EXPECT_EQ(executor.GetFunction(1, 10, "_Z5otherv"), kCuNotFound);  // not in the module
  EXPECT_EQ(executor.GetFunction(2, 10, "_Z5scalePffi"), kCuInvalidHandle);  // no module 2
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

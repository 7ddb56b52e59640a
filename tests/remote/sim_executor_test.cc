#include "remote/devices/sim/sim_executor.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "remote/protocol/protocol.h"
#include "remote/ptx/jit/jit.h"
#include "tests/remote/test_fatbin.h"

namespace gpupool::devices {
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
  EXPECT_EQ(status, dataplane::kCuSuccess) << executor.TakeErrorDetail();
  return status;
}

TEST(SimDeviceMemory, AccountsAndTranslatesWithinAllocations) {
  SimDeviceMemory memory(0, 4 * kMiB);
  const SimDeviceMemory::Owner me = memory.NewOwner();
  uint64_t a = 0, b = 0, c = 0;
  ASSERT_EQ(memory.Allocate(kMiB, me, &a), dataplane::kCuSuccess);
  ASSERT_EQ(memory.Allocate(2 * kMiB, me, &b), dataplane::kCuSuccess);
  EXPECT_EQ(memory.used(), 3 * kMiB);
  EXPECT_EQ(memory.Allocate(2 * kMiB, me, &c), dataplane::kCuOutOfMemory);
  EXPECT_EQ(memory.Allocate(0, me, &c), dataplane::kCuInvalidValue);
  EXPECT_NE(memory.Translate(a, kMiB, me), nullptr);
  EXPECT_EQ(memory.Translate(a, kMiB + 1, me), nullptr);  // runs past the end
  EXPECT_EQ(memory.Translate(a - 1, 1, me), nullptr);     // before the start
  EXPECT_EQ(memory.Translate(b + 2 * kMiB, 1, me), nullptr);
  EXPECT_EQ(memory.Translate(a, UINT64_MAX, me), nullptr);           // size that wraps around
  EXPECT_EQ(memory.Release(a + 8, me), dataplane::kCuInvalidValue);  // not an allocation's start
  EXPECT_EQ(memory.Release(a, me), dataplane::kCuSuccess);
  EXPECT_EQ(memory.Translate(a, 1, me), nullptr);  // freed: no longer valid
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
  ASSERT_EQ(memory.Allocate(kMiB, first, &mine), dataplane::kCuSuccess);
  EXPECT_NE(memory.Translate(mine, kMiB, first), nullptr);
  EXPECT_EQ(memory.Translate(mine, 1, second), nullptr);
  EXPECT_EQ(memory.Translate(mine + 4096, 16, second), nullptr);
  EXPECT_EQ(memory.Release(mine, second), dataplane::kCuInvalidValue);
  EXPECT_EQ(memory.used(), kMiB);  // the failed release changed nothing
  EXPECT_EQ(memory.Release(mine, first), dataplane::kCuSuccess);
}

// A large copy received in place (ReceiveView) has its destination faulted in by helper
// threads while the bytes arrive: whatever the receiver and the helpers do first, the
// block ends up holding exactly the bytes written, the odd pages at either end included,
// and the bytes around the copy are untouched.
TEST(SimDeviceMemory, PopulatingForAWriteNeverChangesAByte) {
  SimDeviceMemory memory(0, 256 * kMiB);
  const SimDeviceMemory::Owner me = memory.NewOwner();
  uint64_t block = 0;
  const uint64_t size = 96 * kMiB + 4093;  // neither end on a page
  ASSERT_EQ(memory.Allocate(size + 2 * 4099, me, &block), dataplane::kCuSuccess);
  char* whole = memory.Translate(block, size + 2 * 4099, me);
  ASSERT_NE(whole, nullptr);
  std::memset(whole, 0x5a, 4099);  // before the copy's range: written, so present
  char* at = memory.Translate(block + 4099, size, me);
  std::vector<char> bytes(size);
  for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i * 131 + (i >> 17));
  const uint64_t before = memory.populated_bytes();
  memory.PopulateForWrite(at, size);
  // The receiver writes from the front, racing the helpers, in slices as a transport does.
  for (uint64_t done = 0; done < size; done += 65537) {
    std::memcpy(at + done, bytes.data() + done, std::min<uint64_t>(65537, size - done));
  }
  memory.StopPopulating();
  EXPECT_EQ(std::memcmp(at, bytes.data(), size), 0);
  // Helpers that come after the writer (its bytes all there) leave them as they are.
  const uint64_t written = memory.populated_bytes();
  memory.PopulateForWrite(at, size);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (memory.populated_bytes() - written < size - 2 * 4096 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  memory.StopPopulating();
  EXPECT_GE(memory.populated_bytes() - written, size - 2 * 4096);
  EXPECT_EQ(std::memcmp(at, bytes.data(), size), 0);
  for (uint64_t i = 0; i < 4099; ++i) ASSERT_EQ(whole[i], 0x5a) << i;
  for (uint64_t i = 0; i < 4099; ++i) ASSERT_EQ(at[size + i], 0) << i;  // after it: still zero
  // The helpers ran (only whole pages inside the range, never more than it).
  EXPECT_GT(written, before);
  EXPECT_LE(written - before, size);
  EXPECT_EQ(memory.Release(block, me), dataplane::kCuSuccess);
}

// A copy that never comes (the client went away mid-transfer) leaves helpers running:
// freeing the block stops them first, and small copies start none.
TEST(SimDeviceMemory, FreeingWhilePopulatingIsSafeAndSmallCopiesStartNoHelpers) {
  SimDeviceMemory memory(0, 1024 * kMiB);
  const SimDeviceMemory::Owner me = memory.NewOwner();
  for (int round = 0; round < 4; ++round) {
    uint64_t block = 0;
    ASSERT_EQ(memory.Allocate(512 * kMiB, me, &block), dataplane::kCuSuccess);
    memory.PopulateForWrite(memory.Translate(block, 512 * kMiB, me), 512 * kMiB);
    EXPECT_EQ(memory.Release(block, me), dataplane::kCuSuccess);
  }
  uint64_t small = 0;
  ASSERT_EQ(memory.Allocate(SimDeviceMemory::kPopulateMin - 1, me, &small), dataplane::kCuSuccess);
  const uint64_t before = memory.populated_bytes();
  memory.PopulateForWrite(memory.Translate(small, SimDeviceMemory::kPopulateMin - 1, me),
                          SimDeviceMemory::kPopulateMin - 1);
  memory.StopPopulating();
  EXPECT_EQ(memory.populated_bytes(), before);
  EXPECT_EQ(memory.used(), SimDeviceMemory::kPopulateMin - 1);
}

// The executor's in-place receive (the dataplane's path for cuMemcpyHtoD, and for a
// recovery's restore) and a copy from a buffer give the same bytes.
TEST(SimExecutor, ALargeCopyReceivedInPlaceOrCopiedHoldsItsBytes) {
  SimDeviceMemory memory(0, 512 * kMiB);
  SimExecutor executor(&memory);
  const uint64_t size = 40 * kMiB + 17;
  uint64_t a = 0, b = 0;
  ASSERT_EQ(executor.Allocate(size, &a), dataplane::kCuSuccess);
  ASSERT_EQ(executor.Allocate(size, &b), dataplane::kCuSuccess);
  std::vector<char> bytes(size);
  for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i ^ (i >> 9));
  char* view = static_cast<char*>(executor.ReceiveView(a, size));
  ASSERT_EQ(view, executor.HostView(a, size));
  std::memcpy(view, bytes.data(), size);  // what the transport does
  ASSERT_EQ(executor.CopyToDevice(a, view, size, 0), dataplane::kCuSuccess);
  ASSERT_EQ(executor.CopyToDevice(b, bytes.data(), size, 0), dataplane::kCuSuccess);
  const void* out = nullptr;
  ASSERT_EQ(executor.CopyFromDevice(a, size, 0, &out), dataplane::kCuSuccess);
  EXPECT_EQ(std::memcmp(out, bytes.data(), size), 0);
  ASSERT_EQ(executor.CopyFromDevice(b, size, 0, &out), dataplane::kCuSuccess);
  EXPECT_EQ(std::memcmp(out, bytes.data(), size), 0);
  EXPECT_EQ(executor.ReceiveView(a + 1, size), nullptr);  // past the allocation: nothing
}

// Two sessions of one GPU (e.g. two clients, or a lease's successor): the second cannot
// read, write, copy, memset, free or hand to a kernel the first one's memory.
TEST(SimExecutor, ASessionCannotTouchAnotherSessionsMemory) {
  SimDeviceMemory memory(0, 64 * kMiB);
  SimExecutor owner(&memory);
  SimExecutor intruder(&memory);
  const uint32_t n = 256;
  uint64_t secret = 0, own = 0;
  ASSERT_EQ(owner.Allocate(n * 4, &secret), dataplane::kCuSuccess);
  ASSERT_EQ(intruder.Allocate(n * 4, &own), dataplane::kCuSuccess);
  std::vector<uint32_t> data(n, 0x5ec2e7u);
  ASSERT_EQ(owner.CopyToDevice(secret, data.data(), n * 4, 0), dataplane::kCuSuccess);

  const void* out = nullptr;
  EXPECT_EQ(intruder.CopyFromDevice(secret, n * 4, 0, &out), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.CopyFromDevice(secret + 64, 4, 0, &out), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.HostView(secret, n * 4), nullptr);  // no in-place receive either
  std::vector<uint32_t> junk(n, 0xbad);
  EXPECT_EQ(intruder.CopyToDevice(secret, junk.data(), n * 4, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.CopyDeviceToDevice(own, secret, n * 4, 0), dataplane::kCuInvalidValue);  // read
  EXPECT_EQ(intruder.CopyDeviceToDevice(secret, own, n * 4, 0), dataplane::kCuInvalidValue);  // write
  EXPECT_EQ(intruder.Memset(secret, 0, 4, n, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.Free(secret), dataplane::kCuInvalidValue);

  // Kernels: scale(secret) and vecAdd(own, own, secret) fault instead of touching it.
  ASSERT_EQ(LoadKernels(intruder, 1), dataplane::kCuSuccess);
  ASSERT_EQ(intruder.GetFunction(1, 10, "_Z5scalePffi"), dataplane::kCuSuccess);
  ASSERT_EQ(intruder.GetFunction(1, 11, "_Z6vecAddPKfS0_Pfi"), dataplane::kCuSuccess);
  device::LaunchConfig config;
  config.block[0] = n;
  uint8_t scale[16];
  float factor = 0.0f;
  int count = static_cast<int>(n);
  std::memcpy(scale, &secret, 8);
  std::memcpy(scale + 8, &factor, 4);
  std::memcpy(scale + 12, &count, 4);
  EXPECT_EQ(intruder.Launch(10, config, scale, sizeof(scale)), dataplane::kCuIllegalAddress);
  uint8_t add[28];
  std::memcpy(add, &own, 8);
  std::memcpy(add + 8, &own, 8);
  std::memcpy(add + 16, &secret, 8);
  std::memcpy(add + 24, &count, 4);
  EXPECT_EQ(intruder.Launch(11, config, add, sizeof(add)), dataplane::kCuIllegalAddress);
  std::memcpy(add, &secret, 8);  // reading it as an input
  std::memcpy(add + 16, &own, 8);
  EXPECT_EQ(intruder.Launch(11, config, add, sizeof(add)), dataplane::kCuIllegalAddress);

  // What the owner's kernels need is the owner's to ask: another session's function ids
  // name nothing in the intruder's session.
  ASSERT_EQ(LoadKernels(owner, 1), dataplane::kCuSuccess);
  ASSERT_EQ(owner.GetFunction(1, 20, "_Z5scalePffi"), dataplane::kCuSuccess);
  dataplane::FunctionResources resources;
  EXPECT_TRUE(owner.Resources(20, &resources));
  EXPECT_FALSE(intruder.Resources(20, &resources));

  // The owner's data is intact.
  ASSERT_EQ(owner.CopyFromDevice(secret, n * 4, 0, &out), dataplane::kCuSuccess);
  EXPECT_EQ(std::memcmp(out, data.data(), n * 4), 0);
}

TEST(SimExecutor, CopiesMemsetsAndRunsVecAdd) {
  SimDeviceMemory memory(0, 64 * kMiB);
  SimExecutor executor(&memory);
  const int n = 1000;
  uint64_t a, b, c;
  ASSERT_EQ(executor.Allocate(n * 4, &a), dataplane::kCuSuccess);
  ASSERT_EQ(executor.Allocate(n * 4, &b), dataplane::kCuSuccess);
  ASSERT_EQ(executor.Allocate(n * 4, &c), dataplane::kCuSuccess);
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.5f;
  }
  ASSERT_EQ(executor.CopyToDevice(a, x.data(), n * 4, 0), dataplane::kCuSuccess);
  ASSERT_EQ(executor.CopyToDevice(b, y.data(), n * 4, 0), dataplane::kCuSuccess);
  ASSERT_EQ(LoadKernels(executor, 1), dataplane::kCuSuccess);
  EXPECT_EQ(executor.GetFunction(1, 10, "_Z5otherv"), dataplane::kCuNotFound);          // not in the module
  EXPECT_EQ(executor.GetFunction(2, 10, "_Z5scalePffi"), dataplane::kCuInvalidHandle);  // no module 2
  ASSERT_EQ(executor.GetFunction(1, 10, "_Z6vecAddPKfS0_Pfi"), dataplane::kCuSuccess);
  uint8_t params[28];
  std::memcpy(params, &a, 8);
  std::memcpy(params + 8, &b, 8);
  std::memcpy(params + 16, &c, 8);
  std::memcpy(params + 24, &n, 4);
  device::LaunchConfig config;
  config.grid[0] = (n + 255) / 256;
  config.block[0] = 256;
  ASSERT_EQ(executor.Launch(10, config, params, sizeof(params)), dataplane::kCuSuccess);
  const void* out = nullptr;
  ASSERT_EQ(executor.CopyFromDevice(c, n * 4, 0, &out), dataplane::kCuSuccess);
  const float* sum = static_cast<const float*>(out);
  for (int i = 0; i < n; ++i) ASSERT_EQ(sum[i], x[i] + 1.5f) << i;

  ASSERT_EQ(executor.Memset(c, 0x01020304, 4, n, 0), dataplane::kCuSuccess);
  ASSERT_EQ(executor.CopyFromDevice(c, 4, 0, &out), dataplane::kCuSuccess);
  EXPECT_EQ(*static_cast<const uint32_t*>(out), 0x01020304u);
  ASSERT_EQ(executor.CopyDeviceToDevice(a, c, n * 4, 0), dataplane::kCuSuccess);
  ASSERT_EQ(executor.CopyFromDevice(a + 4 * (n - 1), 4, 0, &out), dataplane::kCuSuccess);
  EXPECT_EQ(*static_cast<const uint32_t*>(out), 0x01020304u);

  // Clusters run, their shape checked as a driver checks it; then errors: too many threads,
  // short parameters, a pointer outside any allocation.
  config.cluster[0] = 2;
  config.grid[0] = 2 * ((n + 511) / 512);
  EXPECT_EQ(executor.Launch(10, config, params, sizeof(params)), dataplane::kCuSuccess) << executor.TakeErrorDetail();
  config.cluster[0] = 3;
  config.grid[0] = 4;
  EXPECT_EQ(executor.Launch(10, config, params, sizeof(params)), dataplane::kCuInvalidClusterSize);
  EXPECT_NE(executor.TakeErrorDetail().find("clusters of 3x1x1"), std::string::npos);
  config.cluster[0] = 1;
  config.block[0] = 2048;
  EXPECT_EQ(executor.Launch(10, config, params, sizeof(params)), dataplane::kCuInvalidValue);
  config.block[0] = 256;
  EXPECT_EQ(executor.Launch(10, config, params, 20), dataplane::kCuInvalidValue);
  uint64_t wild = c + (uint64_t{1} << 36);
  std::memcpy(params + 16, &wild, 8);
  EXPECT_EQ(executor.Launch(10, config, params, sizeof(params)), dataplane::kCuIllegalAddress);
  EXPECT_EQ(executor.CopyToDevice(wild, x.data(), 4, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(executor.Free(wild), dataplane::kCuInvalidValue);
}

// A model runs what a real GPU of it runs: an image with SASS for the model's architecture
// and PTX only for a newer one (the math libraries' shape) runs that PTX; without the SASS,
// or for an older GPU than the SASS, there is no binary for the GPU; PTX text for a newer
// target is the JIT's INVALID_PTX.
TEST(SimExecutor, RunsNewerPtxOnlyWhereTheModelWouldRunTheImagesSass) {
  std::string newer(kKernelsPtx);
  newer.replace(newer.find(".version 9.0\n.target sm_75"), 26, ".version 9.0\n.target sm_120");
  std::vector<uint8_t> elf(64, 0);  // an ELF header without sections: SASS whose code is not read
  std::memcpy(elf.data(),
              "\x7f"
              "ELF",
              4);
  elf[4] = 2;  // ELFCLASS64
  using fatbin_testing::FatbinOf;
  using fatbin_testing::PtxBytes;
  const std::vector<uint8_t> library = FatbinOf({{2, 80, 0x11, elf}, {1, 120, 0x11, PtxBytes(newer)}});
  const std::vector<uint8_t> ptx_only = FatbinOf({{1, 120, 0x11, PtxBytes(newer)}});
  SimDeviceMemory memory(0, 64 * kMiB);
  {
    SimExecutor a100(&memory, 108, 80);
    ASSERT_EQ(a100.LoadModule(1, library.data(), library.size(), {}), dataplane::kCuSuccess) << a100.TakeErrorDetail();
    ASSERT_EQ(a100.GetFunction(1, 10, "_Z5scalePffi"), dataplane::kCuSuccess);
    const int n = 64;
    uint64_t data = 0;
    ASSERT_EQ(a100.Allocate(n * 4, &data), dataplane::kCuSuccess);
    std::vector<float> values(n, 2.0f);
    ASSERT_EQ(a100.CopyToDevice(data, values.data(), n * 4, 0), dataplane::kCuSuccess);
    uint8_t params[16] = {};
    const float factor = 3.0f;
    std::memcpy(params, &data, 8);
    std::memcpy(params + 8, &factor, 4);
    std::memcpy(params + 12, &n, 4);
    device::LaunchConfig config;
    config.block[0] = n;
    ASSERT_EQ(a100.Launch(10, config, params, sizeof(params)), dataplane::kCuSuccess) << a100.TakeErrorDetail();
    const void* out = nullptr;
    ASSERT_EQ(a100.CopyFromDevice(data, n * 4, 0, &out), dataplane::kCuSuccess);
    for (int i = 0; i < n; ++i) ASSERT_EQ(static_cast<const float*>(out)[i], 6.0f) << i;

    EXPECT_EQ(a100.LoadModule(2, ptx_only.data(), ptx_only.size(), {}), dataplane::kCuNoBinaryForGpu);
    EXPECT_EQ(a100.LoadModule(3, newer.c_str(), newer.size() + 1, {}), dataplane::kCuInvalidPtx);
  }
  for (uint32_t arch : {70u, 90u}) {  // a Volta; a Hopper, which sm_80 SASS does not run on
    SimExecutor other(&memory, 108, arch);
    EXPECT_EQ(other.LoadModule(1, library.data(), library.size(), {}), dataplane::kCuNoBinaryForGpu) << arch;
    EXPECT_NE(other.TakeErrorDetail().find("its SASS is for other GPUs"), std::string::npos) << arch;
  }
  SimExecutor l4(&memory, 58, 89);  // sm_80 SASS runs on 8.9
  EXPECT_EQ(l4.LoadModule(1, library.data(), library.size(), {}), dataplane::kCuSuccess) << l4.TakeErrorDetail();
}

TEST(SimExecutor, FreesEverythingWhenDestroyed) {
  SimDeviceMemory memory(0, 64 * kMiB);
  {
    SimExecutor executor(&memory);
    uint64_t p;
    ASSERT_EQ(executor.Allocate(8 * kMiB, &p), dataplane::kCuSuccess);
    ASSERT_EQ(executor.Allocate(kMiB, &p), dataplane::kCuSuccess);
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
  EXPECT_EQ(executor.CreateStream(5, 0, 0), dataplane::kCuSuccess);
  EXPECT_EQ(executor.CreateStream(5, 0, 0), dataplane::kCuInvalidValue);  // id taken
  EXPECT_EQ(executor.CreateEvent(7, 0), dataplane::kCuSuccess);
  EXPECT_EQ(executor.CreateEvent(8, 0), dataplane::kCuSuccess);
  EXPECT_EQ(executor.CreateEvent(9, 0x2 /* disable timing */), dataplane::kCuSuccess);
  float ms = -1;
  EXPECT_EQ(executor.ElapsedTime(7, 8, &ms), dataplane::kCuInvalidHandle);  // not recorded yet
  EXPECT_EQ(executor.RecordEvent(7, 5), dataplane::kCuSuccess);
  EXPECT_EQ(executor.RecordEvent(8, 0), dataplane::kCuSuccess);
  EXPECT_EQ(executor.RecordEvent(9, 0), dataplane::kCuSuccess);
  EXPECT_EQ(executor.RecordEvent(8, 99), dataplane::kCuInvalidHandle);  // unknown stream
  EXPECT_EQ(executor.ElapsedTime(7, 8, &ms), dataplane::kCuSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(executor.ElapsedTime(7, 9, &ms), dataplane::kCuInvalidHandle);
  EXPECT_EQ(executor.StreamWaitEvent(5, 8), dataplane::kCuSuccess);
  EXPECT_EQ(executor.SynchronizeStream(5), dataplane::kCuSuccess);
  EXPECT_EQ(executor.DestroyStream(5), dataplane::kCuSuccess);
  EXPECT_EQ(executor.SynchronizeStream(5), dataplane::kCuInvalidHandle);
  EXPECT_EQ(executor.DestroyEvent(7), dataplane::kCuSuccess);
  EXPECT_EQ(executor.QueryEvent(7), dataplane::kCuInvalidHandle);
}

// A module's PTX from a job whose declaration sizes would wrap (issue 36, attack 1): the
// sizes of `pad`, `pay` and `wrap` summed to 64 bytes, `pay`'s initialiser landed past the
// module's allocation, in memory of another session. Each is refused, naming the
// declaration; nothing of another session's changes; no size is reported wrapped.
std::string VariablesModule(const std::string& declarations) {
  return ".version 8.0\n.target sm_80\n.address_size 64\n" + declarations + ".visible .entry k()\n{\n  ret;\n}\n";
}

int32_t LoadText(SimExecutor& executor, uint64_t module, const std::string& text) {
  return executor.LoadModule(module, text.c_str(), text.size() + 1, {});
}

TEST(SimExecutor, ModuleVariableSizesThatWouldWrapAreRefused) {
  SimDeviceMemory memory(0, 64 * kMiB);
  SimExecutor victim(&memory);
  SimExecutor attacker(&memory);
  uint64_t secret = 0;
  ASSERT_EQ(victim.Allocate(kMiB, &secret), dataplane::kCuSuccess);
  std::vector<uint8_t> zeros(kMiB, 0);
  ASSERT_EQ(victim.CopyToDevice(secret, zeros.data(), kMiB, 0), dataplane::kCuSuccess);

  const std::string pay =
      ".global .align 8 .b8 pay[16] = {65, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65, "
      "65, 65};\n";
  struct Case {
    std::string declarations;
    std::string detail;  // what the error names
  };
  const std::vector<Case> cases = {
      {".global .align 8 .b8 pad[4096];\n" + pay + ".global .align 8 .b8 wrap[-4048];\n",
       "negative array size in the declaration of wrap"},
      {".global .align 8 .b8 pad[140737488355328];\n" + pay, "declaration of pad is larger than"},
      {".global .align 8 .b8 pad[4096];\n" + pay + ".global .align 8 .b8 wrap[18446744073709547568];\n",
       "declaration of wrap is larger than"},
      {".global .align 8 .b64 big[2305843009213693952];\n", "declaration of big is larger than"},
      {".global .align 8 .b8 grid[4294967296][4294967296];\n", "declaration of grid is larger than"},
      {".const .align 4 .v4 .b32 vec[1099511627776];\n", "declaration of vec is larger than"},
      {".global .align 8 .b8 shortish[4] = {1, 2, 3, 4, 5, 6, 7, 8};\n",
       "initialiser of shortish has 8 bytes, more than its 4"},
      {".global .align 3 .b8 odd[4];\n", ".align 3: must be a power of two"},
      {".global .align -8 .b8 negative[4];\n", "must be a power of two"},
      {".global .align 8 .b8 pad[4096];\n" + pay + ".global .align 8 .b8 wrap[-4048];\n" +
           ".global .align 8 .b8 pad2[1099511627776];\n",
       "negative array size"},
  };
  uint64_t module = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.declarations);
    EXPECT_EQ(LoadText(attacker, module, VariablesModule(c.declarations)), dataplane::kCuInvalidPtx);
    const std::string detail = attacker.TakeErrorDetail();
    EXPECT_NE(detail.find(c.detail), std::string::npos) << detail;
    uint64_t dptr = 0, size = 0;
    EXPECT_EQ(attacker.GetGlobal(module, "wrap", &dptr, &size), dataplane::kCuInvalidHandle);
    ++module;
  }
  // A module of many large variables: their sum is checked too (each is at most 2^40
  // bytes; 2^24 of them would wrap 64 bits) and fails as memory the GPU does not have.
  std::string many;
  for (int k = 0; k < 64; ++k) {
    many += ".global .align 65536 .b8 v" + std::to_string(k) + "[1099511627776];\n";
  }
  EXPECT_NE(LoadText(attacker, module++, VariablesModule(many)), dataplane::kCuSuccess);
  attacker.TakeErrorDetail();

  const void* out = nullptr;
  ASSERT_EQ(victim.CopyFromDevice(secret, kMiB, 0, &out), dataplane::kCuSuccess);
  EXPECT_EQ(std::memcmp(out, zeros.data(), kMiB), 0) << "another session's memory changed";

  // The same variables with sizes that fit load, each where and as large as declared,
  // initialised within its own place.
  ASSERT_EQ(LoadText(attacker, module,
                     VariablesModule(".global .align 8 .b8 pad[4096];\n" + pay + ".global .align 8 .b8 tail[8];\n")),
            dataplane::kCuSuccess)
      << attacker.TakeErrorDetail();
  uint64_t pad = 0, pay_at = 0, tail = 0, size = 0;
  ASSERT_EQ(attacker.GetGlobal(module, "pad", &pad, &size), dataplane::kCuSuccess);
  EXPECT_EQ(size, 4096u);
  ASSERT_EQ(attacker.GetGlobal(module, "pay", &pay_at, &size), dataplane::kCuSuccess);
  EXPECT_EQ(size, 16u);
  EXPECT_EQ(pay_at, pad + 4096);
  ASSERT_EQ(attacker.GetGlobal(module, "tail", &tail, &size), dataplane::kCuSuccess);
  EXPECT_EQ(size, 8u);
  ASSERT_EQ(attacker.CopyFromDevice(pay_at, 24, 0, &out), dataplane::kCuSuccess);
  const uint8_t* bytes = static_cast<const uint8_t*>(out);
  for (int k = 0; k < 16; ++k) EXPECT_EQ(bytes[k], 65) << k;
  for (int k = 16; k < 24; ++k) EXPECT_EQ(bytes[k], 0) << k;
}

// `.shared .b8 big[2^40]` named only as a branch label (issue 36, attack 3): the JIT tier
// placed it, and its compiled code's launch ended the agent in std::bad_alloc. A .shared
// variable larger than a block's shared memory is refused at load, on either tier.
TEST(SimExecutor, ASharedVariableLargerThanABlockHoldsIsRefusedAtLoad) {
  const std::string module_level =
      ".version 8.0\n.target sm_80\n.address_size 64\n"
      ".shared .align 1 .b8 big[1099511627776];\n"
      ".visible .entry k(.param .u64 out)\n{\n  bra big;\nbig:\n  ret;\n}\n";
  const std::string in_kernel =
      ".version 8.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry k(.param .u64 out)\n{\n  .shared .align 4 .b8 huge[233476];\n"
      "  ret;\n}\n";
  for (sim::JitMode mode : {sim::JitMode::kOff, sim::JitMode::kAlways}) {
    sim::SetJitMode(mode);
    SimDeviceMemory memory(0, 64 * kMiB);
    SimExecutor executor(&memory);
    EXPECT_EQ(LoadText(executor, 1, module_level), dataplane::kCuInvalidPtx);
    std::string detail = executor.TakeErrorDetail();
    EXPECT_NE(detail.find("the .shared variable big is 1099511627776 bytes"), std::string::npos) << detail;
    EXPECT_EQ(LoadText(executor, 2, in_kernel), dataplane::kCuInvalidPtx);
    detail = executor.TakeErrorDetail();
    EXPECT_NE(detail.find("huge"), std::string::npos) << detail;
    EXPECT_EQ(executor.GetFunction(1, 10, "k"), dataplane::kCuInvalidHandle);
  }
  sim::SetJitMode(sim::JitMode::kAuto);
}

// Device printf is kept up to CUDA's printf buffer between synchronisations: a kernel that
// prints in a loop cannot make the process allocate without end; what is dropped is said.
const char kTalkPtx[] = R"(
.version 8.0
.target sm_80
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf (.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.global .align 1 .b8 $str[4] = {104, 105, 10, 0};
.visible .entry talk(.param .u32 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  ld.param.u32 %r1, [n];
  mov.u32 %r2, 0;
  mov.u64 %rd1, $str;
  cvta.global.u64 %rd2, %rd1;
  mov.u64 %rd3, 0;
LOOP:
  {
  .param .b64 param0;
  st.param.b64 [param0], %rd2;
  .param .b64 param1;
  st.param.b64 [param1], %rd3;
  .param .b32 retval0;
  call.uni (retval0), vprintf, (param0, param1);
  }
  add.s32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, %r1;
  @%p1 bra LOOP;
  ret;
}
)";

TEST(SimExecutor, DevicePrintfIsCappedBetweenSynchronisations) {
  SimDeviceMemory memory(0, 64 * kMiB);
  SimExecutor executor(&memory);
  ASSERT_EQ(executor.LoadModule(1, kTalkPtx, sizeof(kTalkPtx), {}), dataplane::kCuSuccess)
      << executor.TakeErrorDetail();
  ASSERT_EQ(executor.GetFunction(1, 10, "talk"), dataplane::kCuSuccess) << executor.TakeErrorDetail();
  device::LaunchConfig config;
  config.block[0] = 32;
  uint32_t lines = 4;
  ASSERT_EQ(executor.Launch(10, config, &lines, sizeof(lines)), dataplane::kCuSuccess) << executor.TakeErrorDetail();
  std::string text = executor.TakeOutput();
  EXPECT_EQ(text.size(), 4u * 32 * 3);
  EXPECT_EQ(text.substr(0, 6), "hi\nhi\n");
  // 32 threads x 12,000 lines x 3 bytes: 1,152,000 bytes, over the 1 MiB kept.
  lines = 12000;
  ASSERT_EQ(executor.Launch(10, config, &lines, sizeof(lines)), dataplane::kCuSuccess) << executor.TakeErrorDetail();
  text = executor.TakeOutput();
  EXPECT_LE(text.size(), sim::kMaxPrintfBytes + 200);
  EXPECT_GE(text.size(), sim::kMaxPrintfBytes - 3);
  const std::string note = "bytes of device printf output dropped";
  EXPECT_NE(text.find(note), std::string::npos) << text.substr(text.size() - 200);
  const uint64_t kept = text.find("[gpupool: ");
  const uint64_t dropped = std::stoull(text.substr(kept + 10));
  EXPECT_EQ(kept + dropped, 32u * 12000 * 3);
  // The next synchronisation starts afresh.
  lines = 1;
  ASSERT_EQ(executor.Launch(10, config, &lines, sizeof(lines)), dataplane::kCuSuccess);
  EXPECT_EQ(executor.TakeOutput().size(), 32u * 3);
}

// A kernel that never ends (issue 36, attack 2: `loop: bra loop;`) ends once its session is
// cancelled, from another thread, within a bounded time, on either tier; later launches
// fail at once.
TEST(SimExecutor, CancelEndsAnEndlessKernelOnEitherTier) {
  const std::string text =
      ".version 8.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry forever()\n{\nloop:\n  bra loop;\n}\n";
  for (sim::JitMode mode : {sim::JitMode::kOff, sim::JitMode::kAlways}) {
    SCOPED_TRACE(static_cast<int>(mode));
    sim::SetJitMode(mode);
    SimDeviceMemory memory(0, 64 * kMiB);
    SimExecutor executor(&memory);
    ASSERT_EQ(LoadText(executor, 1, text), dataplane::kCuSuccess) << executor.TakeErrorDetail();
    ASSERT_EQ(executor.GetFunction(1, 10, "forever"), dataplane::kCuSuccess);
    device::LaunchConfig config;
    config.grid[0] = 8;
    config.block[0] = 64;
    std::atomic<int32_t> status{-1};
    std::atomic<bool> ended{false};
    std::thread launch([&] {
      status = executor.Launch(10, config, nullptr, 0);
      ended = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(ended.load()) << "an endless kernel ended by itself";
    const auto cancelled = std::chrono::steady_clock::now();
    executor.Cancel();
    launch.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - cancelled).count();
    EXPECT_LT(seconds, 2.0);
    EXPECT_EQ(status.load(), 702);  // CUDA_ERROR_LAUNCH_TIMEOUT
    EXPECT_NE(executor.TakeErrorDetail().find("cancelled"), std::string::npos);
    EXPECT_EQ(executor.Launch(10, config, nullptr, 0), 702);
    uint64_t dptr = 0;  // the session's other calls still work: its memory can be freed
    EXPECT_EQ(executor.Allocate(4096, &dptr), dataplane::kCuSuccess);
    EXPECT_EQ(executor.Free(dptr), dataplane::kCuSuccess);
  }
  sim::SetJitMode(sim::JitMode::kAuto);
}

// The number of threads of this process (its tasks).
size_t ThreadCount() {
  size_t count = 0;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Threads:", 0) == 0) count = std::stoul(line.substr(8));
  }
  return count;
}

// A kernel spinning on a flag that no thread sets (`while (*flag == 0) {}`, a volatile load,
// as the endless_kernel program has it), over more CTAs than run one after another, so that
// the engine makes them resident on its worker threads: what it does today. It is not
// detected: it runs, reporting progress (the watchdog does not take it for a hung GPU),
// until its session is cancelled; then it ends with CUDA_ERROR_LAUNCH_TIMEOUT, and no
// engine thread is left behind. On either tier (compiled, each thread stops before the
// volatile load and its CTA yields its worker: the turns count as progress too, long after
// every CTA started).
TEST(SimExecutor, ASpinOnAFlagNobodySetsRunsUntilCancelledAndLeavesNoThread) {
  const std::string text =
      ".version 8.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry spin_on_flag(.param .u64 spin_on_flag_flag)\n{\n"
      "  .reg .pred %p<2>;\n  .reg .b32 %r<2>;\n  .reg .b64 %rd<2>;\n"
      "  ld.param.u64 %rd1, [spin_on_flag_flag];\n"
      "$SPIN:\n  ld.volatile.global.u32 %r1, [%rd1];\n  setp.eq.u32 %p1, %r1, 0;\n  @%p1 bra $SPIN;\n"
      "  ret;\n}\n";
  for (sim::JitMode mode : {sim::JitMode::kOff, sim::JitMode::kAlways}) {
    SCOPED_TRACE(static_cast<int>(mode));
    sim::SetJitMode(mode);
    SimDeviceMemory memory(0, 64 * kMiB);
    SimExecutor executor(&memory);
    std::atomic<uint64_t> progress{0};
    executor.SetProgressCounter(&progress);
    ASSERT_EQ(LoadText(executor, 1, text), dataplane::kCuSuccess) << executor.TakeErrorDetail();
    ASSERT_EQ(executor.GetFunction(1, 10, "spin_on_flag"), dataplane::kCuSuccess);
    uint64_t flag = 0;
    ASSERT_EQ(executor.Allocate(4, &flag), dataplane::kCuSuccess);
    ASSERT_EQ(executor.Memset(flag, 0, 4, 1, 0), dataplane::kCuSuccess);
    device::LaunchConfig config;
    config.grid[0] = 64;
    config.block[0] = 128;
    const size_t threads_before = ThreadCount();
    std::atomic<int32_t> status{-1};
    std::atomic<bool> ended{false};
    std::thread launch([&] {
      status = executor.Launch(10, config, &flag, sizeof(flag));
      ended = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    const uint64_t progress_then = progress.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_FALSE(ended.load()) << "the spin ended by itself";
    // The watchdog sees progress, still: no GPU failure.
    EXPECT_GT(progress.load(), progress_then);
    executor.Cancel();
    launch.join();
    EXPECT_EQ(status.load(), 702);  // CUDA_ERROR_LAUNCH_TIMEOUT
    EXPECT_NE(executor.TakeErrorDetail().find("cancelled"), std::string::npos);
    EXPECT_EQ(ThreadCount(), threads_before);
  }
  sim::SetJitMode(sim::JitMode::kAuto);
}

// No exception leaves the executor's entry points (the agent's request handler calls them):
// a module whose parse runs out of host memory is CUDA_ERROR_OUT_OF_MEMORY with a detail,
// in a child whose address space is limited, not std::bad_alloc ending the process.
// In a child: loads a module under a limit of its address space; exits 0 when the load
// failed with CUDA_ERROR_OUT_OF_MEMORY and a detail naming the call.
[[noreturn]] void LoadUnderMemoryLimit() {
  SimDeviceMemory memory(0, 64 * kMiB);
  SimExecutor executor(&memory);
  // 64 MiB of PTX (a comment): its parse reserves several times that for tokens.
  const std::string text = VariablesModule("") + "// " + std::string(64 * kMiB, 'x') + "\n";
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;
  const uint64_t limit = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) + 96 * kMiB;
  const struct rlimit rlimit = {limit, limit};
  if (setrlimit(RLIMIT_AS, &rlimit) != 0) std::_Exit(3);
  const int32_t result = LoadText(executor, 1, text);
  const std::string detail = executor.TakeErrorDetail();
  const bool named = detail.find("LoadModule: out of host memory") != std::string::npos;
  std::_Exit(result == dataplane::kCuOutOfMemory && named ? 0 : 1);
}

TEST(SimExecutorDeathTest, OutOfHostMemoryIsAnErrorNotAnException) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(LoadUnderMemoryLimit(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gpupool::devices

// The cuda executor against a fake driver (fake_cuda_driver.cc, found as libcuda.so.1
// through LD_LIBRARY_PATH): tenant isolation is enforced before the driver is called.
#include "remote/devices/cuda/cuda_executor.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "remote/image/fatbin.h"
#include "remote/protocol/protocol.h"

namespace gpupool::devices {
namespace {

constexpr char kFakeUuid[] = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f";

// The fake driver's counters (the executor dlopens the same library).
struct FakeDriver {
  FakeDriver() {
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(library, nullptr) << dlerror();
    if (library == nullptr) return;
    memory_calls = reinterpret_cast<uint64_t (*)()>(dlsym(library, "fake_cuda_memory_calls"));
    live_allocations = reinterpret_cast<uint64_t (*)()>(dlsym(library, "fake_cuda_live_allocations"));
    live_vmm = reinterpret_cast<uint64_t (*)(int)>(dlsym(library, "fake_cuda_live_vmm"));
    control = reinterpret_cast<void (*)(int, int)>(dlsym(library, "fake_cuda_vmm_control"));
    EXPECT_NE(memory_calls, nullptr) << "libcuda.so.1 is not the test's fake driver";
  }
  uint64_t reservations() const { return live_vmm(0); }
  uint64_t handles() const { return live_vmm(1); }
  uint64_t mappings() const { return live_vmm(2); }

  uint64_t (*memory_calls)() = nullptr;
  uint64_t (*live_allocations)() = nullptr;
  uint64_t (*live_vmm)(int) = nullptr;
  void (*control)(int, int) = nullptr;
};

enum Control { kVmmSupported = 0, kReserveElsewhere, kFailCreate, kFailMap, kFailAccess };
constexpr uint64_t kGranule = uint64_t{2} << 20;  // the fake's granularity
constexpr uint64_t kBase = uint64_t{32} << 40;    // where the client starts choosing
constexpr uint64_t kWindow = uint64_t{64} << 30;  // the executor's reserved address windows

// AllocateAt (the VMM path) against the fake's tables: every test starts and must end with
// nothing reserved, created or mapped.
class CudaExecutorPlacement : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(fake.live_vmm, nullptr);
    ASSERT_NE(fake.control, nullptr);
    Reset();
    ASSERT_EQ(fake.reservations(), 0u);
    auto made = CudaExecutor::Create(kFakeUuid);
    ASSERT_TRUE(made.ok()) << made.status().message();
    executor = std::move(made.value());
  }
  void TearDown() override {
    executor.reset();
    Reset();
    EXPECT_EQ(fake.reservations(), 0u);
    EXPECT_EQ(fake.handles(), 0u);
    EXPECT_EQ(fake.mappings(), 0u);
  }
  void Reset() {
    fake.control(kVmmSupported, 1);
    fake.control(kReserveElsewhere, 0);
    for (int c : {kFailCreate, kFailMap, kFailAccess}) fake.control(c, -1);
  }
  std::string Read(uint64_t dptr, uint64_t size) {
    const void* out = nullptr;
    EXPECT_EQ(executor->CopyFromDevice(dptr, size, 0, &out), dataplane::kCuSuccess);
    return out == nullptr ? std::string() : std::string(static_cast<const char*>(out), size);
  }

  FakeDriver fake;
  std::unique_ptr<device::Executor> executor;
};

TEST_F(CudaExecutorPlacement, AnAllocationLandsAtTheAskedAddress) {
  const uint64_t size = 5000;
  ASSERT_EQ(executor->AllocateAt(kBase, size), dataplane::kCuSuccess);
  EXPECT_EQ(fake.reservations(), 1u);
  EXPECT_EQ(fake.handles(), 1u);
  EXPECT_EQ(fake.mappings(), 1u);
  std::string data(size, 'd');
  ASSERT_EQ(executor->CopyToDevice(kBase, data.data(), size, 0), dataplane::kCuSuccess);
  EXPECT_EQ(executor->Memset(kBase + 8, 0x41, 1, 4, 0), dataplane::kCuSuccess);
  EXPECT_EQ(executor->CopyDeviceToDevice(kBase + 16, kBase + 8, 4, 0), dataplane::kCuSuccess);
  EXPECT_EQ(Read(kBase, 24), "ddddddddAAAAddddAAAAdddd");
  EXPECT_EQ(Read(kBase + size - 4, 4), "dddd");
}

TEST_F(CudaExecutorPlacement, CopiesAreCheckedAgainstTheAskedSizeNotTheGranule) {
  const uint64_t size = 5000;  // the driver maps a whole granule behind it
  ASSERT_EQ(executor->AllocateAt(kBase, size), dataplane::kCuSuccess);
  const uint64_t calls = fake.memory_calls();
  const void* out = nullptr;
  char byte = 'x';
  EXPECT_EQ(executor->CopyToDevice(kBase + size, &byte, 1, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(executor->CopyFromDevice(kBase, size + 1, 0, &out), dataplane::kCuInvalidValue);
  EXPECT_EQ(executor->CopyFromDevice(kBase + kGranule - 8, 8, 0, &out), dataplane::kCuInvalidValue);
  EXPECT_EQ(executor->Memset(kBase + 4096, 0, 4, 1024, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(executor->CopyDeviceToDevice(kBase + size, kBase, 16, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(executor->Free(kBase + 512), dataplane::kCuInvalidValue);  // not a start
  EXPECT_EQ(fake.memory_calls(), calls);                               // none of it reached the driver
}

TEST_F(CudaExecutorPlacement, PackedAllocationsShareTheirGranules) {
  // As the client chooses them: 512 bytes apart, the third across a granule boundary.
  const uint64_t a = kBase, b = kBase + 4608, c = kBase + kGranule - 1024;
  ASSERT_EQ(executor->AllocateAt(a, 4096), dataplane::kCuSuccess);
  ASSERT_EQ(executor->AllocateAt(b, 4096), dataplane::kCuSuccess);
  EXPECT_EQ(fake.mappings(), 1u);
  ASSERT_EQ(executor->AllocateAt(c, 4096), dataplane::kCuSuccess);
  EXPECT_EQ(fake.mappings(), 2u);      // the second granule only
  EXPECT_EQ(fake.reservations(), 1u);  // all in the session's one window
  std::string data(4096, 'b');
  ASSERT_EQ(executor->CopyToDevice(b, data.data(), data.size(), 0), dataplane::kCuSuccess);
  ASSERT_EQ(executor->CopyToDevice(c, data.data(), data.size(), 0), dataplane::kCuSuccess);

  EXPECT_EQ(executor->Free(a), dataplane::kCuSuccess);
  EXPECT_EQ(executor->Free(b), dataplane::kCuSuccess);
  EXPECT_EQ(fake.mappings(), 2u);  // c still uses the first granule
  EXPECT_EQ(Read(c, 4096), data);
  // Freed addresses are reused by the client: they map again.
  ASSERT_EQ(executor->AllocateAt(a, 512), dataplane::kCuSuccess);
  EXPECT_EQ(executor->Free(c), dataplane::kCuSuccess);
  EXPECT_EQ(fake.mappings(), 1u);
  EXPECT_EQ(executor->Free(a), dataplane::kCuSuccess);
  EXPECT_EQ(fake.handles(), 0u);
  EXPECT_EQ(fake.mappings(), 0u);
  EXPECT_EQ(fake.reservations(), 1u);  // the window stays until the session ends

  // The granule mapped already may be the last one an allocation touches, too.
  const uint64_t later = kBase + kGranule + 1024, before = kBase + kGranule - 512;
  ASSERT_EQ(executor->AllocateAt(later, 512), dataplane::kCuSuccess);
  ASSERT_EQ(executor->AllocateAt(before, 1024), dataplane::kCuSuccess);
  EXPECT_EQ(fake.mappings(), 2u);
  std::string across(1024, 'c');
  ASSERT_EQ(executor->CopyToDevice(before, across.data(), across.size(), 0), dataplane::kCuSuccess);
  EXPECT_EQ(Read(before, 1024), across);

  // Or the middle of a run that an earlier, larger allocation mapped.
  const uint64_t large = kBase + 4 * kGranule, tail = large + 3 * kGranule - 512;
  ASSERT_EQ(executor->AllocateAt(large, 3 * kGranule - 1024), dataplane::kCuSuccess);
  ASSERT_EQ(executor->AllocateAt(tail, 1024), dataplane::kCuSuccess);
  EXPECT_EQ(fake.mappings(), 4u);
  // A run ends at its window's end: an allocation across two windows maps one run in
  // each, in two reservations.
  const uint64_t across_windows = kBase + kWindow - kGranule;
  ASSERT_EQ(executor->AllocateAt(across_windows, 2 * kGranule), dataplane::kCuSuccess);
  EXPECT_EQ(fake.mappings(), 6u);
  EXPECT_EQ(fake.reservations(), 2u);
  std::string spans(2 * kGranule, 's');
  ASSERT_EQ(executor->CopyToDevice(across_windows, spans.data(), spans.size(), 0), dataplane::kCuSuccess);
  EXPECT_EQ(Read(across_windows, spans.size()), spans);
  ASSERT_EQ(executor->CopyToDevice(tail, across.data(), across.size(), 0), dataplane::kCuSuccess);
  EXPECT_EQ(Read(tail, 1024), across);
}

TEST_F(CudaExecutorPlacement, OverlappingItsOwnAllocationIsInvalid) {
  ASSERT_EQ(executor->AllocateAt(kBase, 4096), dataplane::kCuSuccess);
  EXPECT_EQ(executor->AllocateAt(kBase + 1024, 16), dataplane::kCuInvalidValue);
  EXPECT_EQ(executor->AllocateAt(kBase - 512, 1024), dataplane::kCuInvalidValue);
  EXPECT_EQ(executor->AllocateAt(kBase, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(executor->AllocateAt(UINT64_MAX - 100, 4096), dataplane::kCuInvalidValue);
  EXPECT_EQ(fake.reservations(), 1u);
}

TEST_F(CudaExecutorPlacement, AnotherGrantedAddressIsRefusedAndUndone) {
  fake.control(kReserveElsewhere, 1);
  EXPECT_EQ(executor->AllocateAt(kBase, 4096), dataplane::kCuNotSupported);
  EXPECT_EQ(fake.reservations(), 0u);
  EXPECT_EQ(fake.handles(), 0u);
  EXPECT_EQ(fake.mappings(), 0u);
  char byte = 'x';
  EXPECT_EQ(executor->CopyToDevice(kBase, &byte, 1, 0), dataplane::kCuInvalidValue);  // not ours
  EXPECT_EQ(executor->Free(kBase), dataplane::kCuInvalidValue);
  // The session's fallback, cuMemAlloc, still serves it.
  uint64_t dptr = 0;
  ASSERT_EQ(executor->Allocate(4096, &dptr), dataplane::kCuSuccess);
  EXPECT_EQ(executor->CopyToDevice(dptr, &byte, 1, 0), dataplane::kCuSuccess);
  EXPECT_EQ(executor->Free(dptr), dataplane::kCuSuccess);
  EXPECT_EQ(fake.live_allocations(), 0u);
}

TEST_F(CudaExecutorPlacement, AnAddressAnotherSessionHoldsIsRefused) {
  auto made = CudaExecutor::Create(kFakeUuid);
  ASSERT_TRUE(made.ok());
  device::Executor& other = *made.value();
  ASSERT_EQ(executor->AllocateAt(kBase, 4096), dataplane::kCuSuccess);
  // Another granule of the same window: the driver moves the hint, the executor refuses.
  EXPECT_EQ(other.AllocateAt(kBase + kGranule, 4096), dataplane::kCuNotSupported);
  EXPECT_NE(other.TakeErrorDetail().find("granted"), std::string::npos);
  EXPECT_EQ(fake.reservations(), 1u);
  EXPECT_EQ(other.AllocateAt(kBase + kWindow, 4096), dataplane::kCuSuccess);  // a free window
  EXPECT_EQ(fake.reservations(), 2u);
  made.value().reset();
  EXPECT_EQ(fake.reservations(), 1u);
}

TEST_F(CudaExecutorPlacement, AFailureMidwayReleasesEverything) {
  fake.control(kFailCreate, 0);
  EXPECT_EQ(executor->AllocateAt(kBase, 4096), dataplane::kCuOutOfMemory);
  EXPECT_NE(executor->TakeErrorDetail().find("cuMemCreate"), std::string::npos);
  fake.control(kFailMap, 0);
  EXPECT_NE(executor->AllocateAt(kBase, 4096), dataplane::kCuSuccess);
  fake.control(kFailAccess, 0);
  EXPECT_NE(executor->AllocateAt(kBase, 4096), dataplane::kCuSuccess);
  EXPECT_NE(executor->TakeErrorDetail().find("cuMemSetAccess"), std::string::npos);
  EXPECT_EQ(fake.reservations(), 1u);  // the session's window, until it ends
  EXPECT_EQ(fake.handles(), 0u);
  EXPECT_EQ(fake.mappings(), 0u);
  char byte = 'x';
  EXPECT_EQ(executor->CopyToDevice(kBase, &byte, 1, 0), dataplane::kCuInvalidValue);

  // Midway through an allocation that shares a granule already mapped: the new granule
  // goes, the shared one stays with only its earlier user.
  const uint64_t earlier = kBase + kGranule - 1024;
  ASSERT_EQ(executor->AllocateAt(earlier, 512), dataplane::kCuSuccess);
  ASSERT_EQ(executor->CopyToDevice(earlier, &byte, 1, 0), dataplane::kCuSuccess);
  fake.control(kFailCreate, 0);
  EXPECT_EQ(executor->AllocateAt(earlier + 512, 4096), dataplane::kCuOutOfMemory);
  EXPECT_EQ(fake.handles(), 1u);
  EXPECT_EQ(fake.mappings(), 1u);
  EXPECT_EQ(Read(earlier, 1), "x");
  EXPECT_EQ(executor->Free(earlier), dataplane::kCuSuccess);
  EXPECT_EQ(fake.mappings(), 0u);  // it did not count the failed allocation as a user
}

TEST_F(CudaExecutorPlacement, FreeAndSessionEndUnmapAndRelease) {
  ASSERT_EQ(executor->AllocateAt(kBase, 3 * kGranule), dataplane::kCuSuccess);
  EXPECT_EQ(fake.mappings(), 1u);
  EXPECT_EQ(executor->Free(kBase), dataplane::kCuSuccess);
  EXPECT_EQ(fake.handles(), 0u);
  EXPECT_EQ(fake.mappings(), 0u);
  EXPECT_EQ(executor->Free(kBase), dataplane::kCuInvalidValue);  // once only
  // A departing session's placed memory goes with it, as its cuMemAlloc memory does.
  uint64_t plain = 0;
  ASSERT_EQ(executor->AllocateAt(kBase, 4096), dataplane::kCuSuccess);
  ASSERT_EQ(executor->Allocate(4096, &plain), dataplane::kCuSuccess);
  executor.reset();
  EXPECT_EQ(fake.reservations(), 0u);
  EXPECT_EQ(fake.live_allocations(), 0u);
}

TEST_F(CudaExecutorPlacement, WithoutVmmSupportNothingIsPlaced) {
  fake.control(kVmmSupported, 0);
  auto made = CudaExecutor::Create(kFakeUuid);  // the attribute is read here
  ASSERT_TRUE(made.ok());
  EXPECT_EQ(made.value()->AllocateAt(kBase, 4096), dataplane::kCuNotSupported);
  EXPECT_EQ(fake.reservations(), 0u);
}

TEST(CudaExecutor, ASessionCannotTouchAnotherSessionsMemory) {
  FakeDriver fake;
  ASSERT_NE(fake.memory_calls, nullptr);
  auto made_owner = CudaExecutor::Create(kFakeUuid);
  auto made_intruder = CudaExecutor::Create(kFakeUuid);
  ASSERT_TRUE(made_owner.ok()) << made_owner.status().message();
  ASSERT_TRUE(made_intruder.ok()) << made_intruder.status().message();
  device::Executor& owner = *made_owner.value();
  device::Executor& intruder = *made_intruder.value();

  const uint64_t size = 4096;
  uint64_t secret = 0, own = 0;
  ASSERT_EQ(owner.Allocate(size, &secret), dataplane::kCuSuccess);
  ASSERT_EQ(intruder.Allocate(size, &own), dataplane::kCuSuccess);
  std::vector<char> data(size, 's');
  ASSERT_EQ(owner.CopyToDevice(secret, data.data(), size, 0), dataplane::kCuSuccess);

  const uint64_t calls = fake.memory_calls();
  const void* out = nullptr;
  std::vector<char> junk(size, 'j');
  EXPECT_EQ(intruder.CopyFromDevice(secret, size, 0, &out), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.CopyFromDevice(secret + 100, 8, 0, &out), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.CopyToDevice(secret, junk.data(), size, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.CopyDeviceToDevice(own, secret, size, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.CopyDeviceToDevice(secret, own, size, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.Memset(secret, 0, 4, size / 4, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.Free(secret), dataplane::kCuInvalidValue);
  // Its own allocation, but past its end (or a count that wraps around).
  EXPECT_EQ(intruder.CopyFromDevice(own, size + 1, 0, &out), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.CopyToDevice(own + size, junk.data(), 1, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(intruder.Memset(own, 0, 4, UINT64_MAX / 2, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(fake.memory_calls(), calls);  // none of it reached the driver

  // Its own memory works as before.
  EXPECT_EQ(intruder.CopyToDevice(own, junk.data(), size, 0), dataplane::kCuSuccess);
  EXPECT_EQ(intruder.Memset(own + 8, 0x41, 1, 8, 0), dataplane::kCuSuccess);
  ASSERT_EQ(intruder.CopyFromDevice(own, 16, 0, &out), dataplane::kCuSuccess);
  EXPECT_EQ(std::string(static_cast<const char*>(out), 16), "jjjjjjjjAAAAAAAA");

  ASSERT_EQ(owner.CopyFromDevice(secret, size, 0, &out), dataplane::kCuSuccess);
  EXPECT_EQ(std::memcmp(out, data.data(), size), 0);

  made_intruder.value().reset();  // a departing session frees what it had
  EXPECT_EQ(fake.live_allocations(), 1u);
}

// An entry point of the fake driver's own (a counter or a control); the executor dlopens
// the same library.
template <typename Function>
Function FakeEntry(const char* name) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(library, nullptr) << dlerror();
  auto entry = library ? reinterpret_cast<Function>(dlsym(library, name)) : nullptr;
  EXPECT_NE(entry, nullptr) << "libcuda.so.1 is not the test's fake driver (no " << name << ")";
  return entry;
}

// An executor of the fake GPU with module 1 loaded and its kernel as function 2.
std::unique_ptr<device::Executor> ExecutorWithAKernel() {
  auto made = CudaExecutor::Create(kFakeUuid);
  if (!made.ok()) {
    ADD_FAILURE() << made.status().message();
    return nullptr;
  }
  const char image[] = "fake image";
  EXPECT_EQ(made.value()->LoadModule(1, image, sizeof(image), {}), dataplane::kCuSuccess);
  EXPECT_EQ(made.value()->GetFunction(1, 2, "kernel"), dataplane::kCuSuccess);
  return std::move(made.value());
}

// A cooperative launch goes to cuLaunchKernelEx with the cooperative attribute and the
// packed parameters (cuLaunchCooperativeKernel takes no packed buffer); others to
// cuLaunchKernel.
TEST(CudaExecutor, CooperativeLaunchesGoThroughLaunchKernelEx) {
  auto launches = FakeEntry<uint64_t (*)(int)>("fake_cuda_launches");
  std::unique_ptr<device::Executor> made = ExecutorWithAKernel();
  ASSERT_TRUE(launches != nullptr && made != nullptr);
  device::Executor& executor = *made;
  const uint64_t plain = launches(0), cooperative = launches(1);
  uint32_t params[2] = {7, 8};
  device::LaunchConfig config;
  config.grid[0] = 6;
  config.grid[1] = 2;
  EXPECT_EQ(executor.Launch(2, config, params, sizeof(params)), dataplane::kCuSuccess);
  EXPECT_EQ(launches(0), plain + 1);
  EXPECT_EQ(launches(1), cooperative);
  config.cooperative = true;
  EXPECT_EQ(executor.Launch(2, config, params, sizeof(params)), dataplane::kCuSuccess);
  EXPECT_EQ(launches(0), plain + 1);
  EXPECT_EQ(launches(1), cooperative + 1);
  EXPECT_EQ(launches(2), 12u);
}

// A launch in thread block clusters goes to cuLaunchKernelEx with the cluster's shape (and
// the cooperative attribute beside it where the launch is both): cuBLAS launches its
// kernels so on GPUs of compute capability 9.0 and later.
TEST(CudaExecutor, ClusterLaunchesGoThroughLaunchKernelExWithTheirShape) {
  auto launches = FakeEntry<uint64_t (*)(int)>("fake_cuda_launches");
  std::unique_ptr<device::Executor> made = ExecutorWithAKernel();
  ASSERT_TRUE(launches != nullptr && made != nullptr);
  device::Executor& executor = *made;
  const uint64_t plain = launches(0), ex = launches(1), cooperative = launches(3);
  uint32_t params[2] = {7, 8};
  device::LaunchConfig config;
  config.grid[0] = 8;
  config.grid[1] = 4;
  config.cluster[0] = 2;
  config.cluster[1] = 4;
  EXPECT_EQ(executor.Launch(2, config, params, sizeof(params)), dataplane::kCuSuccess);
  EXPECT_EQ(launches(0), plain);
  EXPECT_EQ(launches(1), ex + 1);
  EXPECT_EQ(launches(3), cooperative);
  EXPECT_EQ(launches(4), 2u | 4u << 8 | 1u << 16);
  config.cooperative = true;
  EXPECT_EQ(executor.Launch(2, config, params, sizeof(params)), dataplane::kCuSuccess);
  EXPECT_EQ(launches(1), ex + 2);
  EXPECT_EQ(launches(3), cooperative + 1);
  EXPECT_EQ(launches(4), 2u | 4u << 8 | 1u << 16);
  // 16 blocks: the function's opt-in to non-portable sizes first (the driver refuses more
  // than 8 without it).
  config.cooperative = false;
  config.grid[0] = 16;
  config.cluster[0] = 16;
  config.cluster[1] = 1;
  EXPECT_EQ(executor.Launch(2, config, params, sizeof(params)), dataplane::kCuSuccess);
  EXPECT_EQ(launches(4), 16u | 1u << 8 | 1u << 16);
  // One block: a plain launch.
  config.cluster[0] = config.cluster[1] = 1;
  EXPECT_EQ(executor.Launch(2, config, params, sizeof(params)), dataplane::kCuSuccess);
  EXPECT_EQ(launches(0), plain + 1);
  EXPECT_EQ(launches(1), ex + 3);
}

// A launch with more than 48 KiB of dynamic shared memory opts the function in on the
// driver first (the program's cuFuncSetAttribute stays in the client, which checked it);
// a driver refuses the launch otherwise (an H100 did, before this).
TEST(CudaExecutor, LargeDynamicSharedMemoryOptsTheFunctionIn) {
  auto launches = FakeEntry<uint64_t (*)(int)>("fake_cuda_launches");
  auto optin = FakeEntry<int (*)()>("fake_cuda_dynamic_shared_optin");
  std::unique_ptr<device::Executor> made = ExecutorWithAKernel();
  ASSERT_TRUE(launches != nullptr && optin != nullptr && made != nullptr);
  device::Executor& executor = *made;
  const int before = optin();
  const uint64_t plain = launches(0);
  device::LaunchConfig config;
  config.shared_mem = 16 << 10;  // within the default: nothing to opt in
  EXPECT_EQ(executor.Launch(2, config, nullptr, 0), dataplane::kCuSuccess);
  EXPECT_EQ(optin(), before);
  config.shared_mem = 100 << 10;
  EXPECT_EQ(executor.Launch(2, config, nullptr, 0), dataplane::kCuSuccess);
  EXPECT_EQ(optin(), 100 << 10);
  EXPECT_EQ(launches(0), plain + 2);
  config.shared_mem = 300 << 10;  // past what the driver allows: its refusal is the answer
  EXPECT_EQ(executor.Launch(2, config, nullptr, 0), dataplane::kCuInvalidValue);
  EXPECT_EQ(launches(0), plain + 2);
}

// Texture objects are the driver's, over the session's own memory only: a range outside
// its allocations (another session's memory) never reaches the driver; the objects go
// with the memory under them and with the session; a session destroys only its own.
TEST(CudaExecutor, TextureObjectsReadOnlyTheSessionsOwnMemory) {
  auto textures = FakeEntry<uint64_t (*)(int)>("fake_cuda_textures");
  ASSERT_NE(textures, nullptr);
  const uint64_t live = textures(0), made_before = textures(3);
  auto made = CudaExecutor::Create(kFakeUuid);
  auto other_made = CudaExecutor::Create(kFakeUuid);
  ASSERT_TRUE(made.ok() && other_made.ok());
  device::Executor& executor = *made.value();
  device::Executor& other = *other_made.value();
  uint64_t mine = 0, theirs = 0;
  ASSERT_EQ(executor.Allocate(1 << 20, &mine), dataplane::kCuSuccess);
  ASSERT_EQ(other.Allocate(1 << 20, &theirs), dataplane::kCuSuccess);

  dataplane::TexObjectCreateArgs linear;
  linear.device_ptr = mine;
  linear.size_bytes = 4096;
  linear.resource_type = dataplane::kResourceTypeLinear;
  linear.format = 0x20;  // float
  linear.channels = 1;
  uint64_t handle = 0;
  ASSERT_EQ(executor.CreateTextureObject(linear, mine, 4096, &handle), dataplane::kCuSuccess);
  EXPECT_NE(handle, 0u);
  EXPECT_EQ(textures(0), live + 1);
  EXPECT_EQ(textures(1), mine);
  EXPECT_EQ(textures(2), 2u);  // CU_RESOURCE_TYPE_LINEAR

  // Another session's memory, or past the end of this one's: refused before the driver.
  uint64_t refused = 0;
  EXPECT_EQ(executor.CreateTextureObject(linear, theirs, 4096, &refused), dataplane::kCuInvalidValue);
  EXPECT_EQ(executor.CreateTextureObject(linear, mine + (1 << 20) - 16, 4096, &refused), dataplane::kCuInvalidValue);
  EXPECT_EQ(textures(3), made_before + 1);
  // Another session cannot destroy it.
  EXPECT_EQ(other.DestroyTextureObject(handle), dataplane::kCuInvalidHandle);
  EXPECT_EQ(textures(0), live + 1);

  // Pitched 2D memory; then the memory under both objects is freed: both go with it.
  dataplane::TexObjectCreateArgs pitched = linear;
  pitched.resource_type = dataplane::kResourceTypePitch2D;
  pitched.size_bytes = 0;
  pitched.width = 100;
  pitched.height = 8;
  pitched.pitch = 512;
  uint64_t second = 0;
  ASSERT_EQ(executor.CreateTextureObject(pitched, mine + 512, 7 * 512 + 400, &second), dataplane::kCuSuccess);
  EXPECT_EQ(textures(2), 3u);
  EXPECT_EQ(textures(0), live + 2);
  ASSERT_EQ(executor.Free(mine), dataplane::kCuSuccess);
  EXPECT_EQ(textures(0), live);
  EXPECT_EQ(executor.DestroyTextureObject(handle), dataplane::kCuInvalidHandle);

  // One destroyed by its session, one left to the session's end.
  ASSERT_EQ(other.CreateTextureObject(linear, theirs, 4096, &handle), dataplane::kCuSuccess);
  ASSERT_EQ(other.CreateTextureObject(linear, theirs + 4096, 4096, &second), dataplane::kCuSuccess);
  EXPECT_EQ(other.DestroyTextureObject(handle), dataplane::kCuSuccess);
  EXPECT_EQ(textures(0), live + 1);
  other_made.value().reset();
  EXPECT_EQ(textures(0), live);
}

// CUDA arrays are the driver's, named by the session's ids: copies in and out (host, the
// session's own memory, another of its arrays) move the region asked; another session
// cannot reach them, nor can a copy reach another session's memory or leave an array; the
// objects over an array go with it, and everything goes with the session.
TEST(CudaExecutor, ArraysAreTheSessionsOwnAndCopiesStayInside) {
  auto textures = FakeEntry<uint64_t (*)(int)>("fake_cuda_textures");
  auto surfaces = FakeEntry<uint64_t (*)()>("fake_cuda_surfaces");
  auto arrays = FakeEntry<uint64_t (*)()>("fake_cuda_arrays");
  ASSERT_TRUE(textures != nullptr && surfaces != nullptr && arrays != nullptr);
  const uint64_t live_arrays = arrays(), live_textures = textures(0), live_surfaces = surfaces();
  auto made = CudaExecutor::Create(kFakeUuid);
  auto other_made = CudaExecutor::Create(kFakeUuid);
  ASSERT_TRUE(made.ok() && other_made.ok());
  device::Executor& executor = *made.value();
  device::Executor& other = *other_made.value();

  dataplane::ArrayCreateArgs create;
  create.array = 5;
  create.width = 16;  // floats: 64 bytes a row
  create.height = 4;
  create.format = 0x20;
  create.channels = 1;
  create.flags = 0x02;  // SURFACE_LDST
  ASSERT_EQ(executor.CreateArray(create), dataplane::kCuSuccess);
  EXPECT_EQ(executor.CreateArray(create), dataplane::kCuInvalidValue);  // the id is taken
  create.array = 6;
  ASSERT_EQ(executor.CreateArray(create), dataplane::kCuSuccess);
  EXPECT_EQ(arrays(), live_arrays + 2);

  std::vector<float> image(16 * 4);
  for (size_t i = 0; i < image.size(); ++i) image[i] = 0.5f * static_cast<float>(i);
  dataplane::ArrayCopyArgs in;
  in.array = 5;
  in.width_bytes = 64;
  in.height = 4;
  in.depth = 1;
  in.to_array = 1;
  in.other_kind = dataplane::kArrayCopyHost;
  const void* bulk = nullptr;
  uint64_t bulk_len = 0;
  ASSERT_EQ(executor.CopyArray(in, image.data(), &bulk, &bulk_len), dataplane::kCuSuccess);
  EXPECT_EQ(bulk, nullptr);

  // Array 5 to array 6, then a 2 x 2 region of 6 (columns 3-4, rows 1-2) out to the host.
  dataplane::ArrayCopyArgs across = in;
  across.array = 6;
  across.other_kind = dataplane::kArrayCopyArray;
  across.other = 5;
  ASSERT_EQ(executor.CopyArray(across, nullptr, &bulk, &bulk_len), dataplane::kCuSuccess);
  dataplane::ArrayCopyArgs out;
  out.array = 6;
  out.x_bytes = 12;
  out.y = 1;
  out.width_bytes = 8;
  out.height = 2;
  out.depth = 1;
  out.to_array = 0;
  ASSERT_EQ(executor.CopyArray(out, nullptr, &bulk, &bulk_len), dataplane::kCuSuccess);
  ASSERT_EQ(bulk_len, 16u);
  std::vector<float> region(4);
  std::memcpy(region.data(), bulk, 16);
  EXPECT_EQ(region, (std::vector<float>{image[19], image[20], image[35], image[36]}));

  // Out to the session's memory, pitched 256 bytes a row, and back from there.
  uint64_t mine = 0, theirs = 0;
  ASSERT_EQ(executor.Allocate(1 << 16, &mine), dataplane::kCuSuccess);
  ASSERT_EQ(other.Allocate(1 << 16, &theirs), dataplane::kCuSuccess);
  dataplane::ArrayCopyArgs to_memory = out;
  to_memory.array = 5;
  to_memory.other_kind = dataplane::kArrayCopyDevice;
  to_memory.other = mine + 256;
  to_memory.other_pitch = 256;
  ASSERT_EQ(executor.CopyArray(to_memory, nullptr, &bulk, &bulk_len), dataplane::kCuSuccess);
  const void* read = nullptr;
  ASSERT_EQ(executor.CopyFromDevice(mine + 256 + 256, 8, 0, &read), dataplane::kCuSuccess);
  std::memcpy(region.data(), read, 8);
  EXPECT_EQ(region[0], image[35]);
  EXPECT_EQ(region[1], image[36]);

  // Nothing outside: another session's memory, a region past the array, a payload of
  // another size is the session's to refuse; another session's view of array 5.
  to_memory.other = theirs;
  EXPECT_EQ(executor.CopyArray(to_memory, nullptr, &bulk, &bulk_len), dataplane::kCuInvalidValue);
  to_memory.other = mine + (1 << 16) - 256;  // its second row would pass the allocation's end
  EXPECT_EQ(executor.CopyArray(to_memory, nullptr, &bulk, &bulk_len), dataplane::kCuInvalidValue);
  dataplane::ArrayCopyArgs past = out;
  past.x_bytes = 60;
  EXPECT_EQ(executor.CopyArray(past, nullptr, &bulk, &bulk_len), dataplane::kCuInvalidValue);
  past = out;
  past.y = 3;
  EXPECT_EQ(executor.CopyArray(past, nullptr, &bulk, &bulk_len), dataplane::kCuInvalidValue);
  EXPECT_EQ(other.CopyArray(out, nullptr, &bulk, &bulk_len), dataplane::kCuInvalidHandle);
  EXPECT_EQ(other.DestroyArray(5), dataplane::kCuInvalidHandle);
  uint64_t handle = 0;
  EXPECT_EQ(other.CreateSurfaceObject(5, &handle), dataplane::kCuInvalidHandle);

  // Objects over array 5 go with it; array 6's with the session.
  dataplane::TexObjectCreateArgs texture;
  texture.resource_type = dataplane::kResourceTypeArray;
  texture.device_ptr = 5;
  ASSERT_EQ(executor.CreateTextureObject(texture, 5, 0, &handle), dataplane::kCuSuccess);
  ASSERT_EQ(executor.CreateSurfaceObject(5, &handle), dataplane::kCuSuccess);
  ASSERT_EQ(executor.CreateSurfaceObject(6, &handle), dataplane::kCuSuccess);
  EXPECT_EQ(textures(0), live_textures + 1);
  EXPECT_EQ(surfaces(), live_surfaces + 2);
  ASSERT_EQ(executor.DestroyArray(5), dataplane::kCuSuccess);
  EXPECT_EQ(textures(0), live_textures);
  EXPECT_EQ(surfaces(), live_surfaces + 1);
  EXPECT_EQ(arrays(), live_arrays + 1);
  made.value().reset();
  EXPECT_EQ(surfaces(), live_surfaces);
  EXPECT_EQ(arrays(), live_arrays);
}

// A mipmapped array is the driver's, its levels arrays of the session under the ids the
// client chose: each level takes copies within its own (halved) extent, texture objects
// read the whole, surfaces a level; a level goes only with its mipmapped array, which takes
// the objects over it and its levels along; another session reaches none of it, and ids
// already taken are refused.
TEST(CudaExecutor, MipmappedArraysAreTheSessionsOwnWithTheirLevels) {
  auto textures = FakeEntry<uint64_t (*)(int)>("fake_cuda_textures");
  auto surfaces = FakeEntry<uint64_t (*)()>("fake_cuda_surfaces");
  auto arrays = FakeEntry<uint64_t (*)()>("fake_cuda_arrays");
  auto mipmapped = FakeEntry<uint64_t (*)()>("fake_cuda_mipmapped_arrays");
  ASSERT_TRUE(textures != nullptr && surfaces != nullptr && arrays != nullptr && mipmapped != nullptr);
  const uint64_t live_arrays = arrays(), live_textures = textures(0), live_surfaces = surfaces();
  const uint64_t live_mipmapped = mipmapped();
  auto made = CudaExecutor::Create(kFakeUuid);
  auto other_made = CudaExecutor::Create(kFakeUuid);
  ASSERT_TRUE(made.ok() && other_made.ok());
  device::Executor& executor = *made.value();
  device::Executor& other = *other_made.value();

  dataplane::MipmappedArrayCreateArgs create;
  create.descriptor.array = 40;
  create.descriptor.width = 16;  // floats: levels of 16 x 8, 8 x 4, 4 x 2
  create.descriptor.height = 8;
  create.descriptor.format = 0x20;
  create.descriptor.channels = 1;
  create.descriptor.flags = 0x02;  // SURFACE_LDST
  create.first_level = 41;
  create.levels = 3;
  ASSERT_EQ(executor.CreateMipmappedArray(create), dataplane::kCuSuccess);
  EXPECT_EQ(mipmapped(), live_mipmapped + 1);
  EXPECT_EQ(arrays(), live_arrays + 3);
  // Ids taken: the mipmapped array's, a level's (as an array's or a level's), and an array
  // over a level's id.
  EXPECT_EQ(executor.CreateMipmappedArray(create), dataplane::kCuInvalidValue);
  dataplane::MipmappedArrayCreateArgs overlapping = create;
  overlapping.descriptor.array = 50;
  overlapping.first_level = 43;
  EXPECT_EQ(executor.CreateMipmappedArray(overlapping), dataplane::kCuInvalidValue);
  dataplane::ArrayCreateArgs plain = create.descriptor;
  plain.array = 42;
  EXPECT_EQ(executor.CreateArray(plain), dataplane::kCuInvalidValue);
  plain.array = 40;
  EXPECT_EQ(executor.CreateArray(plain), dataplane::kCuInvalidValue);
  // More levels than 16 x 8 has (5): the driver's refusal, nothing made.
  dataplane::MipmappedArrayCreateArgs too_many = create;
  too_many.descriptor.array = 60;
  too_many.first_level = 61;
  too_many.levels = 6;
  EXPECT_EQ(executor.CreateMipmappedArray(too_many), dataplane::kCuInvalidValue);
  EXPECT_EQ(arrays(), live_arrays + 3);

  // Level 1 (8 x 4 floats) takes its own extent and no more; level 2 another image.
  std::vector<float> image(8 * 4);
  for (size_t i = 0; i < image.size(); ++i) image[i] = 1.5f * static_cast<float>(i);
  dataplane::ArrayCopyArgs in;
  in.array = 42;
  in.width_bytes = 32;
  in.height = 4;
  in.depth = 1;
  in.to_array = 1;
  in.other_kind = dataplane::kArrayCopyHost;
  const void* bulk = nullptr;
  uint64_t bulk_len = 0;
  ASSERT_EQ(executor.CopyArray(in, image.data(), &bulk, &bulk_len), dataplane::kCuSuccess);
  dataplane::ArrayCopyArgs wider = in;
  wider.width_bytes = 36;
  EXPECT_EQ(executor.CopyArray(wider, image.data(), &bulk, &bulk_len), dataplane::kCuInvalidValue);
  dataplane::ArrayCopyArgs out;
  out.array = 42;
  out.x_bytes = 4;
  out.y = 3;
  out.width_bytes = 8;
  out.height = 1;
  out.depth = 1;
  ASSERT_EQ(executor.CopyArray(out, nullptr, &bulk, &bulk_len), dataplane::kCuSuccess);
  ASSERT_EQ(bulk_len, 8u);
  float two[2];
  std::memcpy(two, bulk, sizeof(two));
  EXPECT_EQ(two[0], image[25]);
  EXPECT_EQ(two[1], image[26]);
  dataplane::ArrayCopyArgs small = out;
  small.array = 43;  // 4 x 2: row 3 is past it
  EXPECT_EQ(executor.CopyArray(small, nullptr, &bulk, &bulk_len), dataplane::kCuInvalidValue);

  // Another session: none of it.
  EXPECT_EQ(other.CopyArray(out, nullptr, &bulk, &bulk_len), dataplane::kCuInvalidHandle);
  EXPECT_EQ(other.DestroyMipmappedArray(40), dataplane::kCuInvalidHandle);
  dataplane::TexObjectCreateArgs texture;
  texture.resource_type = dataplane::kResourceTypeMipmappedArray;
  texture.device_ptr = 40;
  uint64_t handle = 0;
  EXPECT_EQ(other.CreateTextureObject(texture, 40, 0, &handle), dataplane::kCuInvalidHandle);
  EXPECT_EQ(executor.DestroyMipmappedArray(41), dataplane::kCuInvalidHandle);  // a level, not one

  // A level goes only with its mipmapped array; the objects over both go with it.
  EXPECT_EQ(executor.DestroyArray(42), dataplane::kCuInvalidValue);
  ASSERT_EQ(executor.CreateTextureObject(texture, 40, 0, &handle), dataplane::kCuSuccess);
  EXPECT_EQ(textures(2), uint64_t{dataplane::kResourceTypeMipmappedArray});
  ASSERT_EQ(executor.CreateSurfaceObject(43, &handle), dataplane::kCuSuccess);
  EXPECT_EQ(textures(0), live_textures + 1);
  EXPECT_EQ(surfaces(), live_surfaces + 1);
  ASSERT_EQ(executor.DestroyMipmappedArray(40), dataplane::kCuSuccess);
  EXPECT_EQ(textures(0), live_textures);
  EXPECT_EQ(surfaces(), live_surfaces);
  EXPECT_EQ(arrays(), live_arrays);
  EXPECT_EQ(mipmapped(), live_mipmapped);
  EXPECT_EQ(executor.CopyArray(out, nullptr, &bulk, &bulk_len), dataplane::kCuInvalidHandle);

  // One left to the session's end goes with it, levels and all.
  ASSERT_EQ(executor.CreateMipmappedArray(create), dataplane::kCuSuccess);
  EXPECT_EQ(arrays(), live_arrays + 3);
  made.value().reset();
  EXPECT_EQ(arrays(), live_arrays);
  EXPECT_EQ(mipmapped(), live_mipmapped);
}

// GetFunction's reply carries what the driver says the compiled kernel needs
// (cuFuncGetAttribute), each attribute in its own field; an unknown function gets none.
TEST(CudaExecutor, FunctionResourcesComeFromTheDriver) {
  auto made = CudaExecutor::Create(kFakeUuid);
  ASSERT_TRUE(made.ok()) << made.status().message();
  device::Executor& executor = *made.value();
  const char image[] = "fake image";
  ASSERT_EQ(executor.LoadModule(1, image, sizeof(image), {}), dataplane::kCuSuccess);
  ASSERT_EQ(executor.GetFunction(1, 2, "kernel"), dataplane::kCuSuccess);
  dataplane::FunctionResources resources;
  ASSERT_TRUE(executor.Resources(2, &resources));
  EXPECT_EQ(resources.max_threads_per_block, 384);
  EXPECT_EQ(resources.static_shared_bytes, 4224);
  EXPECT_EQ(resources.const_bytes, 256);
  EXPECT_EQ(resources.local_bytes, 48);
  EXPECT_EQ(resources.registers, 72);
  // Which code runs, as the driver says: the library must not work it out from the image
  // where the GPU runs SASS and the image's PTX is newer (cuSPARSE on an H200, issue 41).
  EXPECT_EQ(resources.ptx_version, 80);
  EXPECT_EQ(resources.binary_version, 86);
  EXPECT_FALSE(executor.Resources(3, &resources));
}

// A fatbin of PTX alone (the client's cuLinkComplete of several inputs, nvcc
// -arch=compute_XX) never reaches cuModuleLoadData as a fatbin (driver 580 crashed on one):
// its PTX for the GPU is JIT-compiled as text, one unit with cuModuleLoadData, several
// linked with the driver's JIT linker.
TEST(CudaExecutor, FatbinsOfPtxAloneAreJitCompiledAsText) {
  auto links = FakeEntry<uint64_t (*)(int)>("fake_cuda_links");
  auto fatbin_loads = FakeEntry<uint64_t (*)()>("fake_cuda_fatbin_loads");
  ASSERT_TRUE(links != nullptr && fatbin_loads != nullptr);
  auto made = CudaExecutor::Create(kFakeUuid);
  ASSERT_TRUE(made.ok()) << made.status().message();
  device::Executor& executor = *made.value();
  const uint64_t fatbins_before = fatbin_loads();
  const std::string unit = ".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry k() { ret; }\n";
  std::vector<uint8_t> two = image::FatbinOfPtx({{unit, 75}, {unit, 75}, {unit, 70}});
  ASSERT_EQ(executor.LoadModule(1, two.data(), two.size(), {}), dataplane::kCuSuccess);
  EXPECT_EQ(links(0), 2u);  // the two units of the newest architecture
  EXPECT_EQ(links(1), 0u);  // the link state is destroyed
  EXPECT_EQ(executor.GetFunction(1, 2, "k"), dataplane::kCuSuccess);
  std::vector<uint8_t> one = image::FatbinOfPtx({{unit, 75}});
  EXPECT_EQ(executor.LoadModule(3, one.data(), one.size(), {}), dataplane::kCuSuccess);
  EXPECT_EQ(links(0), 2u);  // not linked: loaded as text
  EXPECT_EQ(executor.GetFunction(3, 4, "k"), dataplane::kCuSuccess);
  // PTX only for newer GPUs than the fake's (compute capability 7.5): no binary for it.
  std::vector<uint8_t> newer = image::FatbinOfPtx({{unit, 90}});
  EXPECT_EQ(executor.LoadModule(5, newer.data(), newer.size(), {}), 209);
  EXPECT_EQ(fatbin_loads(), fatbins_before);
}

}  // namespace
}  // namespace gpupool::devices

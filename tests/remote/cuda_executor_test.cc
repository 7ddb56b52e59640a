// The cuda executor against a fake driver (fake_cuda_driver.cc, found as libcuda.so.1
// through LD_LIBRARY_PATH): tenant isolation is enforced before the driver is called.
#include "remote/dataplane/cuda_executor.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "remote/dataplane/protocol.h"

namespace gpupool::dataplane {
namespace {

constexpr char kFakeUuid[] = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f";

// The fake driver's counters (the executor dlopens the same library).
struct FakeDriver {
  FakeDriver() {
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(library, nullptr) << dlerror();
    if (library == nullptr) return;
    memory_calls = reinterpret_cast<uint64_t (*)()>(dlsym(library, "fake_cuda_memory_calls"));
    live_allocations =
        reinterpret_cast<uint64_t (*)()>(dlsym(library, "fake_cuda_live_allocations"));
    EXPECT_NE(memory_calls, nullptr) << "libcuda.so.1 is not the test's fake driver";
  }
  uint64_t (*memory_calls)() = nullptr;
  uint64_t (*live_allocations)() = nullptr;
};

TEST(CudaExecutor, ASessionCannotTouchAnotherSessionsMemory) {
  FakeDriver fake;
  ASSERT_NE(fake.memory_calls, nullptr);
  auto made_owner = CudaExecutor::Create(kFakeUuid);
  auto made_intruder = CudaExecutor::Create(kFakeUuid);
  ASSERT_TRUE(made_owner.ok()) << made_owner.status().message();
  ASSERT_TRUE(made_intruder.ok()) << made_intruder.status().message();
  Executor& owner = *made_owner.value();
  Executor& intruder = *made_intruder.value();

  const uint64_t size = 4096;
  uint64_t secret = 0, own = 0;
  ASSERT_EQ(owner.Allocate(size, &secret), kCuSuccess);
  ASSERT_EQ(intruder.Allocate(size, &own), kCuSuccess);
  std::vector<char> data(size, 's');
  ASSERT_EQ(owner.CopyToDevice(secret, data.data(), size, 0), kCuSuccess);

  const uint64_t calls = fake.memory_calls();
  const void* out = nullptr;
  std::vector<char> junk(size, 'j');
  EXPECT_EQ(intruder.CopyFromDevice(secret, size, 0, &out), kCuInvalidValue);
  EXPECT_EQ(intruder.CopyFromDevice(secret + 100, 8, 0, &out), kCuInvalidValue);
  EXPECT_EQ(intruder.CopyToDevice(secret, junk.data(), size, 0), kCuInvalidValue);
  EXPECT_EQ(intruder.CopyDeviceToDevice(own, secret, size, 0), kCuInvalidValue);
  EXPECT_EQ(intruder.CopyDeviceToDevice(secret, own, size, 0), kCuInvalidValue);
  EXPECT_EQ(intruder.Memset(secret, 0, 4, size / 4, 0), kCuInvalidValue);
  EXPECT_EQ(intruder.Free(secret), kCuInvalidValue);
  // Its own allocation, but past its end (or a count that wraps around).
  EXPECT_EQ(intruder.CopyFromDevice(own, size + 1, 0, &out), kCuInvalidValue);
  EXPECT_EQ(intruder.CopyToDevice(own + size, junk.data(), 1, 0), kCuInvalidValue);
  EXPECT_EQ(intruder.Memset(own, 0, 4, UINT64_MAX / 2, 0), kCuInvalidValue);
  EXPECT_EQ(fake.memory_calls(), calls);  // none of it reached the driver

  // Its own memory works as before.
  EXPECT_EQ(intruder.CopyToDevice(own, junk.data(), size, 0), kCuSuccess);
  EXPECT_EQ(intruder.Memset(own + 8, 0x41, 1, 8, 0), kCuSuccess);
  ASSERT_EQ(intruder.CopyFromDevice(own, 16, 0, &out), kCuSuccess);
  EXPECT_EQ(std::string(static_cast<const char*>(out), 16), "jjjjjjjjAAAAAAAA");

  ASSERT_EQ(owner.CopyFromDevice(secret, size, 0, &out), kCuSuccess);
  EXPECT_EQ(std::memcmp(out, data.data(), size), 0);

  made_intruder.value().reset();  // a departing session frees what it had
  EXPECT_EQ(fake.live_allocations(), 1u);
}

}  // namespace
}  // namespace gpupool::dataplane

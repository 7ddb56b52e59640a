// The PTX engine's tests: device malloc and free, device printf, device-side launches and the device
// runtime's queries (interp/device_heap.cc, printf.cc, device_runtime.cc). The fixture and helpers: engine_fixture.h.
#include <array>
#include <string>
#include <cstring>
#include <tuple>

#include "common/occupancy.h"
#include "remote/ptx/device_printf.h"
#include "remote/ptx/front/error_strings.h"
#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

using ptx_test::Engine;
using ptx_test::KernelText;

// Device-side malloc and free: buffers of each thread's own, aligned to 16 bytes, kept
// from one launch to the next; freed memory is used again (the whole heap can be had
// again once all is freed); a request larger than the heap gives NULL; a double free
// fails the launch with CUDA_ERROR_ILLEGAL_ADDRESS.
TEST_F(Engine, DeviceMallocAndFree) {
  const int blocks = 8, threads = 64, n = blocks * threads;
  uint64_t out = Zeros<int32_t>(n), kept = Zeros<uint64_t>(n), got = Zeros<uint64_t>(1);
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(Run("heap_sums", {blocks}, {threads}, 0, out, kept), kCuSuccess) << last_detail_;
    auto sums = Download<int32_t>(out, n);
    for (int t = 0; t < n; ++t) {
      const int count = 1 + t % 37;
      EXPECT_EQ(sums[t], count * t + count * (count - 1) / 2) << "thread " << t;
    }
    ASSERT_EQ(Run("heap_free_kept", {blocks}, {threads}, 0, kept, out), kCuSuccess) << last_detail_;
    auto firsts = Download<int32_t>(out, n);
    for (int t = 0; t < n; t += 2) EXPECT_EQ(firsts[t], t) << "thread " << t;
  }
  // All freed, the whole heap is one block again: its largest payload (8 MiB less the
  // heap's 32-byte header and the block's 16), twice; 16 bytes more, or 9 MiB, do not fit.
  const uint64_t largest = (uint64_t{8} << 20) - 48;
  for (uint64_t bytes : {largest, largest, largest + 1, uint64_t{9} << 20}) {
    ASSERT_EQ(Run("heap_big", {1}, {1}, 0, bytes, got), kCuSuccess) << last_detail_;
    const uint64_t address = Download<uint64_t>(got, 1)[0];
    if (bytes <= largest) {
      EXPECT_NE(address, 0u) << bytes;
      EXPECT_EQ(address % 16, 0u);
    } else {
      EXPECT_EQ(address, 0u);
    }
  }
  EXPECT_EQ(Run("heap_double_free", {1}, {1}, 0), kCuIllegalAddress);
  EXPECT_NE(last_detail_.find("free of a pointer"), std::string::npos) << last_detail_;
}

// The heap is as large as the load asks (the context's CU_LIMIT_MALLOC_HEAP_SIZE): 24 MiB
// fit in a 32 MiB heap and not in the default one; more than the sim's bound is refused
// by name.
TEST_F(Engine, DeviceHeapSizeFollowsTheLoadAndIsBounded) {
  ASSERT_EQ(executor_.LoadModule(2, ptx_.c_str(), ptx_.size() + 1, {}, 0, uint64_t{32} << 20), kCuSuccess)
      << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(2, 95, "heap_big"), kCuSuccess) << executor_.TakeErrorDetail();
  uint64_t got = Zeros<uint64_t>(1);
  struct {
    uint64_t bytes, got;
  } params{uint64_t{24} << 20, got};
  ASSERT_EQ(LaunchLoaded(95, 1, 1, params), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_NE(Download<uint64_t>(got, 1)[0], 0u);
  ASSERT_EQ(Run("heap_big", {1}, {1}, 0, uint64_t{24} << 20, got), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<uint64_t>(got, 1)[0], 0u);  // module 1 has the default 8 MiB

  EXPECT_EQ(executor_.LoadModule(3, ptx_.c_str(), ptx_.size() + 1, {}, 0, sim::kMaxDeviceHeapBytes + 16),
            kCuOutOfMemory);
  EXPECT_NE(executor_.TakeErrorDetail().find("CU_LIMIT_MALLOC_HEAP_SIZE"), std::string::npos);
}

// A call of malloc the module never declared is refused like any unknown function (the
// decoder once looked the declaration up unchecked).
TEST_F(Engine, UndeclaredMallocIsRefused) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(16, 93, "UndeclaredMallocIsRefused.ptx", "undeclared"));
  uint64_t out = Zeros<uint64_t>(1);
  EXPECT_EQ(LaunchLoaded(93, 1, 1, out), kCuNotSupported);
  EXPECT_NE(executor_.TakeErrorDetail().find("malloc"), std::string::npos);
}

// cudaGraphSetConditional, as nvcc emits it (an extern function the driver provides):
// the remoting library's handle is the address of the condition's 4-byte slot, so the
// value lands there; a handle that is no allocation fails the launch with
// CUDA_ERROR_ILLEGAL_ADDRESS, naming the call.
TEST_F(Engine, SetConditionalStoresTheValueAtItsHandle) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(17, 92, "SetConditionalStoresTheValueAtItsHandle.ptx", "set_conditional"));
  uint64_t slot = Zeros<uint32_t>(1);
  uint8_t params[12];  // the kernel's parameter layout: u64 handle, u32 value
  const uint32_t value = 0xfeed;
  std::memcpy(params, &slot, 8);
  std::memcpy(params + 8, &value, 4);
  device::LaunchConfig config;
  config.block[0] = 64;  // every thread stores the same value: no race to lose
  ASSERT_EQ(executor_.Launch(92, config, params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint32_t>(slot, 1)[0], 0xfeedu);
  const uint64_t stray = 8;  // no allocation there
  std::memcpy(params, &stray, 8);
  EXPECT_EQ(executor_.Launch(92, config, params, sizeof(params)), kCuIllegalAddress);
  EXPECT_NE(executor_.TakeErrorDetail().find("cudaGraphSetConditional"), std::string::npos);
}

TEST_F(Engine, DeviceHeapBookkeepingOverwrittenFailsTheLaunch) {
  uint64_t got = Zeros<uint64_t>(1);
  EXPECT_EQ(Run("heap_scribble", {1}, {1}, 0, got), kCuIllegalAddress);
  EXPECT_NE(last_detail_.find("free of a pointer"), std::string::npos) << last_detail_;
  EXPECT_NE(Download<uint64_t>(got, 1)[0], 0u);
}

TEST_F(Engine, DevicePrintfIsKeptUntilTaken) {
  ASSERT_EQ(Run("hello", {2}, {3}, 0, 10), kCuSuccess) << last_detail_;
  std::string text = executor_.TakeOutput();
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 3; ++t) {
      char line[128];
      std::snprintf(line, sizeof(line), "hello from %d.%d value %d %5.2f ok\n", b, t, 10 + t, 1.5 * t);
      EXPECT_NE(text.find(line), std::string::npos) << line << " not in:\n" << text;
    }
  }
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 6);
  EXPECT_EQ(executor_.TakeOutput(), "");
}

// Dynamic parallelism: a kernel that launches itself one level deeper each time gets
// cudaSuccess from its launches down to CUDA's 24 levels and
// cudaErrorLaunchMaxDepthExceeded (65) there; the device runtime launches only the
// parameter buffers it handed out (a pointer to other memory, or NULL, is
// cudaErrorInvalidValue, and nothing runs).
// The formatter both tiers share, on an argument buffer in host memory (vprintf's layout:
// each argument at its alignment). A %c of 0 is a NUL byte in the text, as printf gives on
// a GPU (it was dropped: the text was cut at it); what does not fit a conversion's 511 bytes
// is cut; a width printf cannot do prints nothing, and nothing of the host's stack.
TEST(DevicePrintf, ANulCharacterIsKeptAndOversizedConversionsAreCut) {
  struct Arguments {
    std::array<uint8_t, 64> bytes{};
  } args;
  auto at = [](void* opaque, uint64_t address, uint32_t size) -> const uint8_t* {
    auto* a = static_cast<Arguments*>(opaque);
    if (address < 0x1000 || address - 0x1000 + size > a->bytes.size()) return nullptr;
    return a->bytes.data() + (address - 0x1000);
  };
  sim::DeviceMemory memory{&args, at};
  const uint32_t chars[4] = {'a', 0, 'b', 'c'};
  std::memcpy(args.bytes.data(), chars, sizeof(chars));
  EXPECT_EQ(sim::FormatDevicePrintf(memory, "[%c%c%c]", 0x1000), std::string("[a\0b]", 5));
  EXPECT_EQ(sim::FormatDevicePrintf(memory, "%c|%3c|%-3c|", 0x1000 + 4), std::string("\0|  b|c  |", 10));
  const int32_t seven = 7;
  std::memcpy(args.bytes.data(), &seven, sizeof(seven));
  EXPECT_EQ(sim::FormatDevicePrintf(memory, "%600d", 0x1000), std::string(511, ' '));  // 599 spaces and the 7, cut
  EXPECT_EQ(sim::FormatDevicePrintf(memory, "<%2147483648d>", 0x1000), "<>");
}

TEST_F(Engine, DeviceSideLaunchesAreBoundedAndOnlyOfTheRuntimesBuffers) {
  ASSERT_NO_FATAL_FAILURE(
      LoadKernelFile(14, 95, "DeviceSideLaunchesAreBoundedAndOnlyOfTheRuntimesBuffers.ptx", "deep"));
  ASSERT_EQ(executor_.GetFunction(14, 96, "forge"), kCuSuccess) << executor_.TakeErrorDetail();
  uint64_t errors = Upload(std::vector<uint32_t>(32, 0xffffffffu));
  struct {
    uint64_t errors;
    uint32_t depth;
  } deep{errors, 0};
  device::LaunchConfig config;
  ASSERT_EQ(executor_.Launch(95, config, &deep, sizeof(deep)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(errors, 32);
  for (int depth = 0; depth < 23; ++depth) EXPECT_EQ(got[depth], 0u) << depth;
  EXPECT_EQ(got[23], 65u);  // cudaErrorLaunchMaxDepthExceeded: no grid ran at depth 24
  for (int depth = 24; depth < 32; ++depth) EXPECT_EQ(got[depth], 0xffffffffu) << depth;

  // A header-shaped block of the session's own memory, and NULL: not the runtime's buffers.
  std::vector<uint64_t> fake(16, 0);
  fake[0] = 0x6370646275666672ull;
  uint64_t forged = Upload(fake), out = Zeros<uint32_t>(1);
  for (uint64_t buffer : {forged + 48, uint64_t{0}}) {
    struct {
      uint64_t out, buffer;
    } forge{out, buffer};
    ASSERT_EQ(executor_.Launch(96, config, &forge, sizeof(forge)), kCuSuccess) << executor_.TakeErrorDetail();
    EXPECT_EQ(Download<uint32_t>(out, 1)[0], 1u);  // cudaErrorInvalidValue
  }
}

// cudaMemsetAsync and cudaMemcpyAsync in device code run after the grid, in the order
// queued (the copy sees the memset); a grid queues at most the module's pending-launch
// limit (2048 by default, as the load says otherwise), the calls beyond it return
// cudaErrorLaunchPendingCountExceeded (69) and what was queued still runs in order;
// cudaGetDevice says the device the load names; a memset onto no allocation fails the
// host's launch with CUDA_ERROR_ILLEGAL_ADDRESS, naming the call.
TEST_F(Engine, DeviceSideCopiesRunInStreamOrderAndAreBounded) {
  const std::string text = KernelText("DeviceSideCopiesRunInStreamOrderAndAreBounded.ptx");
  ASSERT_NO_FATAL_FAILURE(LoadKernel(20, 90, text, "set_then_copy"));
  ASSERT_EQ(executor_.GetFunction(20, 91, "set_flood"), kCuSuccess) << executor_.TakeErrorDetail();
  const uint64_t buffer = Upload(std::vector<uint8_t>(128, 0xee));
  ASSERT_EQ(LaunchLoaded(90, 1, 1, buffer), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint8_t>(buffer, 128), std::vector<uint8_t>(128, 7));

  struct Flood {
    uint64_t target;
    uint32_t count;
    uint64_t status;
  };
  const uint32_t count = 2100;
  const uint64_t target = Zeros<uint32_t>(1), status = Zeros<uint32_t>(count);
  ASSERT_EQ(LaunchLoaded(91, 1, 1, Flood{target, count, status}), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(status, count);
  for (uint32_t i = 0; i < count; ++i) EXPECT_EQ(got[i], i < 2048 ? 0u : 69u) << i;
  EXPECT_EQ(Download<uint32_t>(target, 1)[0], 0xffffffffu);  // the 2048th memset (of 255) ran last

  // A module loaded with a limit of 16, for the client's device 3.
  ASSERT_EQ(executor_.LoadModule(21, text.c_str(), text.size() + 1, {}, 0, 0, 16, 3), kCuSuccess)
      << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(21, 92, "set_flood"), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(21, 93, "get_device"), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(20, 94, "get_device"), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(LaunchForOutput<uint32_t>(93, 1, 1, 2), (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(LaunchForOutput<uint32_t>(94, 1, 1, 2), (std::vector<uint32_t>{0, 0}));
  ASSERT_EQ(LaunchLoaded(92, 1, 1, Flood{target, 40, status}), kCuSuccess) << executor_.TakeErrorDetail();
  got = Download<uint32_t>(status, 40);
  for (uint32_t i = 0; i < 40; ++i) EXPECT_EQ(got[i], i < 16 ? 0u : 69u) << i;
  EXPECT_EQ(Download<uint32_t>(target, 1)[0], 0x0f0f0f0fu);

  // Set higher than the sim holds, it queues kMaxPendingLaunchLimit.
  ASSERT_EQ(executor_.LoadModule(22, text.c_str(), text.size() + 1, {}, 0, 0, 4000000000u), kCuSuccess)
      << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(22, 95, "set_flood"), kCuSuccess) << executor_.TakeErrorDetail();
  const uint32_t many = sim::kMaxPendingLaunchLimit + 10;
  const uint64_t many_status = Zeros<uint32_t>(many);
  ASSERT_EQ(LaunchLoaded(95, 1, 1, Flood{target, many, many_status}), kCuSuccess) << executor_.TakeErrorDetail();
  got = Download<uint32_t>(many_status, many);
  EXPECT_EQ(static_cast<size_t>(std::count(got.begin(), got.end(), 0u)), sim::kMaxPendingLaunchLimit);
  EXPECT_EQ(got[sim::kMaxPendingLaunchLimit], 69u);

  const uint64_t stray = uint64_t{1} << 40;  // no allocation there
  EXPECT_EQ(LaunchLoaded(91, 1, 1, Flood{stray, 1, status}), kCuIllegalAddress);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("cudaMemsetAsync in device code (kernel set_flood)"), std::string::npos) << detail;
  EXPECT_NE(detail.find("not within one allocation"), std::string::npos) << detail;
}

// What the client sends with a module's load for device 2 (DeviceRuntimeFacts): its
// attributes, and limits of a context that set them.
DeviceRuntimeFacts ClientFacts() {
  DeviceRuntimeFacts facts;
  facts.attribute_count = 148;  // CUDA 13.0's CU_DEVICE_ATTRIBUTE_MAX
  facts.attributes[16] = 132;   // cudaDevAttrMultiProcessorCount
  facts.attributes[75] = 9;     // cudaDevAttrComputeCapabilityMajor
  facts.attributes[147] = -7;   // the last there is
  const uint64_t limits[kDeviceLimitCount] = {2048, 4u << 20, 1, 5, 1, 32, 0};
  std::copy(std::begin(limits), std::end(limits), facts.limits);
  return facts;
}

struct AttributeQuery {
  uint64_t status, value;
  uint32_t attribute;
  int32_t device;
};

// cudaDeviceGetAttribute in device code says what the client sent with the load for the
// load's device: any other device is cudaErrorInvalidDevice (101), an attribute outside
// [1, CU_DEVICE_ATTRIBUTE_MAX) cudaErrorInvalidValue (1), and a module loaded with none
// (not by the client) cudaErrorNotSupported (801); an out-pointer that is no memory of
// the thread fails the launch with CUDA_ERROR_ILLEGAL_ADDRESS, naming the call.
TEST_F(Engine, DeviceGetAttributeSaysWhatTheClientSent) {
  const std::string text = KernelText("DeviceQueriesAndThreeDimensionalCopies.ptx");
  const DeviceRuntimeFacts facts = ClientFacts();
  ASSERT_EQ(executor_.LoadModule(30, text.c_str(), text.size() + 1, {}, 0, 0, 0, 2, &facts), kCuSuccess)
      << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(30, 80, "get_attribute"), kCuSuccess) << executor_.TakeErrorDetail();
  const uint64_t status = Zeros<uint32_t>(1), value = Zeros<int32_t>(1);
  auto query = [&](uint32_t attribute, int32_t device, uint64_t where) {
    EXPECT_EQ(LaunchLoaded(80, 1, 1, AttributeQuery{status, where, attribute, device}), kCuSuccess)
        << executor_.TakeErrorDetail();
    return Download<uint32_t>(status, 1)[0];
  };
  for (auto [attribute, want] : std::vector<std::pair<uint32_t, int32_t>>{{16, 132}, {75, 9}, {147, -7}, {1, 0}}) {
    EXPECT_EQ(query(attribute, 2, value), 0u) << attribute;
    EXPECT_EQ(Download<int32_t>(value, 1)[0], want) << attribute;
  }
  const int32_t unchanged = 12345;
  ASSERT_EQ(executor_.CopyToDevice(value, &unchanged, 4, 0), kCuSuccess);
  for (uint32_t attribute : {0u, 148u, 0xffffffffu}) EXPECT_EQ(query(attribute, 2, value), 1u) << attribute;
  for (int32_t device : {0, 3, -1}) EXPECT_EQ(query(16, device, value), 101u) << device;
  EXPECT_EQ(Download<int32_t>(value, 1)[0], unchanged);

  ASSERT_NO_FATAL_FAILURE(LoadKernel(31, 81, text, "get_attribute"));  // no facts
  EXPECT_EQ(LaunchLoaded(81, 1, 1, AttributeQuery{status, value, 16, 0}), kCuSuccess);
  EXPECT_EQ(Download<uint32_t>(status, 1)[0], 801u);

  const uint64_t stray = uint64_t{1} << 40;  // no allocation there
  EXPECT_EQ(LaunchLoaded(80, 1, 1, AttributeQuery{status, stray, 16, 2}), kCuIllegalAddress);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("cudaDeviceGetAttribute's value"), std::string::npos) << detail;
}

struct LimitQuery {
  uint64_t status, value;
  uint32_t limit, unused;
};

// cudaDeviceGetLimit in device code: the context's limits the client sent with the load,
// but the malloc heap and the pending-launch limit as the module has them (the sizes the
// load gave; CUDA's defaults for a load that gave none); a limit that is no cudaLimit is
// cudaErrorUnsupportedLimit (215); an out-pointer that is no memory of the thread fails the
// launch with CUDA_ERROR_ILLEGAL_ADDRESS, naming the call.
TEST_F(Engine, DeviceGetLimitSaysTheContextsAndTheModulesLimits) {
  const std::string text = KernelText("DeviceQueriesAndThreeDimensionalCopies.ptx");
  const DeviceRuntimeFacts facts = ClientFacts();
  ASSERT_EQ(executor_.LoadModule(32, text.c_str(), text.size() + 1, {}, 0, uint64_t{16} << 20, 100, 2, &facts),
            kCuSuccess)
      << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(32, 82, "get_limit"), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_NO_FATAL_FAILURE(LoadKernel(33, 83, text, "get_limit"));  // no facts
  const uint64_t status = Zeros<uint32_t>(1), value = Zeros<uint64_t>(1);
  auto limits = [&](uint64_t function) {
    std::vector<uint64_t> got;
    for (uint32_t limit = 0; limit < kDeviceLimitCount; ++limit) {
      EXPECT_EQ(LaunchLoaded(function, 1, 1, LimitQuery{status, value, limit, 0}), kCuSuccess)
          << executor_.TakeErrorDetail();
      EXPECT_EQ(Download<uint32_t>(status, 1)[0], 0u) << limit;
      got.push_back(Download<uint64_t>(value, 1)[0]);
    }
    return got;
  };
  EXPECT_EQ(limits(82), (std::vector<uint64_t>{2048, 4u << 20, 16u << 20, 5, 100, 32, 0}));
  EXPECT_EQ(limits(83), (std::vector<uint64_t>{1024, 1u << 20, 8u << 20, 2, 2048, 64, 0}));
  for (uint32_t limit : {7u, 0x7fffffffu}) {
    ASSERT_EQ(LaunchLoaded(82, 1, 1, LimitQuery{status, value, limit, 0}), kCuSuccess);
    EXPECT_EQ(Download<uint32_t>(status, 1)[0], 215u) << limit;
  }
  const uint64_t stray = uint64_t{1} << 40;
  EXPECT_EQ(LaunchLoaded(82, 1, 1, LimitQuery{status, stray, 0, 0}), kCuIllegalAddress);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("cudaDeviceGetLimit's value"), std::string::npos) << detail;
}

// cudaMemcpy3DParms as a 64-bit device holds it (driver_types.h).
struct Memcpy3DParms {
  struct Side {
    uint64_t array = 0;
    uint64_t x = 0, y = 0, z = 0;
    uint64_t ptr = 0, pitch = 0, xsize = 0, ysize = 0;
  };
  Side src, dst;
  uint64_t width = 0, height = 0, depth = 0;
  uint32_t kind = 3;  // cudaMemcpyDeviceToDevice
  uint32_t padding = 0;
};
static_assert(sizeof(Memcpy3DParms) == 160);

// cudaMemcpy3DAsync in device code copies a box between pitched memory (slices ysize rows
// of pitch bytes apart) at the positions given, after the grid; CUDA arrays are
// cudaErrorInvalidValue (1), as are rows past a slice's ysize and arithmetic that
// overflows; a row past its pitch is cudaErrorInvalidPitchValue (12), a copy from or to
// the host cudaErrorInvalidMemcpyDirection (21), and nothing is queued; a box that is not
// within one allocation fails the host's launch with CUDA_ERROR_ILLEGAL_ADDRESS, naming the
// call and its extent, and so does a cudaMemcpy3DParms* that is no memory of the thread.
TEST_F(Engine, DeviceSide3DCopiesAreBoundedAndRefuseArrays) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(34, 84, "DeviceQueriesAndThreeDimensionalCopies.ptx", "copy_3d"));
  constexpr uint64_t kPitch = 32, kRows = 4, kSlices = 3, kBytes = kPitch * kRows * kSlices;
  std::vector<uint8_t> source(kBytes);
  for (uint64_t i = 0; i < kBytes; ++i) source[i] = static_cast<uint8_t>(i * 7 + 1);
  const uint64_t from = Upload(source), to = Upload(std::vector<uint8_t>(kBytes, 0x11));
  const uint64_t status = Zeros<uint32_t>(1);
  Memcpy3DParms box;
  box.src = {0, 4, 1, 1, from, kPitch, kPitch, kRows};
  box.dst = {0, 8, 2, 0, to, kPitch, kPitch, kRows};
  box.width = 10, box.height = 2, box.depth = 2;
  auto copy = [&](const Memcpy3DParms& parms) {
    const uint64_t where = Upload(std::vector<Memcpy3DParms>{parms});
    struct {
      uint64_t status, parms;
    } params{status, where};
    const int32_t result = LaunchLoaded(84, 1, 1, params);
    return result == kCuSuccess ? static_cast<int32_t>(Download<uint32_t>(status, 1)[0]) : -result;
  };
  ASSERT_EQ(copy(box), 0) << executor_.TakeErrorDetail();
  std::vector<uint8_t> want(kBytes, 0x11);
  for (uint64_t z = 0; z < 2; ++z) {
    for (uint64_t y = 0; y < 2; ++y) {
      for (uint64_t x = 0; x < 10; ++x) {
        want[z * kPitch * kRows + (2 + y) * kPitch + 8 + x] =
            source[(1 + z) * kPitch * kRows + (1 + y) * kPitch + 4 + x];
      }
    }
  }
  EXPECT_EQ(Download<uint8_t>(to, kBytes), want);

  // Linear memory as one row of one slice (no ysize needed), and an empty box.
  Memcpy3DParms line;
  line.src = {0, 0, 0, 0, from, 64, 64, 0};
  line.dst = {0, 0, 0, 0, to, 64, 64, 0};
  line.width = 64, line.height = 1, line.depth = 1;
  ASSERT_EQ(copy(line), 0) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint8_t>(to, 64), std::vector<uint8_t>(source.begin(), source.begin() + 64));
  Memcpy3DParms empty = box;
  empty.depth = 0;
  EXPECT_EQ(copy(empty), 0);

  Memcpy3DParms refused = box;
  refused.src.array = 0x1000;  // a cudaArray_t
  EXPECT_EQ(copy(refused), 1);
  refused = box;
  refused.dst.array = 0x1000;
  EXPECT_EQ(copy(refused), 1);
  refused = box;
  refused.kind = 1;  // cudaMemcpyHostToDevice
  EXPECT_EQ(copy(refused), 21);
  refused = box;
  refused.dst.x = kPitch - 9;  // x + width > pitch
  EXPECT_EQ(copy(refused), 12);
  refused = box;
  refused.src.y = 3;  // rows 3 and 4 of a 4-row slice
  EXPECT_EQ(copy(refused), 1);
  refused = box;
  refused.src.pitch = uint64_t{1} << 62, refused.src.ysize = 8;  // pitch * ysize overflows
  EXPECT_EQ(copy(refused), 1);
  refused = box;
  refused.dst.z = uint64_t{1} << 60;  // z * slice pitch overflows
  EXPECT_EQ(copy(refused), 1);
  EXPECT_EQ(Download<uint8_t>(to, 64), std::vector<uint8_t>(source.begin(), source.begin() + 64));  // none ran

  // A box one slice deeper than the destination holds: the launch fails, nothing is written.
  Memcpy3DParms deep = box;
  deep.src.z = 0, deep.dst.z = 1, deep.depth = 3;
  EXPECT_EQ(copy(deep), -kCuIllegalAddress);
  std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("cudaMemcpy3DAsync in device code (kernel copy_3d): 3 slice(s) of 2 row(s) of 10 bytes"),
            std::string::npos)
      << detail;
  EXPECT_NE(detail.find("its destination is not within one allocation"), std::string::npos) << detail;
  EXPECT_EQ(Download<uint8_t>(to, 64), std::vector<uint8_t>(source.begin(), source.begin() + 64));

  struct {
    uint64_t status, parms;
  } stray{status, uint64_t{1} << 40};
  EXPECT_EQ(LaunchLoaded(84, 1, 1, stray), kCuIllegalAddress);
  detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("cudaMemcpy3DAsync's parameters"), std::string::npos) << detail;
}

constexpr const char* kQueriesFile = "DeviceRuntimeQueriesMemsetsAndErrorStrings.ptx";

// ClientFacts with the figures of an H100 SXM the occupancy calculator reads, three
// devices, and a context that prefers L1 (cudaFuncCachePreferL1, 2).
DeviceRuntimeFacts ModelFacts() {
  DeviceRuntimeFacts facts = ClientFacts();
  const std::pair<int, int32_t> figures[] = {{8, 49152},   {12, 65536}, {16, 132},    {39, 2048}, {75, 9},    {76, 0},
                                             {81, 233472}, {82, 65536}, {97, 232448}, {106, 32},  {111, 1024}};
  for (auto [attribute, value] : figures) facts.attributes[attribute] = value;
  facts.device_count = 3;
  facts.cache_config = 2;
  return facts;
}

struct SimpleQueries {
  uint64_t status, count, cache, banks, version;
};

// cudaGetDeviceCount, cudaDeviceGetCacheConfig, cudaDeviceGetSharedMemConfig and
// cudaRuntimeGetVersion in device code: the client's device count and the context's cache
// preference at the load (a load without them: cudaErrorNotSupported, 801, for the count,
// cudaFuncCachePreferNone for the preference), four-byte banks, and the CUDA release of the
// kernel's PTX (.version 9.0: 13000); an out-pointer that is no memory of the thread fails
// the launch with CUDA_ERROR_ILLEGAL_ADDRESS, naming the call.
TEST_F(Engine, DeviceCountCacheConfigBanksAndRuntimeVersion) {
  const std::string text = KernelText(kQueriesFile);
  const DeviceRuntimeFacts facts = ModelFacts();
  ASSERT_EQ(executor_.LoadModule(40, text.c_str(), text.size() + 1, {}, 0, 0, 0, 2, &facts), kCuSuccess)
      << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(40, 90, "simple_queries"), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_NO_FATAL_FAILURE(LoadKernel(41, 91, text, "simple_queries"));  // no facts
  const uint64_t status = Zeros<uint32_t>(4), values = Zeros<int32_t>(4);
  const SimpleQueries queries{status, values, values + 4, values + 8, values + 12};
  ASSERT_EQ(LaunchLoaded(90, 1, 1, queries), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint32_t>(status, 4), (std::vector<uint32_t>{0, 0, 0, 0}));
  EXPECT_EQ(Download<int32_t>(values, 4), (std::vector<int32_t>{3, 2, 1, 13000}));
  ASSERT_EQ(LaunchLoaded(91, 1, 1, queries), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint32_t>(status, 4), (std::vector<uint32_t>{801, 0, 0, 0}));
  EXPECT_EQ(Download<int32_t>(values, 4), (std::vector<int32_t>{3, 0, 1, 13000}));

  const uint64_t stray = uint64_t{1} << 40;  // no allocation there
  const char* calls[] = {"cudaGetDeviceCount's count", "cudaDeviceGetCacheConfig's config",
                         "cudaDeviceGetSharedMemConfig's config", "cudaRuntimeGetVersion's version"};
  for (int i = 0; i < 4; ++i) {
    SimpleQueries bad = queries;
    (&bad.count)[i] = stray;
    EXPECT_EQ(LaunchLoaded(90, 1, 1, bad), kCuIllegalAddress) << i;
    const std::string detail = executor_.TakeErrorDetail();
    EXPECT_NE(detail.find(calls[i]), std::string::npos) << detail;
  }
}

// cudaFuncAttributes as a 64-bit device holds it (driver_types.h).
struct FuncAttributes {
  uint64_t shared_size_bytes, const_size_bytes, local_size_bytes;
  int32_t max_threads_per_block, num_regs, ptx_version, binary_version, cache_mode_ca;
  int32_t max_dynamic_shared_size_bytes, preferred_shmem_carveout, cluster_dim_must_be_set;
  int32_t cluster[6];
  int32_t reserved[16];
};
static_assert(sizeof(FuncAttributes) == 144);

struct FuncQuery {
  uint64_t status, attributes;
  uint32_t which;  // the kernel `target`, a device function, NULL, or target's address + 1
};

// cudaFuncGetAttributes in device code says of a kernel of the module what the executor
// says of it on the host (Resources: its static shared memory, .maxntid, .const bank and
// local memory), the model's 32 registers, its PTX target and the binary the client chose
// for the device (else the device's architecture), and the shared memory left it per block; a device function, NULL or
// any other address is cudaErrorInvalidDeviceFunction (98) and writes nothing; a module loaded without the client's
// facts still answers but for what the device's attributes give; an out-pointer that is no memory of the thread fails
// the launch with CUDA_ERROR_ILLEGAL_ADDRESS.
TEST_F(Engine, FuncGetAttributesSaysWhatTheHostSays) {
  const std::string text = KernelText(kQueriesFile);
  const DeviceRuntimeFacts facts = ModelFacts();
  ASSERT_EQ(executor_.LoadModule(42, text.c_str(), text.size() + 1, {}, 0, 0, 0, 2, &facts), kCuSuccess)
      << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(42, 92, "func_attributes"), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(42, 93, "target"), kCuSuccess) << executor_.TakeErrorDetail();
  FunctionResources host;
  ASSERT_TRUE(executor_.Resources(93, &host));
  EXPECT_EQ(host.static_shared_bytes, 200);
  EXPECT_EQ(host.max_threads_per_block, 256);
  EXPECT_EQ(host.const_bytes, 48);
  EXPECT_GE(host.local_bytes, 64);

  const uint64_t status = Zeros<uint32_t>(1), where = Zeros<FuncAttributes>(1);
  ASSERT_EQ(LaunchLoaded(92, 1, 1, FuncQuery{status, where, 0}), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint32_t>(status, 1)[0], 0u);
  const FuncAttributes got = Download<FuncAttributes>(where, 1)[0];
  EXPECT_EQ(got.shared_size_bytes, static_cast<uint64_t>(host.static_shared_bytes));
  EXPECT_EQ(got.const_size_bytes, static_cast<uint64_t>(host.const_bytes));
  EXPECT_EQ(got.local_size_bytes, static_cast<uint64_t>(host.local_bytes));
  EXPECT_EQ(got.max_threads_per_block, host.max_threads_per_block);
  EXPECT_EQ(got.num_regs, 32);
  EXPECT_EQ(got.ptx_version, 80);
  EXPECT_EQ(got.binary_version, 90);
  EXPECT_EQ(got.max_dynamic_shared_size_bytes, 49152 - 200);
  EXPECT_EQ(got.preferred_shmem_carveout, -1);
  EXPECT_EQ(got.cache_mode_ca, 0);
  EXPECT_EQ(got.cluster_dim_must_be_set, 0);

  const std::vector<uint8_t> marked(sizeof(FuncAttributes), 0x5a);
  const uint64_t untouched = Upload(marked);
  for (uint32_t which : {1u, 2u, 3u}) {
    ASSERT_EQ(LaunchLoaded(92, 1, 1, FuncQuery{status, untouched, which}), kCuSuccess) << which;
    EXPECT_EQ(Download<uint32_t>(status, 1)[0], 98u) << which;
  }
  EXPECT_EQ(Download<uint8_t>(untouched, marked.size()), marked);

  // The SASS the client chose from the image for the device (sm_80 on an sm_86 GPU, say).
  DeviceRuntimeFacts chosen = facts;
  chosen.binary_version = 80;
  ASSERT_EQ(executor_.LoadModule(48, text.c_str(), text.size() + 1, {}, 0, 0, 0, 2, &chosen), kCuSuccess)
      << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(48, 99, "func_attributes"), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(LaunchLoaded(99, 1, 1, FuncQuery{status, where, 0}), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<FuncAttributes>(where, 1)[0].binary_version, 80);

  ASSERT_NO_FATAL_FAILURE(LoadKernel(43, 94, text, "func_attributes"));  // no facts
  ASSERT_EQ(LaunchLoaded(94, 1, 1, FuncQuery{status, where, 0}), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint32_t>(status, 1)[0], 0u);
  const FuncAttributes bare = Download<FuncAttributes>(where, 1)[0];
  EXPECT_EQ(bare.shared_size_bytes, 200u);
  EXPECT_EQ(bare.binary_version, 80);  // the PTX's target: no device architecture known

  EXPECT_EQ(LaunchLoaded(92, 1, 1, FuncQuery{status, uint64_t{1} << 40, 0}), kCuIllegalAddress);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("cudaFuncGetAttributes' attributes"), std::string::npos) << detail;
}

struct OccupancyQuery {
  uint64_t status, blocks, shared;
  uint32_t which, block_size, flags, with_flags;
};

// The occupancy calculator in device code is the host's (common/occupancy.h) on the
// device's attributes and the kernel's needs: 16 blocks of 128 threads of `target` on an
// H100 (threads and registers bound it), 4 with 48 KiB of dynamic shared memory each, none
// of more threads than its .maxntid; WithFlags takes cudaOccupancyDisableCachingOverride
// (1) and no other flag; a block size of 0 or less and another flag are
// cudaErrorInvalidValue (1), a function that is no kernel of the module
// cudaErrorInvalidDeviceFunction (98), a module loaded without the device's attributes
// cudaErrorNotSupported (801); an out-pointer that is no memory of the thread fails the
// launch with CUDA_ERROR_ILLEGAL_ADDRESS.
TEST_F(Engine, OccupancyInDeviceCodeIsTheHostsCalculator) {
  const std::string text = KernelText(kQueriesFile);
  const DeviceRuntimeFacts facts = ModelFacts();
  ASSERT_EQ(executor_.LoadModule(44, text.c_str(), text.size() + 1, {}, 0, 0, 0, 2, &facts), kCuSuccess)
      << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(44, 95, "occupancy"), kCuSuccess) << executor_.TakeErrorDetail();
  const uint64_t status = Zeros<uint32_t>(1), blocks = Zeros<int32_t>(1);
  auto ask = [&](uint64_t function, uint32_t which, int32_t block_size, uint64_t shared, uint32_t flags,
                 bool with_flags) {
    const OccupancyQuery query{status, blocks, shared, which, static_cast<uint32_t>(block_size), flags, with_flags};
    EXPECT_EQ(LaunchLoaded(function, 1, 1, query), kCuSuccess) << executor_.TakeErrorDetail();
    return std::make_pair(Download<uint32_t>(status, 1)[0], Download<int32_t>(blocks, 1)[0]);
  };
  GpuModel h100{};
  h100.shared_per_block = 49152, h100.shared_per_block_optin = 232448, h100.shared_per_multiprocessor = 233472;
  h100.reserved_shared_per_block = 1024, h100.registers_per_block = 65536, h100.registers_per_multiprocessor = 65536;
  h100.max_threads_per_multiprocessor = 2048, h100.max_blocks_per_multiprocessor = 32;
  const KernelResources target{32, 200, 256};
  for (auto [block_size, shared] :
       std::vector<std::pair<int, uint64_t>>{{128, 0}, {128, 48 << 10}, {256, 0}, {32, 100000}, {1024, 0}, {1, 0}}) {
    const int want = ActiveBlocksPerMultiprocessor(h100, target, block_size, shared);
    EXPECT_EQ(ask(95, 0, block_size, shared, 0, false), std::make_pair(0u, want)) << block_size << " " << shared;
    EXPECT_EQ(ask(95, 0, block_size, shared, 1, true), std::make_pair(0u, want)) << block_size << " " << shared;
  }
  EXPECT_EQ(ask(95, 0, 128, 0, 0, false).second, 16);
  EXPECT_EQ(ask(95, 0, 128, 48 << 10, 0, false).second, 4);
  EXPECT_EQ(ask(95, 0, 512, 0, 0, false).second, 0);

  EXPECT_EQ(ask(95, 0, 0, 0, 0, false).first, 1u);
  EXPECT_EQ(ask(95, 0, -32, 0, 0, true).first, 1u);
  EXPECT_EQ(ask(95, 0, 128, 0, 2, true).first, 1u);
  for (uint32_t which : {1u, 2u, 3u}) EXPECT_EQ(ask(95, which, 128, 0, 0, false).first, 98u) << which;

  ASSERT_NO_FATAL_FAILURE(LoadKernel(45, 96, text, "occupancy"));  // no facts
  EXPECT_EQ(ask(96, 0, 128, 0, 0, false).first, 801u);

  const OccupancyQuery stray{status, uint64_t{1} << 40, 0, 0, 128, 0, 0};
  EXPECT_EQ(LaunchLoaded(95, 1, 1, stray), kCuIllegalAddress);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("cudaOccupancyMaxActiveBlocksPerMultiprocessor's blocks"), std::string::npos) << detail;
}

struct Memset3D {
  uint64_t status, ptr, pitch, xsize, ysize, width, height, depth;
  uint32_t value, unused;
};

// cudaMemset3DAsync in device code sets a box of pitched memory (slices ysize rows of pitch
// bytes apart) after the grid; a row wider than the pitch is cudaErrorInvalidPitchValue
// (12), rows past a slice's ysize and arithmetic that overflows cudaErrorInvalidValue (1),
// and nothing is queued; an empty extent sets nothing; a box that is not within one
// allocation fails the host's launch with CUDA_ERROR_ILLEGAL_ADDRESS, naming the call and
// its extent, and writes nothing.
TEST_F(Engine, DeviceSide3DMemsetsAreBounded) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(46, 97, kQueriesFile, "memset_3d"));
  constexpr uint64_t kPitch = 32, kRows = 4, kSlices = 3, kBytes = kPitch * kRows * kSlices;
  const uint64_t to = Upload(std::vector<uint8_t>(kBytes, 0x11)), status = Zeros<uint32_t>(1);
  auto set = [&](const Memset3D& m) {
    const int32_t result = LaunchLoaded(97, 1, 1, m);
    return result == kCuSuccess ? static_cast<int32_t>(Download<uint32_t>(status, 1)[0]) : -result;
  };
  const Memset3D box{status, to + kPitch + 4, kPitch, 20, kRows, 10, 2, 3, 0x1abu, 0};
  ASSERT_EQ(set(box), 0) << executor_.TakeErrorDetail();
  std::vector<uint8_t> want(kBytes, 0x11);
  for (uint64_t z = 0; z < 3; ++z) {
    for (uint64_t y = 0; y < 2; ++y) {
      for (uint64_t x = 0; x < 10; ++x) want[z * kPitch * kRows + (1 + y) * kPitch + 4 + x] = 0xab;
    }
  }
  EXPECT_EQ(Download<uint8_t>(to, kBytes), want);

  for (auto [width, height, depth] : std::vector<std::array<uint64_t, 3>>{{0, 2, 3}, {10, 0, 3}, {10, 2, 0}}) {
    Memset3D empty = box;
    empty.width = width, empty.height = height, empty.depth = depth, empty.value = 0x77;
    EXPECT_EQ(set(empty), 0);
  }
  Memset3D refused = box;
  refused.width = kPitch + 1;
  EXPECT_EQ(set(refused), 12);
  refused = box;
  refused.height = kRows + 1;  // more rows than a slice has
  EXPECT_EQ(set(refused), 1);
  refused = box;
  refused.pitch = uint64_t{1} << 62, refused.ysize = 8;  // pitch * ysize overflows
  EXPECT_EQ(set(refused), 1);
  EXPECT_EQ(Download<uint8_t>(to, kBytes), want);  // none ran

  Memset3D deep = box;
  deep.ptr = to, deep.depth = 4;  // a slice past the allocation
  EXPECT_EQ(set(deep), -kCuIllegalAddress);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("cudaMemset3DAsync in device code (kernel memset_3d): 4 slice(s) of 2 row(s) of 10 bytes"),
            std::string::npos)
      << detail;
  EXPECT_NE(detail.find("its destination is not within one allocation"), std::string::npos) << detail;
  EXPECT_EQ(Download<uint8_t>(to, kBytes), want);
  Memset3D huge = box;
  huge.depth = uint64_t{1} << 62;  // the span overflows: refused when it runs
  EXPECT_EQ(set(huge), -kCuIllegalAddress);
  executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint8_t>(to, kBytes), want);
}

struct ErrorStrings {
  uint64_t pointers, texts;
  uint32_t error, unused;
};

// cudaGetErrorString and cudaGetErrorName in device code return pointers into the module's
// memory that the kernel reads: CUDA's texts and names (those of CUDA 13.0's runtime), and
// "unrecognized error code" for a number CUDA does not define; a module that calls neither
// has no such variable.
TEST_F(Engine, ErrorStringsAreCudasAndReadableByTheKernel) {
  const std::string text = KernelText(kQueriesFile);
  ASSERT_NO_FATAL_FAILURE(LoadKernel(47, 98, text, "error_strings"));
  const uint64_t pointers = Zeros<uint64_t>(2), texts = Zeros<char>(256);
  const std::vector<std::tuple<uint32_t, std::string, std::string>> cases = {
      {0, "no error", "cudaSuccess"},
      {1, "invalid argument", "cudaErrorInvalidValue"},
      {98, "invalid device function", "cudaErrorInvalidDeviceFunction"},
      {801, "operation not supported", "cudaErrorNotSupported"},
      {999, "unknown error", "cudaErrorUnknown"},
      {10, "unrecognized error code", "unrecognized error code"},  // none of CUDA 13.0
      {0xffffffffu, "unrecognized error code", "unrecognized error code"}};
  for (const auto& [error, message, name] : cases) {
    ASSERT_EQ(LaunchLoaded(98, 1, 1, ErrorStrings{pointers, texts, error, 0}), kCuSuccess)
        << executor_.TakeErrorDetail();
    const std::vector<char> read = Download<char>(texts, 256);
    EXPECT_EQ(std::string(read.data()), message) << error;
    EXPECT_EQ(std::string(read.data() + 128), name) << error;
    const std::vector<uint64_t> at = Download<uint64_t>(pointers, 2);
    EXPECT_NE(at[0], 0u);
    EXPECT_NE(at[1], 0u);
  }
  EXPECT_EQ(sim::ErrorStringOffset(10, false), 0u);
  const std::vector<uint8_t>& image = sim::ErrorStringsImage();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(image.data() + sim::ErrorStringOffset(2, true))),
            "cudaErrorMemoryAllocation");

  auto parsed = sim::PtxModule::Parse(KernelText("DeviceQueriesAndThreeDimensionalCopies.ptx"));
  ASSERT_TRUE(parsed.ok());
  for (const sim::ModuleVariable& variable : (*parsed)->variables()) {
    EXPECT_NE(variable.name, sim::kErrorStringsVariable);
  }
}

}  // namespace
}  // namespace gpupool::dataplane

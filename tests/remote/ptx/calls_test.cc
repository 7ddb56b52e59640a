// The PTX engine's tests: device function calls: inlining, function pointers, virtual functions, recursion (the
// decoder). The fixture and helpers: engine_fixture.h.
#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

using ptx_test::Engine;
using ptx_test::KernelText;

TEST_F(Engine, DeviceFunctionCallsAndModuleGlobals) {
  const int n = 32;
  // __constant__ c_coeffs: its initialiser, then new values written through its
  // address.
  uint64_t coeffs = 0, size = 0;
  ASSERT_EQ(executor_.GetGlobal(1, "c_coeffs", &coeffs, &size), kCuSuccess);
  EXPECT_EQ(size, 16u);
  auto initial = Download<float>(coeffs, 4);
  EXPECT_EQ(initial, (std::vector<float>{1.5f, -2.0f, 0.25f, 8.0f}));
  const float fresh[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  ASSERT_EQ(executor_.CopyToDevice(coeffs, fresh, sizeof(fresh), 0), kCuSuccess);
  uint64_t counter = 0, table = 0;
  ASSERT_EQ(executor_.GetGlobal(1, "d_counter", &counter, &size), kCuSuccess);
  EXPECT_EQ(size, 4u);
  ASSERT_EQ(executor_.GetGlobal(1, "d_table", &table, &size), kCuSuccess);
  EXPECT_EQ(size, 24u);
  EXPECT_EQ(executor_.GetGlobal(1, "no_such_variable", &counter, &size), kCuNotFound);
  // Another session of the GPU cannot name this session's module.
  devices::SimExecutor other(&memory_);
  uint64_t stolen = 0;
  EXPECT_EQ(other.GetGlobal(1, "d_counter", &stolen, &size), kCuInvalidHandle);
  EXPECT_EQ(stolen, 0u);
  ASSERT_EQ(executor_.GetGlobal(1, "d_counter", &counter, &size), kCuSuccess);

  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = 0.5f + i * 0.125f;
  uint64_t din = Upload(in), out = Zeros<float>(n);
  ASSERT_EQ(Run("calls", {1}, {n}, 0, din, out), kCuSuccess) << last_detail_;
  auto got = Download<float>(out, n);
  for (int i = 0; i < n; ++i) {
    float r = 0;
    for (int k = 0; k <= i % 4; ++k) r = std::fma(r, in[i], fresh[k & 3]);
    EXPECT_FLOAT_EQ(got[i], r) << i;
  }
  EXPECT_EQ(Download<int>(counter, 1)[0], 7 + n * (n - 1) / 2);
  // d_table[i % 3] += 1 by one warp: lanes of one index read and write
  // together.
  EXPECT_EQ(Download<unsigned long long>(table, 3), (std::vector<unsigned long long>{2, 3, 4}));
}

// Virtual functions of objects made on the device: neighbouring lanes call three different
// Area()s (divergent indirect calls), and the virtual destructors free the heap.
TEST_F(Engine, VirtualFunctionsOfDeviceObjects) {
  const int blocks = 4, threads = 96, n = blocks * threads;
  uint64_t out = Zeros<int32_t>(n);
  for (int round = 0; round < 2; ++round) {  // the heap was given back by the destructors
    ASSERT_EQ(Run("virtual_shapes", {blocks}, {threads}, 0, out), kCuSuccess) << last_detail_;
    auto areas = Download<int32_t>(out, n);
    for (int t = 0; t < n; ++t) {
      const int want = t % 3 == 0 ? t * 3 : t % 3 == 1 ? t * 4 / 2 : t * t + 1;
      ASSERT_EQ(areas[t], want) << "thread " << t;
    }
  }
}

// Function pointers from a table in an initialiser and one the host read from a module
// variable and passed as an argument; strings and a struct's pointer members from
// initialisers.
TEST_F(Engine, FunctionPointersAndAddressesInInitialisers) {
  uint64_t chosen = 0, chosen_size = 0, values = 0, values_size = 0;
  ASSERT_EQ(executor_.GetGlobal(1, "chosen_op", &chosen, &chosen_size), kCuSuccess);
  ASSERT_EQ(executor_.GetGlobal(1, "named_values", &values, &values_size), kCuSuccess);
  const uint64_t passed = Download<uint64_t>(chosen, 1)[0];
  EXPECT_GE(passed, sim::kCodeWindow);  // a function's address, not data
  const int threads = 64;
  uint64_t out = Zeros<int32_t>(3 * threads);
  ASSERT_EQ(Run("function_pointers", {1}, {threads}, 0, out, passed), kCuSuccess) << last_detail_;
  auto got = Download<int32_t>(out, 3 * threads);
  const char initials[3] = {'t', 'n', 's'};
  for (int t = 0; t < threads; ++t) {
    const int want = t % 3 == 0 ? 2 * t : t % 3 == 1 ? -t : t * t;
    EXPECT_EQ(got[3 * t], want) << "thread " << t;
    EXPECT_EQ(got[3 * t + 1], -t) << "thread " << t;
    EXPECT_EQ(got[3 * t + 2], initials[t % 3]) << "thread " << t;
  }
  ASSERT_EQ(Run("initialised_pointers", {1}, {1}, 0, out), kCuSuccess) << last_detail_;
  auto fields = Download<int32_t>(out, 4);
  EXPECT_EQ(fields, (std::vector<int32_t>{7, 30, 'e', 'q'}));
  // The pointer member holds the variable's device address plus 8, as the GPU's would.
  uint64_t named = 0, named_size = 0;
  ASSERT_EQ(executor_.GetGlobal(1, "named", &named, &named_size), kCuSuccess);
  EXPECT_EQ(Download<uint64_t>(named, 2)[1], values + 8);
}

// A call through a pointer that is no function of the module faults, as on a GPU.
TEST_F(Engine, ACallThroughABadFunctionPointerIsAnIllegalAddress) {
  uint64_t out = Zeros<int32_t>(32), table = 0, size = 0;
  ASSERT_EQ(executor_.GetGlobal(1, "op_table", &table, &size), kCuSuccess);
  EXPECT_EQ(Run("call_pointer", {1}, {32}, 0, out, table), kCuIllegalAddress);
  EXPECT_NE(last_detail_.find("no device function"), std::string::npos) << last_detail_;
}

// Recursion runs as deep as the inlining goes (16 calls); deeper is a launch failure that
// says so, where the call would run, not a refusal of the kernel.
TEST_F(Engine, RecursionRunsToSixteenCallsAndDeeperFailsByName) {
  const int threads = 32;
  uint64_t out = Zeros<int32_t>(threads);
  ASSERT_EQ(Run("recursion", {1}, {threads}, 0, out, 15), kCuSuccess) << last_detail_;
  auto got = Download<int32_t>(out, threads);
  for (int t = 0; t < threads; ++t) {
    int want = 1;
    for (int k = 1; k <= t % 15; ++k) want = (want * want + k) % 1009;
    EXPECT_EQ(got[t], want) << "thread " << t;
  }
  EXPECT_EQ(Run("recursion", {1}, {threads}, 0, out, 20), kCuLaunchFailed);
  EXPECT_NE(last_detail_.find("nested deeper than 16"), std::string::npos) << last_detail_;
}

// Hand-written PTX: a masked byte of an address inside a .b8 array (how nvcc writes a
// pointer in a packed struct), an initialiser naming no symbol of the module (the load
// fails by name), and recursion that branches three ways (the decode stops at its bound
// instead of growing without end).
TEST_F(Engine, AddressInitialisersAndTheInliningBound) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(20, 120, "AddressInitialisersAndTheInliningBound_bytes_ptx.ptx", "nothing"));
  uint64_t target = 0, packed = 0, size = 0;
  ASSERT_EQ(executor_.GetGlobal(20, "target_var", &target, &size), kCuSuccess);
  ASSERT_EQ(executor_.GetGlobal(20, "packed", &packed, &size), kCuSuccess);
  auto raw = Download<uint8_t>(packed, 10);
  uint64_t address = 0;
  std::memcpy(&address, raw.data() + 1, 8);
  EXPECT_EQ(raw[0], 1);
  EXPECT_EQ(address, target + 2);
  EXPECT_EQ(raw[9], 9);

  const std::string unknown_ptx = KernelText("AddressInitialisersAndTheInliningBound_unknown_ptx.ptx");
  EXPECT_EQ(executor_.LoadModule(21, unknown_ptx.c_str(), unknown_ptx.size() + 1, {}), kCuInvalidPtx);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("nowhere"), std::string::npos) << detail;

  const std::string branching_ptx = KernelText("AddressInitialisersAndTheInliningBound_branching_ptx.ptx");
  ASSERT_EQ(executor_.LoadModule(22, branching_ptx.c_str(), branching_ptx.size() + 1, {}), kCuSuccess)
      << executor_.TakeErrorDetail();
  EXPECT_EQ(executor_.GetFunction(22, 121, "branching"), kCuInvalidPtx);
  const std::string bound = executor_.TakeErrorDetail();
  EXPECT_NE(bound.find("instructions once its device functions are inlined"), std::string::npos) << bound;
}

}  // namespace
}  // namespace gpupool::dataplane

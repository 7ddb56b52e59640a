// The PTX engine's tests: warp matrix operations: wmma and mma (interp/wmma.cc).
// The fixture and helpers: engine_fixture.h.
#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

using ptx_test::Engine;
using ptx_test::KernelText;
using ptx_test::ToHalf;

// wmma (tensor cores, sm_70+): a 16x16x16 multiply of halves into f32 with A row-major in
// a wider array (stride 24), B column-major and C column-major at their default strides,
// every accumulator element doubled in registers, D stored row-major with stride 20, so
// any disagreement between load, mma, the element-wise step and store shows. Hand-written,
// like the tests above (nvcc's own wmma code runs in tests/remote/driver/tensor_cores.cu):
// kernels/WarpMatrixMultiplyF16.ptx.

TEST_F(Engine, WarpMatrixMultiplyOfHalves) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(5, 96, "WarpMatrixMultiplyF16.ptx", "wmma_f16"));
  std::vector<float> af(16 * 24), bf(16 * 16), c(16 * 16), d(16 * 20, -1.0f);
  std::vector<uint16_t> a(af.size()), b(bf.size());
  for (size_t i = 0; i < af.size(); ++i) a[i] = ToHalf(af[i] = static_cast<float>(i % 7) - 3);
  for (size_t i = 0; i < bf.size(); ++i) {
    b[i] = ToHalf(bf[i] = static_cast<float>(i % 5) * 0.5f);
    c[i] = static_cast<float>(i % 11);
  }
  struct {
    uint64_t a, b, c, d;
  } params{Upload(a), Upload(b), Upload(c), Upload(d)};
  ASSERT_EQ(LaunchLoaded(96, 1, 32, params), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<float>(params.d, 16 * 20);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 20; ++j) {
      if (j >= 16) {  // beyond the 16 columns: the stride's gap, untouched
        EXPECT_EQ(got[i * 20 + j], -1.0f) << i << "," << j;
        continue;
      }
      // C and B are column-major.
      float sum = c[j * 16 + i];
      for (int k = 0; k < 16; ++k) sum += af[i * 24 + k] * bf[j * 16 + k];
      EXPECT_EQ(got[i * 20 + j], 2 * sum) << i << "," << j;
    }
  }
}

// A wmma load whose rows run past the end of the allocation faults like any load.
TEST_F(Engine, WarpMatrixLoadOutOfBoundsIsIllegalAddress) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(5, 96, "WarpMatrixMultiplyF16.ptx", "wmma_f16"));
  std::vector<uint16_t> a(15 * 24 + 8), b(16 * 16);  // the last row needs 15 * 24 + 16
  std::vector<float> c(16 * 16), d(16 * 20);
  struct {
    uint64_t a, b, c, d;
  } params{Upload(a), Upload(b), Upload(c), Upload(d)};
  EXPECT_EQ(LaunchLoaded(96, 1, 32, params), kCuIllegalAddress);
  EXPECT_NE(executor_.TakeErrorDetail().find("wmma load"), std::string::npos);
}

// Integer wmma (sm_72+): s8 x s8 into s32 on the 32x8x16 shape, with .satfinite clamping
// sums beyond the int32 range instead of wrapping them.
TEST_F(Engine, WarpMatrixMultiplyOfIntegersSaturates) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(6, 95, "WarpMatrixMultiplyOfIntegersSaturates.ptx", "wmma_s8"));
  std::vector<int8_t> a(32 * 16), b(16 * 8);
  std::vector<int32_t> c(32 * 8);
  for (int i = 0; i < 32 * 16; ++i) a[i] = static_cast<int8_t>(i % 2 ? -128 + i % 9 : 127 - i % 13);
  for (int i = 0; i < 16 * 8; ++i) b[i] = static_cast<int8_t>(i % 3 == 0 ? -127 : i % 17);
  for (int i = 0; i < 32 * 8; ++i) {
    c[i] = i % 4 == 0 ? INT32_MAX - 1000 : i % 4 == 1 ? INT32_MIN + 1000 : i * 1000 - 7;
  }
  struct {
    uint64_t a, b, c;
  } params{Upload(a), Upload(b), Upload(c)};
  ASSERT_EQ(LaunchLoaded(95, 1, 32, params), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<int32_t>(params.c, 32 * 8);
  int clamped = 0;
  for (int i = 0; i < 32; ++i) {
    for (int j = 0; j < 8; ++j) {
      int64_t sum = c[i * 8 + j];
      for (int k = 0; k < 16; ++k) sum += int64_t{a[i * 16 + k]} * b[j * 16 + k];
      int64_t want = std::clamp<int64_t>(sum, INT32_MIN, INT32_MAX);
      clamped += want != sum;
      EXPECT_EQ(got[i * 8 + j], want) << i << "," << j;
    }
  }
  EXPECT_GT(clamped, 0);  // the data does reach past the int32 range
}

// Malformed matrix instructions are refused naming the instruction and the problem.
TEST_F(Engine, MalformedMatrixInstructionsNameTheProblem) {
  const struct {
    const char* body;
    const char* problem;
  } cases[] = {
      {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1,%f2,%f3,%f4}, {%r1,%r2,%r3}, "
       "{%r5,%r6}, {%f1,%f2,%f3,%f4};",
       "fragment a of 3 registers does not fit a 16x16 matrix"},
      {"wmma.load.a.sync.aligned.row.global.f16 {%r1,%r2,%r3,%r4,%r5,%r6,%r7,%r8}, [%rd1];",
       "unknown or missing shape"},
      {"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1,%r2}, [%r3];", "needs 4 destination registers"},
      {"cp.async.ca.shared.global [%r1], [%rd1], 12;", "cp-size must be 4, 8 or 16"},
      {"mbarrier.arrive.shared.b64 %rd1;", "needs a state, an address and an optional count"},
  };
  uint64_t module = 30;
  for (const auto& c : cases) {
    const std::string ptx = std::string(".version 7.0\n.target sm_80\n.address_size 64\n") +
                            ".visible .entry k()\n{\n  .reg .b32 %r<9>;\n  .reg .f32 %f<5>;\n" +
                            "  .reg .b64 %rd<2>;\n  " + c.body + "\n  ret;\n}\n";
    ++module;
    int32_t loaded = executor_.LoadModule(module, ptx.c_str(), ptx.size() + 1, {});
    int32_t status = loaded == kCuSuccess ? executor_.GetFunction(module, 90 + module, "k") : loaded;
    EXPECT_NE(status, kCuSuccess) << c.body;
    std::string detail = executor_.TakeErrorDetail();
    EXPECT_NE(detail.find(c.problem), std::string::npos) << c.body << ": " << detail;
  }
}

}  // namespace
}  // namespace gpupool::dataplane

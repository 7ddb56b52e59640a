// The PTX engine's tests: half-precision arithmetic, comparisons and conversions (interp/half.cc).
// The fixture and helpers: engine_fixture.h.
#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

using ptx_test::Engine;
using ptx_test::FromHalf;
using ptx_test::KernelText;
using ptx_test::ToHalf;

TEST_F(Engine, HalfPrecision) {
  const int n = 32;
  std::vector<uint16_t> a(n), b(2 * n);
  for (int i = 0; i < n; ++i) {
    a[i] = ToHalf(i * 0.25f);
    b[2 * i] = ToHalf(i * 0.125f);
    b[2 * i + 1] = ToHalf((i + 1) * 0.5f);
  }
  uint64_t da = Upload(a), db = Upload(b), out = Zeros<float>(4 * n);
  ASSERT_EQ(Run("halves", {1}, {n}, 0, da, db, out), kCuSuccess) << last_detail_;
  auto got = Download<float>(out, 4 * n);
  for (int i = 0; i < n; ++i) {
    float x = i * 0.25f, lo = i * 0.125f, hi = (i + 1) * 0.5f;
    EXPECT_EQ(got[4 * i], x + x * x) << i;
    EXPECT_EQ(got[4 * i + 1], lo * lo + lo) << i;
    EXPECT_EQ(got[4 * i + 2], hi * hi + hi) << i;
    EXPECT_EQ(got[4 * i + 3], x * 3.0f + (x < 1.0f ? 100.0f : 0.0f)) << i;
  }
}

// Comparisons of packed halves (cuda_fp16's __hgt2, __hlt2_mask, __hbge2, __hisnan2,
// __hequ2, __hne2_mask, and h2sin, which uses set.eq.f16x2 on its way) against the
// same comparisons of floats, NaNs included; before, set on f16x2 compared the two
// halves as one 32-bit integer and gave wrong answers without an error.
TEST_F(Engine, PackedHalfComparisons) {
  const int n = 64;
  const float kNan = std::nanf("");
  auto value = [&](int i, int k) -> float {
    if ((i + k) % 11 == 5) return kNan;
    return ((i * 7 + k * 3) % 13 - 6) * 0.5f;
  };
  std::vector<uint16_t> a(2 * n), b(2 * n);
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < 2; ++k) {
      a[2 * i + k] = ToHalf(value(i, k));
      b[2 * i + k] = ToHalf(value(i + 17, k + 1));
    }
  }
  uint64_t da = Upload(a), db = Upload(b), out = Zeros<uint32_t>(8 * n);
  ASSERT_EQ(Run("half_compares", {1}, {n}, 0, da, db, out), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, 8 * n);
  auto packed = [](bool lo, bool hi, uint32_t one) { return (lo ? one : 0) | (hi ? one : 0) << 16; };
  for (int i = 0; i < n; ++i) {
    float x[2] = {value(i, 0), value(i, 1)}, y[2] = {value(i + 17, 1), value(i + 17, 2)};
    bool gt[2], lt[2], ge[2], nan[2], equ[2], ne[2];
    for (int k = 0; k < 2; ++k) {
      gt[k] = x[k] > y[k];
      lt[k] = x[k] < y[k];
      ge[k] = x[k] >= y[k];
      nan[k] = std::isnan(x[k]);
      equ[k] = std::isnan(x[k]) || std::isnan(y[k]) || x[k] == y[k];
      ne[k] = x[k] != y[k] && !std::isnan(x[k]) && !std::isnan(y[k]);
    }
    EXPECT_EQ(got[8 * i], packed(gt[0], gt[1], 0x3c00)) << i;
    EXPECT_EQ(got[8 * i + 1], packed(lt[0], lt[1], 0xffff)) << i;
    EXPECT_EQ(got[8 * i + 2], ge[0] && ge[1] ? 1u : 0u) << i;
    EXPECT_EQ(got[8 * i + 3], packed(nan[0], nan[1], 0x3c00)) << i;
    EXPECT_EQ(got[8 * i + 4], packed(equ[0], equ[1], 0x3c00)) << i;
    EXPECT_EQ(got[8 * i + 5], (nan[0] ? 1u : 0u) | (gt[1] ? 2u : 0u)) << i;
    for (int k = 0; k < 2; ++k) {
      float sine = FromHalf(static_cast<uint16_t>(got[8 * i + 6] >> (16 * k)));
      if (std::isnan(x[k])) {
        EXPECT_TRUE(std::isnan(sine)) << i << " " << k;
      } else {
        EXPECT_NEAR(sine, std::sin(x[k]), 2e-3) << i << " " << k << " x " << x[k];
      }
    }
    EXPECT_EQ(got[8 * i + 7], packed(ne[0], ne[1], 0xffff)) << i;
  }
}

// setp on packed halves writes the lower half's comparison to p and the upper's to q;
// with a BoolOp each is combined with c. set with a BoolOp combines too, and writes 1.0
// in the destination's format (f16 here) when true.
TEST_F(Engine, HalfSetpPairsAndBoolOps) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(11, 97, "HalfSetpPairsAndBoolOps.ptx", "half_setp"));
  // x = {lo 2.0, hi -1.0}, y = {lo 1.0, hi 0.5}: lo greater, hi not.
  const uint32_t x = ToHalf(2.0f) | ToHalf(-1.0f) << 16, y = ToHalf(1.0f) | ToHalf(0.5f) << 16;
  for (float f : {-0.5f, 3.0f}) {
    uint64_t out = Zeros<uint32_t>(8);
    struct {
      uint64_t out;
      uint32_t x, y;
      float f;
    } params{out, x, y, f};
    ASSERT_EQ(LaunchLoaded(97, 1, 1, params), kCuSuccess) << executor_.TakeErrorDetail();
    auto got = Download<uint32_t>(out, 8);
    const bool negative = f < 0;
    EXPECT_EQ(got[0], 1u) << f;                           // p: lower halves, 2 > 1
    EXPECT_EQ(got[1], 0u) << f;                           // q: upper halves, -1 > 0.5 is false
    EXPECT_EQ(got[2], 1u) << f;                           // lower, or c
    EXPECT_EQ(got[3], negative ? 1u : 0u) << f;           // upper, or c
    EXPECT_EQ(got[4], negative ? 0u : 1u) << f;           // lower, and !c
    EXPECT_EQ(got[5], 0u) << f;                           // upper, and !c
    EXPECT_EQ(got[6], negative ? 0x3c003c00u : 0u) << f;  // f > -1 and c: 1.0 as f16
    EXPECT_EQ(got[7], negative ? 0xffffffffu : 0u) << f;  // (f != f) xor c
  }
}

// fma.rn.relu (cuda_fp16's __hfma_relu) clamps a negative result to 0; min/max.NaN
// (__hmax_nan, __hmin_nan, and on f32) give the canonical NaN when an operand is NaN,
// where plain max gives the other operand; max.xorsign.abs is refused, not mis-run.
TEST_F(Engine, HalfReluAndNaNPropagation) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(12, 98, "HalfReluAndNaNPropagation.ptx", "relu_nan"));
  // x = {lo 2.0, hi NaN}, y = {lo -3.0, hi 1.0}: fma lo 2 * -3 - 3 = -9 -> 0.
  const uint32_t x = ToHalf(2.0f) | 0x7e00u << 16, y = ToHalf(-3.0f) | ToHalf(1.0f) << 16;
  uint64_t out = Zeros<uint32_t>(6);
  struct {
    uint64_t out;
    uint32_t x, y;
    float f, g;
  } params{out, x, y, std::nanf(""), 1.5f};
  device::LaunchConfig config;
  ASSERT_EQ(executor_.Launch(98, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(out, 6);
  EXPECT_EQ(got[0], 0x7fff0000u);                        // hi: NaN * 1 + 1 -> canonical NaN; lo 0
  EXPECT_EQ(got[1], 0x7fffu << 16 | ToHalf(2.0f));       // max.NaN: NaN in hi
  EXPECT_EQ(got[2], ToHalf(1.0f) << 16 | ToHalf(2.0f));  // plain max ignores the NaN
  EXPECT_EQ(got[3], 0x7fffc200u);                        // bf16 {NaN, 1.0} vs {y's bits: 1/128, -32}: NaN, -32
  EXPECT_EQ(got[4], 0x7fffffffu);                        // min.NaN.f32 with a NaN
  EXPECT_EQ(got[5], 0x7fffffffu);                        // max.NaN.f32 of NaN, NaN
  ASSERT_EQ(executor_.GetFunction(12, 99, "xorsign"), kCuSuccess) << executor_.TakeErrorDetail();
  struct {
    uint64_t out;
    float f;
  } xor_params{out, 1.0f};
  EXPECT_EQ(executor_.Launch(99, config, &xor_params, sizeof(xor_params)), kCuNotSupported);
  EXPECT_NE(executor_.TakeErrorDetail().find("max.xorsign.abs.f32"), std::string::npos);
}

// cvt.rn.f16x2.f32 and cvt.rn.bf16x2.f32 d, a, b (sm_80; __floats2half2_rn compiles to the
// first): a rounds into d's upper half, b into its lower half. Hand-written, since the suite
// is compiled for an earlier target.
TEST_F(Engine, PackedHalfConversions) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(2, 99, "PackedHalfConversions.ptx", "pack_halves"));
  uint64_t out = Zeros<uint32_t>(2);
  struct {
    uint64_t out;
    float upper, lower;
  } params{out, 0.1f, -1.5f};
  ASSERT_EQ(LaunchLoaded(99, 1, 1, params), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(out, 2);
  EXPECT_EQ(got[0], 0x2E66BE00u);  // half(0.1) = 0x2e66 (rounded), half(-1.5) = 0xbe00
  EXPECT_EQ(got[1], 0x3DCDBFC0u);  // bf16(0.1) = 0x3dcd (rounded up), bf16(-1.5) = 0xbfc0
}

// tanh.approx and ex2.approx on halves (f16 and f16x2) within the ISA's error bound of
// the true value; they were refused (htanh_approx's kernel did not run).
TEST_F(Engine, HalfTanhAndExp2Approximations) {
  std::vector<uint32_t> in;
  for (int i = 0; i < 64; ++i) {
    const float lo = -6.0f + 0.19f * static_cast<float>(i), hi = 3.0f - 0.11f * static_cast<float>(i);
    in.push_back(static_cast<uint32_t>(ToHalf(lo)) | static_cast<uint32_t>(ToHalf(hi)) << 16);
  }
  uint64_t din = Upload(in), out = Zeros<uint32_t>(4 * in.size());
  ASSERT_EQ(Run("half_approx", {1}, {static_cast<uint32_t>(in.size())}, 0, din, out), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, 4 * in.size());
  auto near = [](uint16_t bits, double want) {
    // 2^-10 relative (the f16 forms' bound), and a little absolute room near 0.
    return std::fabs(FromHalf(bits) - want) <= std::ldexp(std::fabs(want), -10) + 1e-4;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    const float lo = FromHalf(static_cast<uint16_t>(in[i])), hi = FromHalf(static_cast<uint16_t>(in[i] >> 16));
    const uint32_t t = got[4 * i], e = got[4 * i + 1];
    EXPECT_TRUE(near(static_cast<uint16_t>(t), std::tanh(lo))) << lo;
    EXPECT_TRUE(near(static_cast<uint16_t>(t >> 16), std::tanh(hi))) << hi;
    EXPECT_TRUE(near(static_cast<uint16_t>(e), std::exp2(lo))) << lo;
    EXPECT_TRUE(near(static_cast<uint16_t>(e >> 16), std::exp2(hi))) << hi;
    EXPECT_TRUE(near(static_cast<uint16_t>(got[4 * i + 2]), std::tanh(lo))) << lo;
    EXPECT_TRUE(near(static_cast<uint16_t>(got[4 * i + 3]), std::exp2(lo))) << lo;
  }
}

}  // namespace
}  // namespace gpupool::dataplane

// The PTX engine's tests: cvt between integers and floats, with directed rounding (interp/conversions.cc).
// The fixture and helpers: engine_fixture.h.
#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

using ptx_test::Engine;
using ptx_test::FromHalf;
using ptx_test::InRoundingMode;
using ptx_test::KernelText;

// cvt into float types with .rz/.rm/.rp rounds in that direction: integers to float and
// double against the host's conversions in that mode, float to half and bfloat16 against
// a search of every 16-bit value (the CUDA kernel for sm_75, which emulates bfloat16
// rounding, and cvt.{rz,rm,rp}.bf16.f32 as sm_90 compiles __float2bfloat16_rz and so on).
TEST_F(Engine, DirectedRoundingConversions) {
  const int n = 64;
  std::vector<int32_t> k(n);
  std::vector<int64_t> l(n);
  std::vector<float> x(n);
  uint64_t seed = 987654321;
  auto next = [&] { return seed = seed * 6364136223846793005ull + 1442695040888963407ull; };
  for (int i = 0; i < n; ++i) {
    k[i] = static_cast<int32_t>(next() >> 32);  // most need more than a float's 24 bits
    l[i] = static_cast<int64_t>(next());
    // Magnitudes from half's subnormals (2^-24) to past its largest value (65504).
    x[i] = (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f + (i % 9) * 0.1234567f, i * 43 / n - 26);
  }
  uint64_t dk = Upload(k), dl = Upload(l), dx = Upload(x);
  uint64_t f = Zeros<float>(6 * n), d = Zeros<double>(3 * n), h = Zeros<uint16_t>(6 * n);
  ASSERT_EQ(Run("directed_conversions", {1}, {n}, 0, dk, dl, dx, f, d, h), kCuSuccess) << last_detail_;
  auto gf = Download<float>(f, 6 * n);
  auto gd = Download<double>(d, 3 * n);
  auto gh = Download<uint16_t>(h, 6 * n);

  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(13, 97, "DirectedRoundingConversions.ptx", "bf16_directed"));
  uint64_t b = Zeros<uint16_t>(3 * n);
  struct {
    uint64_t x, out;
  } params{dx, b};
  ASSERT_EQ(LaunchLoaded(97, 1, n, params), kCuSuccess) << executor_.TakeErrorDetail();
  auto gb = Download<uint16_t>(b, 3 * n);

  // The 16-bit value rounding v down (mode FE_DOWNWARD), up, or towards zero: the nearest
  // one on that side, found among all of them (v is never zero here).
  auto search = [](float v, int mode, float (*decode)(uint16_t)) {
    if (mode == FE_TOWARDZERO) mode = v > 0 ? FE_DOWNWARD : FE_UPWARD;
    uint16_t best = 0;
    bool found = false;
    for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
      const float c = decode(static_cast<uint16_t>(bits));
      if (std::isnan(c) || (mode == FE_DOWNWARD ? c > v : c < v)) continue;
      const float b = decode(best);
      if (!found || (mode == FE_DOWNWARD ? c > b : c < b) ||
          (c == b && std::signbit(c) == std::signbit(v))) {  // -0 for a tiny negative
        best = static_cast<uint16_t>(bits);
        found = true;
      }
    }
    return best;
  };
  auto from_bf16 = [](uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); };
  int inexact = 0;
  for (int i = 0; i < n; ++i) {
    volatile int32_t p = k[i];
    volatile int64_t q = l[i];
    const float want_f[6] = {InRoundingMode(FE_TOWARDZERO, [&] { return static_cast<float>(p); }),
                             InRoundingMode(FE_UPWARD, [&] { return static_cast<float>(p); }),
                             InRoundingMode(FE_DOWNWARD, [&] { return static_cast<float>(static_cast<uint32_t>(p)); }),
                             InRoundingMode(FE_DOWNWARD, [&] { return static_cast<float>(q); }),
                             InRoundingMode(FE_UPWARD, [&] { return static_cast<float>(static_cast<uint64_t>(q)); }),
                             InRoundingMode(FE_TOWARDZERO, [&] { return static_cast<float>(q); })};
    const double want_d[3] = {InRoundingMode(FE_TOWARDZERO, [&] { return static_cast<double>(q); }),
                              InRoundingMode(FE_UPWARD, [&] { return static_cast<double>(static_cast<uint64_t>(q)); }),
                              InRoundingMode(FE_DOWNWARD, [&] { return static_cast<double>(q); })};
    for (int j = 0; j < 6; ++j) EXPECT_EQ(gf[6 * i + j], want_f[j]) << i << " float " << j;
    for (int j = 0; j < 3; ++j) EXPECT_EQ(gd[3 * i + j], want_d[j]) << i << " double " << j;
    const int modes[3] = {FE_TOWARDZERO, FE_DOWNWARD, FE_UPWARD};
    for (int j = 0; j < 3; ++j) {
      const uint16_t half = search(x[i], modes[j], &FromHalf);
      const uint16_t bf16 = search(x[i], modes[j], +from_bf16);
      EXPECT_EQ(gh[6 * i + j], half) << i << " half " << j << " of " << x[i];
      EXPECT_EQ(gh[6 * i + 3 + j], bf16) << i << " bf16 (sm_75) " << j << " of " << x[i];
      EXPECT_EQ(gb[3 * i + j], bf16) << i << " bf16 (sm_90) " << j << " of " << x[i];
    }
    inexact += search(x[i], FE_DOWNWARD, &FromHalf) != search(x[i], FE_UPWARD, &FromHalf);
  }
  EXPECT_GT(inexact, n / 2) << "values too kind: most were halves already";
}

TEST_F(Engine, Conversions) {
  const int n = 32;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = (i - 16) * 7.25f + ((i & 1) ? 0.5f : 0.25f);
  in[3] = 2.5f;
  in[4] = -3.5f;
  in[5] = 3e9f;  // saturates
  uint64_t din = Upload(in), out = Zeros<int>(12 * n);
  ASSERT_EQ(Run("conversions", {1}, {n}, 0, din, out), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, 12 * n);
  auto saturate = [](double v) {
    return static_cast<int>(std::clamp(v, static_cast<double>(INT32_MIN), static_cast<double>(INT32_MAX)));
  };
  for (int i = 0; i < n; ++i) {
    float x = in[i];
    const int* o = &got[12 * i];
    EXPECT_EQ(o[0], saturate(std::trunc(x))) << i;
    EXPECT_EQ(o[1], saturate(std::nearbyint(x))) << i;
    EXPECT_EQ(o[2], saturate(std::floor(x))) << i;
    EXPECT_EQ(o[3], saturate(std::ceil(x))) << i;
    EXPECT_EQ(o[4], static_cast<int>(static_cast<unsigned char>(saturate(std::trunc(x))))) << i;
    EXPECT_EQ(o[5], static_cast<int>(static_cast<short>(saturate(std::trunc(x * 1000.0f))))) << i;
    EXPECT_EQ(static_cast<unsigned>(o[6]),
              x < 0 ? 0u : static_cast<unsigned>(std::min<double>(std::trunc(x), 4294967295.0)))
        << i;
    long long wide = static_cast<long long>(std::trunc(static_cast<double>(x * 1e6f)));
    EXPECT_EQ(o[7], static_cast<int>(wide >> 8)) << i;
    float back = static_cast<float>(o[1]);
    int bits;
    std::memcpy(&bits, &back, 4);
    EXPECT_EQ(o[8], bits) << i;
    float product = static_cast<float>(i * 1234567);
    std::memcpy(&bits, &product, 4);
    EXPECT_EQ(o[9], bits) << i;
    EXPECT_EQ(o[10], saturate(std::trunc(static_cast<float>(static_cast<double>(x) * 3.0) * 100.0f))) << i;
    EXPECT_EQ(static_cast<unsigned>(o[11]),
              static_cast<unsigned>(std::min<double>(std::nearbyint(std::fabs(x)), 4294967295.0)))
        << i;
  }
}

}  // namespace
}  // namespace gpupool::dataplane

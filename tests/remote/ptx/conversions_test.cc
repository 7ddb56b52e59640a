// The PTX engine's tests: cvt between integers and floats, with directed rounding (interp/conversions.cc).
// The fixture and helpers: engine_fixture.h.
#include "remote/ptx/half_float.h"
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

// sm_89's 8-bit floats: cvt to .e4m3x2/.e5m2x2 from pairs of floats and from f16x2, and
// back to f16x2, with and without .relu, against a reference found by search: each
// format's values decoded from its definition (E4M3: bias 7, 3 mantissa bits, S.1111.111
// NaN, no infinities; E5M2: bias 15, 2 mantissa bits, IEEE's infinities and NaNs), the
// nearest finite one with ties to the even encoding (so the largest finite beyond them:
// .satfinite), the canonical NaN 0x7f for a NaN, +0 for a negative value under .relu.
// The floats: each value of both formats, its neighbours, the midpoints between values and
// theirs; every 16-bit pattern as a pair back to halves; random f16x2 patterns.
TEST_F(Engine, Fp8ConversionsAsTheIsaDefinesThem) {
  auto decode = [](uint32_t byte, bool e4m3) {
    const uint32_t magnitude = byte & 0x7f;
    const double sign = (byte & 0x80) ? -1.0 : 1.0;
    if (e4m3) {
      if (magnitude == 0x7f) return std::nan("");
      const int field = static_cast<int>(magnitude >> 3), mantissa = static_cast<int>(magnitude & 7);
      return sign * (field == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, field - 10));
    }
    const int field = static_cast<int>(magnitude >> 2), mantissa = static_cast<int>(magnitude & 3);
    if (field == 31) return mantissa == 0 ? sign * HUGE_VAL : std::nan("");
    return sign * (field == 0 ? std::ldexp(mantissa, -16) : std::ldexp(4 + mantissa, field - 17));
  };
  auto to_fp8 = [&](float x, bool e4m3, bool relu) -> uint32_t {
    if (std::isnan(x)) return 0x7f;
    if (relu && std::signbit(x)) return 0;
    const double magnitude = std::fabs(static_cast<double>(x));
    uint32_t best = 0;
    double best_distance = HUGE_VAL;
    const uint32_t largest = e4m3 ? 0x7e : 0x7b;  // (in double, a huge value is as far from each)
    if (magnitude >= decode(largest, e4m3)) return largest | (std::signbit(x) ? 0x80 : 0);
    for (uint32_t code = 0; code < 0x80; ++code) {
      const double value = decode(code, e4m3);
      if (!std::isfinite(value)) continue;
      const double distance = std::fabs(value - magnitude);
      if (distance < best_distance || (distance == best_distance && (code & 1) == 0)) {
        best = code;
        best_distance = distance;
      }
    }
    return best | (std::signbit(x) ? 0x80 : 0);
  };
  auto to_half = [&](uint32_t byte, bool e4m3, bool relu) -> uint32_t {
    const double value = decode(byte, e4m3);
    if (std::isnan(value)) return 0x7fff;
    if (relu && (byte & 0x80)) return 0;
    return sim::FloatToHalf(static_cast<float>(value));
  };
  std::vector<float> probes = {0.0f, -0.0f, 1e-30f, 1e30f, HUGE_VALF, -HUGE_VALF, std::nanf(""), 464.0f, 61440.0f};
  for (bool e4m3 : {true, false}) {
    std::vector<double> values;
    for (uint32_t code = 0; code < 0x80; ++code) {
      if (std::isfinite(decode(code, e4m3))) values.push_back(decode(code, e4m3));
    }
    for (size_t i = 0; i < values.size(); ++i) {
      const float v = static_cast<float>(values[i]);
      const float mid = i + 1 < values.size() ? static_cast<float>((values[i] + values[i + 1]) / 2) : v * 1.0625f;
      for (float x : {v, std::nextafter(v, HUGE_VALF), std::nextafter(v, -HUGE_VALF), mid,
                      std::nextafter(mid, HUGE_VALF), std::nextafter(mid, -HUGE_VALF)}) {
        probes.push_back(x);
        probes.push_back(-x);
      }
    }
  }
  const uint32_t n = 65536;
  std::vector<uint32_t> in(3 * n);
  uint64_t seed = 77;
  for (uint32_t t = 0; t < n; ++t) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    in[3 * t] = std::bit_cast<uint32_t>(probes[t % probes.size()]);
    in[3 * t + 1] = std::bit_cast<uint32_t>(probes[(t * 7 + 3) % probes.size()]);
    in[3 * t + 2] = static_cast<uint32_t>(seed >> 32);
  }
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(14, 98, "Fp8ConversionsWithRelu.ptx", "fp8_relu"));
  const uint64_t din = Upload(in), dout = Zeros<uint32_t>(8 * n);
  struct {
    uint64_t in, out;
  } params{din, dout};
  ASSERT_EQ(LaunchLoaded(98, n / 256, 256, params), kCuSuccess) << executor_.TakeErrorDetail();
  const std::vector<uint32_t> out = Download<uint32_t>(dout, 8 * n);
  int wrong = 0;
  for (uint32_t t = 0; t < n && wrong < 10; ++t) {
    const float a = std::bit_cast<float>(in[3 * t]), b = std::bit_cast<float>(in[3 * t + 1]);
    const uint32_t halves = in[3 * t + 2];
    auto pair = [&](bool e4m3, bool relu) { return to_fp8(a, e4m3, relu) << 8 | to_fp8(b, e4m3, relu); };
    auto from_halves = [&](bool e4m3) {
      return to_fp8(sim::HalfToFloat(static_cast<uint16_t>(halves >> 16)), e4m3, true) << 8 |
             to_fp8(sim::HalfToFloat(static_cast<uint16_t>(halves)), e4m3, true);
    };
    auto back = [&](bool e4m3, bool relu) { return to_half(t >> 8, e4m3, relu) << 16 | to_half(t & 0xff, e4m3, relu); };
    const uint32_t want[8] = {pair(true, false) | pair(true, true) << 16,
                              pair(false, false) | pair(false, true) << 16,
                              from_halves(true) | from_halves(false) << 16,
                              back(true, false),
                              back(true, true),
                              back(false, false),
                              back(false, true),
                              t};
    for (int k = 0; k < 8; ++k) {
      if (out[8 * t + k] != want[k]) {
        ++wrong;
        ADD_FAILURE() << "thread " << t << " word " << k << ": " << std::hex << out[8 * t + k] << " want " << want[k]
                      << " (floats " << std::hexfloat << a << ", " << b << ", halves " << halves << ")";
      }
    }
  }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace gpupool::dataplane

// The PTX engine's tests: integer, bit and float arithmetic, rounding modes and refused modifiers
// (interp/arithmetic.*). The fixture and helpers: engine_fixture.h.
#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

using ptx_test::Engine;
using ptx_test::InRoundingMode;
using ptx_test::KernelText;

// Float and double arithmetic with .rz/.rm/.rp rounds in that direction: checked against
// the host's own operations in that rounding mode (operands chosen so that most results
// are inexact: round-to-nearest would differ in the last place).
TEST_F(Engine, DirectedRounding) {
  const int n = 64;
  std::vector<float> a(n), b(n);
  std::vector<double> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    a[i] = (i % 2 ? -1.0f : 1.0f) * (1.0f + i / 7.0f);
    b[i] = 3.0f + i / 13.0f;
    x[i] = (i % 3 ? 1.0 : -1.0) * (0.1 + i / 11.0);
    y[i] = 7.0 / (i + 3);
  }
  uint64_t da = Upload(a), db = Upload(b), dx = Upload(x), dy = Upload(y);
  uint64_t f = Zeros<float>(8 * n), d = Zeros<double>(4 * n);
  ASSERT_EQ(Run("directed_rounding", {1}, {n}, 0, da, db, dx, dy, f, d), kCuSuccess) << last_detail_;
  auto gf = Download<float>(f, 8 * n);
  auto gd = Download<double>(d, 4 * n);
  int differs_from_nearest = 0;
  for (int i = 0; i < n; ++i) {
    volatile float p = a[i], q = b[i];
    volatile double u = x[i], v = y[i];
    const float want_f[8] = {InRoundingMode(FE_TOWARDZERO, [&] { return p + q; }),
                             InRoundingMode(FE_UPWARD, [&] { return p + q; }),
                             InRoundingMode(FE_DOWNWARD, [&] { return p + q; }),
                             InRoundingMode(FE_DOWNWARD, [&] { return p * q; }),
                             InRoundingMode(FE_UPWARD, [&] { return p / q; }),
                             InRoundingMode(FE_DOWNWARD, [&] { return std::sqrt(std::fabs(p)); }),
                             InRoundingMode(FE_UPWARD, [&] { return 1.0f / q; }),
                             InRoundingMode(FE_TOWARDZERO, [&] { return std::fma(p, q, 1.0f); })};
    const double want_d[4] = {InRoundingMode(FE_UPWARD, [&] { return u + v; }),
                              InRoundingMode(FE_TOWARDZERO, [&] { return u * v; }),
                              InRoundingMode(FE_DOWNWARD, [&] { return u / v; }),
                              InRoundingMode(FE_UPWARD, [&] { return std::sqrt(std::fabs(u)); })};
    for (int k = 0; k < 8; ++k) EXPECT_EQ(gf[8 * i + k], want_f[k]) << i << " op " << k;
    for (int k = 0; k < 4; ++k) EXPECT_EQ(gd[4 * i + k], want_d[k]) << i << " op " << k;
    differs_from_nearest += gf[8 * i + 4] != p / q;
  }
  EXPECT_GT(differs_from_nearest, n / 4) << "operands too kind: most divisions were exact";
}

// .ftz flushes subnormal f32 inputs as well as results, as --use_fast_math code expects:
// a subnormal times 2^30 is 0, not 1e-31, and it compares equal to 0.
TEST_F(Engine, FtzFlushesSubnormalInputs) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(15, 94, "FtzFlushesSubnormalInputs.ptx", "ftz_inputs"));
  uint64_t out = Zeros<float>(6);
  struct {
    uint64_t out;
    float x;
  } params{out, 1e-40f};
  ASSERT_EQ(LaunchLoaded(94, 1, 1, params), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<float>(out, 6);
  EXPECT_EQ(got[0], 0.0f);                   // mul.ftz
  EXPECT_NEAR(got[1], 1.0737e-31f, 1e-34f);  // plain mul keeps the subnormal
  EXPECT_EQ(got[2], 0.0f);                   // fma.ftz
  EXPECT_EQ(got[3], 0.0f);                   // setp.gt.ftz: 0 > 0 is false
  EXPECT_EQ(got[4], 1.0f);                   // setp.gt: the subnormal is above 0
  EXPECT_EQ(got[5], 0.0f);                   // sub.ftz
}

// dp4a, dp2a.lo/hi, vabsdiff4 and vabsdiff2 (with and without .add) on words whose bytes
// and half-words span both signs, against a CPU reference.
TEST_F(Engine, ByteDotProductsAndAbsoluteDifferences) {
  const int n = 64;
  std::vector<uint32_t> a(n), b(n);
  uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
  for (int i = 0; i < n; ++i) {
    a[i] = next();
    b[i] = next();
  }
  uint64_t da = Upload(a), db = Upload(b), out = Zeros<uint32_t>(10 * n);
  ASSERT_EQ(Run("byte_dots", {1}, {n}, 0, da, db, out), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, 10 * n);
  auto s8 = [](uint32_t w, int i) { return static_cast<int32_t>(static_cast<int8_t>(w >> (8 * i))); };
  auto u8 = [](uint32_t w, int i) { return static_cast<int32_t>((w >> (8 * i)) & 0xff); };
  auto s16 = [](uint32_t w, int i) { return static_cast<int32_t>(static_cast<int16_t>(w >> (16 * i))); };
  auto u16 = [](uint32_t w, int i) { return static_cast<int32_t>((w >> (16 * i)) & 0xffff); };
  for (int i = 0; i < n; ++i) {
    const uint32_t x = a[i], y = b[i];
    uint32_t want[10] = {static_cast<uint32_t>(-5), 9, 7, 3, 0, 0, 0, static_cast<uint32_t>(-1), 0, 0};
    for (int k = 0; k < 4; ++k) {
      want[0] += static_cast<uint32_t>(s8(x, k) * s8(y, k));
      want[1] += static_cast<uint32_t>(u8(x, k) * u8(y, k));
      want[4] |= static_cast<uint32_t>(std::abs(u8(x, k) - u8(y, k))) << (8 * k);
      want[5] += static_cast<uint32_t>(std::abs(s8(x, k) - s8(y, k)));
      want[6] += static_cast<uint32_t>(std::abs(u8(x, k) - u8(y, k)));
    }
    for (int k = 0; k < 2; ++k) {
      want[2] += static_cast<uint32_t>(s16(x, k) * s8(y, k));
      want[3] += static_cast<uint32_t>(u16(x, k) * u8(y, k + 2));
      want[7] += static_cast<uint32_t>(s16(x, k) * s8(y, k + 2));
      want[8] += static_cast<uint32_t>(std::abs(u16(x, k) - u16(y, k)));
      want[9] |= static_cast<uint32_t>(std::abs(u16(x, k) - u16(y, k))) << (16 * k);
    }
    for (int k = 0; k < 10; ++k) EXPECT_EQ(got[10 * i + k], want[k]) << i << " result " << k;
  }
}

uint32_t BytePerm(uint32_t x, uint32_t y, uint32_t s) {
  uint64_t bytes = (uint64_t{y} << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}

TEST_F(Engine, IntegerArithmeticAndBitOperations) {
  const int n = 32;
  std::vector<int> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<int>(0x9e3779b9u * (i + 1)) >> (i % 5);
    b[i] = (i % 7 == 3) ? 0 : static_cast<int>(0x85ebca6bu * (i + 3)) >> (i % 9);
  }
  a[0] = INT32_MIN;
  b[0] = -1;
  uint64_t da = Upload(a), db = Upload(b), out = Zeros<long long>(16 * n);
  ASSERT_EQ(Run("int_ops", {1}, {n}, 0, da, db, out), kCuSuccess) << last_detail_;
  auto got = Download<long long>(out, 16 * n);
  for (int i = 0; i < n; ++i) {
    int x = a[i], y = b[i];
    unsigned ux = x, uy = y;
    const long long* o = &got[16 * i];
    EXPECT_EQ(o[0], static_cast<int>((static_cast<long long>(x) * y) >> 32)) << i;
    EXPECT_EQ(o[1], static_cast<unsigned>((static_cast<unsigned long long>(ux) * uy) >> 32)) << i;
    EXPECT_EQ(o[2], static_cast<long long>(x) * y) << i;
    if (y != 0 && !(x == INT32_MIN && y == -1)) {
      EXPECT_EQ(o[3], x / y) << i;
      EXPECT_EQ(o[4], x % y) << i;
    }
    if (uy != 0) {
      EXPECT_EQ(o[5], ux / uy) << i;
    }
    EXPECT_EQ(o[6], __builtin_popcount(ux)) << i;
    EXPECT_EQ(o[7], ux == 0 ? 32 : __builtin_clz(ux)) << i;
    unsigned rev = 0;
    for (int k = 0; k < 32; ++k) rev |= ((ux >> k) & 1) << (31 - k);
    EXPECT_EQ(static_cast<unsigned>(o[8]), rev) << i;
    EXPECT_EQ(static_cast<unsigned>(o[9]), BytePerm(ux, uy, 0x5140)) << i;
    EXPECT_EQ(o[10], (ux >> 3) & 0x1f) << i;
    EXPECT_EQ(o[11], x >> (uy & 31)) << i;
    EXPECT_EQ(o[12], ux >> (uy & 31)) << i;
    EXPECT_EQ(o[13], __builtin_ffs(x)) << i;
    EXPECT_EQ(static_cast<unsigned>(o[14]), static_cast<unsigned>(std::abs(static_cast<long long>(x) - y)) + 5u) << i;
    EXPECT_EQ(static_cast<int>(o[15]), static_cast<int>(static_cast<unsigned>(std::min(x, y)) + std::max(ux, uy) +
                                                        static_cast<unsigned>(x == INT32_MIN ? x : std::abs(x))))
        << i;
  }
}

TEST_F(Engine, FloatAndDoubleMath) {
  const int n = 32;
  const float coeffs[4] = {1.5f, -2.0f, 0.25f, 8.0f};
  std::vector<float> a(n), b(n);
  std::vector<double> da(n);
  for (int i = 0; i < n; ++i) {
    a[i] = (i - 15.5f) * 0.37f;
    b[i] = (i % 5 + 1) * ((i & 1) ? -0.71f : 0.93f);
    da[i] = (i - 10) * 1.2345678901;
  }
  uint64_t pa = Upload(a), pb = Upload(b), pd = Upload(da), out = Zeros<float>(16 * n), dout = Zeros<double>(8 * n);
  ASSERT_EQ(Run("float_ops", {1}, {n}, 0, pa, pb, pd, out, dout), kCuSuccess) << last_detail_;
  auto f = Download<float>(out, 16 * n);
  auto d = Download<double>(dout, 8 * n);
  auto near = [](double got, double want, double tolerance) {
    return std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want));
  };
  for (int i = 0; i < n; ++i) {
    float x = a[i], y = b[i];
    const float* o = &f[16 * i];
    EXPECT_EQ(o[0], std::fma(x, y, coeffs[i & 3])) << i;  // nvcc contracts to fma.rn
    EXPECT_EQ(o[1], x / y) << i;
    EXPECT_EQ(o[2], std::sqrt(std::fabs(x))) << i;
    EXPECT_TRUE(near(o[3], 1.0 / std::sqrt(std::fabs(x) + 1.0f), 1e-6)) << i;
    EXPECT_TRUE(near(o[4], std::sin(x), 1e-5)) << i << " " << o[4];
    EXPECT_TRUE(near(o[5], std::cos(x), 1e-5)) << i;
    EXPECT_TRUE(near(o[6], std::exp(y), 1e-5)) << i;
    EXPECT_TRUE(near(o[7], std::log(std::fabs(x) + 1.0f), 1e-5)) << i;
    EXPECT_EQ(o[8], std::fma(x, y, 1.0f)) << i;
    EXPECT_EQ(o[9], std::fmin(x, y)) << i;
    EXPECT_EQ(o[10], std::fmax(x, y)) << i;
    EXPECT_EQ(o[11], std::copysign(x, y)) << i;
    EXPECT_EQ(o[12], std::min(1.0f, std::max(0.0f, x))) << i;
    EXPECT_EQ(o[13], std::floor(x) + std::ceil(y) + std::trunc(x) + std::nearbyint(y)) << i;
    EXPECT_TRUE(near(o[14], x / y, 1e-6)) << i;
    EXPECT_EQ(o[15], 0.0f) << i;  // x / 0 is inf or nan only for x == 0 (never here)
    double v = da[i];
    const double* p = &d[8 * i];
    EXPECT_EQ(p[0], std::fma(v, v, 1.0)) << i;
    EXPECT_EQ(p[1], v / 3.0) << i;
    EXPECT_EQ(p[2], std::sqrt(std::fabs(v))) << i;
    EXPECT_EQ(p[3], std::fma(v, 2.0, -1.0)) << i;
    EXPECT_EQ(p[4], static_cast<double>(x) + v) << i;
    EXPECT_TRUE(near(p[5], std::sin(v), 1e-14)) << i;
    EXPECT_TRUE(near(p[6], std::exp(v / 10.0), 1e-14)) << i;
    EXPECT_EQ(p[7], static_cast<double>(static_cast<float>(v))) << i;
  }
}

// bmsk against the PTX ISA's cases: a field inside the word, one cut at bit 31, a start
// past bit 31 (0 with clamp, taken modulo 32 with wrap), a width of 32 (clamp: every bit
// from the start; wrap: 0, as is any width 0).
TEST_F(Engine, BitMasks) {
  const std::vector<uint32_t> positions = {4, 28, 40, 0, 3, 31, 33};
  const std::vector<uint32_t> widths = {8, 8, 4, 32, 0, 1, 36};
  const std::vector<uint32_t> clamp = {0xFF0, 0xF0000000, 0, 0xFFFFFFFF, 0, 0x80000000, 0};
  const std::vector<uint32_t> wrap = {0xFF0, 0xF0000000, 0xF00, 0, 0, 0x80000000, 0x1E};
  uint64_t a = Upload(positions), b = Upload(widths), out = Zeros<uint32_t>(2 * positions.size());
  ASSERT_EQ(Run("bit_masks", {1}, {static_cast<uint32_t>(positions.size())}, 0, a, b, out), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, 2 * positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    EXPECT_EQ(got[2 * i], clamp[i]) << "clamp " << positions[i] << ", " << widths[i];
    EXPECT_EQ(got[2 * i + 1], wrap[i]) << "wrap " << positions[i] << ", " << widths[i];
  }
}

// fns (__fns) against the PTX ISA's examples and its pseudo-code run on the CPU: forwards,
// backwards, offset 0 (is bit base set), past the last set bit, an empty mask, base 31.
TEST_F(Engine, NthSetBit) {
  std::vector<uint32_t> masks = {0xaaaaaaaa, 0xaaaaaaaa, 0xaaaaaaaa, 0xaaaaaaaa};
  std::vector<uint32_t> bases = {3, 3, 2, 2};
  std::vector<int32_t> offsets = {1, -1, 1, -1};
  const std::vector<uint32_t> isa = {3, 3, 3, 1};  // the ISA's own examples
  uint32_t seed = 12345;
  auto next = [&seed] { return seed = seed * 1103515245u + 12345u; };
  const uint32_t fixed_masks[] = {0, 0xffffffff, 0x80000001, 0x10};
  for (int i = 0; i < 60; ++i) {
    masks.push_back(i < 4 ? fixed_masks[i] : next());
    bases.push_back(i % 8 == 0 ? 31 : next() % 32);
    offsets.push_back(static_cast<int32_t>(next() % 41) - 20);
  }
  auto reference = [](uint32_t mask, uint32_t base, int32_t offset) {
    uint32_t d = 0xffffffff;
    if (offset == 0) return ((mask >> base) & 1) ? base : d;
    int pos = static_cast<int>(base), count = std::abs(offset) - 1, inc = offset > 0 ? 1 : -1;
    for (; pos >= 0 && pos < 32; pos += inc) {
      if ((mask >> pos) & 1) {
        if (count == 0) return static_cast<uint32_t>(pos);
        --count;
      }
    }
    return d;
  };
  const uint32_t n = static_cast<uint32_t>(masks.size());
  uint64_t m = Upload(masks), b = Upload(bases), o = Upload(offsets), out = Zeros<uint32_t>(n);
  ASSERT_EQ(Run("nth_set_bit", {1}, {n}, 0, m, b, o, out), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, n);
  for (size_t i = 0; i < isa.size(); ++i) EXPECT_EQ(got[i], isa[i]) << "ISA example " << i;
  for (uint32_t i = 0; i < n; ++i) {
    EXPECT_EQ(got[i], reference(masks[i], bases[i], offsets[i]))
        << std::hex << masks[i] << std::dec << " base " << bases[i] << " offset " << offsets[i];
  }
}

// An arithmetic instruction with a modifier the engine does not implement is refused at
// its launch (CUDA_ERROR_NOT_SUPPORTED naming it), not run as if the modifier were absent:
// mad24.hi.sat saturates on a GPU, and ran as plain mad24.hi; a tensor copy (TMA) in
// im2col mode gathers pixels the sim does not lay out. The same module's kernels
// without such a modifier run (a cluster's barrier in a launch without clusters is the
// block's own: clusters of one block).
TEST_F(Engine, UnimplementedModifiersAreRefusedNotIgnored) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(13, 94, "UnimplementedModifiersAreRefusedNotIgnored.ptx", "saturating_mad24"));
  ASSERT_EQ(executor_.GetFunction(13, 95, "plain_mad24"), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(13, 93, "cluster_store"), kCuSuccess) << executor_.TakeErrorDetail();
  uint64_t out = Zeros<uint32_t>(1);
  device::LaunchConfig config;
  EXPECT_EQ(executor_.Launch(93, config, &out, sizeof(out)), kCuNotSupported);
  const std::string async_detail = executor_.TakeErrorDetail();
  EXPECT_NE(async_detail.find("cp.async.bulk.tensor.3d.shared::cluster.global.im2col"), std::string::npos)
      << async_detail;
  ASSERT_EQ(executor_.GetFunction(13, 92, "cluster_barrier"), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(executor_.Launch(92, config, &out, sizeof(out)), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(executor_.Launch(94, config, &out, sizeof(out)), kCuNotSupported);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("mad24.hi.sat.s32': modifier .sat"), std::string::npos) << detail;
  EXPECT_EQ(Download<uint32_t>(out, 1)[0], 0u);
  ASSERT_EQ(executor_.Launch(95, config, &out, sizeof(out)), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint32_t>(out, 1)[0], 1000007u);
}

// The scalar video instructions (vadd, vsub, vabsdiff, vmin, vmax, vshl, vshr), as the PTX
// ISA defines them: each source's word, byte or half-word (the selector) sign- or
// zero-extended by its type, the operation in 64-bit integers (shift amounts of .u32 b
// clamped to 32 or taken modulo 32), .sat to the destination type's range, then the
// secondary .add, .min or .max with c extended by the destination's type, and the low 32
// bits. cuSPARSE's binary searches use vshr.u32.u32.u32.clamp.add; before, every such
// kernel was refused at launch (and cuSPARSE, which does not check its launches, left
// its output unwritten).
TEST_F(Engine, ScalarVideoInstructionsAsTheIsaDefinesThem) {
  const uint32_t n = 4096;
  std::vector<uint32_t> in(3 * n);
  uint64_t seed = 5;
  auto next = [&] {
    return static_cast<uint32_t>((seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 32);
  };
  for (uint32_t t = 0; t < n; ++t) {
    in[3 * t] = t % 5 == 0 ? t : next();
    in[3 * t + 1] = t % 3 == 0 ? t % 40 : t % 3 == 1 ? next() % 64 : next();  // shift amounts, small and large
    in[3 * t + 2] = next();
  }
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(15, 99, "ScalarVideoInstructions.ptx", "video"));
  const uint64_t din = Upload(in), dout = Zeros<uint32_t>(12 * n);
  struct {
    uint64_t in, out;
  } params{din, dout};
  ASSERT_EQ(LaunchLoaded(99, n / 128, 128, params), kCuSuccess) << executor_.TakeErrorDetail();
  const std::vector<uint32_t> out = Download<uint32_t>(dout, 12 * n);
  // The reference: 'w' the word, 'b'k byte k, 'h'k half-word k; signedness per operand.
  auto part = [](uint32_t v, char unit, int k, bool is_signed) -> int64_t {
    if (unit == 'w') return is_signed ? int64_t{static_cast<int32_t>(v)} : int64_t{v};
    if (unit == 'h') {
      const uint32_t h = (v >> (16 * k)) & 0xffff;
      return is_signed ? int64_t{static_cast<int16_t>(h)} : int64_t{h};
    }
    const uint32_t b = (v >> (8 * k)) & 0xff;
    return is_signed ? int64_t{static_cast<int8_t>(b)} : int64_t{b};
  };
  auto saturate = [](int64_t v, bool d_signed) {
    return d_signed ? std::clamp<int64_t>(v, INT32_MIN, INT32_MAX) : std::clamp<int64_t>(v, 0, UINT32_MAX);
  };
  auto shift_amount = [](int64_t b, bool clamp) { return clamp ? std::min<int64_t>(b, 32) : (b & 31); };
  auto low = [](int64_t v) { return static_cast<uint32_t>(static_cast<uint64_t>(v)); };
  int wrong = 0;
  for (uint32_t t = 0; t < n && wrong < 10; ++t) {
    const uint32_t a = in[3 * t], b = in[3 * t + 1], c = in[3 * t + 2];
    const int64_t cs = static_cast<int32_t>(c), cu = c;
    const int64_t wa_s = part(a, 'w', 0, true), wa_u = part(a, 'w', 0, false);
    const int64_t wb_s = part(b, 'w', 0, true), wb_u = part(b, 'w', 0, false);
    // a << b in 64 bits: a is at most 33 bits and b at most 32, so a product fits in 128;
    // only the shifts into .sat or .min need more than the low 64 bits, and there the
    // sign and whether the value is beyond 32 bits decide.
    auto shl_sat_s32 = [&](int64_t v, int64_t k) -> int64_t {
      if (v == 0) return 0;
      if (k >= 33 || (v > 0 ? v > (int64_t{INT32_MAX} >> k) : -v > (INT64_C(0x80000000) >> k))) {
        return v > 0 ? INT32_MAX : INT32_MIN;
      }
      return v * (int64_t{1} << k);
    };
    auto shl_min_u32 = [&](int64_t v, int64_t k, int64_t m) -> int64_t {    // min(v << k, m), v >= 0
      if (v != 0 && (k >= 32 || v > (INT64_C(0xffffffff) >> k))) return m;  // v << k > 2^32 > m
      return std::min(v << k, m);
    };
    const uint32_t want[12] = {
        low(wa_u + wb_u),
        low(saturate(wa_s + wb_s, true)),
        low(saturate(part(a, 'b', 0, false) - part(b, 'h', 1, true), true)),
        low(std::llabs(wa_s - wb_s) + cu),
        low(std::max(std::min(part(a, 'h', 0, true), part(b, 'b', 3, false)), cs)),
        low(std::min(saturate(std::max(wa_s, wb_s), false), cu)),
        low(wa_u << shift_amount(wb_u, false)),
        low(shl_sat_s32(wa_s, shift_amount(wb_u, true))),
        low((wa_u >> shift_amount(wb_u, true)) + cu),
        low(std::max(part(a, 'b', 1, true) >> shift_amount(wb_u, false), cs)),
        low(shl_min_u32(wa_u, shift_amount(wb_u, true), cu)),
        low(saturate(wa_u - wb_u, false)),
    };
    for (int k = 0; k < 12; ++k) {
      if (out[12 * t + k] != want[k]) {
        ++wrong;
        ADD_FAILURE() << "thread " << t << " instruction " << k + 1 << ": " << std::hex << out[12 * t + k] << " want "
                      << want[k] << " (a " << a << ", b " << b << ", c " << c << ")";
      }
    }
  }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace gpupool::dataplane

// The PTX engine (remote/ptx) through the sim executor: each kernel of
// engine_kernels.cu (compiled by nvcc at build time) runs on the engine and its
// results are checked against a CPU reference computed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "remote/devices/sim/sim_executor.h"
#include "tests/remote/ptx/device_buffers.h"
#include "remote/image/ptx_signature.h"
#include "remote/protocol/protocol.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::dataplane {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

std::string ReadFile(const std::string& name) {
  std::ifstream file(std::string(GPUPOOL_PTX_MODULES) + "/" + name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

class Engine : public ::testing::Test {
 protected:
  void SetUp() override {
    ptx_ = ReadFile("engine_kernels.ptx");
    ASSERT_FALSE(ptx_.empty());
    auto layouts = image::ParsePtxSignatures(ptx_);
    ASSERT_TRUE(layouts.ok()) << layouts.status().message();
    layouts_ = *layouts;
    ASSERT_EQ(executor_.LoadModule(1, ptx_.c_str(), ptx_.size() + 1, {}), kCuSuccess) << executor_.TakeErrorDetail();
  }

  template <typename T>
  uint64_t Upload(const std::vector<T>& data) {
    return ptx_test::UploadTo(executor_, data);
  }
  template <typename T>
  uint64_t Zeros(size_t count) {
    return Upload(std::vector<T>(count));
  }
  template <typename T>
  std::vector<T> Download(uint64_t dptr, size_t count) {
    return ptx_test::DownloadFrom<T>(executor_, dptr, count);
  }

  // Launches `kernel` with `args` packed by the layout of its .entry
  // declaration.
  template <typename... Args>
  int32_t Run(const std::string& kernel, std::vector<uint32_t> grid, std::vector<uint32_t> block, uint32_t shared,
              Args... args) {
    auto layout = layouts_.find(kernel);
    EXPECT_NE(layout, layouts_.end()) << kernel;
    if (layout == layouts_.end()) return -1;
    std::vector<uint8_t> params(layout->second.param_size);
    size_t index = 0;
    bool sizes_ok = true;
    auto put = [&](auto value) {
      const image::ParamSlot& slot = layout->second.params.at(index++);
      sizes_ok &= slot.size == sizeof(value);
      std::memcpy(params.data() + slot.offset, &value, sizeof(value));
    };
    (put(args), ...);
    EXPECT_TRUE(sizes_ok) << kernel << ": argument sizes differ from the declaration";
    EXPECT_EQ(index, layout->second.params.size()) << kernel;
    uint64_t function = ++next_function_;
    int32_t status = executor_.GetFunction(1, function, kernel);
    EXPECT_EQ(status, kCuSuccess) << executor_.TakeErrorDetail();
    LaunchConfig config;
    for (int i = 0; i < 3; ++i) {
      config.grid[i] = i < static_cast<int>(grid.size()) ? grid[i] : 1;
      config.block[i] = i < static_cast<int>(block.size()) ? block[i] : 1;
    }
    config.shared_mem = shared;
    status = executor_.Launch(function, config, params.data(), params.size());
    last_detail_ = executor_.TakeErrorDetail();
    return status;
  }

  // Loads hand-written PTX `text` as module `module` and kernel `name` of it as `function`.
  void LoadKernel(uint64_t module, uint64_t function, const std::string& text, const std::string& name) {
    ASSERT_EQ(executor_.LoadModule(module, text.c_str(), text.size() + 1, {}), kCuSuccess)
        << executor_.TakeErrorDetail();
    ASSERT_EQ(executor_.GetFunction(module, function, name), kCuSuccess) << executor_.TakeErrorDetail();
  }

  SimDeviceMemory memory_{0, 4 * kGiB};
  SimExecutor executor_{&memory_};
  std::string ptx_;
  std::map<std::string, image::KernelLayout> layouts_;
  uint64_t next_function_ = 100;
  std::string last_detail_;
};

TEST_F(Engine, GridAndBlockDimensions) {
  // One warp per block; then blocks of several warps whose warps start inside a row and
  // a plane (7x5x3 = 105 threads: warp 1 begins at x=4, y=1, z=0, the last is partial).
  const uint32_t shapes[2][2][3] = {{{3, 2, 2}, {4, 3, 2}}, {{2, 1, 2}, {7, 5, 3}}};
  for (const auto& [grid, block] : shapes) {
    SCOPED_TRACE(testing::Message() << "block " << block[0] << "x" << block[1] << "x" << block[2]);
    const uint32_t threads = block[0] * block[1] * block[2];
    const uint32_t total = grid[0] * grid[1] * grid[2] * threads;
    uint64_t out = Zeros<uint32_t>(4 * total);
    ASSERT_EQ(Run("dims", {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, 0, out), kCuSuccess)
        << last_detail_;
    auto got = Download<uint32_t>(out, 4 * total);
    std::vector<bool> seen(total);
    for (uint32_t bz = 0; bz < grid[2]; ++bz)
      for (uint32_t by = 0; by < grid[1]; ++by)
        for (uint32_t bx = 0; bx < grid[0]; ++bx)
          for (uint32_t tz = 0; tz < block[2]; ++tz)
            for (uint32_t ty = 0; ty < block[1]; ++ty)
              for (uint32_t tx = 0; tx < block[0]; ++tx) {
                uint32_t b = bx + grid[0] * (by + grid[1] * bz);
                uint32_t id = b * threads + tx + block[0] * (ty + block[1] * tz);
                ASSERT_EQ(got[4 * id], id);
                EXPECT_EQ(got[4 * id + 1], tx | (ty << 10) | (tz << 20));
                EXPECT_EQ(got[4 * id + 2], bx | (by << 10) | (bz << 20));
                EXPECT_EQ(got[4 * id + 3], block[0] | (block[1] << 10) | (grid[2] << 20));
                seen[id] = true;
              }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), total);
  }
}

TEST_F(Engine, DivergenceAndReconvergence) {
  const int n = 96;  // three warps, the last one full too
  uint64_t out = Zeros<int>(2 * n);
  ASSERT_EQ(Run("diverge", {1}, {n}, 0, out), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, 2 * n);
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) {
    if (i % 3 == 0) {
      for (int k = 0; k < i % 7; ++k) v[i] += k * i;
    } else if (i % 3 == 1) {
      v[i] = -i;
    } else {
      while (v[i] < i) v[i] += 5;
    }
  }
  for (int i = 0; i < n; ++i) {
    uint32_t ballot = 0;
    for (int lane = 0; lane < 32; ++lane) ballot |= static_cast<uint32_t>(v[i / 32 * 32 + lane] > 10) << lane;
    EXPECT_EQ(got[2 * i], v[i]) << i;
    EXPECT_EQ(static_cast<uint32_t>(got[2 * i + 1]), ballot) << i;
  }
}

TEST_F(Engine, StaticAndDynamicSharedMemoryWithBarriers) {
  const int blocks = 4, threads = 256;
  std::vector<float> in(blocks * threads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 7) % 13);
  uint64_t din = Upload(in), reversed = Zeros<float>(in.size()), sums = Zeros<float>(blocks);
  ASSERT_EQ(Run("shared_reduce", {blocks}, {threads}, threads * 4, din, reversed, sums), kCuSuccess) << last_detail_;
  auto r = Download<float>(reversed, in.size());
  auto s = Download<float>(sums, blocks);
  for (int b = 0; b < blocks; ++b) {
    float sum = 0;
    for (int t = 0; t < threads; ++t) {
      sum += in[b * threads + t];
      EXPECT_EQ(r[b * threads + t], in[b * threads + threads - 1 - t]);
    }
    EXPECT_EQ(s[b], sum) << b;
  }
  // Not enough dynamic shared memory for the kernel's accesses: a stray shared
  // access.
  EXPECT_EQ(Run("shared_reduce", {blocks}, {threads}, 16, din, reversed, sums), kCuIllegalAddress);
}

TEST_F(Engine, BlockWideVotes) {
  const int blocks = 3, threads = 100;  // the last warp of each block is partial
  std::vector<int> in(blocks * threads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i % 7) - 2;
  in[150] = 5000;  // block 1 only
  uint64_t din = Upload(in), out = Zeros<int>(3 * in.size());
  ASSERT_EQ(Run("block_votes", {blocks}, {threads}, 0, din, out), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, 3 * in.size());
  for (int b = 0; b < blocks; ++b) {
    int count = 0, any = 0;
    for (int t = 0; t < threads; ++t) {
      count += in[b * threads + t] > 0;
      any |= in[b * threads + t] > 1000;
    }
    for (int t = 0; t < threads; ++t) {
      int i = b * threads + t;
      EXPECT_EQ(got[3 * i], count) << i;
      EXPECT_NE(got[3 * i + 1], 0) << i;
      EXPECT_EQ(got[3 * i + 2] != 0, any != 0) << i;
    }
  }
}

// Half-precision values in 16-bit storage: exact for these inputs (normal numbers, zero,
// NaN).
uint16_t ToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  if (value == 0.0f) return 0;
  if (std::isnan(value)) return 0x7e00;
  uint32_t exponent = ((x >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(((x >> 16) & 0x8000) | (exponent << 10) | ((x >> 13) & 0x3ff));
}

float FromHalf(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  const float sign = bits & 0x8000 ? -1.0f : 1.0f;
  if (exponent == 0x1f) return mantissa != 0 ? std::nanf("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  return sign * std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
}

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
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry half_setp(.param .u64 out_param, .param .b32 x_param, .param .b32 y_param,
                          .param .f32 f_param)
{
  .reg .pred %p<8>;
  .reg .b16 %h<2>;
  .reg .b32 %r<12>;
  .reg .f32 %f<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out_param];
  ld.param.b32 %r1, [x_param];
  ld.param.b32 %r2, [y_param];
  ld.param.f32 %f1, [f_param];
  setp.gt.f16x2 %p1|%p2, %r1, %r2;
  selp.u32 %r3, 1, 0, %p1;
  selp.u32 %r4, 1, 0, %p2;
  setp.lt.f32 %p3, %f1, 0f00000000;
  setp.gt.or.f16x2 %p4|%p5, %r1, %r2, %p3;
  selp.u32 %r5, 1, 0, %p4;
  selp.u32 %r6, 1, 0, %p5;
  setp.gt.and.f16x2 %p6|%p7, %r1, %r2, !%p3;
  selp.u32 %r7, 1, 0, %p6;
  selp.u32 %r8, 1, 0, %p7;
  set.gt.and.f16.f32 %h1, %f1, 0fBF800000, %p3;
  mov.b32 %r9, {%h1, %h1};
  set.ne.xor.u32.f32 %r10, %f1, %f1, %p3;
  st.global.v4.u32 [%rd1], {%r3, %r4, %r5, %r6};
  st.global.v4.u32 [%rd1+16], {%r7, %r8, %r9, %r10};
  ret;
}
)";
  LoadKernel(11, 97, ptx, "half_setp");
  if (HasFatalFailure()) return;
  // x = {lo 2.0, hi -1.0}, y = {lo 1.0, hi 0.5}: lo greater, hi not.
  const uint32_t x = ToHalf(2.0f) | ToHalf(-1.0f) << 16, y = ToHalf(1.0f) | ToHalf(0.5f) << 16;
  for (float f : {-0.5f, 3.0f}) {
    uint64_t out = Zeros<uint32_t>(8);
    struct {
      uint64_t out;
      uint32_t x, y;
      float f;
    } params{out, x, y, f};
    LaunchConfig config;
    ASSERT_EQ(executor_.Launch(97, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
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

// A parameter's ".ptr [.space] .align N" (as the toolkit's libraries write their pointer
// parameters) gives the pointee's alignment: the pointer itself stays 8-aligned, so the
// parameters after it are where the host packed them. cuBLAS's reductions read their
// pointer mode 4 bytes early, and faulted, when ".align 1" was taken for the parameter's.
TEST_F(Engine, PointerParameterAlignmentIsThePointees) {
  const std::string ptx = R"(
.version 9.0
.target sm_80
.address_size 64
.visible .entry ptr_params(.param .u32 a_param, .param .u64 .ptr .align 1 out_param,
                           .param .u32 b_param, .param .u64 .ptr .global .align 16 in_param,
                           .param .u32 c_param)
{
  .reg .b32 %r<5>;
  .reg .b64 %rd<3>;
  ld.param.u32 %r1, [a_param];
  ld.param.u64 %rd1, [out_param];
  ld.param.u32 %r2, [b_param];
  ld.param.u64 %rd2, [in_param];
  ld.param.u32 %r3, [c_param];
  ld.global.u32 %r4, [%rd2];
  st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
  ret;
}
)";
  LoadKernel(11, 98, ptx, "ptr_params");
  if (HasFatalFailure()) return;
  uint64_t out = Zeros<uint32_t>(4), in = Upload(std::vector<uint32_t>{7});
  struct {
    uint32_t a;
    uint64_t out;  // at 8
    uint32_t b;    // at 16
    uint64_t in;   // at 24
    uint32_t c;    // at 32
  } params{0xa, out, 0xb, in, 0xc};
  static_assert(offsetof(decltype(params), in) == 24);
  LaunchConfig config;
  ASSERT_EQ(executor_.Launch(98, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint32_t>(out, 4), (std::vector<uint32_t>{0xa, 0xb, 0xc, 7}));
}

// fma.rn.relu (cuda_fp16's __hfma_relu) clamps a negative result to 0; min/max.NaN
// (__hmax_nan, __hmin_nan, and on f32) give the canonical NaN when an operand is NaN,
// where plain max gives the other operand; max.xorsign.abs is refused, not mis-run.
TEST_F(Engine, HalfReluAndNaNPropagation) {
  const std::string ptx = R"(
.version 7.0
.target sm_86
.address_size 64
.visible .entry relu_nan(.param .u64 out_param, .param .b32 x_param, .param .b32 y_param,
                         .param .f32 f_param, .param .f32 g_param)
{
  .reg .b32 %r<12>;
  .reg .f32 %f<6>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out_param];
  ld.param.b32 %r1, [x_param];
  ld.param.b32 %r2, [y_param];
  ld.param.f32 %f1, [f_param];
  ld.param.f32 %f2, [g_param];
  fma.rn.relu.f16x2 %r3, %r1, %r2, %r2;
  max.NaN.f16x2 %r4, %r1, %r2;
  max.f16x2 %r5, %r1, %r2;
  mov.b32 %r9, 0x7FC03F80;
  min.NaN.bf16x2 %r6, %r9, %r2;
  min.NaN.f32 %f3, %f1, %f2;
  max.NaN.f32 %f4, %f1, %f1;
  mov.b32 %r7, %f3;
  mov.b32 %r8, %f4;
  st.global.v4.u32 [%rd1], {%r3, %r4, %r5, %r6};
  st.global.v2.u32 [%rd1+16], {%r7, %r8};
  ret;
}
.visible .entry xorsign(.param .u64 out_param, .param .f32 f_param)
{
  .reg .f32 %f<3>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out_param];
  ld.param.f32 %f1, [f_param];
  max.xorsign.abs.f32 %f2, %f1, %f1;
  st.global.f32 [%rd1], %f2;
  ret;
}
)";
  LoadKernel(12, 98, ptx, "relu_nan");
  if (HasFatalFailure()) return;
  // x = {lo 2.0, hi NaN}, y = {lo -3.0, hi 1.0}: fma lo 2 * -3 - 3 = -9 -> 0.
  const uint32_t x = ToHalf(2.0f) | 0x7e00u << 16, y = ToHalf(-3.0f) | ToHalf(1.0f) << 16;
  uint64_t out = Zeros<uint32_t>(6);
  struct {
    uint64_t out;
    uint32_t x, y;
    float f, g;
  } params{out, x, y, std::nanf(""), 1.5f};
  LaunchConfig config;
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
  const int saved = std::fegetround();
  // The result goes through a volatile before the mode is set back: without
  // -frounding-math the compiler may otherwise compute it after the second call.
  auto in_mode = [&](int mode, auto op) {
    std::fesetround(mode);
    volatile auto r = op();
    std::fesetround(saved);
    return static_cast<decltype(op())>(r);
  };
  int differs_from_nearest = 0;
  for (int i = 0; i < n; ++i) {
    volatile float p = a[i], q = b[i];
    volatile double u = x[i], v = y[i];
    const float want_f[8] = {
        in_mode(FE_TOWARDZERO, [&] { return p + q; }), in_mode(FE_UPWARD, [&] { return p + q; }),
        in_mode(FE_DOWNWARD, [&] { return p + q; }),   in_mode(FE_DOWNWARD, [&] { return p * q; }),
        in_mode(FE_UPWARD, [&] { return p / q; }),     in_mode(FE_DOWNWARD, [&] { return std::sqrt(std::fabs(p)); }),
        in_mode(FE_UPWARD, [&] { return 1.0f / q; }),  in_mode(FE_TOWARDZERO, [&] { return std::fma(p, q, 1.0f); })};
    const double want_d[4] = {in_mode(FE_UPWARD, [&] { return u + v; }), in_mode(FE_TOWARDZERO, [&] { return u * v; }),
                              in_mode(FE_DOWNWARD, [&] { return u / v; }),
                              in_mode(FE_UPWARD, [&] { return std::sqrt(std::fabs(u)); })};
    for (int k = 0; k < 8; ++k) EXPECT_EQ(gf[8 * i + k], want_f[k]) << i << " op " << k;
    for (int k = 0; k < 4; ++k) EXPECT_EQ(gd[4 * i + k], want_d[k]) << i << " op " << k;
    differs_from_nearest += gf[8 * i + 4] != p / q;
  }
  EXPECT_GT(differs_from_nearest, n / 4) << "operands too kind: most divisions were exact";
}

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

  const std::string ptx = R"(
.version 7.8
.target sm_90
.address_size 64
.visible .entry bf16_directed(.param .u64 x_param, .param .u64 out_param)
{
  .reg .b16 %rs<4>;
  .reg .b32 %r<2>;
  .reg .f32 %f<2>;
  .reg .b64 %rd<7>;
  ld.param.u64 %rd1, [x_param];
  ld.param.u64 %rd2, [out_param];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.f32 %f1, [%rd4];
  mul.wide.u32 %rd5, %r1, 6;
  add.s64 %rd6, %rd2, %rd5;
  cvt.rz.bf16.f32 %rs1, %f1;
  cvt.rm.bf16.f32 %rs2, %f1;
  cvt.rp.bf16.f32 %rs3, %f1;
  st.global.u16 [%rd6], %rs1;
  st.global.u16 [%rd6+2], %rs2;
  st.global.u16 [%rd6+4], %rs3;
  ret;
}
)";
  LoadKernel(13, 97, ptx, "bf16_directed");
  if (HasFatalFailure()) return;
  uint64_t b = Zeros<uint16_t>(3 * n);
  struct {
    uint64_t x, out;
  } params{dx, b};
  LaunchConfig config;
  config.block[0] = n;
  ASSERT_EQ(executor_.Launch(97, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  auto gb = Download<uint16_t>(b, 3 * n);

  const int saved = std::fegetround();
  auto in_mode = [&](int mode, auto op) {
    std::fesetround(mode);
    volatile auto r = op();
    std::fesetround(saved);
    return static_cast<decltype(op())>(r);
  };
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
    const float want_f[6] = {in_mode(FE_TOWARDZERO, [&] { return static_cast<float>(p); }),
                             in_mode(FE_UPWARD, [&] { return static_cast<float>(p); }),
                             in_mode(FE_DOWNWARD, [&] { return static_cast<float>(static_cast<uint32_t>(p)); }),
                             in_mode(FE_DOWNWARD, [&] { return static_cast<float>(q); }),
                             in_mode(FE_UPWARD, [&] { return static_cast<float>(static_cast<uint64_t>(q)); }),
                             in_mode(FE_TOWARDZERO, [&] { return static_cast<float>(q); })};
    const double want_d[3] = {in_mode(FE_TOWARDZERO, [&] { return static_cast<double>(q); }),
                              in_mode(FE_UPWARD, [&] { return static_cast<double>(static_cast<uint64_t>(q)); }),
                              in_mode(FE_DOWNWARD, [&] { return static_cast<double>(q); })};
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
  LaunchConfig config;
  ASSERT_EQ(executor_.Launch(95, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
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
  const std::string ptx = R"(
.version 7.0
.target sm_75
.address_size 64
.visible .entry undeclared(.param .u64 out_param)
{
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out_param];
  {
  .param .b64 param0;
  st.param.b64 [param0], 16;
  .param .b64 retval0;
  call.uni (retval0), malloc, (param0);
  ld.param.b64 %rd2, [retval0];
  }
  st.global.u64 [%rd1], %rd2;
  ret;
}
)";
  LoadKernel(16, 93, ptx, "undeclared");
  if (HasFatalFailure()) return;
  uint64_t out = Zeros<uint64_t>(1);
  LaunchConfig config;
  EXPECT_EQ(executor_.Launch(93, config, &out, sizeof(out)), kCuNotSupported);
  EXPECT_NE(executor_.TakeErrorDetail().find("malloc"), std::string::npos);
}

// cudaGraphSetConditional, as nvcc emits it (an extern function the driver provides):
// the remoting library's handle is the address of the condition's 4-byte slot, so the
// value lands there; a handle that is no allocation fails the launch with
// CUDA_ERROR_ILLEGAL_ADDRESS, naming the call.
TEST_F(Engine, SetConditionalStoresTheValueAtItsHandle) {
  const std::string ptx = R"(
.version 8.4
.target sm_80
.address_size 64
.extern .func cudaGraphSetConditional
(
  .param .b64 cudaGraphSetConditional_param_0,
  .param .b32 cudaGraphSetConditional_param_1
)
;
.visible .entry set_conditional(.param .u64 handle_param, .param .u32 value_param)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [handle_param];
  ld.param.u32 %r1, [value_param];
  {
  .param .b64 param0;
  st.param.b64 [param0], %rd1;
  .param .b32 param1;
  st.param.b32 [param1], %r1;
  call.uni cudaGraphSetConditional, (param0, param1);
  }
  ret;
}
)";
  LoadKernel(17, 92, ptx, "set_conditional");
  if (HasFatalFailure()) return;
  uint64_t slot = Zeros<uint32_t>(1);
  uint8_t params[12];  // the kernel's parameter layout: u64 handle, u32 value
  const uint32_t value = 0xfeed;
  std::memcpy(params, &slot, 8);
  std::memcpy(params + 8, &value, 4);
  LaunchConfig config;
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

// vote, match and redux .sync over each lane's own membermask: the lanes of one warp run
// converged, even lanes naming the even lanes and odd lanes the odd ones (as
// cooperative_groups' labeled_partition and its reduce, ballot and all do). Each group
// gets its own answer, not the warp's.
TEST_F(Engine, WarpCollectivesFollowEachLanesMembermask) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry member_groups(.param .u64 out_param)
{
  .reg .pred %p<5>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out_param];
  mov.u32 %r1, %tid.x;
  and.b32 %r2, %r1, 1;
  setp.eq.u32 %p1, %r2, 0;
  selp.b32 %r3, 0x55555555, 0xAAAAAAAA, %p1;
  setp.lt.u32 %p2, %r1, 16;
  vote.sync.ballot.b32 %r4, %p2, %r3;
  not.pred %p3, %p1;
  or.pred %p3, %p3, %p2;
  vote.sync.all.pred %p4, %p3, %r3;
  selp.u32 %r5, 1, 0, %p4;
  redux.sync.add.u32 %r6, %r1, %r3;
  shr.u32 %r7, %r1, 2;
  match.any.sync.b32 %r8, %r7, %r3;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r4, %r5, %r6, %r8};
  ret;
}
)";
  LoadKernel(14, 96, ptx, "member_groups");
  if (HasFatalFailure()) return;
  uint64_t out = Zeros<uint32_t>(4 * 32);
  LaunchConfig config;
  config.block[0] = 32;
  ASSERT_EQ(executor_.Launch(96, config, &out, sizeof(out)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(out, 4 * 32);
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const bool odd = lane % 2;
    EXPECT_EQ(got[4 * lane], odd ? 0x0000aaaau : 0x00005555u) << lane;              // ballot: lane < 16
    EXPECT_EQ(got[4 * lane + 1], odd ? 1u : 0u) << lane;                            // all(odd or lane < 16)
    EXPECT_EQ(got[4 * lane + 2], odd ? 256u : 240u) << lane;                        // sum of the group's lane ids
    EXPECT_EQ(got[4 * lane + 3], (odd ? 0xau : 0x5u) << (4 * (lane / 4))) << lane;  // lane / 4
  }
}

// A loop whose back edge leads to a block placed before its head, as nvcc lays out a
// warp's ballot-and-scatter loop: even lanes go around at once, odd lanes after one more
// block placed after the branch. The next iteration's vote.sync waits for the odd lanes,
// though they stand at a higher PC: every lane sees the whole warp's ballot each time.
TEST_F(Engine, WarpVoteWaitsForLanesStillInTheLoopsLastBlock) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry late_lanes(.param .u64 out_param)
{
  .reg .pred %p<4>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out_param];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, 0;
  mov.u32 %r5, 0;
  mov.u32 %r9, -1;
  bra.uni $HEAD;
$TAIL:
  add.u32 %r2, %r2, 1;
$HEAD:
  setp.lt.u32 %p1, %r2, 3;
  @!%p1 bra $DONE;
  add.u32 %r6, %r2, 1;
  shl.b32 %r6, %r6, 3;
  setp.lt.u32 %p2, %r1, %r6;
  vote.sync.ballot.b32 %r3, %p2, %r9;
  mad.lo.u32 %r8, %r1, 4, %r2;
  mul.wide.u32 %rd2, %r8, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r3;
  and.b32 %r7, %r1, 1;
  setp.eq.u32 %p3, %r7, 0;
  @%p3 bra $TAIL;
  add.u32 %r5, %r5, 1;
  bra.uni $TAIL;
$DONE:
  mad.lo.u32 %r8, %r1, 4, 3;
  mul.wide.u32 %rd2, %r8, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
  ret;
}
)";
  LoadKernel(15, 97, ptx, "late_lanes");
  if (HasFatalFailure()) return;
  uint64_t out = Zeros<uint32_t>(4 * 32);
  LaunchConfig config;
  config.block[0] = 32;
  ASSERT_EQ(executor_.Launch(97, config, &out, sizeof(out)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(out, 4 * 32);
  for (uint32_t lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(got[4 * lane], 0x000000ffu) << lane;
    EXPECT_EQ(got[4 * lane + 1], 0x0000ffffu) << lane;
    EXPECT_EQ(got[4 * lane + 2], 0x00ffffffu) << lane;
    EXPECT_EQ(got[4 * lane + 3], lane % 2 ? 3u : 0u) << lane;
  }
}

// .ftz flushes subnormal f32 inputs as well as results, as --use_fast_math code expects:
// a subnormal times 2^30 is 0, not 1e-31, and it compares equal to 0.
TEST_F(Engine, FtzFlushesSubnormalInputs) {
  const std::string ptx = R"(
.version 7.0
.target sm_75
.address_size 64
.visible .entry ftz_inputs(.param .u64 out_param, .param .f32 x_param)
{
  .reg .pred %p<3>;
  .reg .f32 %f<8>;
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out_param];
  ld.param.f32 %f1, [x_param];
  mul.ftz.f32 %f2, %f1, 0f4E800000;
  mul.f32 %f3, %f1, 0f4E800000;
  fma.rn.ftz.f32 %f4, %f1, 0f4E800000, 0f00000000;
  setp.gt.ftz.f32 %p1, %f1, 0f00000000;
  selp.f32 %f5, 0f3F800000, 0f00000000, %p1;
  setp.gt.f32 %p2, %f1, 0f00000000;
  selp.f32 %f6, 0f3F800000, 0f00000000, %p2;
  sub.ftz.f32 %f7, 0f00000000, %f1;
  st.global.v4.f32 [%rd1], {%f2, %f3, %f4, %f5};
  st.global.v2.f32 [%rd1+16], {%f6, %f7};
  ret;
}
)";
  LoadKernel(15, 94, ptx, "ftz_inputs");
  if (HasFatalFailure()) return;
  uint64_t out = Zeros<float>(6);
  struct {
    uint64_t out;
    float x;
  } params{out, 1e-40f};
  LaunchConfig config;
  ASSERT_EQ(executor_.Launch(94, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
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

// cvt.rn.f16x2.f32 and cvt.rn.bf16x2.f32 d, a, b (sm_80; __floats2half2_rn compiles to the
// first): a rounds into d's upper half, b into its lower half. Hand-written, since the suite
// is compiled for an earlier target.
TEST_F(Engine, PackedHalfConversions) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry pack_halves(.param .u64 out_param, .param .f32 upper_param,
                            .param .f32 lower_param)
{
  .reg .f32 %f<3>;
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out_param];
  ld.param.f32 %f1, [upper_param];
  ld.param.f32 %f2, [lower_param];
  cvt.rn.f16x2.f32 %r1, %f1, %f2;
  cvt.rn.bf16x2.f32 %r2, %f1, %f2;
  st.global.u32 [%rd1], %r1;
  st.global.u32 [%rd1+4], %r2;
  ret;
}
)";
  LoadKernel(2, 99, ptx, "pack_halves");
  if (HasFatalFailure()) return;
  uint64_t out = Zeros<uint32_t>(2);
  struct {
    uint64_t out;
    float upper, lower;
  } params{out, 0.1f, -1.5f};
  LaunchConfig config;
  ASSERT_EQ(executor_.Launch(99, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(out, 2);
  EXPECT_EQ(got[0], 0x2E66BE00u);  // half(0.1) = 0x2e66 (rounded), half(-1.5) = 0xbe00
  EXPECT_EQ(got[1], 0x3DCDBFC0u);  // bf16(0.1) = 0x3dcd (rounded up), bf16(-1.5) = 0xbfc0
}

// redux.sync (sm_80; __reduce_*_sync and cooperative groups' reduce on integers): each
// lane gets the warp's add, signed min, unsigned max, and, or and xor. Hand-written, like
// the test above.
TEST_F(Engine, WarpReductions) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry reduce_warp(.param .u64 in_param, .param .u64 out_param)
{
  .reg .b32 %r<10>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [in_param];
  ld.param.u64 %rd2, [out_param];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.u32 %r2, [%rd4];
  redux.sync.add.s32 %r3, %r2, -1;
  redux.sync.min.s32 %r4, %r2, -1;
  redux.sync.max.u32 %r5, %r2, -1;
  redux.sync.and.b32 %r6, %r2, -1;
  redux.sync.or.b32 %r7, %r2, -1;
  redux.sync.xor.b32 %r8, %r2, -1;
  mul.wide.u32 %rd3, %r1, 24;
  add.s64 %rd5, %rd2, %rd3;
  st.global.v2.u32 [%rd5], {%r3, %r4};
  st.global.v2.u32 [%rd5+8], {%r5, %r6};
  st.global.v2.u32 [%rd5+16], {%r7, %r8};
  ret;
}
)";
  LoadKernel(3, 98, ptx, "reduce_warp");
  if (HasFatalFailure()) return;
  std::vector<int32_t> in(32);
  int32_t add = 0, min = INT32_MAX;
  uint32_t max = 0, all = ~0u, any = 0, x = 0;
  for (int i = 0; i < 32; ++i) {
    in[i] = (i * 37) % 23 - 5 + (i == 9 ? 1 << 30 : 0);
    add += in[i];
    min = std::min(min, in[i]);
    max = std::max(max, static_cast<uint32_t>(in[i]));
    all &= static_cast<uint32_t>(in[i]);
    any |= static_cast<uint32_t>(in[i]);
    x ^= static_cast<uint32_t>(in[i]);
  }
  uint64_t din = Upload(in), out = Zeros<uint32_t>(32 * 6);
  struct {
    uint64_t in, out;
  } params{din, out};
  LaunchConfig config;
  config.block[0] = 32;
  ASSERT_EQ(executor_.Launch(98, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(out, 32 * 6);
  for (int lane : {0, 13, 31}) {
    EXPECT_EQ(static_cast<int32_t>(got[6 * lane]), add) << lane;
    EXPECT_EQ(static_cast<int32_t>(got[6 * lane + 1]), min) << lane;
    EXPECT_EQ(got[6 * lane + 2], max) << lane;
    EXPECT_EQ(got[6 * lane + 3], all) << lane;
    EXPECT_EQ(got[6 * lane + 4], any) << lane;
    EXPECT_EQ(got[6 * lane + 5], x) << lane;
  }
}

// Atomics on 16-bit values (atomicAdd on __half, __half2, __nv_bfloat16; atomicCAS on an
// unsigned short): 64 threads add into neighbouring halves of one word, so a wrong word
// update would spill into the neighbour. Hand-written, like the tests above.
TEST_F(Engine, SixteenBitAtomics) {
  const std::string ptx = R"(
.version 7.8
.target sm_90
.address_size 64
.visible .entry atomics16(.param .u64 out_param)
{
  .reg .b16 %h<4>;
  .reg .b32 %r<6>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out_param];
  mov.b32 %r1, 0x40003C00;
  atom.global.add.noftz.f16x2 %r2, [%rd1], %r1;
  mov.b16 %h1, 0x3800;
  atom.global.add.noftz.f16 %h2, [%rd1+4], %h1;
  mov.b16 %h1, 0x3F80;
  atom.global.add.noftz.bf16 %h2, [%rd1+6], %h1;
  mov.u32 %r3, %tid.x;
  cvt.u16.u32 %h1, %r3;
  add.u32 %r4, %r3, 1;
  cvt.u16.u32 %h3, %r4;
  atom.global.cas.b16 %h2, [%rd1+10], %h1, %h3;
  ret;
}
)";
  LoadKernel(4, 97, ptx, "atomics16");
  if (HasFatalFailure()) return;
  uint64_t out = Zeros<uint16_t>(8);
  LaunchConfig config;
  config.block[0] = 64;
  ASSERT_EQ(executor_.Launch(97, config, &out, sizeof(out)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint16_t>(out, 8);
  EXPECT_EQ(got[0], ToHalf(64.0f));   // 64 x 1.0 into the lower half
  EXPECT_EQ(got[1], ToHalf(128.0f));  // 64 x 2.0 into the upper half
  EXPECT_EQ(got[2], ToHalf(32.0f));   // 64 x 0.5
  EXPECT_EQ(got[3], 0x4280);          // bf16: 64 x 1.0 = 64
  EXPECT_EQ(got[4], 0);               // untouched neighbour
  EXPECT_EQ(got[5], 64);              // the compare-and-swap chain, thread by thread
  EXPECT_EQ(got[6], 0);
}

// wmma (tensor cores, sm_70+): a 16x16x16 multiply of halves into f32 with A row-major in
// a wider array (stride 24), B column-major and C column-major at their default strides,
// every accumulator element doubled in registers, D stored row-major with stride 20, so
// any disagreement between load, mma, the element-wise step and store shows. Hand-written,
// like the tests above (nvcc's own wmma code runs in tests/remote/driver/tensor_cores.cu).
const char kWmmaF16[] = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry wmma_f16(.param .u64 a_param, .param .u64 b_param, .param .u64 c_param,
                         .param .u64 d_param)
{
  .reg .b32 %r<20>;
  .reg .f32 %f<20>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [a_param];
  ld.param.u64 %rd2, [b_param];
  ld.param.u64 %rd3, [c_param];
  ld.param.u64 %rd4, [d_param];
  mov.u32 %r1, 24;
  wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r2, %r3, %r4, %r5, %r6, %r7, %r8, %r9}, [%rd1], %r1;
  wmma.load.b.sync.aligned.col.m16n16k16.global.f16 {%r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17}, [%rd2];
  wmma.load.c.sync.aligned.col.m16n16k16.global.f32 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, [%rd3];
  wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 {%f9, %f10, %f11, %f12, %f13, %f14, %f15, %f16}, {%r2, %r3, %r4, %r5, %r6, %r7, %r8, %r9}, {%r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17}, {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8};
  mul.f32 %f9, %f9, 0f40000000;
  mul.f32 %f10, %f10, 0f40000000;
  mul.f32 %f11, %f11, 0f40000000;
  mul.f32 %f12, %f12, 0f40000000;
  mul.f32 %f13, %f13, 0f40000000;
  mul.f32 %f14, %f14, 0f40000000;
  mul.f32 %f15, %f15, 0f40000000;
  mul.f32 %f16, %f16, 0f40000000;
  mov.u32 %r18, 20;
  wmma.store.d.sync.aligned.row.m16n16k16.global.f32 [%rd4], {%f9, %f10, %f11, %f12, %f13, %f14, %f15, %f16}, %r18;
  ret;
}
)";

TEST_F(Engine, WarpMatrixMultiplyOfHalves) {
  LoadKernel(5, 96, kWmmaF16, "wmma_f16");
  if (HasFatalFailure()) return;
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
  LaunchConfig config;
  config.block[0] = 32;
  ASSERT_EQ(executor_.Launch(96, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
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
  LoadKernel(5, 96, kWmmaF16, "wmma_f16");
  if (HasFatalFailure()) return;
  std::vector<uint16_t> a(15 * 24 + 8), b(16 * 16);  // the last row needs 15 * 24 + 16
  std::vector<float> c(16 * 16), d(16 * 20);
  struct {
    uint64_t a, b, c, d;
  } params{Upload(a), Upload(b), Upload(c), Upload(d)};
  LaunchConfig config;
  config.block[0] = 32;
  EXPECT_EQ(executor_.Launch(96, config, &params, sizeof(params)), kCuIllegalAddress);
  EXPECT_NE(executor_.TakeErrorDetail().find("wmma load"), std::string::npos);
}

// Integer wmma (sm_72+): s8 x s8 into s32 on the 32x8x16 shape, with .satfinite clamping
// sums beyond the int32 range instead of wrapping them.
TEST_F(Engine, WarpMatrixMultiplyOfIntegersSaturates) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry wmma_s8(.param .u64 a_param, .param .u64 b_param, .param .u64 c_param)
{
  .reg .b32 %r<24>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [a_param];
  ld.param.u64 %rd2, [b_param];
  ld.param.u64 %rd3, [c_param];
  wmma.load.c.sync.aligned.row.m32n8k16.global.s32 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%rd3];
  wmma.load.a.sync.aligned.row.m32n8k16.global.s8 {%r9, %r10, %r11, %r12}, [%rd1];
  wmma.load.b.sync.aligned.col.m32n8k16.global.s8 {%r13}, [%rd2];
  wmma.mma.sync.aligned.row.col.m32n8k16.s32.s8.s8.s32.satfinite {%r14, %r15, %r16, %r17, %r18, %r19, %r20, %r21}, {%r9, %r10, %r11, %r12}, {%r13}, {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8};
  wmma.store.d.sync.aligned.row.m32n8k16.global.s32 [%rd3], {%r14, %r15, %r16, %r17, %r18, %r19, %r20, %r21};
  ret;
}
)";
  LoadKernel(6, 95, ptx, "wmma_s8");
  if (HasFatalFailure()) return;
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
  LaunchConfig config;
  config.block[0] = 32;
  ASSERT_EQ(executor_.Launch(95, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
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

// cp.async (sm_80): the ignore-src form (inline PTX only; nvcc's own code is in
// tests/remote/driver/async_copies.cu) zero fills instead of reading, a source offset
// applies, and a source past the end of its allocation faults like any load.
TEST_F(Engine, AsyncCopiesToSharedMemory) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry copy_async(.param .u64 in_param, .param .u64 out_param)
{
  .shared .align 16 .b8 staged[1024];
  .reg .pred %p<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [in_param];
  ld.param.u64 %rd2, [out_param];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 16;
  add.s64 %rd4, %rd1, %rd3;
  mov.u32 %r2, staged;
  mul.lo.u32 %r3, %r1, 16;
  add.u32 %r4, %r2, %r3;
  and.b32 %r5, %r1, 3;
  setp.eq.u32 %p1, %r5, 3;
  cp.async.cg.shared.global [%r4], [%rd4+16], 16, %p1;
  cp.async.commit_group;
  cp.async.wait_all;
  bar.sync 0;
  ld.shared.v4.u32 {%r2, %r3, %r5, %r6}, [%r4];
  add.s64 %rd5, %rd2, %rd3;
  st.global.v4.u32 [%rd5], {%r2, %r3, %r5, %r6};
  ret;
}
)";
  LoadKernel(7, 94, ptx, "copy_async");
  if (HasFatalFailure()) return;
  const int threads = 32;
  std::vector<uint32_t> in(4 * (threads + 1));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint32_t>(i * 7 + 1);
  struct {
    uint64_t in, out;
  } params{Upload(in), Zeros<uint32_t>(4 * threads)};
  LaunchConfig config;
  config.block[0] = threads;
  ASSERT_EQ(executor_.Launch(94, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(params.out, 4 * threads);
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got[4 * t + i], t % 4 == 3 ? 0u : in[4 * (t + 1) + i]) << t << "," << i;
    }
  }
  // One thread more reads 16 bytes past the end of `in`.
  params.out = Zeros<uint32_t>(4 * (threads + 1));
  config.block[0] = threads + 1;
  EXPECT_EQ(executor_.Launch(94, config, &params, sizeof(params)), kCuIllegalAddress);
  std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("cp.async load"), std::string::npos) << detail;
}

// mbarrier (sm_80: cuda::barrier): 64 threads arrive on a barrier initialised for 64 and
// wait on phase 0's parity (the pending counts they see are 63 down to 0, in some order);
// phase 1's parity is not complete yet; in phase 1 the second warp drops out
// (arrive_drop), so phase 2 completes with the first warp's 32 arrivals alone, which each
// thread checks with test_wait on its own state.
TEST_F(Engine, MemoryBarriers) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry mbar(.param .u64 out_param)
{
  .shared .align 8 .b64 bar;
  .reg .pred %p<4>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out_param];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd1, %rd2;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra INITED;
  mbarrier.init.shared.b64 [bar], 64;
INITED:
  bar.sync 0;
  mbarrier.arrive.shared.b64 %rd4, [bar];
  mbarrier.pending_count.b64 %r2, %rd4;
WAIT0:
  mbarrier.try_wait.parity.shared.b64 %p2, [bar], 0;
  @!%p2 bra WAIT0;
  mbarrier.test_wait.parity.shared.b64 %p3, [bar], 1;
  selp.u32 %r3, 1, 0, %p3;
  mov.u32 %r4, 2;
  mov.u32 %r5, 2;
  shr.u32 %r6, %r1, 5;
  setp.eq.u32 %p1, %r6, 1;
  @%p1 bra DROP;
  mbarrier.arrive.shared.b64 %rd5, [bar];
  bra.uni JOINED;
DROP:
  mbarrier.arrive_drop.shared.b64 _, [bar];
JOINED:
  bar.sync 0;
  @%p1 bra DONE;
  mbarrier.test_wait.shared.b64 %p2, [bar], %rd5;
  selp.u32 %r4, 1, 0, %p2;
  mbarrier.arrive.shared.b64 %rd6, [bar];
  bar.warp.sync -1;
  mbarrier.test_wait.shared.b64 %p2, [bar], %rd6;
  selp.u32 %r5, 1, 0, %p2;
DONE:
  st.global.v4.u32 [%rd3], {%r2, %r3, %r4, %r5};
  ret;
}
)";
  LoadKernel(8, 93, ptx, "mbar");
  if (HasFatalFailure()) return;
  uint64_t out = Zeros<uint32_t>(4 * 64);
  LaunchConfig config;
  config.block[0] = 64;
  ASSERT_EQ(executor_.Launch(93, config, &out, sizeof(out)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(out, 4 * 64);
  std::vector<uint32_t> pending;
  for (int t = 0; t < 64; ++t) {
    pending.push_back(got[4 * t]);
    EXPECT_EQ(got[4 * t + 1], 0u) << t;                // phase 1 not complete in phase 1
    EXPECT_EQ(got[4 * t + 2], t < 32 ? 1u : 2u) << t;  // phase 1 complete after bar.sync
    EXPECT_EQ(got[4 * t + 3], t < 32 ? 1u : 2u) << t;  // phase 2: 32 arrivals were enough
  }
  std::sort(pending.begin(), pending.end());
  for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(pending[i], i);
}

// A vector load or store of one thread is one access, as on a GPU, even when another CTA
// (which may run on the engine's other worker thread) watches it. CUB's decoupled
// look-back scan relies on that: a CTA publishes {status, value} with one
// st.relaxed.gpu.v2 and the next polls it with one ld.relaxed.gpu.v2. Here CTA 0 publishes
// rounds {s, 3s} (v2.u32) or {s, 3s, 5s, 7s} (v4.u32, 16 bytes), one slot per thread, and
// CTA 1 polls the slots until it sees the last round, counting pairs that do not match
// (a new status with an old value). Blocks of 32 (a whole warp: coalesced accesses) and
// of 1 (a lone lane) take the engine's two paths.
TEST_F(Engine, VectorAccessesAreWholeAcrossCtas) {
  const std::string ptx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry publish2(.param .u64 slots_param, .param .u64 torn_param, .param .u32 rounds_param)
{
  .reg .pred %p<4>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [slots_param];
  ld.param.u64 %rd2, [torn_param];
  ld.param.u32 %r1, [rounds_param];
  mov.u32 %r10, %tid.x;
  mul.wide.u32 %rd3, %r10, 8;
  add.s64 %rd1, %rd1, %rd3;
  mov.u32 %r2, %ctaid.x;
  setp.eq.u32 %p1, %r2, 0;
  @%p1 bra WRITER;
  setp.ne.u32 %p1, %r2, 1;
  @%p1 bra DONE;
  mov.u32 %r9, 0;
READ:
  ld.relaxed.gpu.global.v2.u32 {%r3, %r4}, [%rd1];
  mul.lo.u32 %r5, %r3, 3;
  setp.ne.u32 %p2, %r4, %r5;
  selp.u32 %r6, 1, 0, %p2;
  add.u32 %r9, %r9, %r6;
  setp.lt.u32 %p3, %r3, %r1;
  @%p3 bra READ;
  mul.wide.u32 %rd4, %r10, 4;
  add.s64 %rd2, %rd2, %rd4;
  st.global.u32 [%rd2], %r9;
  bra.uni DONE;
WRITER:
  mov.u32 %r3, 1;
WRITE:
  mul.lo.u32 %r4, %r3, 3;
  st.relaxed.gpu.global.v2.u32 [%rd1], {%r3, %r4};
  add.u32 %r3, %r3, 1;
  setp.le.u32 %p3, %r3, %r1;
  @%p3 bra WRITE;
DONE:
  ret;
}
.visible .entry publish4(.param .u64 slots_param, .param .u64 torn_param, .param .u32 rounds_param)
{
  .reg .pred %p<4>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [slots_param];
  ld.param.u64 %rd2, [torn_param];
  ld.param.u32 %r1, [rounds_param];
  mov.u32 %r10, %tid.x;
  mul.wide.u32 %rd3, %r10, 16;
  add.s64 %rd1, %rd1, %rd3;
  mov.u32 %r2, %ctaid.x;
  setp.eq.u32 %p1, %r2, 0;
  @%p1 bra WRITER;
  setp.ne.u32 %p1, %r2, 1;
  @%p1 bra DONE;
  mov.u32 %r9, 0;
READ:
  ld.relaxed.gpu.global.v4.u32 {%r3, %r4, %r5, %r6}, [%rd1];
  mul.lo.u32 %r7, %r3, 7;
  setp.ne.u32 %p2, %r6, %r7;
  mul.lo.u32 %r7, %r3, 3;
  setp.ne.or.u32 %p2, %r4, %r7, %p2;
  selp.u32 %r8, 1, 0, %p2;
  add.u32 %r9, %r9, %r8;
  setp.lt.u32 %p3, %r3, %r1;
  @%p3 bra READ;
  mul.wide.u32 %rd4, %r10, 4;
  add.s64 %rd2, %rd2, %rd4;
  st.global.u32 [%rd2], %r9;
  bra.uni DONE;
WRITER:
  mov.u32 %r3, 1;
WRITE:
  mul.lo.u32 %r4, %r3, 3;
  mul.lo.u32 %r5, %r3, 5;
  mul.lo.u32 %r6, %r3, 7;
  st.relaxed.gpu.global.v4.u32 [%rd1], {%r3, %r4, %r5, %r6};
  add.u32 %r3, %r3, 1;
  setp.le.u32 %p3, %r3, %r1;
  @%p3 bra WRITE;
DONE:
  ret;
}
)";
  LoadKernel(9, 94, ptx, "publish2");
  if (HasFatalFailure()) return;
  ASSERT_EQ(executor_.GetFunction(9, 95, "publish4"), kCuSuccess) << executor_.TakeErrorDetail();
  constexpr uint32_t kRounds = 20000;
  for (uint64_t function : {94, 95}) {
    for (uint32_t threads : {32u, 1u}) {
      uint64_t slots = Zeros<uint32_t>(4 * threads);
      uint64_t torn = Upload(std::vector<uint32_t>(threads, 0xdeadbeef));
      uint8_t params[20] = {};
      std::memcpy(params, &slots, 8);
      std::memcpy(params + 8, &torn, 8);
      std::memcpy(params + 16, &kRounds, 4);
      LaunchConfig config;
      config.grid[0] = 4;  // enough CTAs for two workers: CTA 0 on one, CTA 1 on the other
      config.block[0] = threads;
      ASSERT_EQ(executor_.Launch(function, config, params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
      auto counts = Download<uint32_t>(torn, threads);
      for (uint32_t t = 0; t < threads; ++t) {
        EXPECT_EQ(counts[t], 0u) << (function == 94 ? "v2" : "v4") << ", " << threads << " threads: thread " << t
                                 << " saw torn vectors";
      }
    }
  }
}

// membar.gl orders a thread's store before its later load for every other thread, as
// fence.sc does (the store-buffering litmus test): in round r CTA 0 stores x = r, fences
// and loads y, while CTA 1 (on the engine's other worker thread) stores y = r, fences and
// loads x. At least one of them must see the other's round-r store. The two meet between
// rounds on counters of their own.
TEST_F(Engine, FencesOrderStoresBeforeLoadsAcrossCtas) {
  // One worker runs CTA 0 to its end before CTA 1 begins: CTA 0 would wait for ever.
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs two worker threads";
  const std::string ptx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry litmus(.param .u64 cells_param, .param .u64 seen_param, .param .u32 rounds_param)
{
  .reg .pred %p<4>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [cells_param];
  ld.param.u64 %rd2, [seen_param];
  ld.param.u32 %r1, [rounds_param];
  mov.u32 %r2, %ctaid.x;
  setp.gt.u32 %p1, %r2, 1;
  @%p1 bra DONE;
  // mine: cells[ctaid], theirs: cells[1 - ctaid]; my round counter: cells[2 + ctaid]
  mul.wide.u32 %rd3, %r2, 4;
  add.s64 %rd4, %rd1, %rd3;
  sub.u32 %r3, 1, %r2;
  mul.wide.u32 %rd5, %r3, 4;
  add.s64 %rd6, %rd1, %rd5;
  add.s64 %rd7, %rd4, 8;
  add.s64 %rd8, %rd6, 8;
  mul.lo.u32 %r4, %r2, %r1;
  mul.wide.u32 %rd9, %r4, 4;
  add.s64 %rd10, %rd2, %rd9;
  mov.u32 %r5, 1;
ROUND:
  st.volatile.global.u32 [%rd4], %r5;
  membar.gl;
  ld.volatile.global.u32 %r6, [%rd6];
  st.global.u32 [%rd10], %r6;
  add.s64 %rd10, %rd10, 4;
  st.volatile.global.u32 [%rd7], %r5;
WAIT:
  ld.volatile.global.u32 %r7, [%rd8];
  setp.lt.u32 %p2, %r7, %r5;
  @%p2 bra WAIT;
  add.u32 %r5, %r5, 1;
  setp.le.u32 %p3, %r5, %r1;
  @%p3 bra ROUND;
DONE:
  ret;
}
)";
  LoadKernel(10, 96, ptx, "litmus");
  if (HasFatalFailure()) return;
  constexpr uint32_t kRounds = 200000;
  uint64_t cells = Zeros<uint32_t>(4);
  uint64_t seen = Zeros<uint32_t>(2 * kRounds);
  uint8_t params[20] = {};
  std::memcpy(params, &cells, 8);
  std::memcpy(params + 8, &seen, 8);
  std::memcpy(params + 16, &kRounds, 4);
  LaunchConfig config;
  config.grid[0] = 4;  // enough CTAs for two workers: CTA 0 on one, CTA 1 on the other
  ASSERT_EQ(executor_.Launch(96, config, params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(seen, 2 * kRounds);
  uint32_t both_missed = 0;
  for (uint32_t r = 0; r < kRounds; ++r) {
    both_missed += got[r] < r + 1 && got[kRounds + r] < r + 1;
  }
  EXPECT_EQ(both_missed, 0u) << "rounds in which neither CTA saw the other's store";
}

// PTX comes from jobs: declarations that would make the agent loop or allocate without end
// are refused. A register range of 2^64 - 3 (found by the ptx fuzz target, which hung on
// it) and more register names than the module bound fail to load, naming why; a kernel
// needing more local memory per thread than CUDA allows fails its launch with
// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES instead of allocating gigabytes per block.
TEST_F(Engine, OversizedDeclarationsAreRefused) {
  for (const char* registers : {"%r<-3>", "%r<2000000>", "%a<600000>, %b<600000>"}) {
    const std::string ptx = std::string(".version 7.0\n.target sm_80\n.address_size 64\n") +
                            ".visible .entry k()\n{\n  .reg .b32 " + registers + ";\n  ret;\n}\n";
    EXPECT_EQ(executor_.LoadModule(20, ptx.c_str(), ptx.size() + 1, {}), kCuInvalidPtx) << registers;
    EXPECT_NE(executor_.TakeErrorDetail().find("registers declared"), std::string::npos) << registers;
  }
  const std::string big_local = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry big_local(.param .u64 out_param)
{
  .local .align 4 .b8 scratch[1048576];
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out_param];
  mov.u64 %rd2, scratch;
  st.local.u32 [%rd2+1048572], 7;
  ld.local.u32 %r1, [%rd2+1048572];
  st.global.u32 [%rd1], %r1;
  ret;
}
)";
  LoadKernel(21, 92, big_local, "big_local");
  if (HasFatalFailure()) return;
  uint64_t out = Zeros<uint32_t>(1);
  LaunchConfig config;
  config.block[0] = 32;
  EXPECT_EQ(executor_.Launch(92, config, &out, sizeof(out)), kCuLaunchOutOfResources);
  std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("local memory"), std::string::npos) << detail;
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

TEST_F(Engine, LocalMemoryArrays) {
  const int n = 64;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = i * 37 + 5;
  uint64_t din = Upload(in), out = Zeros<int>(n);
  ASSERT_EQ(Run("local_array", {2}, {32}, 0, din, out, n), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, n);
  for (int i = 0; i < n; ++i) {
    int idx = in[i] & 15;
    EXPECT_EQ(got[i], in[i] * idx + in[i] * ((idx + 3) & 15)) << i;
  }
}

TEST_F(Engine, AtomicsOnGlobalAndSharedMemory) {
  const int blocks = 4, threads = 64, n = blocks * threads;
  std::vector<int> counters = {0, 0, -1, 0, -1, 0, 0, 0, 0, 0};
  uint64_t c = Upload(counters), u = Zeros<unsigned>(2), f = Zeros<float>(1), d = Zeros<double>(1),
           w = Zeros<unsigned long long>(1);
  ASSERT_EQ(Run("atomics", {blocks}, {threads}, 0, c, u, f, d, w), kCuSuccess) << last_detail_;
  auto got = Download<int>(c, 10);
  int xor_all = 0, or_all = 0;
  for (int i = 0; i < n; ++i) {
    xor_all ^= i;
    or_all |= 1 << (i % 31);
  }
  EXPECT_EQ(got[0], n);
  EXPECT_EQ(got[1], -2 * n);
  EXPECT_EQ(got[2], n - 1);
  EXPECT_EQ(got[3], -(n - 1));
  EXPECT_EQ(got[4], ~or_all);
  EXPECT_EQ(got[5], or_all);
  EXPECT_EQ(got[6], xor_all);
  EXPECT_EQ(got[7], 42);
  EXPECT_EQ(got[8], 3 * n);
  EXPECT_EQ(got[9], n);
  unsigned inc = 0, dec = 0;
  for (int i = 0; i < n; ++i) {
    inc = inc >= 9 ? 0 : inc + 1;
    dec = (dec == 0 || dec > 9) ? 9 : dec - 1;
  }
  auto ug = Download<unsigned>(u, 2);
  EXPECT_EQ(ug[0], inc);
  EXPECT_EQ(ug[1], dec);
  EXPECT_EQ(Download<float>(f, 1)[0], 0.5f * n);
  EXPECT_EQ(Download<double>(d, 1)[0], 0.25 * n);
  EXPECT_EQ(Download<unsigned long long>(w, 1)[0], static_cast<unsigned long long>(n) << 33);
}

TEST_F(Engine, WarpShufflesVotesAndMatch) {
  const int n = 64;
  uint64_t out = Zeros<int>(8 * n);
  ASSERT_EQ(Run("warp_ops", {1}, {n}, 0, out), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, 8 * n);
  for (int t = 0; t < n; ++t) {
    int lane = t & 31, base = t - lane;
    auto v = [&](int l) { return (base + l) * 3 + 1; };
    int sum = 0;
    for (int l = 0; l < 32; ++l) sum += v(l);
    const int* o = &got[8 * t];
    EXPECT_EQ(o[0], sum) << t;
    EXPECT_EQ(o[1], lane >= 1 ? v(lane - 1) : v(lane)) << t;
    EXPECT_EQ(o[2], lane + 2 <= 31 ? v(lane + 2) : v(lane)) << t;
    EXPECT_EQ(o[3], v(5)) << t;
    EXPECT_EQ(o[4], 1) << t;
    EXPECT_EQ(o[5], base == 0 ? 1 : 0) << t;  // v == 10 at thread 3 only
    EXPECT_EQ(static_cast<uint32_t>(o[6]), 0xfu << (lane / 4 * 4)) << t;
    EXPECT_EQ(static_cast<uint32_t>(o[7]), (lane & 1) ? 0xaaaaaaaau : 0u) << t;
  }
}

TEST_F(Engine, SpecialRegistersAndClocks) {
  const int n = 64;
  uint64_t out = Zeros<unsigned>(4 * n), clocks = Zeros<long long>(2 * n);
  auto before = std::chrono::system_clock::now().time_since_epoch();
  ASSERT_EQ(Run("specials", {1}, {n}, 0, out, clocks), kCuSuccess) << last_detail_;
  auto after = std::chrono::system_clock::now().time_since_epoch();
  auto got = Download<unsigned>(out, 4 * n);
  auto c = Download<long long>(clocks, 2 * n);
  for (int t = 0; t < n; ++t) {
    EXPECT_EQ(got[4 * t], static_cast<unsigned>(t % 32));
    EXPECT_EQ(got[4 * t + 1], static_cast<unsigned>(t / 32));
    EXPECT_EQ(got[4 * t + 2], 1u);  // %smid < %nsmid
    EXPECT_EQ(got[4 * t + 3], 4950u);
    EXPECT_GT(c[2 * t], 0) << "clock64 did not advance";
    EXPECT_GE(c[2 * t + 1], std::chrono::duration_cast<std::chrono::nanoseconds>(before).count());
    EXPECT_LE(c[2 * t + 1], std::chrono::duration_cast<std::chrono::nanoseconds>(after).count());
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
  SimExecutor other(&memory_);
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

TEST_F(Engine, StrayAccessesAreIllegalAddresses) {
  uint64_t own = Zeros<int>(16);
  ASSERT_EQ(Run("poke", {1}, {1}, 0, own, 15LL), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int>(own, 16)[15], 1);
  EXPECT_EQ(Run("poke", {1}, {1}, 0, own, 16LL),
            kCuIllegalAddress);  // one past the end
  EXPECT_NE(last_detail_.find("store of 4 bytes"), std::string::npos) << last_detail_;
  EXPECT_EQ(Run("poke", {1}, {1}, 0, own, -1LL), kCuIllegalAddress);
  EXPECT_EQ(Run("poke", {1}, {1}, 0, uint64_t{0}, 0LL),
            kCuIllegalAddress);  // null
  // Another session's memory of the same GPU is not reachable.
  SimExecutor other(&memory_);
  uint64_t theirs = 0;
  ASSERT_EQ(other.Allocate(64, &theirs), kCuSuccess);
  EXPECT_EQ(Run("poke", {1}, {1}, 0, theirs, 0LL), kCuIllegalAddress);
  const void* data = nullptr;
  ASSERT_EQ(other.CopyFromDevice(theirs, 4, 0, &data), kCuSuccess);
  EXPECT_EQ(*static_cast<const int*>(data), 0);
}

// A warp's loads and stores are checked once for the span of its lanes' addresses; a
// stray lane must still fault as the per-lane path does: the first stray lane's address,
// and the stores of the lanes before it done.
TEST_F(Engine, StrayLaneOfAWholeWarpFaults) {
  uint64_t own = Zeros<int>(32);
  ASSERT_EQ(Run("warp_poke", {1}, {32}, 0, own, 0LL), kCuSuccess) << last_detail_;
  auto got = Download<int>(own, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], i + 1) << i;
  uint64_t fresh = Zeros<int>(32);
  EXPECT_EQ(Run("warp_poke", {1}, {32}, 0, fresh, 2LL), kCuIllegalAddress);
  char expected[96];
  std::snprintf(expected, sizeof(expected), "store of 4 bytes at 0x%llx", static_cast<unsigned long long>(fresh + 128));
  EXPECT_NE(last_detail_.find(expected), std::string::npos) << last_detail_;
  got = Download<int>(fresh, 32);
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], 0);
  for (int i = 2; i < 32; ++i) EXPECT_EQ(got[i], i - 1) << i;
  EXPECT_EQ(Run("warp_poke", {1}, {32}, 0, fresh, 1LL), kCuIllegalAddress);  // lane 31 only
  std::snprintf(expected, sizeof(expected), "store of 4 bytes at 0x%llx", static_cast<unsigned long long>(fresh + 128));
  EXPECT_NE(last_detail_.find(expected), std::string::npos) << last_detail_;
  EXPECT_EQ(Run("warp_poke", {1}, {32}, 0, fresh, -1LL), kCuIllegalAddress);
  std::snprintf(expected, sizeof(expected), "store of 4 bytes at 0x%llx", static_cast<unsigned long long>(fresh - 4));
  EXPECT_NE(last_detail_.find(expected), std::string::npos) << last_detail_;

  uint64_t in = Upload(std::vector<int>(32, 5));
  uint64_t out = Zeros<int>(32);
  ASSERT_EQ(Run("warp_peek", {1}, {32}, 0, in, out, 0LL), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int>(out, 32), std::vector<int>(32, 5));
  EXPECT_EQ(Run("warp_peek", {1}, {32}, 0, in, out, 1LL), kCuIllegalAddress);
  std::snprintf(expected, sizeof(expected), "load of 4 bytes at 0x%llx", static_cast<unsigned long long>(in + 128));
  EXPECT_NE(last_detail_.find(expected), std::string::npos) << last_detail_;

  // Shared memory: 32 ints of dynamic shared memory; lane 31 one past the end.
  ASSERT_EQ(Run("warp_poke_shared", {1}, {32}, 128, 0LL, out), kCuSuccess) << last_detail_;
  got = Download<int>(out, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], i + 1) << i;
  EXPECT_EQ(Run("warp_poke_shared", {1}, {32}, 128, 1LL, out), kCuIllegalAddress);
  EXPECT_NE(last_detail_.find("store of 4 bytes"), std::string::npos) << last_detail_;
}

// Partial masks, lanes in two allocations, generic pointers to shared and global memory,
// vector and signed narrow loads, a vector store under a mask.
TEST_F(Engine, LoadAndStorePathsAgree) {
  const int n = 64;
  std::vector<int> v(4 * n), a(n + 1), b(n + 1);
  std::vector<signed char> s(n);
  std::vector<short> h(n);
  for (int i = 0; i < 4 * n; ++i) v[i] = (i * 37) % 23 - 11;
  for (int i = 0; i <= n; ++i) {
    a[i] = i * i - 50;
    b[i] = 1000 - 7 * i;
  }
  for (int i = 0; i < n; ++i) {
    s[i] = static_cast<signed char>(i * 9 - 100);
    h[i] = static_cast<short>(i * 1001 - 30000);
  }
  uint64_t dv = Upload(v), ds = Upload(s), dh = Upload(h), da = Upload(a), db = Upload(b);
  uint64_t out = Zeros<int>(2 * n);
  ASSERT_EQ(Run("mem_paths", {1}, {n}, 0, dv, ds, dh, da, db, out), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, 2 * n);
  std::vector<int> tile(65);
  for (int t = 0; t < n; ++t) tile[t] = a[t] * 3;
  tile[64] = 7;
  for (int t = 0; t < n; ++t) {
    int r = 0;
    if (t % 3 != 1) {
      r += v[4 * t] - v[4 * t + 1] + v[4 * t + 2] * v[4 * t + 3];
      r += s[t];
      r += h[t];
    }
    r += (t & 1) ? a[t] : b[t];
    r += tile[t] + 2 * tile[t + 1];
    const std::vector<int>& p = t % 5 == 0 ? b : a;
    r += p[t] + 2 * p[t + 1];
    int want0 = (t & 4) ? r : 0, want1 = (t & 4) ? -r : 0;
    EXPECT_EQ(got[2 * t], want0) << t;
    EXPECT_EQ(got[2 * t + 1], want1) << t;
  }
}

TEST_F(Engine, AtomicPathsReturnValuesAndFaults) {
  const int blocks = 4, threads = 96, n = blocks * threads;
  uint64_t tickets = Zeros<int>(n + 2), shared_tickets = Zeros<int>(n), generic_tickets = Zeros<int>(n),
           bins = Zeros<int>(8);
  ASSERT_EQ(Run("atomic_paths", {blocks}, {threads}, 0, tickets, shared_tickets, generic_tickets, bins), kCuSuccess)
      << last_detail_;
  auto t = Download<int>(tickets, n + 2);
  auto st = Download<int>(shared_tickets, n);
  auto gt = Download<int>(generic_tickets, n);
  EXPECT_EQ(t[n], n);
  EXPECT_EQ(t[n + 1], n);
  std::vector<int> global(t.begin(), t.begin() + n), global_generic(n);
  for (int i = 0; i < n; ++i) global_generic[i] = gt[i] / 1000;
  std::sort(global.begin(), global.end());
  std::sort(global_generic.begin(), global_generic.end());
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(global[i], i);
    EXPECT_EQ(global_generic[i], i);
  }
  for (int b = 0; b < blocks; ++b) {
    std::vector<int> shared(st.begin() + b * threads, st.begin() + (b + 1) * threads), generic;
    for (int k = 0; k < threads; ++k) generic.push_back(gt[b * threads + k] % 1000);
    std::sort(shared.begin(), shared.end());
    std::sort(generic.begin(), generic.end());
    for (int k = 0; k < threads; ++k) {
      EXPECT_EQ(shared[k], k) << b;
      EXPECT_EQ(generic[k], k) << b;
    }
  }
  auto got = Download<int>(bins, 8);
  for (int k = 0; k < 8; ++k) {
    int want = 0;
    for (int x = 0; x < threads; ++x) want += (x % 3 && x % 8 == k) ? x : 0;
    EXPECT_EQ(got[k], blocks * want) << k;
  }

  uint64_t p = Zeros<int>(32);
  ASSERT_EQ(Run("atomic_poke", {1}, {32}, 0, p, 0LL), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int>(p, 32), std::vector<int>(32, 1));
  EXPECT_EQ(Run("atomic_poke", {1}, {32}, 0, p, 2LL), kCuIllegalAddress);
  EXPECT_NE(last_detail_.find("misaligned atomic of 4 bytes"), std::string::npos) << last_detail_;
  EXPECT_EQ(Run("atomic_poke", {1}, {32}, 0, p, 4LL), kCuIllegalAddress);
  char expected[96];
  std::snprintf(expected, sizeof(expected), "atomic of 4 bytes at 0x%llx", static_cast<unsigned long long>(p + 128));
  EXPECT_NE(last_detail_.find(expected), std::string::npos) << last_detail_;
  auto after = Download<int>(p, 32);
  EXPECT_EQ(after[0], 1);
  for (int i = 1; i < 32; ++i) EXPECT_EQ(after[i], 2) << i;
}

// Loads whose destination is their own address register (pointer chasing), whole warp
// and under a guard: each lane reads its address before its destination is written.
TEST_F(Engine, LoadIntoItsAddressRegister) {
  const char ptx[] = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .entry chase(.param .u64 nodes, .param .u64 out) {
  .reg .pred %p<2>;
  .reg .b32 %r<2>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [nodes];
  ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd4, %r1, 16;
  add.s64 %rd1, %rd1, %rd4;
  ld.global.v2.u64 {%rd1, %rd3}, [%rd1];
  setp.lt.u32 %p1, %r1, 20;
  @%p1 ld.global.u64 %rd1, [%rd1];
  add.s64 %rd5, %rd2, %rd4;
  st.global.v2.u64 [%rd5], {%rd3, %rd1};
  ret;
}
)";
  ASSERT_EQ(executor_.LoadModule(2, ptx, sizeof(ptx), {}), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(2, 7, "chase"), kCuSuccess) << executor_.TakeErrorDetail();
  uint64_t nodes = Zeros<uint64_t>(64), out = Zeros<uint64_t>(64);
  std::vector<uint64_t> init(64);
  for (int t = 0; t < 32; ++t) {
    init[2 * t] = nodes + 16 * ((t + 5) % 32);
    init[2 * t + 1] = 100 + t;
  }
  ASSERT_EQ(executor_.CopyToDevice(nodes, init.data(), init.size() * 8, 0), kCuSuccess);
  uint64_t params[2] = {nodes, out};
  LaunchConfig config;
  config.block[0] = 32;
  ASSERT_EQ(executor_.Launch(7, config, params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint64_t>(out, 64);
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(got[2 * t], 100u + t) << t;
    EXPECT_EQ(got[2 * t + 1], nodes + 16 * ((t + (t < 20 ? 10 : 5)) % 32)) << t;
  }
}

TEST_F(Engine, TrapsAssertionsAndTextures) {
  EXPECT_EQ(Run("trap_kernel", {1}, {32}, 0), kCuLaunchFailed);
  EXPECT_EQ(Run("assert_kernel", {1}, {4}, 0, 1), kCuSuccess) << last_detail_;
  EXPECT_EQ(executor_.TakeOutput(), "");
  EXPECT_EQ(Run("assert_kernel", {2}, {4}, 0, 3), kCuAssert);
  std::string text = executor_.TakeOutput();
  EXPECT_NE(text.find("Assertion `v != 3` failed."), std::string::npos) << text;
  EXPECT_NE(text.find("engine_kernels.cu"), std::string::npos) << text;
  // Textures (texture_test.cc runs them): a handle that is no texture object of the
  // session faults the launch as an illegal address.
  uint64_t out = Zeros<float>(32);
  EXPECT_EQ(Run("texture_kernel", {1}, {32}, 0, uint64_t{1}, out), kCuIllegalAddress);
  EXPECT_NE(last_detail_.find("texture object"), std::string::npos) << last_detail_;
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

// What a kernel needs, as a driver reports it of compiled code: only the module's .shared
// variables the kernel or a function it calls names (here 1024 + 64 bytes, not the other
// kernel's 8192), its .maxntid bound (a bigger block fails with
// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), the module's .const bytes, its local memory.
TEST_F(Engine, KernelsNeedTheirOwnSharedMemoryAndThreadBound) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.const .align 4 .b8 weights[96];
.shared .align 4 .b8 big_tile[8192];
.shared .align 8 .b8 own_tile[1024];
.shared .align 16 .b8 callee_tile[64];
.func touch()
{
  .reg .b32 %r<2>;
  mov.u32 %r1, 7;
  st.shared.u32 [callee_tile], %r1;
  ret;
}
.entry bounded(.param .u64 out)
.maxntid 64, 2, 1
{
  .local .align 4 .b8 __local_depot0[40];
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  st.shared.u32 [own_tile], %r1;
  call touch, ();
  bar.sync 0;
  ld.shared.u32 %r2, [callee_tile];
  ld.shared.u32 %r3, [own_tile];
  add.u32 %r2, %r2, %r3;
  st.global.u32 [%rd1], %r2;
  ret;
}
.entry other()
{
  .reg .b32 %r<2>;
  mov.u32 %r1, 1;
  st.shared.u32 [big_tile+8188], %r1;
  ret;
}
)";
  LoadKernel(13, 91, ptx, "bounded");
  if (HasFatalFailure()) return;
  FunctionResources resources;
  ASSERT_TRUE(executor_.Resources(91, &resources));
  EXPECT_EQ(resources.static_shared_bytes, 1024 + 64);
  EXPECT_EQ(resources.max_threads_per_block, 128);
  EXPECT_EQ(resources.const_bytes, 96);
  EXPECT_EQ(resources.local_bytes, 48);  // 40, in 16-byte units
  ASSERT_EQ(executor_.GetFunction(13, 92, "other"), kCuSuccess);
  ASSERT_TRUE(executor_.Resources(92, &resources));
  EXPECT_EQ(resources.static_shared_bytes, 8192);
  EXPECT_EQ(resources.max_threads_per_block, 1024);
  EXPECT_FALSE(executor_.Resources(93, &resources));  // no such function

  uint64_t out = Zeros<uint32_t>(1);
  LaunchConfig config;
  config.block[0] = 64;
  config.block[1] = 2;
  EXPECT_EQ(executor_.Launch(91, config, &out, sizeof(out)), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_GE(Download<uint32_t>(out, 1)[0], 7u);
  config.block[1] = 3;  // 192 threads
  EXPECT_EQ(executor_.Launch(91, config, &out, sizeof(out)), kCuLaunchOutOfResources);
  EXPECT_NE(executor_.TakeErrorDetail().find("at most 128 threads"), std::string::npos);
}

// Dynamic parallelism: a kernel that launches itself one level deeper each time gets
// cudaSuccess from its launches down to CUDA's 24 levels and
// cudaErrorLaunchMaxDepthExceeded (65) there; the device runtime launches only the
// parameter buffers it handed out (a pointer to other memory, or NULL, is
// cudaErrorInvalidValue, and nothing runs).
TEST_F(Engine, DeviceSideLaunchesAreBoundedAndOnlyOfTheRuntimesBuffers) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.extern .func (.param .b64 func_retval0) __cudaCDP2GetParameterBufferV2
(
  .param .b64 p0,
  .param .align 4 .b8 p1[12],
  .param .align 4 .b8 p2[12],
  .param .b32 p3
)
;
.extern .func (.param .b32 func_retval0) __cudaCDP2LaunchDeviceV2
(
  .param .b64 p0,
  .param .b64 p1
)
;
.visible .entry deep(.param .u64 deep_errors, .param .u32 deep_depth)
{
  .reg .pred %p<3>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [deep_errors];
  ld.param.u32 %r1, [deep_depth];
  setp.ge.u32 %p1, %r1, 30;
  @%p1 bra $DONE;
  mov.u64 %rd2, deep;
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd2;
  .param .align 4 .b8 param1[12];
  st.param.b32 [param1+0], 1;
  st.param.b32 [param1+4], 1;
  st.param.b32 [param1+8], 1;
  .param .align 4 .b8 param2[12];
  st.param.b32 [param2+0], 1;
  st.param.b32 [param2+4], 1;
  st.param.b32 [param2+8], 1;
  .param .b32 param3;
  st.param.b32 [param3+0], 0;
  .param .b64 retval0;
  call.uni (retval0), __cudaCDP2GetParameterBufferV2, (param0, param1, param2, param3);
  ld.param.b64 %rd3, [retval0+0];
  }
  setp.eq.s64 %p2, %rd3, 0;
  @%p2 bra $DONE;
  add.u32 %r2, %r1, 1;
  st.u64 [%rd3], %rd1;
  st.u32 [%rd3+8], %r2;
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd3;
  .param .b64 param1;
  st.param.b64 [param1+0], 0;
  .param .b32 retval0;
  call.uni (retval0), __cudaCDP2LaunchDeviceV2, (param0, param1);
  ld.param.b32 %r3, [retval0+0];
  }
  mul.wide.u32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd4;
  st.global.u32 [%rd5], %r3;
$DONE:
  ret;
}
.visible .entry forge(.param .u64 forge_out, .param .u64 forge_buffer)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [forge_out];
  ld.param.u64 %rd2, [forge_buffer];
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd2;
  .param .b64 param1;
  st.param.b64 [param1+0], 0;
  .param .b32 retval0;
  call.uni (retval0), __cudaCDP2LaunchDeviceV2, (param0, param1);
  ld.param.b32 %r1, [retval0+0];
  }
  st.global.u32 [%rd1], %r1;
  ret;
}
)";
  LoadKernel(14, 95, ptx, "deep");
  if (HasFatalFailure()) return;
  ASSERT_EQ(executor_.GetFunction(14, 96, "forge"), kCuSuccess) << executor_.TakeErrorDetail();
  uint64_t errors = Upload(std::vector<uint32_t>(32, 0xffffffffu));
  struct {
    uint64_t errors;
    uint32_t depth;
  } deep{errors, 0};
  LaunchConfig config;
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

// A fatbin of uncompressed PTX entries, each for `arch` (what the library ships for a
// program built with -rdc=true: the translation units' PTX beside the linked SASS).
std::vector<uint8_t> PtxFatbin(const std::vector<std::string>& texts, uint32_t arch) {
  std::vector<uint8_t> out(16, 0);
  auto put = [&](size_t at, auto value) { std::memcpy(out.data() + at, &value, sizeof(value)); };
  for (const std::string& text : texts) {
    const size_t at = out.size(), padded = (text.size() + 1 + 7) / 8 * 8;
    out.resize(at + 64 + padded, 0);
    put(at, uint16_t{1});                                  // kind: PTX
    put(at + 2, uint16_t{0x101});                          // version
    put(at + 4, uint32_t{64});                             // header size
    put(at + 8, static_cast<uint32_t>(padded));            // padded payload size
    put(at + 16, static_cast<uint32_t>(text.size() + 1));  // payload size
    put(at + 28, arch);                                    // sm_version
    std::memcpy(out.data() + at + 64, text.data(), text.size());
  }
  put(0, uint32_t{0xBA55ED50});
  put(4, uint16_t{1});
  put(6, uint16_t{16});
  put(16 - 8, static_cast<uint64_t>(out.size() - 16));
  return out;
}

// The translation units of one module are linked as a driver JIT-links relocatable PTX: a
// declaration takes the other unit's definition, each unit's own `g` and `$str` stay
// apart, an identical unit counts once, and a unit that is not PTX fails the load naming
// it.
TEST_F(Engine, TranslationUnitsAreLinked) {
  const std::string head = ".version 7.0\n.target sm_75\n.address_size 64\n";
  const std::string unit1 = head + R"(
.visible .global .align 4 .u32 counter = 5;
.global .align 1 .b8 $str[2] = {65, 0};
.visible .func (.param .b32 r) twice(.param .b32 x)
{
  .reg .b32 %r<3>;
  ld.param.b32 %r1, [x];
  add.s32 %r2, %r1, %r1;
  st.param.b32 [r], %r2;
  ret;
}
.func (.param .b32 r) g()
{
  .reg .b32 %r<2>;
  mov.u32 %r1, 1000;
  st.param.b32 [r], %r1;
  ret;
}
.visible .entry first(.param .u64 out)
{
  .reg .b32 %r<6>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  { .param .b32 a; st.param.b32 [a], 3; .param .b32 b; call.uni (b), twice, (a); ld.param.b32 %r1, [b]; }
  { .param .b32 b; call.uni (b), g, (); ld.param.b32 %r2, [b]; }
  ld.global.u8 %r3, [$str];
  add.s32 %r4, %r1, %r2;
  add.s32 %r4, %r4, %r3;
  st.global.u32 [%rd1], %r4;
  ret;
}
)";
  const std::string unit2 = head + R"(
.extern .global .align 4 .u32 counter;
.global .align 1 .b8 $str[2] = {66, 0};
.extern .func (.param .b32 r) twice(.param .b32 x);
.func (.param .b32 r) g()
{
  .reg .b32 %r<2>;
  mov.u32 %r1, 2000;
  st.param.b32 [r], %r1;
  ret;
}
.visible .entry second(.param .u64 out)
{
  .reg .b32 %r<7>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  { .param .b32 a; st.param.b32 [a], 4; .param .b32 b; call.uni (b), twice, (a); ld.param.b32 %r1, [b]; }
  { .param .b32 b; call.uni (b), g, (); ld.param.b32 %r2, [b]; }
  ld.global.u8 %r3, [$str];
  ld.global.u32 %r5, [counter];
  add.s32 %r4, %r1, %r2;
  add.s32 %r4, %r4, %r3;
  add.s32 %r4, %r4, %r5;
  st.global.u32 [%rd1], %r4;
  ret;
}
)";
  const auto fatbin = PtxFatbin({unit1, unit2, unit1}, 75);
  ASSERT_EQ(executor_.LoadModule(30, fatbin.data(), fatbin.size(), {}), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(30, 130, "first"), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(30, 131, "second"), kCuSuccess) << executor_.TakeErrorDetail();
  uint64_t out = Zeros<uint32_t>(2), second_out = out + 4;
  LaunchConfig config;
  ASSERT_EQ(executor_.Launch(130, config, &out, sizeof(out)), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.Launch(131, config, &second_out, sizeof(second_out)), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint32_t>(out, 2), (std::vector<uint32_t>{6 + 1000 + 'A', 8 + 2000 + 'B' + 5}));
  uint64_t counter = 0, size = 0;
  ASSERT_EQ(executor_.GetGlobal(30, "counter", &counter, &size), kCuSuccess);
  EXPECT_EQ(size, 4u);  // the definition's, not the declaration's

  const auto broken = PtxFatbin({unit1, head + ".visible .entry third( {"}, 75);
  EXPECT_EQ(executor_.LoadModule(31, broken.data(), broken.size(), {}), kCuInvalidPtx);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("translation unit 2 of 2"), std::string::npos) << detail;
}

// Lanes of a warp waiting for each other make progress, as on sm_70 and later GPUs: an
// intra-warp spin lock without the "done flag" idiom, lane 0 spinning on lane 31's flag
// (each ran for ever with the lowest PC always first), and a long divergent loop before a
// whole-warp shuffle, which must still see every lane.
TEST_F(Engine, LanesOfAWarpWaitingForEachOtherProgress) {
  uint64_t lock = Zeros<int32_t>(1), counter = Zeros<int32_t>(1);
  ASSERT_EQ(Run("intra_warp_lock", {4}, {64}, 0, lock, counter), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int32_t>(counter, 1)[0], 4 * 64);
  uint64_t flags = Zeros<int32_t>(8), out = Zeros<int32_t>(256);
  ASSERT_EQ(Run("intra_warp_flag", {2}, {128}, 0, flags, out), kCuSuccess) << last_detail_;
  auto got = Download<int32_t>(out, 256);
  int work = 0;
  for (int i = 0; i < 2000; ++i) work += i % 7;
  for (int warp = 0; warp < 8; ++warp) {
    EXPECT_EQ(got[warp * 32], 1) << "warp " << warp;
    EXPECT_EQ(got[warp * 32 + 31], work) << "warp " << warp;
  }
  ASSERT_EQ(Run("long_divergent_loop_then_shuffle", {1}, {64}, 0, out), kCuSuccess) << last_detail_;
  auto counts = Download<uint32_t>(out, 64);
  uint32_t sum = 0;
  for (uint32_t lane = 0; lane < 32; ++lane) {
    uint32_t count = 0;
    for (uint32_t i = 0; i < (lane >= 16 ? 20000 + lane : lane); ++i) count = count * 3 + (i & 7);
    sum += count;
  }
  for (int t = 0; t < 64; ++t) EXPECT_EQ(counts[t], sum) << "thread " << t;
}

// Named barriers keep their own thread counts: a producer warp arrives (bar.arrive) and
// goes on while its consumer waits (bar.sync) for that barrier only, and another pair of
// warps passes a third barrier meanwhile. Every barrier was CTA-wide: bar.arrive did not
// count and the consumer was released with the producer's next wait, reading the next
// round's row.
TEST_F(Engine, NamedBarriersCountTheirOwnThreads) {
  const int rounds = 6;
  uint64_t out = Zeros<int32_t>(rounds * 32 + 3);
  ASSERT_EQ(Run("named_barriers", {2}, {128}, 0, out, rounds, 5), kCuSuccess) << last_detail_;
  auto got = Download<int32_t>(out, rounds * 32 + 3);
  for (int r = 0; r < rounds; ++r) {
    for (int lane = 0; lane < 32; ++lane) {
      ASSERT_EQ(got[r * 32 + lane], r * 100 + lane) << "round " << r << " lane " << lane;
    }
  }
  EXPECT_EQ(got[rounds * 32], 2 * rounds);  // warp 2 of both CTAs, every round
  EXPECT_EQ(got[rounds * 32 + 1], 2 * rounds);
  EXPECT_EQ(got[rounds * 32 + 2], 1);
}

// An arithmetic instruction with a modifier the engine does not implement is refused at
// its launch (CUDA_ERROR_NOT_SUPPORTED naming it), not run as if the modifier were absent:
// mad24.hi.sat saturates on a GPU, and ran as plain mad24.hi; st.shared::cluster stored
// into the CTA's own shared memory through a generic address. The same module's kernel
// without such a modifier runs.
TEST_F(Engine, UnimplementedModifiersAreRefusedNotIgnored) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry saturating_mad24(.param .u64 out_param)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out_param];
  mov.u32 %r1, 8388607;
  mad24.hi.sat.s32 %r2, %r1, %r1, 2147483647;
  st.global.u32 [%rd1], %r2;
  ret;
}
.visible .entry cluster_store(.param .u64 out_param)
{
  .reg .b32 %r<2>;
  .shared .align 4 .u32 slot;
  mov.u32 %r1, slot;
  st.shared::cluster.u32 [%r1], 5;
  ret;
}
.visible .entry cluster_barrier(.param .u64 out_param)
{
  barrier.cluster.arrive;
  barrier.cluster.wait;
  ret;
}
.visible .entry plain_mad24(.param .u64 out_param)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out_param];
  mov.u32 %r1, 1000;
  mad24.lo.s32 %r2, %r1, %r1, 7;
  st.global.u32 [%rd1], %r2;
  ret;
}
)";
  LoadKernel(13, 94, ptx, "saturating_mad24");
  if (HasFatalFailure()) return;
  ASSERT_EQ(executor_.GetFunction(13, 95, "plain_mad24"), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(13, 93, "cluster_store"), kCuSuccess) << executor_.TakeErrorDetail();
  uint64_t out = Zeros<uint32_t>(1);
  LaunchConfig config;
  // Another CTA's shared memory (distributed shared memory) is not this CTA's.
  EXPECT_EQ(executor_.Launch(93, config, &out, sizeof(out)), kCuNotSupported);
  const std::string cluster_detail = executor_.TakeErrorDetail();
  EXPECT_NE(cluster_detail.find("st.shared::cluster.u32"), std::string::npos) << cluster_detail;
  ASSERT_EQ(executor_.GetFunction(13, 92, "cluster_barrier"), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(executor_.Launch(92, config, &out, sizeof(out)), kCuNotSupported);
  const std::string barrier_detail = executor_.TakeErrorDetail();
  EXPECT_NE(barrier_detail.find("barrier.cluster.arrive"), std::string::npos) << barrier_detail;
  EXPECT_EQ(executor_.Launch(94, config, &out, sizeof(out)), kCuNotSupported);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("mad24.hi.sat.s32': modifier .sat"), std::string::npos) << detail;
  EXPECT_EQ(Download<uint32_t>(out, 1)[0], 0u);
  ASSERT_EQ(executor_.Launch(95, config, &out, sizeof(out)), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint32_t>(out, 1)[0], 1000007u);
}

// A barrier that can never complete is the tenant's deadlock: the launch fails with
// CUDA_ERROR_LAUNCH_FAILED naming the block and the barrier, instead of hanging or running
// on with the threads released (wrong answers). Mode 0: half of the threads wait for a
// count of 128 that only 64 reach (the others exited). Mode 1: warp 0 waits at barrier 0,
// warp 1 at barrier 1, each for every thread. Mode 2: the same barrier with counts that
// complete runs to the end. The executor serves the next launch as before.
TEST_F(Engine, BarrierDeadlockFailsTheLaunchNamingIt) {
  const std::string ptx = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry barrier_deadlock(.param .u64 out_param, .param .u32 mode_param)
{
  .reg .pred %p<4>;
  .reg .b32 %r<6>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out_param];
  ld.param.u32 %r1, [mode_param];
  mov.u32 %r2, %tid.x;
  setp.eq.u32 %p1, %r1, 1;
  @%p1 bra SPLIT;
  setp.ge.u32 %p2, %r2, 64;
  @%p2 bra DONE;
  setp.eq.u32 %p3, %r1, 2;
  selp.u32 %r3, 64, 128, %p3;
  bar.sync 1, %r3;
  bra.uni DONE;
SPLIT:
  shr.u32 %r4, %r2, 5;
  bar.sync %r4;
DONE:
  mul.wide.u32 %rd2, %r2, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], 1;
  ret;
}
)";
  LoadKernel(12, 96, ptx, "barrier_deadlock");
  if (HasFatalFailure()) return;
  uint64_t out = Zeros<uint32_t>(128);
  auto launch = [&](uint32_t mode, uint32_t blocks) {
    struct {
      uint64_t out;
      uint32_t mode;
    } params{out, mode};
    LaunchConfig config;
    config.grid[0] = blocks;
    config.block[0] = mode == 1 ? 64 : 128;
    int32_t status = executor_.Launch(96, config, &params, sizeof(params));
    last_detail_ = executor_.TakeErrorDetail();
    return status;
  };
  EXPECT_EQ(launch(0, 3), kCuLaunchFailed);
  EXPECT_NE(last_detail_.find("deadlock"), std::string::npos) << last_detail_;
  EXPECT_NE(last_detail_.find("barrier 1: 64 threads waiting, 64 of the 128"), std::string::npos) << last_detail_;
  EXPECT_EQ(launch(1, 1), kCuLaunchFailed);
  EXPECT_NE(last_detail_.find("block (0,0,0)"), std::string::npos) << last_detail_;
  EXPECT_NE(last_detail_.find("barrier 0: 32 threads waiting, all 64 running threads needed"), std::string::npos)
      << last_detail_;
  EXPECT_NE(last_detail_.find("barrier 1: 32 threads waiting"), std::string::npos) << last_detail_;
  ASSERT_EQ(launch(2, 2), kCuSuccess) << last_detail_;
  auto got = Download<uint32_t>(out, 128);
  for (int t = 0; t < 128; ++t) ASSERT_EQ(got[t], 1u) << "thread " << t;
}

// CTAs waiting for other CTAs of their grid run, as on a GPU that holds the grid at once: a
// CTA that runs long makes its worker start the following CTAs beside it. Each of these
// ran for ever when a worker ran its CTAs one at a time to completion.
TEST_F(Engine, CtasWaitingForOtherCtasOfTheirGridProgress) {
  const int blocks = 64, threads = 64;
  uint64_t counter = Zeros<int32_t>(1), values = Zeros<int32_t>(blocks);
  uint64_t out = Zeros<int32_t>(blocks * threads);
  ASSERT_EQ(Run("software_grid_barrier", {blocks}, {threads}, 0, counter, values, out), kCuSuccess) << last_detail_;
  auto got = Download<int32_t>(out, blocks * threads);
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < threads; ++t) {
      ASSERT_EQ(got[b * threads + t], ((b + 1) % blocks) * 3 + 1) << "block " << b;
    }
  }
  EXPECT_EQ(Download<int32_t>(counter, 1)[0], blocks);

  uint64_t flag = Zeros<int32_t>(1), pair = Zeros<int32_t>(2);
  ASSERT_EQ(Run("first_waits_for_last", {40}, {32}, 0, flag, pair), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int32_t>(pair, 2), (std::vector<int32_t>{42, 41}));

  // A failure while others wait ends the launch (the waiting CTAs are abandoned).
  uint64_t count = Zeros<int32_t>(1);
  EXPECT_EQ(Run("trap_while_others_wait", {16}, {32}, 0, count), kCuLaunchFailed);
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
  const std::string bytes_ptx = R"(
.version 7.0
.target sm_75
.address_size 64
.global .align 8 .u64 target_var = 5;
.global .align 1 .b8 packed[10] = {1, 0xFF(generic(target_var)+2), 0xFF00(generic(target_var)+2), 0xFF0000(generic(target_var)+2), 0xFF000000(generic(target_var)+2), 0xFF00000000(generic(target_var)+2), 0xFF0000000000(generic(target_var)+2), 0xFF000000000000(generic(target_var)+2), 0xFF00000000000000(generic(target_var)+2), 9};
.visible .entry nothing() { ret; }
)";
  LoadKernel(20, 120, bytes_ptx, "nothing");
  if (HasFatalFailure()) return;
  uint64_t target = 0, packed = 0, size = 0;
  ASSERT_EQ(executor_.GetGlobal(20, "target_var", &target, &size), kCuSuccess);
  ASSERT_EQ(executor_.GetGlobal(20, "packed", &packed, &size), kCuSuccess);
  auto raw = Download<uint8_t>(packed, 10);
  uint64_t address = 0;
  std::memcpy(&address, raw.data() + 1, 8);
  EXPECT_EQ(raw[0], 1);
  EXPECT_EQ(address, target + 2);
  EXPECT_EQ(raw[9], 9);

  const std::string unknown_ptx = R"(
.version 7.0
.target sm_75
.address_size 64
.global .align 8 .u64 dangling[2] = {0, generic(nowhere)};
.visible .entry nothing() { ret; }
)";
  EXPECT_EQ(executor_.LoadModule(21, unknown_ptx.c_str(), unknown_ptx.size() + 1, {}), kCuInvalidPtx);
  const std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("nowhere"), std::string::npos) << detail;

  const std::string branching_ptx = R"(
.version 7.0
.target sm_75
.address_size 64
.func (.param .b32 r) tri(.param .b32 n)
{
  .reg .b32 %r<8>;
  .reg .pred %p<2>;
  ld.param.b32 %r1, [n];
  setp.lt.s32 %p1, %r1, 1;
  @%p1 bra done;
  add.s32 %r2, %r1, -1;
  { .param .b32 a; st.param.b32 [a], %r2; .param .b32 b; call.uni (b), tri, (a); ld.param.b32 %r3, [b]; }
  { .param .b32 a; st.param.b32 [a], %r2; .param .b32 b; call.uni (b), tri, (a); ld.param.b32 %r4, [b]; }
  { .param .b32 a; st.param.b32 [a], %r2; .param .b32 b; call.uni (b), tri, (a); ld.param.b32 %r5, [b]; }
  add.s32 %r1, %r3, %r4;
  add.s32 %r1, %r1, %r5;
done:
  st.param.b32 [r], %r1;
  ret;
}
.visible .entry branching(.param .u64 out)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out];
  { .param .b32 a; st.param.b32 [a], 12; .param .b32 b; call.uni (b), tri, (a); ld.param.b32 %r1, [b]; }
  st.global.b32 [%rd1], %r1;
  ret;
}
)";
  ASSERT_EQ(executor_.LoadModule(22, branching_ptx.c_str(), branching_ptx.size() + 1, {}), kCuSuccess)
      << executor_.TakeErrorDetail();
  EXPECT_EQ(executor_.GetFunction(22, 121, "branching"), kCuInvalidPtx);
  const std::string bound = executor_.TakeErrorDetail();
  EXPECT_NE(bound.find("instructions once its device functions are inlined"), std::string::npos) << bound;
}

// Compressed fatbins (zstd and LZ4 entries) load and run; a cubin (SASS only)
// does not.
TEST(EngineImages, CompressedFatbinsRunAndCubinsAreRefused) {
  SimDeviceMemory memory(0, kGiB);
  for (const char* name : {"engine_kernels_zstd.fatbin", "engine_kernels_lz4.fatbin"}) {
    SimExecutor executor(&memory);
    std::string fatbin = ReadFile(name);
    ASSERT_GT(fatbin.size(), 16u) << name;
    ASSERT_EQ(executor.LoadModule(1, fatbin.data(), fatbin.size(), {}), kCuSuccess)
        << name << ": " << executor.TakeErrorDetail();
    ASSERT_EQ(executor.GetFunction(1, 2, "poke"), kCuSuccess) << name;
    uint64_t p = 0;
    ASSERT_EQ(executor.Allocate(64, &p), kCuSuccess);
    uint8_t params[16];
    int64_t offset = 3;
    std::memcpy(params, &p, 8);
    std::memcpy(params + 8, &offset, 8);
    LaunchConfig config;
    ASSERT_EQ(executor.Launch(2, config, params, sizeof(params)), kCuSuccess) << name;
    const void* data = nullptr;
    ASSERT_EQ(executor.CopyFromDevice(p + 12, 4, 0, &data), kCuSuccess);
    EXPECT_EQ(*static_cast<const int*>(data), 1) << name;
  }
  SimExecutor executor(&memory);
  std::string cubin = ReadFile("engine_kernels.cubin");
  ASSERT_GT(cubin.size(), 64u);
  EXPECT_EQ(executor.LoadModule(1, cubin.data(), cubin.size(), {}), kCuNoBinaryForGpu);
  EXPECT_NE(executor.TakeErrorDetail().find("PTX only"), std::string::npos);
  const char junk[] =
      "\x7f"
      "ELF but not really";
  EXPECT_EQ(executor.LoadModule(2, junk, sizeof(junk), {}), kCuInvalidImage);
  const char bad_ptx[] = ".version 8.0\n.target sm_80\n.visible .entry k() { ret }\n";
  EXPECT_EQ(executor.LoadModule(3, bad_ptx, sizeof(bad_ptx), {}), kCuInvalidPtx);
}

// Instructions whose value is the same in every block (parameters, %ntid, %tid and what
// is computed from them alone) run once per warp before the blocks, and copies of special
// registers are read in place (Hoist in interp/hoist.cc). What must stay does stay: a
// register written twice (the loop counter), a guarded instruction, anything of %ctaid,
// and a parameter load past the parameters, which faults only if it runs.
TEST(EngineHoisting, InvariantsRunOncePerWarpAndTheRestStays) {
  const char ptx[] = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .entry hoist(.param .u32 n, .param .u64 out, .param .u32 scale) {
  .reg .pred %p<5>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<4>;
  ld.param.u32 %r1, [n];
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r2, [scale];
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mul.lo.u32 %r6, %r2, 3;
  mad.lo.u32 %r7, %r3, %r4, %r5;
  setp.ge.u32 %p1, %r7, %r1;
  @%p1 bra DONE;
  mov.u32 %r8, 0;
LOOP:
  add.u32 %r8, %r8, %r6;
  setp.lt.u32 %p2, %r8, 40;
  @%p2 bra LOOP;
  setp.eq.u32 %p3, %r5, 1;
  @%p3 mul.lo.u32 %r9, %r2, 1000;
  setp.eq.u32 %p4, %r1, 0;
  @%p4 bra FAR;
  add.u32 %r10, %r8, %r9;
  add.u32 %r10, %r10, %r3;
  mul.wide.u32 %rd2, %r7, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r10;
  bra DONE;
FAR:
  ld.param.u32 %r11, [n+64];
DONE:
  ret;
}
)";
  auto module = sim::PtxModule::Parse(ptx);
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto kernel = (*module)->Decode("hoist", {});
  ASSERT_TRUE(kernel.ok()) << kernel.status().message();
  const uint32_t blocks = 5, threads = 64, n = 300;
  std::vector<uint32_t> out(blocks * threads, 0xdeadbeef);
  const uint64_t address = 1ull << 44;
  // Parameters by natural alignment: n at 0, out at 8, scale at 16.
  auto launch = [&](uint32_t scale, uint64_t* instructions, std::string* detail) {
    std::vector<uint8_t> params(20);
    std::memcpy(params.data(), &n, 4);
    std::memcpy(params.data() + 8, &address, 8);
    std::memcpy(params.data() + 16, &scale, 4);
    sim::LaunchSpec spec;
    spec.grid[0] = blocks;
    spec.block[0] = threads;
    spec.params = params.data();
    spec.param_size = params.size();
    spec.memory = {sim::MemoryRange{address, out.size() * 4, reinterpret_cast<char*>(out.data())}};
    spec.thread_instructions = instructions;
    spec.error_detail = detail;
    return sim::RunKernel(**kernel, spec);
  };
  for (uint32_t scale : {2u, 5u}) {
    uint64_t instructions = 0;
    std::string detail;
    ASSERT_EQ(launch(scale, &instructions, &detail), kCuSuccess) << detail;
    uint32_t step = 3 * scale, sum = 0;
    do sum += step;
    while (sum < 40);
    for (uint32_t b = 0; b < blocks; ++b) {
      for (uint32_t t = 0; t < threads; ++t) {
        uint32_t i = b * threads + t;
        uint32_t want = i < n ? sum + (t == 1 ? 1000 * scale : 0) + b : 0xdeadbeef;
        ASSERT_EQ(out[i], want) << "scale " << scale << " block " << b << " thread " << t;
      }
    }
    // Counted per lane that runs an instruction (a guard false or a branch not taken
    // counts nothing). A thread that stores: mad, setp; mov; per round add, setp and the
    // branch back but in the last; setp; setp; add, add, mul.wide, add, st; bra; ret; and
    // thread 1 of a block its guarded mul. A thread past n: mad, setp, bra, ret. The
    // three ld.param, the three copies of special registers and the mul by 3 are not
    // there (without hoisting, 7 more per thread).
    uint64_t rounds = sum / step;
    uint64_t storing = 2 + 1 + (3 * rounds - 1) + 1 + 1 + 5 + 1 + 1;
    EXPECT_EQ(instructions, n * storing + blocks + (blocks * threads - n) * 4) << "scale " << scale;
    std::fill(out.begin(), out.end(), 0xdeadbeef);
  }
}

// __managed__ variables are declared ".global .attribute(.managed)"; ".attribute(.unified(..))"
// likewise. Both are ordinary device memory to the engine; an unterminated list is named.
TEST(EngineParse, VariableAttributesAreReadAndAnUnterminatedOneIsNamed) {
  const std::string head = ".version 8.0\n.target sm_80\n.address_size 64\n";
  auto module = sim::PtxModule::Parse(head +
                                      ".global .attribute(.managed) .align 4 .u32 counter = 5;\n"
                                      ".global .attribute(.unified(0x1234, 0x5678)) .align 8 .b8 table[16];\n"
                                      ".visible .entry touch() { ret; }\n");
  ASSERT_TRUE(module.ok()) << module.status().message();
  EXPECT_TRUE((*module)->Decode("touch", {}).ok());
  auto broken = sim::PtxModule::Parse(head + ".global .attribute(.managed .u32 counter;\n");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("unterminated .attribute"), std::string::npos) << broken.status().message();
}

}  // namespace
}  // namespace gpupool::dataplane

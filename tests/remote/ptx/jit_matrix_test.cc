// The JIT tier's trap, match.sync and warp matrix operations (mma.sync, ldmatrix): each
// kernel of kernels/JitMatrix.ptx runs on the interpreter and compiled, and the launches
// must agree bit for bit (memory, result, failure detail).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "remote/ptx/jit/jit.h"
#include "remote/ptx/ptx_engine.h"
#include "tests/remote/ptx/jit_fixture.h"

namespace gpupool::sim {
namespace {

using jit_test::Bytes;
using jit_test::kIllegalAddress;
using jit_test::kLaunchFailed;
using jit_test::Outcome;
using jit_test::Values;

class JitMatrix : public jit_test::JitKernelFileTest {
 public:
  JitMatrix() : JitKernelFileTest("JitMatrix.ptx") {}
};

// A guarded trap and __trap()'s branch around one: the launch fails as on the interpreter
// (CUDA_ERROR_LAUNCH_FAILED, "trap"), in scalar code (blocks of 36 threads) and in vector
// code (blocks of 64), wherever the trapping thread lies; without it the launch runs to its
// end with the interpreter's memory.
TEST_F(JitMatrix, TrapFailsTheLaunchAsTheInterpretersDoes) {
  for (const char* name : {"trap_at", "trap_branch"}) {
    for (uint32_t threads : {36u, 64u}) {
      const uint32_t blocks = 4, n = blocks * threads;
      for (uint32_t bad : {n + 5, 0u, threads + 7, n - 1}) {
        Outcome out = Both(name, blocks, {threads}, {Bytes(std::vector<uint32_t>(n, 0xdeadbeefu))}, {bad});
        if (bad >= n) {
          ASSERT_EQ(out.error, 0) << name << ": " << out.detail;
          std::vector<uint32_t> words = Values<uint32_t>(out.buffers[0]);
          for (uint32_t t = 0; t < n; ++t) ASSERT_EQ(words[t], t) << name << ", thread " << t;
        } else {
          EXPECT_EQ(out.error, kLaunchFailed) << name << ", " << bad;
          EXPECT_EQ(out.detail, "trap") << name << ", " << bad;
        }
      }
    }
    EXPECT_TRUE(Vector(name)) << name;
  }
}

// match.any and match.all of 32- and 64-bit values over the warp and over each lane's
// parity, in a branch part of each warp takes: warps whose values are all one, of a few
// values, and whose 64-bit values differ only in their upper halves; blocks of whole warps
// and of a partial last warp.
TEST_F(JitMatrix, MatchGivesTheInterpretersMasks) {
  for (uint32_t threads : {96u, 80u}) {
    const uint32_t blocks = 3, n = blocks * threads;
    std::vector<uint64_t> in(n);
    for (uint32_t t = 0; t < n; ++t) {
      const uint32_t w = t / 32, l = t % 32;
      uint64_t low = 0, high = 0;
      if (w % 3 == 0) {
        low = 5, high = 1;
      } else if (w % 3 == 1) {
        low = (t * 7) % 4, high = 0;
      } else {
        low = l % 2 ? 2 : 6, high = (l / 2) % 2;
      }
      in[t] = high << 32 | low;
    }
    Outcome out = Both("matches", blocks, {threads}, {Bytes(in), Bytes(std::vector<uint32_t>(6 * n, 0xdeadbeefu))});
    ASSERT_EQ(out.error, 0) << out.detail;
    // Warp 0 of a block of 96: every lane holds one value.
    std::vector<uint32_t> words = Values<uint32_t>(out.buffers[1]);
    EXPECT_EQ(words[0], 0xffffffffu);
    EXPECT_EQ(words[1], 0xffffffffu);
    EXPECT_EQ(words[2], 1u);
    EXPECT_EQ(words[3], 0x55555555u);
    EXPECT_EQ(words[5], 1u);
  }
}

// Element bits for the fragments: f16, bf16 and f32 (also tf32's) and f64 values of
// every kind. With `edges`, mostly zeros of both signs, subnormals, infinities, NaNs
// (quiet and signalling) and the largest finite values; else ordinary values near 1 (with
// some subnormals and negative zeros), so that most sums stay finite.
class Elements {
 public:
  explicit Elements(uint32_t seed) : state_(seed) {}

  uint64_t Next(int bits, bool bf16, bool edges) {
    const uint32_t r = Random();
    if (edges || r % 8 == 0) {
      static const uint16_t kHalf[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7e00, 0x7d01, 0x7bff, 0xfbff};
      static const uint16_t kBf16[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x7f7f, 0xff7f};
      static const uint32_t kF32[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f800000u,
                                      0xff800000u, 0x7fc00000u, 0x7f800001u, 0x7f7fffffu, 0xff7fffffu};
      static const uint64_t kF64[] = {0,
                                      uint64_t{1} << 63,
                                      1,
                                      0x800fffffffffffffull,
                                      0x7ff0000000000000ull,
                                      0xfff0000000000000ull,
                                      0x7ff8000000000000ull,
                                      0x7ff0000000000001ull,
                                      0x7fefffffffffffffull,
                                      0xffefffffffffffffull};
      // Without `edges`: zeros and subnormals only (the first four).
      const uint32_t pick = (r >> 8) % (edges ? 10 : 4);
      if (bits == 16) return bf16 ? kBf16[pick] : kHalf[pick];
      return bits == 32 ? kF32[pick] : kF64[pick];
    }
    const uint32_t sign = (r >> 3) & 1, mantissa = Random();
    const int exponent = static_cast<int>((r >> 4) % 7) - 3;  // 2^-3 ... 2^3
    if (bits == 16 && !bf16) return (sign << 15) | ((15 + exponent) << 10) | (mantissa & 0x3ff);
    if (bits == 16) return (sign << 15) | ((127 + exponent) << 7) | (mantissa & 0x7f);
    if (bits == 32) return (uint64_t{sign} << 31) | (uint64_t(127 + exponent) << 23) | (mantissa & 0x7fffff);
    return (uint64_t{sign} << 63) | (uint64_t(1023 + exponent) << 52) | (uint64_t{mantissa} << 20 | Random());
  }

 private:
  uint32_t Random() {
    state_ = state_ * 1664525u + 1013904223u;
    return state_ >> 1;
  }
  uint32_t state_;
};

// One mma.sync form of JitMatrix.ptx: its kernel, the element types of a (and b) and of c,
// and the registers of a, b and c per lane.
struct MmaForm {
  const char* kernel;
  const char* input;  // f16, bf16, tf32, f64
  const char* accumulator;
  int a, b, c, d;
};

// `count` registers' words of one lane of elements of `type`, 32 bits each (f16 and bf16
// two to a word), or 64 (f64).
std::vector<uint8_t> Fragments(Elements& elements, const std::string& type, size_t registers, bool edges) {
  std::vector<uint8_t> bytes;
  auto put = [&](uint64_t word, size_t size) {
    const size_t at = bytes.size();
    bytes.resize(at + size);
    std::memcpy(bytes.data() + at, &word, size);
  };
  for (size_t r = 0; r < registers; ++r) {
    if (type == "f16" || type == "bf16") {
      const bool bf16 = type == "bf16";
      put(elements.Next(16, bf16, edges) | elements.Next(16, bf16, edges) << 16, 4);
    } else if (type == "f64") {
      put(elements.Next(64, false, edges), 8);
    } else {
      put(elements.Next(32, false, edges), 4);
    }
  }
  return bytes;
}

// Every mma.sync form the engine takes (shapes m16n8k16, m16n8k8 and m8n8k4; f16, bf16,
// tf32 and f64 inputs; f32 and f16 accumulators each way), on ordinary values with
// subnormals and negative zeros and on edge values (NaNs, infinities, the largest finite
// ones): d is the interpreter's bit for bit, on blocks of two warps.
TEST_F(JitMatrix, MmaSyncOfEveryFormGivesTheInterpretersResultsBitForBit) {
  static const MmaForm kForms[] = {
      {"mma_m16n8k16_f32_f16", "f16", "f32", 4, 2, 4, 4},    {"mma_m16n8k16_f16_f16", "f16", "f16", 4, 2, 2, 2},
      {"mma_m16n8k16_f32_bf16", "bf16", "f32", 4, 2, 4, 4},  {"mma_m16n8k8_f32_f16", "f16", "f32", 2, 1, 4, 4},
      {"mma_m16n8k8_f16_f16_f32", "f16", "f32", 2, 1, 4, 2}, {"mma_m16n8k8_f32_f16_f16", "f16", "f16", 2, 1, 2, 4},
      {"mma_m16n8k8_f32_bf16", "bf16", "f32", 2, 1, 4, 4},   {"mma_m16n8k8_f32_tf32", "tf32", "f32", 4, 2, 4, 4},
      {"mma_m8n8k4_f64", "f64", "f64", 1, 1, 2, 2}};
  const uint32_t blocks = 3, threads = 64, n = blocks * threads;
  for (const MmaForm& form : kForms) {
    for (bool edges : {false, true}) {
      Elements elements(edges ? 7 : 11);
      std::vector<uint8_t> a, b, c;
      for (uint32_t t = 0; t < n; ++t) {
        for (auto [buffer, type, registers] : {std::tuple{&a, form.input, form.a}, std::tuple{&b, form.input, form.b},
                                               std::tuple{&c, form.accumulator, form.c}}) {
          std::vector<uint8_t> lane = Fragments(elements, type, registers, edges);
          buffer->insert(buffer->end(), lane.begin(), lane.end());
        }
      }
      const size_t d_bytes = size_t{n} * form.d * (std::string(form.input) == "f64" ? 8 : 4);
      Outcome out = Both(form.kernel, blocks, {threads}, {a, b, c, std::vector<uint8_t>(d_bytes, 0xee)});
      ASSERT_EQ(out.error, 0) << form.kernel << ": " << out.detail;
      if (!edges) {
        // Ordinary values give ordinary sums: no NaN in d (the products were computed).
        const std::vector<uint8_t>& d = out.buffers[3];
        EXPECT_NE(d, std::vector<uint8_t>(d_bytes, 0xee)) << form.kernel;
      }
    }
  }
}

// mma.sync accumulating in place in a loop (d is c, read across lanes from registers the
// loop keeps rewriting): the interpreter's sums after 1 and 5 rounds.
TEST_F(JitMatrix, MmaSyncAccumulatingInALoop) {
  const uint32_t blocks = 2, threads = 96, n = blocks * threads;
  for (uint32_t rounds : {1u, 5u}) {
    Elements elements(rounds);
    std::vector<uint8_t> a, b;
    for (uint32_t k = 0; k < n * rounds; ++k) {
      std::vector<uint8_t> x = Fragments(elements, "f16", 4, false), y = Fragments(elements, "f16", 2, false);
      a.insert(a.end(), x.begin(), x.end());
      b.insert(b.end(), y.begin(), y.end());
    }
    Outcome out = Both("mma_loop", blocks, {threads}, {a, b, std::vector<uint8_t>(n * 16, 0xee)}, {rounds});
    ASSERT_EQ(out.error, 0) << out.detail;
  }
}

// ldmatrix of one, two and four matrices, plain and transposed, rows packed (16 bytes
// apart) and spread (32), the two-matrix form at an offset: each lane's registers the
// interpreter's; a lane whose row lies outside shared memory fails both tiers with the same
// detail (ldmatrix, 2 bytes, the address); lanes storing right after it to rows the others
// read do not change what those read.
TEST_F(JitMatrix, LdmatrixGivesTheInterpretersRegisters) {
  const uint32_t blocks = 3;
  std::vector<uint16_t> halves(blocks * 1056 / 2);
  for (size_t k = 0; k < halves.size(); ++k) halves[k] = static_cast<uint16_t>(k * 40503u + 7);
  for (uint32_t count : {1u, 2u, 4u}) {
    for (const char* suffix : {"", "_trans"}) {
      const std::string name = "ldmatrix_x" + std::to_string(count) + suffix;
      for (uint32_t stride : {16u, 32u}) {
        Outcome out =
            Both(name, blocks, {32}, {Bytes(halves), Bytes(std::vector<uint32_t>(blocks * 32 * count, 0xdeadbeefu))},
                 {stride, 99});
        ASSERT_EQ(out.error, 0) << name << ": " << out.detail;
        if (count == 1 && stride == 16 && std::string(suffix).empty()) {
          // Lane 5 of block 0: row 1, halves 2 and 3 of matrix 0.
          EXPECT_EQ(Values<uint32_t>(out.buffers[1])[5], uint32_t{halves[8 + 2]} | uint32_t{halves[8 + 3]} << 16);
        }
      }
      Outcome stray = Both(name, blocks, {32}, {Bytes(halves), Bytes(std::vector<uint32_t>(blocks * 32 * count))},
                           {32, 9 % (8 * count)});
      EXPECT_EQ(stray.error, kIllegalAddress) << name;
      EXPECT_NE(stray.detail.find("ldmatrix"), std::string::npos) << name << ": " << stray.detail;
    }
  }
  // Lanes that store, right after it, to rows other lanes' ldmatrix reads: those lanes read
  // the rows as they were.
  Outcome out = Both("ldmatrix_then_store", blocks, {32},
                     {Bytes(halves), Bytes(std::vector<uint32_t>(blocks * 32 * 4, 0xdeadbeefu))}, {16, 99});
  ASSERT_EQ(out.error, 0) << out.detail;
  // Lane 8 of block 0, its first register: row 2 of matrix 0 (bytes 32 on), which thread 1
  // overwrites right after it.
  EXPECT_EQ(Values<uint32_t>(out.buffers[1])[8 * 4], uint32_t{halves[16]} | uint32_t{halves[17]} << 16);
}

// A wmma form of JitMatrix.ptx: its kernel (wmma_<name>) and its element types of a and b
// and of c (and d).
struct WmmaForm {
  const char* name;
  const char* input;  // f16, bf16, tf32, f64, s8, u8
  const char* accumulator;
};

// `bytes` bytes of elements of `type` (s8 and u8: any bytes; s32: any words, a third of
// them near the ends of the range, so that .satfinite clamps).
std::vector<uint8_t> Matrix(Elements& elements, const std::string& type, size_t bytes, bool edges, uint32_t seed) {
  std::vector<uint8_t> out;
  uint32_t x = seed;
  while (out.size() < bytes) {
    x = x * 1664525u + 1013904223u;
    if (type == "s8" || type == "u8") {
      out.push_back(static_cast<uint8_t>(x >> 24));
    } else if (type == "s32") {
      const uint32_t word = x % 3 == 0 ? 0x7fffff00u + (x >> 28) : x % 3 == 1 ? 0x80000010u - (x >> 28) : x >> 20;
      for (int k = 0; k < 4; ++k) out.push_back(static_cast<uint8_t>(word >> (8 * k)));
    } else {
      std::vector<uint8_t> word = Fragments(elements, type, 1, edges);
      out.insert(out.end(), word.begin(), word.end());
    }
  }
  out.resize(bytes);
  return out;
}

// wmma.load, wmma.mma and wmma.store of every shape and type the engine takes (f16 with
// f32, f16 and mixed accumulators; bf16; tf32; f64; s8 and u8 with and without .satfinite),
// row- and column-major, with and without a stride, through global and generic addresses,
// on ordinary and edge values: d the interpreter's bit for bit, on blocks of one warp and of
// two.
TEST_F(JitMatrix, WmmaOfEveryShapeAndTypeGivesTheInterpretersResultsBitForBit) {
  static const WmmaForm kForms[] = {
      {"f16_f32_m16n16k16", "f16", "f32"}, {"f16_f32_m32n8k16", "f16", "f32"},      {"f16_f32_m8n32k16", "f16", "f32"},
      {"f16_f16_m16n16k16", "f16", "f16"}, {"f16_f16_f32_m16n16k16", "f16", "f32"}, {"bf16_m16n16k16", "bf16", "f32"},
      {"bf16_m32n8k16", "bf16", "f32"},    {"bf16_m8n32k16", "bf16", "f32"},        {"tf32_m16n16k8", "tf32", "f32"},
      {"f64_m8n8k4", "f64", "f64"},        {"s8_m16n16k16", "s8", "s32"},           {"u8_m32n8k16", "u8", "s32"},
      {"s8_m8n32k16", "s8", "s32"}};
  const uint32_t blocks = 2, bytes = blocks * 8192;
  for (const WmmaForm& form : kForms) {
    const std::string name = std::string("wmma_") + form.name;
    for (uint32_t threads : {32u, 64u}) {
      for (bool edges : {false, true}) {
        Elements elements(edges ? 5 : 3);
        std::vector<uint8_t> a = Matrix(elements, form.input, bytes, edges, 1);
        std::vector<uint8_t> b = Matrix(elements, form.input, bytes, edges, 2);
        std::vector<uint8_t> c = Matrix(elements, form.accumulator, bytes, edges, 3);
        // a with a stride of 36 elements (rows apart), d with 40.
        Outcome out = Both(name, blocks, {threads}, {a, b, c, std::vector<uint8_t>(bytes, 0xee)}, {36, 40});
        ASSERT_EQ(out.error, 0) << name << ": " << out.detail;
        EXPECT_NE(out.buffers[3], std::vector<uint8_t>(bytes, 0xee)) << name;
      }
    }
  }
}

// d stored to a shared tile and loaded back from it as another multiply's c (lanes reading
// what other lanes stored; stride 20 and 16), then stored through the generic space; and
// wmma accesses outside their memory (a's stride, d's stride too large for the buffers, the
// shared tile's stride past the CTA's shared memory) failing both tiers with the same detail.
TEST_F(JitMatrix, WmmaThroughSharedMemoryAndStrayAccesses) {
  const uint32_t bytes = 4096;
  Elements elements(9);
  std::vector<uint8_t> a = Matrix(elements, "f16", bytes, false, 4), b = Matrix(elements, "f16", bytes, false, 5);
  std::vector<uint8_t> c = Matrix(elements, "f32", bytes, false, 6);
  for (uint32_t stride : {20u, 16u}) {
    Outcome out = Both("wmma_shared_round_trip", 1, {64}, {a, b, c, std::vector<uint8_t>(bytes, 0xee)}, {16, stride});
    ASSERT_EQ(out.error, 0) << out.detail;
  }
  for (auto [name, sa, sd] :
       {std::tuple{"wmma_shared_round_trip", 16u, 200u}, std::tuple{"wmma_f16_f32_m16n16k16", 4000u, 16u},
        std::tuple{"wmma_f16_f32_m16n16k16", 16u, 4000u}, std::tuple{"wmma_f64_m8n8k4", 16u, 4000u}}) {
    Outcome out = Both(name, 1, {32}, {a, b, c, std::vector<uint8_t>(bytes)}, {sa, sd});
    EXPECT_EQ(out.error, kIllegalAddress) << name << " " << sa << " " << sd;
    EXPECT_NE(out.detail.find("wmma"), std::string::npos) << name << ": " << out.detail;
  }
}

}  // namespace
}  // namespace gpupool::sim

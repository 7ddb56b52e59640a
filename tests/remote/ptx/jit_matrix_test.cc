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
#include <vector>

#include "remote/ptx/jit/jit.h"
#include "remote/ptx/ptx_engine.h"
#include "tests/remote/ptx/kernel_text.h"

namespace gpupool::sim {
namespace {

constexpr int32_t kLaunchFailed = 719;
constexpr int32_t kIllegalAddress = 700;

using dataplane::ptx_test::KernelText;

// A launch's buffers at made-up device addresses (the same on both tiers: they are added in
// the same order), as the sim executor hands them to the engine.
struct Buffers {
  std::vector<MemoryRange> ranges;
  std::vector<std::vector<uint8_t>> data;
  uint64_t next = uint64_t{1} << 44;
};

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <typename T>
std::vector<T> Values(const std::vector<uint8_t>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

// What a launch left: its result, its failure's text and its buffers.
struct Outcome {
  int32_t error = 0;
  std::string detail;
  std::vector<std::vector<uint8_t>> buffers;
};

class JitMatrix : public ::testing::Test {
 public:
  void SetUp() override {
    auto parsed = PtxModule::Parse(KernelText("JitMatrix.ptx"));
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    module_ = std::move(*parsed);
  }
  void TearDown() override { SetJitMode(JitMode::kAuto); }

  const DecodedKernel& Kernel(const std::string& name) {
    auto kernel = module_->Decode(name, {});
    EXPECT_TRUE(kernel.ok()) << kernel.status().message();
    return **kernel;
  }

  // `name` over `blocks` blocks of `block` threads in `mode`, its parameters the buffers'
  // addresses (8 bytes each, in order) and then `extra`'s 32-bit words.
  Outcome Run(JitMode mode, const std::string& name, uint32_t blocks, std::vector<uint32_t> block,
              const std::vector<std::vector<uint8_t>>& buffers, const std::vector<uint32_t>& extra) {
    SetJitMode(mode);
    Outcome out;
    out.buffers = buffers;
    std::vector<MemoryRange> ranges;
    std::vector<uint8_t> params;
    uint64_t next = uint64_t{1} << 44;
    for (std::vector<uint8_t>& b : out.buffers) {
      ranges.push_back(MemoryRange{next, b.size(), reinterpret_cast<char*>(b.data())});
      params.resize(params.size() + 8);
      std::memcpy(params.data() + params.size() - 8, &next, 8);
      next += (b.size() + 4095) / 4096 * 4096 + 4096;
    }
    for (uint32_t word : extra) {
      params.resize(params.size() + 4);
      std::memcpy(params.data() + params.size() - 4, &word, 4);
    }
    LaunchSpec spec;
    spec.grid[0] = blocks;
    for (int i = 0; i < 3; ++i) spec.block[i] = i < static_cast<int>(block.size()) ? block[i] : 1;
    spec.params = params.data();
    spec.param_size = params.size();
    spec.memory = ranges;
    spec.error_detail = &out.detail;
    out.error = RunKernel(Kernel(name), spec);
    return out;
  }

  // The same interpreted, then compiled: the compiled launch must be the JIT's, end as the
  // interpreted one ended and leave what it left, bit for bit. The interpreter's outcome.
  Outcome Both(const std::string& name, uint32_t blocks, std::vector<uint32_t> block,
               const std::vector<std::vector<uint8_t>>& buffers, const std::vector<uint32_t>& extra = {}) {
    Outcome interpreted = Run(JitMode::kOff, name, blocks, block, buffers, extra);
    const DecodedKernel& kernel = Kernel(name);
    const uint64_t launches = kernel.jit->jit_launches.load();
    Outcome compiled = Run(JitMode::kAlways, name, blocks, block, buffers, extra);
    EXPECT_NE(kernel.jit->compiled, nullptr) << name << ": " << kernel.jit->refused;
    EXPECT_EQ(kernel.jit->jit_launches.load(), launches + 1) << name << ": " << kernel.jit->refused;
    EXPECT_EQ(compiled.error, interpreted.error) << name << ": " << compiled.detail;
    EXPECT_EQ(compiled.detail, interpreted.detail) << name;
    // A failed launch's memory is not compared: the tiers run its threads in other orders up
    // to the failure (and the session's error is sticky: nothing reads it after).
    for (size_t b = 0; interpreted.error == 0 && b < buffers.size(); ++b) {
      const std::vector<uint8_t>& x = interpreted.buffers[b];
      const std::vector<uint8_t>& y = compiled.buffers[b];
      for (size_t k = 0; k + 4 <= x.size(); k += 4) {
        uint32_t u, v;
        std::memcpy(&u, x.data() + k, 4);
        std::memcpy(&v, y.data() + k, 4);
        EXPECT_EQ(v, u) << name << ": buffer " << b << ", word " << k / 4;
        if (u != v) break;
      }
    }
    return interpreted;
  }

  bool Vector(const std::string& name) {
    const DecodedKernel& kernel = Kernel(name);
    return kernel.jit->compiled != nullptr && HasVectorCode(*kernel.jit->compiled);
  }

  std::unique_ptr<PtxModule> module_;
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

}  // namespace
}  // namespace gpupool::sim

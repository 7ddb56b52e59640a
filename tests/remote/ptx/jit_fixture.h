// Fixtures for tests of the JIT tier against the interpreter on a PTX module (jit_test.cc,
// jit_matrix_test.cc, jit_atomics_test.cc): launches with buffers at made-up device
// addresses, as the sim executor hands them to the engine, and what they left.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "remote/ptx/jit/jit.h"
#include "remote/ptx/ptx_engine.h"
#include "tests/remote/ptx/kernel_text.h"

namespace gpupool::sim::jit_test {

constexpr int32_t kLaunchFailed = 719;
constexpr int32_t kIllegalAddress = 700;

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

// A fixture over one PTX module (Text(), parsed at SetUp): its kernels decoded by name and
// launched on either tier, and the JIT mode back to auto at TearDown.
class JitModuleTest : public ::testing::Test {
 public:
  void SetUp() override { Parse(Text()); }
  void TearDown() override { SetJitMode(JitMode::kAuto); }

  void Parse(const std::string& text) {
    auto parsed = PtxModule::Parse(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    module_ = std::move(*parsed);
  }

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

 protected:
  virtual std::string Text() = 0;
};

// The kernels of tests/remote/ptx/kernels/`file`.
class JitKernelFileTest : public JitModuleTest {
 public:
  explicit JitKernelFileTest(const char* file) : file_(file) {}

 protected:
  std::string Text() override { return dataplane::ptx_test::KernelText(file_); }

 private:
  const char* const file_;
};

}  // namespace gpupool::sim::jit_test

// The PTX engine's JIT tier (remote/ptx/jit/jit.h): kernels of independent threads run
// compiled give the interpreter's results bit for bit, stray accesses still fault, kernels
// it cannot take run on the interpreter, and GPUPOOL_PTX_JIT=auto compiles only kernels
// whose launches are worth it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "remote/ptx/front/program.h"
#include "remote/ptx/jit/jit.h"
#include "remote/ptx/jit/line_vector.h"
#include "remote/protocol/sim_texture.h"
#include "remote/ptx/ptx_engine.h"
#include "tests/remote/ptx/jit_fixture.h"
#include "tests/remote/ptx/kernel_text.h"

namespace gpupool::sim {
namespace {

constexpr int32_t kIllegalAddress = 700;

using dataplane::ptx_test::KernelText;

// A kernel of many instructions the tier takes, each result in its own word of a 16-word
// row per element (a grid-stride loop).
std::string MixKernelText() { return KernelText("JitMix.ptx"); }

// JitMix.ptx and `mix_once`: mix without its loop (one element per thread, forward branches only),
// which the tier also compiles to vector code.
std::string ModuleText() {
  std::string text = MixKernelText();
  const size_t begin = text.find(".visible .entry mix(");
  std::string once = text.substr(begin, text.find("\n}\n", begin) + 3 - begin);
  once.replace(once.find("entry mix("), 10, "entry mix_once(");
  const std::string loop_back = "  add.s32 %r6, %r6, %r8;\n  bra LOOP;\n";
  once.replace(once.find(loop_back), loop_back.size(), "  bra DONE;\n");
  return text + once;
}

// Host buffers at made-up device addresses, as the sim executor hands them to the engine.
struct Memory {
  std::vector<MemoryRange> ranges;
  uint64_t next = uint64_t{1} << 44;
  template <typename T>
  uint64_t Add(std::vector<T>& data) {
    uint64_t address = next;
    next += (data.size() * sizeof(T) + 4095) / 4096 * 4096 + 4096;
    ranges.push_back(MemoryRange{address, data.size() * sizeof(T), reinterpret_cast<char*>(data.data())});
    return address;
  }
};

template <typename... Args>
std::vector<uint8_t> Pack(Args... args) {
  std::vector<uint8_t> bytes;
  auto put = [&](auto value) {
    size_t align = sizeof(value);
    bytes.resize((bytes.size() + align - 1) / align * align);
    size_t at = bytes.size();
    bytes.resize(at + sizeof(value));
    std::memcpy(bytes.data() + at, &value, sizeof(value));
  };
  (put(args), ...);
  return bytes;
}

// Runs `kernel` over `grid` x `block` with the packed `params` on `memory` (and
// `dynamic_shared` bytes of dynamic shared memory; cooperatively with `grid_workspace`
// where it is not 0); its CUresult (the threads' instructions counted into *instructions,
// the failure's text into *detail, where not null).
int32_t Launch(const DecodedKernel& kernel, std::vector<uint32_t> grid, std::vector<uint32_t> block,
               const std::vector<uint8_t>& params, Memory& memory, uint64_t* instructions = nullptr,
               std::string* detail = nullptr, uint32_t dynamic_shared = 0, uint64_t grid_workspace = 0) {
  LaunchSpec spec;
  for (int i = 0; i < 3; ++i) {
    spec.grid[i] = grid[i];
    spec.block[i] = block[i];
  }
  spec.params = params.data();
  spec.param_size = params.size();
  spec.memory = memory.ranges;
  spec.thread_instructions = instructions;
  spec.error_detail = detail;
  spec.dynamic_shared = dynamic_shared;
  spec.cooperative = grid_workspace != 0;
  spec.grid_workspace = grid_workspace;
  return RunKernel(kernel, spec);
}

class Jit : public jit_test::JitModuleTest {
 public:
  // Kernel "rotate" on `blocks` blocks of `threads` for `rounds` rounds, on the interpreter
  // (results[0]) and compiled (results[1]): each thread's last value.
  void RunRotate(uint32_t blocks, uint32_t threads, uint32_t rounds, std::vector<uint32_t> results[2]) {
    const DecodedKernel& kernel = Kernel("rotate");
    for (int compiled = 0; compiled < 2; ++compiled) {
      SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
      results[compiled].assign(threads * blocks, 0);
      Memory memory;
      uint64_t d = memory.Add(results[compiled]);
      ASSERT_EQ(Launch(kernel, {blocks, 1, 1}, {threads, 1, 1}, Pack(d, rounds), memory), 0);
    }
  }

 protected:
  std::string Text() override { return ModuleText(); }
};

struct MixInputs {
  std::vector<float> f;
  std::vector<int32_t> i;
  std::vector<int8_t> b;
};

MixInputs MakeInputs(int n) {
  const float kFloats[] = {1.5f,     -2.75f,    0.0f,   -0.0f, 3e9f,  -3e9f,      std::nanf(""),
                           INFINITY, -INFINITY, 1e-40f, 7.0f,  -0.5f, 123456.789f};
  const int32_t kInts[] = {
      0, 1, -1, 7, -123456, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), 0x12345678, -2};
  const int8_t kBytes[] = {0, 1, -1, 127, -128, 42};
  MixInputs in;
  for (int k = 0; k < n; ++k) {
    in.f.push_back(kFloats[k % std::size(kFloats)] * (1 + k / std::size(kFloats)));
    in.i.push_back(kInts[k % std::size(kInts)] ^ (k / std::size(kInts)));
    in.b.push_back(kBytes[k % std::size(kBytes)]);
  }
  return in;
}

// Runs `mix` on fresh copies of the inputs; returns the 16-word rows.
std::vector<uint32_t> RunMix(Jit* test, const DecodedKernel& kernel, int n, uint32_t shift, int32_t* status,
                             uint32_t blocks = 3, uint32_t threads = 64) {
  MixInputs in = MakeInputs(n);
  std::vector<uint32_t> out(size_t(n) * 16, 0xdeadbeef);
  Memory memory;
  uint64_t df = memory.Add(in.f), di = memory.Add(in.i), db = memory.Add(in.b);
  uint64_t dout = memory.Add(out);
  // mix: 3 blocks of 64 threads over 1000 elements, every thread loops.
  *status = Launch(kernel, {blocks, 1, 1}, {threads, 1, 1}, Pack(df, di, db, dout, uint32_t(n), shift), memory);
  return out;
}

// Vector code with a loop (mix: a grid-stride loop whose last trip some lanes skip), and
// without (mix_once: 16 blocks of 64 threads over 1000 elements, so that the last lanes are
// masked off); the stores, 64 bytes apart, go lane by lane, the loads as whole vectors.
class JitBitForBit : public Jit, public ::testing::WithParamInterface<const char*> {};

TEST_P(JitBitForBit, CompiledKernelGivesTheInterpretersResultsBitForBit) {
  const DecodedKernel& kernel = Kernel(GetParam());
  const bool once = std::string(GetParam()) == "mix_once";
  const uint32_t blocks = once ? 16 : 3;
  const int n = 1000;
  for (uint32_t shift : {3u, 31u, 32u, 40u}) {
    SetJitMode(JitMode::kOff);
    int32_t interpreted_status = -1;
    std::vector<uint32_t> interpreted = RunMix(this, kernel, n, shift, &interpreted_status, blocks);
    ASSERT_EQ(interpreted_status, 0);
    SetJitMode(JitMode::kAlways);
    const uint64_t before = kernel.jit->jit_launches.load();
    int32_t compiled_status = -1;
    std::vector<uint32_t> compiled = RunMix(this, kernel, n, shift, &compiled_status, blocks);
    ASSERT_EQ(compiled_status, 0);
    ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
    EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
    EXPECT_EQ(kernel.jit->jit_launches.load(), before + 1)
        << "the launch did not run compiled: " << kernel.jit->refused;
    for (size_t k = 0; k < compiled.size(); ++k) {
      // Float words: a NaN is a NaN (LLVM may fold neg into a multiply, which on the host
      // keeps a NaN operand's sign; PTX does not fix NaN bits, and a GPU's are canonical).
      const bool float_word = k % 16 == 0 || k % 16 == 2 || k % 16 == 12 || k % 16 == 13 || k % 16 == 14;
      if (float_word && std::isnan(std::bit_cast<float>(compiled[k])) &&
          std::isnan(std::bit_cast<float>(interpreted[k]))) {
        continue;
      }
      ASSERT_EQ(compiled[k], interpreted[k]) << "element " << k / 16 << " word " << k % 16 << " with shift " << shift;
    }
    // And against what PTX says, for the words where the host's C++ would differ.
    MixInputs in = MakeInputs(n);
    for (int e = 0; e < n; ++e) {
      const uint32_t* row = &compiled[size_t(e) * 16];
      const float f = in.f[e];
      const int32_t i = in.i[e];
      int32_t rzi = std::isnan(f)         ? 0
                    : f >= 2147483648.0f  ? std::numeric_limits<int32_t>::max()
                    : f <= -2147483648.0f ? std::numeric_limits<int32_t>::min()
                                          : static_cast<int32_t>(f);
      ASSERT_EQ(static_cast<int32_t>(row[1]), rzi) << "cvt.rzi.s32.f32 of " << f;
      ASSERT_EQ(row[3], shift >= 32 ? 0u : static_cast<uint32_t>(i) << shift) << "shl";
      ASSERT_EQ(static_cast<int32_t>(row[4]), shift >= 32 ? (i < 0 ? -1 : 0) : i >> shift) << "shr.s32";
      ASSERT_EQ(row[5], shift >= 32 ? 0u : static_cast<uint32_t>(i) >> shift) << "shr.u32";
      ASSERT_EQ(row[10], f < 0 ? 1u : 2u) << "setp.lt.f32 of " << f;
      ASSERT_EQ(row[11], (f < 0 || std::isnan(f)) ? 1u : 2u) << "setp.ltu.f32 of " << f;
      ASSERT_EQ(static_cast<int32_t>(row[6]), std::min<int32_t>(i, in.b[e])) << "min.s32";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ScalarAndVector, JitBitForBit, ::testing::Values("mix", "mix_once"));

// The CTA state compiled code works on (shared memory, saved registers, resume points) starts
// at a cache line whatever malloc's heap held before it (line_vector.h: a row's 32-byte
// saves split across two lines made launches 40% slower as allocations fell).
TEST(JitState, CtaStateStartsAtACacheLine) {
  std::vector<std::unique_ptr<char[]>> heap;  // odd-sized blocks between the vectors
  std::vector<jit::LineVector<uint8_t>> bytes;
  std::vector<jit::LineVector<int32_t>> points;
  std::vector<jit::LineVector<uint64_t>> words;
  for (size_t size : {1u, 17u, 48u, 1000u, 8192u, 59392u}) {
    heap.push_back(std::make_unique<char[]>(size % 97 + 1));
    bytes.emplace_back().assign(size, 0);
    heap.push_back(std::make_unique<char[]>(size % 31 + 3));
    points.emplace_back().assign(size, 0);
    words.emplace_back().assign(size, 0);
    words.back().assign(size * 2 + 1, 7);  // a reallocation keeps the alignment
  }
  for (const auto& v : bytes) EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u) << v.size();
  for (const auto& v : points) EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u) << v.size();
  for (const auto& v : words) EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u) << v.size();
  EXPECT_EQ(words.back()[words.back().size() - 1], 7u);
}

TEST_F(Jit, ThreadsAndBlocksOfThreeDimensions) {
  SetJitMode(JitMode::kAlways);
  const DecodedKernel& kernel = Kernel("dims");
  const uint32_t grid[3] = {3, 2, 2}, block[3] = {4, 3, 5};
  const uint32_t threads = 3 * 2 * 2 * 4 * 3 * 5;
  std::vector<uint32_t> out(threads, 0xffffffff);
  Memory memory;
  uint64_t dout = memory.Add(out);
  uint64_t instructions = 0;
  ASSERT_EQ(
      Launch(kernel, {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, Pack(dout), memory, &instructions),
      0);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  for (uint32_t g = 0; g < threads; ++g) {
    const uint32_t per_block = 4 * 3 * 5;
    ASSERT_EQ(out[g], (g / per_block) << 16 | (g % per_block)) << "thread " << g;
  }
  // Every thread runs each of the kernel's instructions once: count them in the text.
  std::string text = MixKernelText();
  std::string body = text.substr(text.find(".entry dims"));
  body = body.substr(body.find('{'), body.find('}') - body.find('{'));
  std::istringstream lines(body);
  uint64_t per_thread = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(';') != std::string::npos && line.find(".reg") == std::string::npos) ++per_thread;
  }
  EXPECT_EQ(per_thread, 25u);
  EXPECT_EQ(instructions, per_thread * threads);
  // Blocks 16 threads wide run as vector code: the same layout, the same count.
  ASSERT_NE(kernel.jit->compiled, nullptr);
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
  const uint32_t wide_threads = 3 * 2 * 2 * 16 * 3 * 2;
  std::vector<uint32_t> wide(wide_threads, 0xffffffff);
  Memory wide_memory;
  uint64_t dwide = wide_memory.Add(wide);
  instructions = 0;
  ASSERT_EQ(Launch(kernel, {3, 2, 2}, {16, 3, 2}, Pack(dwide), wide_memory, &instructions), 0);
  for (uint32_t g = 0; g < wide_threads; ++g) {
    const uint32_t per_block = 16 * 3 * 2;
    ASSERT_EQ(wide[g], (g / per_block) << 16 | (g % per_block)) << "thread " << g;
  }
  EXPECT_EQ(instructions, per_thread * wide_threads);
}

TEST_F(Jit, AStrayAccessIsAnIllegalAddressAndStopsTheLaunch) {
  SetJitMode(JitMode::kAlways);
  const DecodedKernel& kernel = Kernel("stray");
  std::vector<uint32_t> data(1024, 5);
  Memory memory;
  uint64_t d = memory.Add(data);
  // In bounds first: every word incremented once.
  ASSERT_EQ(Launch(kernel, {8, 1, 1}, {128, 1, 1}, Pack(d, uint32_t{0}), memory), 0);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  for (uint32_t v : data) ASSERT_EQ(v, 6u);
  // Blocks `width` threads wide, `blocks` of them: the launch reads past the allocation and
  // names the first thread that did; a null pointer and one below the allocation fault too.
  auto expect_strays = [&](uint32_t blocks, uint32_t width, uint32_t shift, uint32_t block, uint32_t warp) {
    std::string detail;
    EXPECT_EQ(Launch(kernel, {blocks, 1, 1}, {width, 1, 1}, Pack(d, shift), memory, nullptr, &detail), kIllegalAddress);
    char expected[64];
    std::snprintf(expected, sizeof(expected), "load of 4 bytes at 0x%llx (block %u, warp %u)",
                  static_cast<unsigned long long>(d + 1024 * 4), block, warp);
    EXPECT_EQ(detail, expected) << width << " threads wide";
    EXPECT_EQ(Launch(kernel, {1, 1, 1}, {width, 1, 1}, Pack(uint64_t{0}, uint32_t{0}), memory), kIllegalAddress);
    EXPECT_EQ(Launch(kernel, {1, 1, 1}, {width, 1, 1}, Pack(d - 4, uint32_t{0}), memory), kIllegalAddress);
  };
  // Vector code, 4 words past the end: the last block's last threads read past it.
  expect_strays(8, 128, 4, 7, 3);
  ASSERT_NE(kernel.jit->compiled, nullptr);
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
  // Blocks 12 threads wide run the scalar code: the same checks. 86 blocks of 12 cover
  // words 0..1031 from shift 0: the last 8 threads are past the end (the first of them is
  // thread 4 of block 85, in warp 0).
  expect_strays(86, 12, 0, 85, 0);
}

// A launch of fewer than four blocks runs on scratch the calling thread keeps from launch
// to launch: nothing of an earlier launch (a fault, its counts, other sizes, barriers'
// saved registers) shows in the next one.
TEST_F(Jit, SmallLaunchesOnOneThreadEachStartAfresh) {
  SetJitMode(JitMode::kAlways);
  const DecodedKernel& stray = Kernel("stray");
  const DecodedKernel& rotate = Kernel("rotate");
  std::vector<uint32_t> data(1024, 5);
  Memory memory;
  uint64_t d = memory.Add(data);
  std::string detail;
  uint64_t faulted = 0;
  ASSERT_EQ(Launch(stray, {1, 1, 1}, {32, 1, 1}, Pack(d - 4, uint32_t{0}), memory, &faulted, &detail), kIllegalAddress);
  EXPECT_NE(detail, "");
  // The same kernel in bounds, on one block: as the first launch of a fresh thread.
  auto in_bounds = [&](uint32_t threads) {
    std::string again;
    uint64_t counted = 0;
    EXPECT_EQ(Launch(stray, {1, 1, 1}, {threads, 1, 1}, Pack(d, uint32_t{0}), memory, &counted, &again), 0);
    EXPECT_EQ(again, "") << threads << " threads";
    return counted;
  };
  const uint64_t here = in_bounds(128);
  uint64_t fresh = 0;
  std::thread([&] { fresh = in_bounds(128); }).join();
  EXPECT_EQ(here, fresh);
  EXPECT_GT(here, 0u);
  // Barriers and shared memory after a larger block, on 1, 2 and 3 blocks: the
  // interpreter's results every time.
  const uint32_t rounds = 5;
  for (uint32_t blocks = 1; blocks <= 3; ++blocks) {
    for (uint32_t threads : {96u, 40u, 100u}) {
      std::vector<uint32_t> results[2];
      RunRotate(blocks, threads, rounds, results);
      ASSERT_EQ(results[0], results[1]) << blocks << " blocks of " << threads;
    }
  }
  EXPECT_GE(rotate.jit->jit_launches.load(), 9u) << rotate.jit->refused;
}

TEST_F(Jit, BarriersAndSharedMemoryGiveTheInterpretersResults) {
  const DecodedKernel& kernel = Kernel("rotate");
  const uint32_t threads = 100, blocks = 3, rounds = 7;
  std::vector<uint32_t> results[2];
  RunRotate(blocks, threads, rounds, results);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  // Each round every thread takes its right neighbour's value: v' = v[t + 1] * 3 + round.
  std::vector<uint32_t> v(threads);
  for (uint32_t t = 0; t < threads; ++t) v[t] = t;
  for (uint32_t round = 0; round < rounds; ++round) {
    std::vector<uint32_t> next(threads);
    for (uint32_t t = 0; t < threads; ++t) next[t] = v[(t + 1) % threads] * 3 + round;
    v = next;
  }
  for (uint32_t k = 0; k < threads * blocks; ++k) {
    ASSERT_EQ(results[1][k], v[k % threads]) << "thread " << k;
    ASSERT_EQ(results[0][k], results[1][k]) << "thread " << k;
  }
}

TEST_F(Jit, AtomicsOnSharedAndGlobalMemoryAcrossBlocks) {
  SetJitMode(JitMode::kAlways);
  const DecodedKernel& kernel = Kernel("hist");
  const uint32_t n = 100000;
  std::vector<uint8_t> in(n);
  std::vector<uint32_t> expected(16, 0);
  for (uint32_t k = 0; k < n; ++k) {
    in[k] = static_cast<uint8_t>(k * 2654435761u >> 24);
    ++expected[in[k] & 15];
  }
  std::vector<uint32_t> bins(16, 0);
  Memory memory;
  uint64_t din = memory.Add(in), dbins = memory.Add(bins);
  // 391 blocks on two workers, adding into the same 16 words.
  ASSERT_EQ(Launch(kernel, {(n + 255) / 256, 1, 1}, {256, 1, 1}, Pack(din, n, dbins), memory), 0);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  EXPECT_EQ(bins, expected);
}

TEST_F(Jit, AStrayAccessToSharedMemoryIsAnIllegalAddress) {
  const DecodedKernel& kernel = Kernel("peek");
  std::vector<uint32_t> out(1, 0);
  Memory memory;
  uint64_t d = memory.Add(out);
  for (JitMode mode : {JitMode::kOff, JitMode::kAlways}) {
    SetJitMode(mode);
    EXPECT_EQ(Launch(kernel, {1, 1, 1}, {1, 1, 1}, Pack(d, uint32_t{7}), memory), 0);
    std::string detail;
    EXPECT_EQ(Launch(kernel, {1, 1, 1}, {1, 1, 1}, Pack(d, uint32_t{8}), memory, nullptr, &detail), kIllegalAddress);
    EXPECT_NE(detail.find("load of 4 bytes"), std::string::npos) << detail;
  }
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
}

TEST_F(Jit, ALongCtaReportsProgressWhileItRuns) {
  // The agent's watchdog reports a GPU whose launch makes no progress as hung: one block
  // whose threads loop long must count progress inside the CTA, as the interpreter does.
  SetJitMode(JitMode::kAlways);
  const DecodedKernel& kernel = Kernel("spin");
  std::vector<uint32_t> out(256, 0);
  Memory memory;
  uint64_t d = memory.Add(out);
  std::vector<uint8_t> params = Pack(d, uint32_t{200000});
  std::atomic<uint64_t> progress{0};
  LaunchSpec spec;
  spec.block[0] = 256;
  spec.params = params.data();
  spec.param_size = params.size();
  spec.memory = memory.ranges;
  spec.progress = &progress;
  ASSERT_EQ(RunKernel(kernel, spec), 0);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  // 256 threads x 200000 back edges: one progress per 2^16 of them.
  EXPECT_GE(progress.load(), 256u * 200000 / 65536);
  uint32_t x = 5;
  for (int k = 0; k < 200000; ++k) x = x * 1664525u + 1013904223u;
  EXPECT_EQ(out[5], x);
}

TEST_F(Jit, ATicketReadOutsideALoopIsCompiled) {
  SetJitMode(JitMode::kAlways);
  // A thread's ticket from an atomic steers no loop: compiled, each thread one ticket
  // (jit_atomics_test.cc has the rest).
  const DecodedKernel& kernel = Kernel("ticket");
  std::vector<uint32_t> counter(1, 0), out(64, 0xffffffff);
  Memory memory;
  uint64_t dcounter = memory.Add(counter), dout = memory.Add(out);
  ASSERT_EQ(Launch(kernel, {1, 1, 1}, {64, 1, 1}, Pack(dcounter, dout), memory), 0);
  EXPECT_EQ(counter[0], 64u);
  std::vector<uint32_t> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t k = 0; k < 64; ++k) ASSERT_EQ(sorted[k], k);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
}

TEST_F(Jit, AutoCompilesOnlyKernelsWhoseLaunchesAreWorthIt) {
  SetJitMode(JitMode::kAuto);
  const DecodedKernel& kernel = Kernel("stray");
  std::vector<uint32_t> data(uint64_t{1} << 20, 0);
  Memory memory;
  uint64_t d = memory.Add(data);
  // Small launches: interpreted, nothing compiled.
  for (int k = 0; k < 4; ++k) {
    ASSERT_EQ(Launch(kernel, {4, 1, 1}, {256, 1, 1}, Pack(d, uint32_t{0}), memory), 0);
  }
  EXPECT_EQ(kernel.jit->jit_launches.load(), 0u);
  EXPECT_FALSE(kernel.jit->tried);
  // A launch that brings the kernel to 2^20 threads starts the compile in the background
  // and runs interpreted; once the code is there, launches run it.
  // (The two launches add 1 to each of the 2^20 words, as one of 4096 blocks would.)
  ASSERT_EQ(Launch(kernel, {4079, 1, 1}, {256, 1, 1}, Pack(d, uint32_t{0}), memory), 0);
  EXPECT_FALSE(kernel.jit->tried) << "256 threads short of 2^20";
  ASSERT_EQ(Launch(kernel, {17, 1, 1}, {256, 1, 1}, Pack(d, uint32_t{4079 * 256}), memory), 0);
  EXPECT_TRUE(kernel.jit->tried);
  WaitForCompile(*kernel.jit);
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_EQ(kernel.jit->jit_launches.load(), 0u);
  ASSERT_EQ(Launch(kernel, {4096, 1, 1}, {256, 1, 1}, Pack(d, uint32_t{0}), memory), 0);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  for (uint64_t k = 0; k < data.size(); ++k) ASSERT_EQ(data[k], k < 1024 ? 6u : 2u) << k;
  // A kernel launched often on one thread: each launch counts as kJitLaunchThreads.
  const DecodedKernel& often = Kernel("dims");
  std::vector<uint32_t> out(1, 0);
  uint64_t dout = memory.Add(out);
  const uint64_t launches = kJitAfterThreads / kJitLaunchThreads - 1;
  for (uint64_t k = 0; k < launches; ++k) {
    ASSERT_EQ(Launch(often, {1, 1, 1}, {1, 1, 1}, Pack(dout), memory), 0);
  }
  EXPECT_FALSE(often.jit->tried) << "after " << launches << " launches";
  ASSERT_EQ(Launch(often, {1, 1, 1}, {1, 1, 1}, Pack(dout), memory), 0);
  EXPECT_TRUE(often.jit->tried);
  WaitForCompile(*often.jit);
  // Off: interpreted again.
  SetJitMode(JitMode::kOff);
  ASSERT_EQ(Launch(kernel, {4096, 1, 1}, {256, 1, 1}, Pack(d, uint32_t{0}), memory), 0);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u);
  EXPECT_EQ(data[5], 7u);
}

// A launch of 2^20 threads or more starts its kernel's compile and waits for it (up to
// kJitLaunchWaits) instead of running all of it on the interpreter: NVIDIA's samples
// launch once to warm up, then time; the first launch ran interpreted for 9 s of a tiled
// multiply's 80 s. A smaller launch that brings the kernel to 2^20 does not wait (above).
TEST_F(Jit, ALargeLaunchWaitsForItsCompile) {
  SetJitMode(JitMode::kAuto);
  const DecodedKernel& kernel = Kernel("stray");
  std::vector<uint32_t> data(uint64_t{1} << 20, 0);
  Memory memory;
  const uint64_t d = memory.Add(data);
  ASSERT_EQ(Launch(kernel, {4096, 1, 1}, {256, 1, 1}, Pack(d, uint32_t{0}), memory), 0);
  EXPECT_TRUE(kernel.jit->tried);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  for (uint64_t k = 0; k < data.size(); ++k) ASSERT_EQ(data[k], 1u) << k;
}

// The tier takes the decoder's shared-memory layout: a module's .shared variable that the
// kernel names only as a branch label is no shared memory of the kernel on either tier
// (the tier once placed it, and ran with more shared memory than the interpreter allowed).
TEST(JitLimits, SharedMemoryIsLaidOutAsTheDecoderLaysItOut) {
  const std::string text = KernelText("SharedMemoryIsLaidOutAsTheDecoderLaysItOut.ptx");
  auto module = PtxModule::Parse(text);
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("labelled", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  EXPECT_EQ(kernel.static_shared, 16u);
  EXPECT_EQ(kernel.shared_layout.size, 16u);
  EXPECT_EQ(kernel.shared_layout.offsets.count("lbl"), 0u);
  std::vector<uint32_t> out(1, 0);
  Memory memory;
  const uint64_t d = memory.Add(out);
  for (JitMode mode : {JitMode::kOff, JitMode::kAlways}) {
    SetJitMode(mode);
    std::string detail;
    EXPECT_EQ(Launch(kernel, {1, 1, 1}, {1, 1, 1}, Pack(d, uint32_t{12}), memory, nullptr, &detail), 0) << detail;
    // Past the 16 bytes of `words`: where `lbl` would have been.
    EXPECT_EQ(Launch(kernel, {1, 1, 1}, {1, 1, 1}, Pack(d, uint32_t{16}), memory), kIllegalAddress)
        << "mode " << static_cast<int>(mode);
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
}

// Compile work is bounded (the compile thread is shared by every tenant of the process):
// registers live across many barriers are saved and restored at each, so a kernel of
// 200 registers live across 200 barriers runs on the interpreter instead, with the same
// result.
TEST(JitLimits, CompileWorkOverTheBoundRunsOnTheInterpreter) {
  const int registers = 200, barriers = 200;
  std::ostringstream text;
  text << ".version 8.0\n.target sm_80\n.address_size 64\n"
       << ".visible .entry many(.param .u64 out)\n{\n"
       << "  .reg .b32 %r<" << registers + 1 << ">;\n  .reg .b64 %rd<2>;\n"
       << "  ld.param.u64 %rd1, [out];\n";
  for (int k = 0; k < registers; ++k) text << "  mov.u32 %r" << k << ", " << k + 1 << ";\n";
  for (int k = 0; k < barriers; ++k) text << "  bar.sync 0;\n";
  text << "  mov.u32 %r" << registers << ", 0;\n";
  for (int k = 0; k < registers; ++k) {
    text << "  add.u32 %r" << registers << ", %r" << registers << ", %r" << k << ";\n";
  }
  text << "  st.global.u32 [%rd1], %r" << registers << ";\n  ret;\n}\n";
  auto module = PtxModule::Parse(text.str());
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("many", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  SetJitMode(JitMode::kAlways);
  std::vector<uint32_t> out(1, 0);
  Memory memory;
  const uint64_t d = memory.Add(out);
  EXPECT_EQ(Launch(kernel, {1, 1, 1}, {4, 1, 1}, Pack(d), memory), 0);
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(out[0], static_cast<uint32_t>(registers * (registers + 1) / 2));
  EXPECT_EQ(kernel.jit->jit_launches.load(), 0u);
  EXPECT_NE(kernel.jit->refused.find("compile work"), std::string::npos) << kernel.jit->refused;
}

// A branch to a label after the last instruction (`DONE: }`) ends the thread; with a
// barrier, the tier's liveness analysis took the label for an instruction one past the
// end (found by the ptx_jit fuzz target, under AddressSanitizer).
TEST(JitLimits, ABranchToALabelAfterTheLastInstructionEndsTheThread) {
  const std::string text = KernelText("ABranchToALabelAfterTheLastInstructionEndsTheThread.ptx");
  auto module = PtxModule::Parse(text);
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("tail", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  for (JitMode mode : {JitMode::kOff, JitMode::kAlways}) {
    SetJitMode(mode);
    std::vector<uint32_t> out(4, 0);
    Memory memory;
    const uint64_t d = memory.Add(out);
    EXPECT_EQ(Launch(**decoded, {1, 1, 1}, {4, 1, 1}, Pack(d), memory), 0);
    EXPECT_EQ(out, (std::vector<uint32_t>{7, 8, 0, 0})) << "mode " << static_cast<int>(mode);
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ((*decoded)->jit->jit_launches.load(), 1u) << (*decoded)->jit->refused;
}

// cp.async (JitCpAsync.ptx): the tier copies at issue, as the interpreter does, with the
// same zero-fill (src-size, ignore-src) and the same faults.
// The fixtures over one file of kernels/ (jit_fixture.h).
using KernelFileTest = jit_test::JitKernelFileTest;

class JitAsyncCopy : public KernelFileTest {
 public:
  JitAsyncCopy() : KernelFileTest("JitCpAsync.ptx") {}

  // C = A * B (n x n, A[k] = a_at(k), B[k] = b_at(k)) by `name` on tiles x tiles blocks of
  // 16 x 16 threads, interpreted and compiled: the product (small integers and fractions of
  // a power of two, exact in any order), and the compiled result bit for bit the
  // interpreter's; the compiled launch must have been the JIT's.
  void MultiplyOnBothTiers(const std::string& name, int n, uint32_t tiles, const std::function<float(int)>& a_at,
                           const std::function<float(int)>& b_at) {
    const DecodedKernel& kernel = Kernel(name);
    std::vector<float> a(n * n), b(n * n);
    for (int k = 0; k < n * n; ++k) {
      a[k] = a_at(k);
      b[k] = b_at(k);
    }
    std::vector<float> c[2];
    for (int compiled = 0; compiled < 2; ++compiled) {
      SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
      c[compiled].assign(n * n, -1.0f);
      Memory memory;
      const uint64_t da = memory.Add(a), db = memory.Add(b), dc = memory.Add(c[compiled]);
      std::string detail;
      ASSERT_EQ(Launch(kernel, {tiles, tiles, 1}, {16, 16, 1}, Pack(da, db, dc, n), memory, nullptr, &detail), 0)
          << detail;
    }
    EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        float sum = 0;
        for (int k = 0; k < n; ++k) sum += a[i * n + k] * b[k * n + j];
        ASSERT_EQ(c[0][i * n + j], sum) << i << ", " << j;
        ASSERT_EQ(std::bit_cast<uint32_t>(c[1][i * n + j]), std::bit_cast<uint32_t>(c[0][i * n + j])) << i << ", " << j;
      }
    }
  }

  // `stage` on 64 threads (a block shaped `block`: 64 x 1 runs vector code, 1 x 64 scalar
  // code) from an input of `in_size` bytes at `shift` bytes, to `target` bytes past each
  // thread's place in shared memory, in `mode`: its CUresult, *out and *detail.
  int32_t Stage(JitMode mode, uint32_t shift, uint32_t target, std::vector<uint8_t>* out, std::string* detail,
                uint64_t* in_address = nullptr, size_t in_size = 1024,
                const std::vector<uint32_t>& block = {64, 1, 1}) {
    SetJitMode(mode);
    std::vector<uint8_t> in(in_size);
    for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<uint8_t>(k * 7 + 1);
    out->assign(1024, 0xee);
    Memory memory;
    const uint64_t din = memory.Add(in), dout = memory.Add(*out);
    if (in_address != nullptr) *in_address = din;
    return Launch(Kernel("stage"), {1, 1, 1}, block, Pack(din, dout, shift, target), memory, nullptr, detail);
  }
};

// nvcc's tiled matrix multiply of cp.async copies (4 bytes each, src-size and ignore-src
// zero-filling the tiles past the matrix's edge): the interpreter's results bit for bit,
// and the product.
TEST_F(JitAsyncCopy, ATiledMatrixMultiplyGivesTheInterpretersResults) {
  const int n = 37;  // not a multiple of the tile: the last tiles are partly zeros
  MultiplyOnBothTiers(
      "matmul_cp_async", n, (n + 15) / 16, [](int k) { return static_cast<float>(k % 7) - 3; },
      [](int k) { return static_cast<float>(k % 5) * 0.5f; });
}

// Double buffering with CUDA's pipeline primitives (nvcc's: the next tiles' copies issued
// before the current ones are read, cp.async.wait_group 1): the interpreter's results, and
// the product.
TEST_F(JitAsyncCopy, ADoubleBufferedPipelineGivesTheInterpretersResults) {
  const int n = 64;
  MultiplyOnBothTiers(
      "mm_pipe", n, n / 16, [](int k) { return static_cast<float>(k % 11) - 5; },
      [](int k) { return static_cast<float>(k % 3) * 0.25f; });
}

// Every size of source a 16-byte copy may have (src-size 0 to 16 and more), and
// ignore-src: the bytes not from the source are zeros, on the interpreter, in vector code
// (rows whose 8 lanes all copy 16 bytes: one copy; the others lane by lane) and in scalar
// code.
TEST_F(JitAsyncCopy, SrcSizeAndIgnoreSrcFillWithZeros) {
  for (uint32_t shift : {0u, 4u}) {
    std::vector<uint8_t> out[3];
    for (int run = 0; run < 3; ++run) {
      std::string detail;
      const JitMode mode = run > 0 ? JitMode::kAlways : JitMode::kOff;
      const std::vector<uint32_t> block = run == 2 ? std::vector<uint32_t>{1, 64, 1} : std::vector<uint32_t>{64, 1, 1};
      ASSERT_EQ(Stage(mode, shift, 0, &out[run], &detail, nullptr, 1024 + shift, block), 0) << detail;
    }
    for (uint32_t t = 0; t < 64; ++t) {
      const uint32_t from_source = std::min(t % 32, 16u);
      for (uint32_t k = 0; k < 16; ++k) {
        const uint32_t at = 16 * t + shift + k;
        uint8_t expected = k < from_source ? static_cast<uint8_t>(at * 7 + 1) : 0;
        if (k >= 12) expected = (t & 4) ? 0 : static_cast<uint8_t>(at * 7 + 1);
        ASSERT_EQ(out[0][16 * t + k], expected) << "thread " << t << ", byte " << k << ", shift " << shift;
        for (int run = 1; run < 3; ++run) {
          ASSERT_EQ(out[run][16 * t + k], out[0][16 * t + k])
              << (run == 1 ? "vector" : "scalar") << " code, thread " << t << ", byte " << k << ", shift " << shift;
        }
      }
    }
  }
  const DecodedKernel& kernel = Kernel("stage");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 4u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
}

// A copy from past the source's allocation, or to past the CTA's shared memory, fails the
// launch on the interpreter, in vector code and in scalar code with the same error and the
// same text (a source of 13 of the 16 bytes: a fault of 13 bytes; the stray lane's own
// thread); a copy of no bytes from the source reads nothing.
TEST_F(JitAsyncCopy, AStrayCopyFailsTheLaunchAsOnTheInterpreter) {
  std::string store_detail[3];
  for (int run = 0; run < 3; ++run) {
    const JitMode mode = run > 0 ? JitMode::kAlways : JitMode::kOff;
    const std::vector<uint32_t> block = run == 2 ? std::vector<uint32_t>{1, 64, 1} : std::vector<uint32_t>{64, 1, 1};
    std::vector<uint8_t> out;
    std::string detail;
    uint64_t in = 0;
    char expected[96];
    // Thread 45 (warp 1) copies 13 bytes from 1012 of the 1024: one past the end.
    EXPECT_EQ(Stage(mode, 292, 0, &out, &detail, &in, 1024, block), kIllegalAddress);
    std::snprintf(expected, sizeof(expected), "cp.async load of 13 bytes at 0x%llx (block 0, warp 1)",
                  static_cast<unsigned long long>(in + 16 * 45 + 292));
    EXPECT_EQ(detail, expected) << "run " << run;
    // Thread 63 copies all 16 from 1024 on.
    EXPECT_EQ(Stage(mode, 16, 0, &out, &detail, &in, 1024, block), kIllegalAddress);
    std::snprintf(expected, sizeof(expected), "cp.async load of 16 bytes at 0x%llx (block 0, warp 1)",
                  static_cast<unsigned long long>(in + 1024));
    EXPECT_EQ(detail, expected) << "run " << run;
    // Thread 63's target ends 16 bytes past the 1024 of `staged`.
    EXPECT_EQ(Stage(mode, 0, 16, &out, &detail, nullptr, 1024, block), kIllegalAddress);
    EXPECT_NE(detail.find("cp.async store of 16 bytes"), std::string::npos) << detail;
    EXPECT_NE(detail.find("(block 0, warp 1)"), std::string::npos) << detail;
    store_detail[run] = detail;
  }
  // The target's address as the instruction made it (a .shared one), on every tier.
  EXPECT_EQ(store_detail[1], store_detail[0]);
  EXPECT_EQ(store_detail[2], store_detail[0]);
  EXPECT_EQ(Kernel("stage").jit->jit_launches.load(), 6u) << Kernel("stage").jit->refused;
}

// A kernel that copies with cp.async and reads what another thread wrote with a load a
// thread could spin on (ld.volatile) runs compiled when no branch can run that load again
// (stage has no loop), and when one can too, in scalar code whose threads stop before the
// load (each thread here runs to its next stop before the next one starts): the same bytes.
TEST_F(JitAsyncCopy, AKernelThatMayWaitForAnotherThreadRunsCompiled) {
  for (bool loop : {false, true}) {
    std::string text = KernelText("JitCpAsync.ptx");
    const std::string load = "ld.shared.u32 %r12, [%r4];";
    // In a loop that runs once: a branch back to the load, which a thread could spin at.
    text.replace(text.find(load), load.size(),
                 loop ? "$Lagain:\n  ld.volatile.shared.u32 %r12, [%r4];\n  setp.eq.u32 %p1, %r12, %r12;\n"
                        "  @!%p1 bra $Lagain;"
                      : "ld.volatile.shared.u32 %r12, [%r4];");
    Parse(text);
    std::vector<uint8_t> out;
    std::string detail;
    ASSERT_EQ(Stage(JitMode::kAlways, 0, 0, &out, &detail), 0) << detail;
    EXPECT_EQ(out[16 * 20 + 1], static_cast<uint8_t>((16 * 20 + 1) * 7 + 1));
    EXPECT_EQ(Kernel("stage").jit->jit_launches.load(), 1u) << Kernel("stage").jit->refused;
    ASSERT_NE(Kernel("stage").jit->compiled, nullptr) << Kernel("stage").jit->refused;
    EXPECT_EQ(Yields(*Kernel("stage").jit->compiled), loop);
  }
}

// Vector accesses (ld/st .v2/.v4) and dynamic shared memory (JitVectorAccess.ptx): the
// interpreter's results bit for bit, and its faults with the same text.
class JitVectorAccess : public KernelFileTest {
 public:
  JitVectorAccess() : KernelFileTest("JitVectorAccess.ptx") {}

  // `stray_vector` on 48 threads with `in_words` words of input and `out_words` of output,
  // its stores to shared memory `shift` bytes on, in `mode`: its CUresult, *out, *detail
  // and the buffers' device addresses.
  int32_t Stray(JitMode mode, uint32_t shift, size_t in_words, size_t out_words, std::vector<uint32_t>* out,
                std::string* detail, uint64_t* in_address, uint64_t* out_address) {
    SetJitMode(mode);
    std::vector<uint32_t> in(in_words);
    for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<uint32_t>(k * 1000);
    out->assign(out_words, 0xeeeeeeee);
    Memory memory;
    *in_address = memory.Add(in);
    *out_address = memory.Add(*out);
    return Launch(Kernel("stray_vector"), {1, 1, 1}, {48, 1, 1}, Pack(*in_address, *out_address, shift), memory,
                  nullptr, detail);
  }
};

// nvcc's tiled matrix multiply of float4 loads and stores (ld.global.nc.v4, st.shared.v4,
// ld.shared.v4, st.global.v4): the interpreter's results bit for bit, and the product.
TEST_F(JitVectorAccess, AFloat4TiledMatrixMultiplyGivesTheInterpretersResults) {
  const int n = 64;
  const DecodedKernel& kernel = Kernel("matmul_float4");
  std::vector<float> a(n * n), b(n * n);
  for (int k = 0; k < n * n; ++k) {
    a[k] = static_cast<float>(k % 7) - 3;
    b[k] = static_cast<float>(k % 5) * 0.5f;
  }
  std::vector<float> c[2];
  for (int compiled = 0; compiled < 2; ++compiled) {
    SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
    c[compiled].assign(n * n, -1.0f);
    Memory memory;
    const uint64_t da = memory.Add(a), db = memory.Add(b), dc = memory.Add(c[compiled]);
    std::string detail;
    ASSERT_EQ(Launch(kernel, {n / 32, n / 32, 1}, {8, 32, 1}, Pack(da, db, dc, n), memory, nullptr, &detail), 0)
        << detail;
  }
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      float sum = 0;
      for (int k = 0; k < n; ++k) sum += a[i * n + k] * b[k * n + j];
      ASSERT_EQ(c[0][i * n + j], sum) << i << ", " << j;
      ASSERT_EQ(std::bit_cast<uint32_t>(c[1][i * n + j]), std::bit_cast<uint32_t>(c[0][i * n + j])) << i << ", " << j;
    }
  }
}

// A vector access past shared memory or past its allocation fails the launch on both tiers
// with the same error and text: the whole access's size at its first element's address.
TEST_F(JitVectorAccess, AStrayVectorAccessFailsTheLaunchAsOnTheInterpreter) {
  std::vector<uint32_t> out[2], scratch;
  for (int compiled = 0; compiled < 2; ++compiled) {
    const JitMode mode = compiled ? JitMode::kAlways : JitMode::kOff;
    std::string detail;
    uint64_t in = 0, dout = 0;
    char expected[96];
    ASSERT_EQ(Stray(mode, 0, 96, 192, &out[compiled], &detail, &in, &dout), 0) << detail;
    // Thread 47 (warp 1) stores 16 bytes at 756 of the 768 bytes of `tile`.
    EXPECT_EQ(Stray(mode, 4, 96, 192, &scratch, &detail, &in, &dout), kIllegalAddress);
    EXPECT_EQ(detail, "store of 16 bytes at 0x2f4 (block 0, warp 1)") << "mode " << static_cast<int>(mode);
    // Thread 47 loads 8 bytes past the 94 words of `in`.
    EXPECT_EQ(Stray(mode, 0, 94, 192, &scratch, &detail, &in, &dout), kIllegalAddress);
    std::snprintf(expected, sizeof(expected), "load of 8 bytes at 0x%llx (block 0, warp 1)",
                  static_cast<unsigned long long>(in + 8 * 47));
    EXPECT_EQ(detail, expected) << "mode " << static_cast<int>(mode);
    // Thread 47 stores 16 bytes of which the last 4 are past the 191 words of `out`.
    EXPECT_EQ(Stray(mode, 0, 96, 191, &scratch, &detail, &in, &dout), kIllegalAddress);
    std::snprintf(expected, sizeof(expected), "store of 16 bytes at 0x%llx (block 0, warp 1)",
                  static_cast<unsigned long long>(dout + 16 * 47));
    EXPECT_EQ(detail, expected) << "mode " << static_cast<int>(mode);
  }
  EXPECT_EQ(Kernel("stray_vector").jit->jit_launches.load(), 4u) << Kernel("stray_vector").jit->refused;
  for (uint32_t t = 0; t < 48; ++t) {
    EXPECT_EQ(out[0][4 * t], t + 2 * t * 1000) << t;
    EXPECT_EQ(out[0][4 * t + 1], t + (2 * t + 1) * 1000) << t;
    EXPECT_EQ(out[0][4 * t + 2], t) << t;
    EXPECT_EQ(out[0][4 * t + 3], t) << t;
  }
  EXPECT_EQ(out[1], out[0]);
}

// nvcc's saxpy of float4 (ld.global.v4, st.global.v4) in vector code (blocks of 64: 8
// lanes at once; the last block partly past n, so its lanes go one by one) and in scalar
// code (blocks of 60): the interpreter's results bit for bit; x shorter than n * 4 floats
// fails both tiers with the same detail, in vector code the first stray lane's.
TEST_F(JitVectorAccess, AVectorAccessInVectorCodeGivesTheInterpretersResults) {
  const DecodedKernel& kernel = Kernel("saxpy4");
  const int n = 1000;
  std::vector<float> x(4 * n);
  for (int k = 0; k < 4 * n; ++k) x[k] = static_cast<float>(k % 9) * 0.25f - 1.0f;
  for (uint32_t block : {64u, 60u}) {
    std::vector<float> y[2];
    for (int compiled = 0; compiled < 2; ++compiled) {
      SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
      y[compiled].assign(4 * n + 4, 0);
      for (int k = 0; k < 4 * n + 4; ++k) y[compiled][k] = static_cast<float>(k % 5);
      Memory memory;
      const uint64_t dx = memory.Add(x), dy = memory.Add(y[compiled]);
      std::string detail;
      ASSERT_EQ(Launch(kernel, {(n + block - 1) / block, 1, 1}, {block, 1, 1}, Pack(n, 1.5f, dx, dy), memory, nullptr,
                       &detail),
                0)
          << detail;
    }
    for (int k = 0; k < 4 * n + 4; ++k) {
      const float expected = k < 4 * n ? std::fma(x[k], 1.5f, static_cast<float>(k % 5)) : static_cast<float>(k % 5);
      ASSERT_EQ(y[0][k], expected) << k;
      ASSERT_EQ(std::bit_cast<uint32_t>(y[1][k]), std::bit_cast<uint32_t>(y[0][k])) << k;
    }
  }
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
  // x of 4 * 1000 - 2 floats: thread 999 (block 15, warp 1) reads 16 bytes from 8 bytes
  // before its end.
  std::vector<float> short_x(4 * n - 2, 1.0f);
  std::string details[2];
  for (int compiled = 0; compiled < 2; ++compiled) {
    SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
    std::vector<float> y(4 * n, 0);
    Memory memory;
    const uint64_t dx = memory.Add(short_x), dy = memory.Add(y);
    EXPECT_EQ(Launch(kernel, {16, 1, 1}, {64, 1, 1}, Pack(n, 1.5f, dx, dy), memory, nullptr, &details[compiled]),
              kIllegalAddress);
    char expected[96];
    std::snprintf(expected, sizeof(expected), "load of 16 bytes at 0x%llx (block 15, warp 1)",
                  static_cast<unsigned long long>(dx + 16 * 999));
    EXPECT_EQ(details[compiled], expected) << "compiled " << compiled;
  }
  EXPECT_EQ(kernel.jit->jit_launches.load(), 3u) << kernel.jit->refused;
}

// `reduce_dynamic` (JitVectorAccess.ptx) over n inputs (input k is k % 7) on blocks of 64
// threads with `dynamic_shared` bytes of dynamic shared memory, in `mode`: its CUresult,
// *out (each block's sum, then each block's first 3 threads') and *detail.
int32_t ReduceDynamic(const DecodedKernel& kernel, JitMode mode, uint32_t n, uint32_t dynamic_shared,
                      std::vector<float>* out, std::string* detail) {
  SetJitMode(mode);
  const uint32_t blocks = (n + 127) / 128;
  std::vector<float> in(n);
  for (uint32_t k = 0; k < n; ++k) in[k] = static_cast<float>(k % 7);
  out->assign(2 * blocks, -1.0f);
  Memory memory;
  const uint64_t din = memory.Add(in), dout = memory.Add(*out);
  return Launch(kernel, {blocks, 1, 1}, {64, 1, 1}, Pack(din, dout, n), memory, nullptr, detail, dynamic_shared);
}

// Dynamic shared memory (`extern __shared__`) after 12 bytes of static (at 16, as the
// decoder places it), the launch's bytes: the interpreter's results bit for bit, with as
// many bytes as the threads use and with more.
TEST_F(JitVectorAccess, ADynamicSharedMemoryReductionGivesTheInterpretersResults) {
  const DecodedKernel& kernel = Kernel("reduce_dynamic");
  const uint32_t n = 1000;  // the last block's second half partly past the end
  for (uint32_t dynamic_shared : {256u, 4096u}) {
    std::vector<float> out[2];
    for (int compiled = 0; compiled < 2; ++compiled) {
      std::string detail;
      ASSERT_EQ(ReduceDynamic(kernel, compiled ? JitMode::kAlways : JitMode::kOff, n, dynamic_shared, &out[compiled],
                              &detail),
                0)
          << detail;
    }
    const uint32_t blocks = (n + 127) / 128;
    for (uint32_t block = 0; block < blocks; ++block) {
      float sum = 0, first = 0;
      for (uint32_t k = block * 128; k < std::min(n, block * 128 + 128); ++k) {
        sum += static_cast<float>(k % 7);
        if (k % 64 < 3) first += static_cast<float>(k % 7);
      }
      EXPECT_EQ(out[0][block], sum) << block;
      EXPECT_EQ(out[0][blocks + block], first) << block;
    }
    for (size_t k = 0; k < out[0].size(); ++k) {
      EXPECT_EQ(std::bit_cast<uint32_t>(out[1][k]), std::bit_cast<uint32_t>(out[0][k])) << k;
    }
  }
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
}

// An access past the launch's dynamic shared memory fails the launch on both tiers with
// the same error and text: 128 bytes hold 32 threads' partial sums (thread 32, warp 1,
// stores at 16 + 128), none hold thread 0's.
TEST_F(JitVectorAccess, AStrayDynamicSharedAccessFailsTheLaunchAsOnTheInterpreter) {
  const DecodedKernel& kernel = Kernel("reduce_dynamic");
  for (JitMode mode : {JitMode::kOff, JitMode::kAlways}) {
    std::vector<float> out;
    std::string detail;
    EXPECT_EQ(ReduceDynamic(kernel, mode, 256, 128, &out, &detail), kIllegalAddress);
    EXPECT_EQ(detail, "store of 4 bytes at 0x90 (block 0, warp 1)") << "mode " << static_cast<int>(mode);
    EXPECT_EQ(ReduceDynamic(kernel, mode, 256, 0, &out, &detail), kIllegalAddress);
    EXPECT_EQ(detail, "store of 4 bytes at 0x10 (block 0, warp 0)") << "mode " << static_cast<int>(mode);
  }
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
}

// A kernel that names no shared variable, launched with dynamic shared memory, runs on the
// interpreter (its compiled code would take a generic address in the shared window for a
// global one); without, compiled.
TEST_F(Jit, DynamicSharedMemoryForAKernelNamingNoSharedVariableIsInterpreted) {
  SetJitMode(JitMode::kAlways);
  const DecodedKernel& kernel = Kernel("dims");
  std::vector<uint32_t> out(1, 0);
  Memory memory;
  const uint64_t d = memory.Add(out);
  ASSERT_EQ(Launch(kernel, {1, 1, 1}, {1, 1, 1}, Pack(d), memory, nullptr, nullptr, 64), 0);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 0u);
  ASSERT_EQ(Launch(kernel, {1, 1, 1}, {1, 1, 1}, Pack(d), memory), 0);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
}

// The interpreter's div and rem (interp/arithmetic.h): by zero, div gives all ones and rem
// the dividend; signed by -1, div the negation (the minimum itself) and rem 0.
template <typename T>
T Quotient(T a, T b) {
  if (b == 0) return static_cast<T>(-1);
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));
  }
  return static_cast<T>(a / b);
}
template <typename T>
T Remainder(T a, T b) {
  if (b == 0) return a;
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
  }
  return static_cast<T>(a % b);
}

// Runs `kernel` (its parameters: the input's and the output's device addresses) once on
// the interpreter, then compiled on a row of 64 threads (vector code) and on a column of 64
// (scalar code), each into its own out[run] of `count` elements set to `fill` first; checks
// that both compiled launches ran compiled code, vector code among it.
template <typename In, typename Out>
void RunInterpretedThenCompiled(const DecodedKernel& kernel, std::vector<In>& in, std::vector<Out> (&out)[3],
                                size_t count, const Out& fill) {
  const std::vector<uint32_t> blocks[3] = {{64, 1, 1}, {64, 1, 1}, {1, 64, 1}};
  for (int run = 0; run < 3; ++run) {
    SetJitMode(run == 0 ? JitMode::kOff : JitMode::kAlways);
    out[run].assign(count, fill);
    Memory memory;
    const uint64_t din = memory.Add(in), dout = memory.Add(out[run]);
    std::string detail;
    ASSERT_EQ(Launch(kernel, {1, 1, 1}, blocks[run], Pack(din, dout), memory, nullptr, &detail), 0) << detail;
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr);
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
}

// Integer div and rem (JitIntegerDivision.ptx) by zero, by -1, of the minimum, of mixed
// signs and of 64-bit values: the interpreter's results bit for bit in vector code (a
// block of 64 threads in x) and in scalar code (64 in y), and the interpreter's rules.
TEST(JitIntegerDivision, DivAndRemGiveTheInterpretersResults) {
  auto module = PtxModule::Parse(KernelText("JitIntegerDivision.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("divide", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  const uint64_t values[8] = {
      0, 1, ~uint64_t{0}, 7, static_cast<uint64_t>(-7), 0x80000000u, uint64_t{1} << 63, 0x123456789abcdefull};
  std::vector<uint64_t> in;
  for (uint64_t a : values) {
    for (uint64_t b : values) {
      in.push_back(a);
      in.push_back(b == 0x123456789abcdefull ? 3 : b);
    }
  }
  struct Result {
    int32_t div_s32;
    uint32_t div_u32;
    int32_t rem_s32;
    uint32_t rem_u32;
    int64_t div_s64;
    uint64_t div_u64;
    int64_t rem_s64;
    uint64_t rem_u64;
  };
  static_assert(sizeof(Result) == 48);
  std::vector<Result> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, 64, Result{}));
  for (int i = 0; i < 64; ++i) {
    const uint64_t a = in[2 * i], b = in[2 * i + 1];
    const Result& r = out[0][i];
    EXPECT_EQ(r.div_s32, Quotient<int32_t>(static_cast<int32_t>(a), static_cast<int32_t>(b))) << i;
    EXPECT_EQ(r.div_u32, Quotient<uint32_t>(static_cast<uint32_t>(a), static_cast<uint32_t>(b))) << i;
    EXPECT_EQ(r.rem_s32, Remainder<int32_t>(static_cast<int32_t>(a), static_cast<int32_t>(b))) << i;
    EXPECT_EQ(r.rem_u32, Remainder<uint32_t>(static_cast<uint32_t>(a), static_cast<uint32_t>(b))) << i;
    EXPECT_EQ(r.div_s64, Quotient<int64_t>(static_cast<int64_t>(a), static_cast<int64_t>(b))) << i;
    EXPECT_EQ(r.div_u64, Quotient<uint64_t>(a, b)) << i;
    EXPECT_EQ(r.rem_s64, Remainder<int64_t>(static_cast<int64_t>(a), static_cast<int64_t>(b))) << i;
    EXPECT_EQ(r.rem_u64, Remainder<uint64_t>(a, b)) << i;
    for (int run = 1; run < 3; ++run) {
      EXPECT_EQ(std::memcmp(&out[run][i], &r, sizeof(Result)), 0) << "pair " << i << ", run " << run;
    }
  }
}

// sin, cos, lg2, ex2 and tanh .approx.f32 (JitApproxFunctions.ptx) of zeros, infinities,
// NaN, subnormals, large and small values: the interpreter's results bit for bit in vector
// code (64 threads in x) and in scalar code (64 in y), the C library's functions.
TEST(JitApproxFunctions, GiveTheInterpretersResultsBitForBit) {
  auto module = PtxModule::Parse(KernelText("JitApproxFunctions.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("approx", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  std::vector<float> in = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           0.5f,
                           3.14159265f,
                           -100.25f,
                           1e30f,
                           -1e30f,
                           88.7f,
                           128.5f,
                           -150.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::min()};
  for (int k = 0; in.size() < 64; ++k) in.push_back(std::ldexp(static_cast<float>(k % 13) - 6.3f, k % 17 - 8));
  std::vector<float> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, 5 * 64, -1.0f));
  for (int i = 0; i < 64; ++i) {
    const float expected[5] = {std::sin(in[i]), std::cos(in[i]), std::log2(in[i]), std::exp2(in[i]), std::tanh(in[i])};
    for (int f = 0; f < 5; ++f) {
      EXPECT_EQ(std::bit_cast<uint32_t>(out[0][5 * i + f]), std::bit_cast<uint32_t>(expected[f]))
          << "input " << in[i] << ", function " << f;
      for (int run = 1; run < 3; ++run) {
        EXPECT_EQ(std::bit_cast<uint32_t>(out[run][5 * i + f]), std::bit_cast<uint32_t>(out[0][5 * i + f]))
            << "input " << in[i] << ", function " << f << ", run " << run;
      }
    }
  }
}

// popc, clz, brev, bfi, bmsk, fns and shf (JitBitOps.ptx) of zeros, all ones, single bits and
// mixed words, at positions and lengths past the width (bfi's low 8 bits; bmsk's clamp and
// wrap), fns offsets up, down and 0 from bases past 31 and shift amounts past 32: the interpreter's results bit
// for bit in vector code (64 threads in x) and in scalar code (64 in y).
TEST(JitBitOps, GiveTheInterpretersResultsBitForBit) {
  auto module = PtxModule::Parse(KernelText("JitBitOps.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("bits", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  const uint32_t words[] = {0, 1, ~0u, 0x80000000u, 0x12345678u, 0xf0f00f0fu, 5, 31, 32, 33, 0x100, 0x1ff};
  const uint32_t amounts[] = {0, 1, 3, 8, 17, 31, 32, 33, 63, 64, 65, 255, 256, 0x123, ~0u, static_cast<uint32_t>(-3)};
  const uint64_t longs[] = {0, 1, ~uint64_t{0}, uint64_t{1} << 63, 0x0123456789abcdefull, 0xffff0000ffffull};
  struct Input {
    uint32_t a, b, c, e;
    uint64_t x, y;
  };
  std::vector<Input> in;
  for (uint32_t i = 0; i < 64; ++i) {
    in.push_back({words[i % std::size(words)], i < 32 ? amounts[i % std::size(amounts)] : words[(i * 5) % 12],
                  amounts[(i * 7 + 3) % std::size(amounts)], amounts[(i * 11 + 5) % std::size(amounts)],
                  longs[i % std::size(longs)], longs[(i / 6) % std::size(longs)]});
  }
  std::vector<uint32_t> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, 20 * 64, 0xdeadbeefu));
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(out[0][20 * i], static_cast<uint32_t>(std::popcount(in[i].a))) << i;
    EXPECT_EQ(out[0][20 * i + 4], static_cast<uint32_t>(std::countl_zero(in[i].x))) << i;
    for (int run = 1; run < 3; ++run) {
      for (int k = 0; k < 20; ++k) {
        EXPECT_EQ(out[run][20 * i + k], out[0][20 * i + k]) << "input " << i << ", word " << k << ", run " << run;
      }
    }
  }
}

// prmt as the PTX ISA defines it: d's byte i is byte ctl[i] of b:a, by c's nibble i (its
// bit 3 replicating the byte's sign) or, with a mode, by the ISA's table at c's low 2 bits
// (rows f4e, b4e, rc8, ecl, ecr, rc16; each entry d's bytes 3 2 1 0 as a selector).
uint32_t PermuteBytes(uint32_t a, uint32_t b, uint32_t c, int mode) {
  static const uint16_t kTable[6][4] = {{0x3210, 0x4321, 0x5432, 0x6543}, {0x5670, 0x6701, 0x7012, 0x0123},
                                        {0x0000, 0x1111, 0x2222, 0x3333}, {0x3210, 0x3211, 0x3222, 0x3333},
                                        {0x0000, 0x1110, 0x2210, 0x3210}, {0x1010, 0x3232, 0x1010, 0x3232}};
  const uint64_t bytes = (uint64_t{b} << 32) | a;
  const uint32_t selector = mode == 0 ? c : kTable[mode - 1][c & 3];
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t s = (selector >> (4 * i)) & 0xf;
    uint32_t byte = (bytes >> (8 * (s & 7))) & 0xff;
    if (mode == 0 && (s & 8)) byte = (byte & 0x80) ? 0xff : 0;
    r |= byte << (8 * i);
  }
  return r;
}

// bfe as the PTX ISA defines it: bit i of d is a's bit pos + i while i < len and that is
// inside the width, else the sign bit (a's bit min(pos + len - 1, msb) for .s types and
// len > 0, else 0).
template <typename T>
T ExtractBits(T a, uint32_t b, uint32_t c) {
  using U = std::make_unsigned_t<T>;
  constexpr uint32_t msb = 8 * sizeof(T) - 1;
  const uint32_t pos = b & 0xff, len = c & 0xff;
  const U value = static_cast<U>(a);
  const bool sbit = std::is_signed_v<T> && len != 0 && ((value >> std::min(pos + len - 1, msb)) & 1);
  U d = 0;
  for (uint32_t i = 0; i <= msb; ++i) {
    const bool bit = i < len && pos + i <= msb ? (value >> (pos + i)) & 1 : sbit;
    d |= static_cast<U>(bit) << i;
  }
  return static_cast<T>(d);
}

// bfind as the PTX ISA defines it: the most significant 1 (of a negative .s value, the most
// significant 0), or with .shiftamt the left shift bringing it to the top; -1 for none.
template <typename T>
uint32_t FindMsb(T a, bool shift) {
  using U = std::make_unsigned_t<T>;
  constexpr int msb = 8 * sizeof(T) - 1;
  for (int i = msb; i >= 0; --i) {
    const bool bit = (static_cast<U>(a) >> i) & 1;
    if (bit != (std::is_signed_v<T> && a < 0)) return static_cast<uint32_t>(shift ? msb - i : i);
  }
  return ~0u;
}

// prmt in every mode, lop3, bfe and bfind of 32 and 64 bits (JitBitFields.ptx) of zeros,
// all ones, single bits, minimums and mixed words, selectors with sign bits, positions and
// lengths past the width and past 255: the PTX ISA's results (the interpreter's) and, bit
// for bit, the same compiled in vector code (64 threads in x) and in scalar code (64 in y).
TEST(JitBitFields, GiveThePtxIsasAndTheInterpretersResults) {
  auto module = PtxModule::Parse(KernelText("JitBitFields.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("fields", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  const uint32_t words[] = {0,  1,  ~0u, 0x80000000u, 0x7fffffffu, 0x12345678u, 0xf0f00f0fu, 0x8899aabbu, 5,
                            31, 32, 33,  0x100,       0x1ff,       0x8123u,     0xfedcba98u, 0xffu,       0x7f80u};
  const uint32_t amounts[] = {0, 1, 3, 8, 17, 31, 32, 33, 63, 64, 65, 255, 256, 0x123, ~0u, 2, 0x1f1f, 0x3f20};
  const uint64_t longs[] = {0,
                            1,
                            ~uint64_t{0},
                            uint64_t{1} << 63,
                            0x0123456789abcdefull,
                            0xffff0000ffffull,
                            0x8000000000000001ull,
                            0x7fffffffffffffffull};
  struct Input {
    uint32_t a, b, c, e;
    uint64_t x, y;
  };
  std::vector<Input> in;
  for (uint32_t i = 0; i < 64; ++i) {
    const uint32_t c = i % 3 == 0 ? words[(i * 7 + 1) % std::size(words)] : amounts[(i * 7 + 3) % std::size(amounts)];
    in.push_back({words[i % std::size(words)], i < 32 ? amounts[i % std::size(amounts)] : words[(i * 5) % 18], c,
                  words[(i * 11 + 5) % std::size(words)], longs[i % std::size(longs)],
                  longs[(i / 8) % std::size(longs)]});
  }
  constexpr int kWords = 26;
  std::vector<uint32_t> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, kWords * 64, 0xdeadbeefu));
  const uint8_t kLuts[5] = {0x96, 0xe8, 0x01, 0xfe, 0xca};
  for (int i = 0; i < 64; ++i) {
    const Input& v = in[i];
    const uint32_t* r = &out[0][kWords * i];
    for (int mode = 0; mode < 7; ++mode) {
      EXPECT_EQ(r[mode], PermuteBytes(v.a, v.b, v.c, mode)) << "input " << i << ", prmt mode " << mode;
    }
    for (int k = 0; k < 5; ++k) {
      uint32_t lop = 0;
      for (int m = 0; m < 8; ++m) {
        if ((kLuts[k] >> m) & 1) lop |= ((m & 4) ? v.a : ~v.a) & ((m & 2) ? v.b : ~v.b) & ((m & 1) ? v.e : ~v.e);
      }
      EXPECT_EQ(r[7 + k], lop) << "input " << i << ", lut " << int{kLuts[k]};
    }
    EXPECT_EQ(r[12], ExtractBits<uint32_t>(v.a, v.b, v.c)) << i;
    EXPECT_EQ(r[13], static_cast<uint32_t>(ExtractBits<int32_t>(static_cast<int32_t>(v.a), v.b, v.c))) << i;
    const uint32_t finds[8] = {FindMsb<uint32_t>(v.a, false), FindMsb<int32_t>(static_cast<int32_t>(v.a), false),
                               FindMsb<uint32_t>(v.a, true),  FindMsb<int32_t>(static_cast<int32_t>(v.a), true),
                               FindMsb<uint64_t>(v.x, false), FindMsb<int64_t>(static_cast<int64_t>(v.x), false),
                               FindMsb<uint64_t>(v.x, true),  FindMsb<int64_t>(static_cast<int64_t>(v.x), true)};
    for (int k = 0; k < 8; ++k) EXPECT_EQ(r[14 + k], finds[k]) << "input " << i << ", bfind " << k;
    uint64_t wide[2];
    std::memcpy(wide, &r[22], sizeof(wide));
    EXPECT_EQ(wide[0], ExtractBits<uint64_t>(v.x, v.b, v.c)) << i;
    EXPECT_EQ(wide[1], static_cast<uint64_t>(ExtractBits<int64_t>(static_cast<int64_t>(v.x), v.b, v.c))) << i;
    for (int run = 1; run < 3; ++run) {
      for (int k = 0; k < kWords; ++k) {
        EXPECT_EQ(out[run][kWords * i + k], r[k]) << "input " << i << ", word " << k << ", run " << run;
      }
    }
  }
}

// dp4a and dp2a, vabsdiff4, vabsdiff2 (.sat, .add) and sad (JitByteDots.ptx) of bytes and
// halves at their extremes (0, 0x7f, 0x80, 0xff; 0x7fff, 0x8000, 0xffff), accumulators that
// wrap (INT_MIN, INT_MAX, -1), in every signedness of a and b: the PTX ISA's results (the
// interpreter's) and, bit for bit, the same compiled in vector code (64 threads in x) and
// in scalar code (64 in y).
TEST(JitByteDots, DotsAndDifferencesGiveThePtxIsasAndTheInterpretersResults) {
  auto module = PtxModule::Parse(KernelText("JitByteDots.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("dots", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  const uint32_t words[] = {0,           1,           ~0u,         0x80000000u, 0x7fffffffu, 0x807f80ffu, 0x7f7f7f7fu,
                            0x80808080u, 0xffffffffu, 0x12345678u, 0x8000ffffu, 0x7fff0001u, 0xfedcba98u, 0x00ff00ffu};
  struct Input {
    uint32_t a, b, c, pad;
  };
  std::vector<Input> in;
  for (uint32_t i = 0; i < 64; ++i) {
    in.push_back({words[i % std::size(words)], words[(i * 5 + 3) % std::size(words)],
                  words[(i * 11 + 7) % std::size(words)], 0});
  }
  constexpr int kWords = 21;
  std::vector<uint32_t> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, kWords * 64, 0xdeadbeefu));
  // Element k of `bits` bits of `word`, signed or not, as PTX extends it.
  auto element = [](uint32_t word, int k, int bits, bool is_signed) {
    const int64_t v = (word >> (k * bits)) & ((uint32_t{1} << bits) - 1);
    return is_signed && (v >> (bits - 1)) ? v - (int64_t{1} << bits) : v;
  };
  for (int i = 0; i < 64; ++i) {
    const Input& v = in[i];
    // vabsdiff: {bits, d signed and .sat, a signed, b signed, .add} per form 12..18.
    const int kDifferences[7][5] = {{8, 0, 0, 0, 0},  {8, 1, 1, 1, 0},  {8, 0, 0, 1, 0}, {8, 0, 1, 0, 1},
                                    {16, 0, 0, 0, 0}, {16, 1, 1, 1, 0}, {16, 0, 1, 0, 1}};
    for (int f = 0; f < 7; ++f) {
      const auto [bits, sat, a_signed, b_signed, add] = kDifferences[f];
      int64_t sum = add ? v.c : 0;
      uint32_t fields = 0;
      for (int k = 0; k < 32 / bits; ++k) {
        int64_t difference = std::abs(element(v.a, k, bits, a_signed) - element(v.b, k, bits, b_signed));
        sum += difference;
        if (sat) difference = std::min<int64_t>(difference, bits == 8 ? 127 : 32767);
        fields |= static_cast<uint32_t>(difference & ((int64_t{1} << bits) - 1)) << (k * bits);
      }
      EXPECT_EQ(out[0][kWords * i + 12 + f], add ? static_cast<uint32_t>(sum) : fields)
          << "input " << i << ", vabsdiff " << f;
    }
    EXPECT_EQ(out[0][kWords * i + 19], (v.a > v.b ? v.a - v.b : v.b - v.a) + v.c) << i;  // sad.u32
    const int32_t sa = static_cast<int32_t>(v.a), sb = static_cast<int32_t>(v.b);
    EXPECT_EQ(out[0][kWords * i + 20],
              (sa > sb ? v.a - v.b : v.b - v.a) + v.c) << i;  // sad.s32: |a - b| wrapping
    for (int form = 0; form < kWords; ++form) {
      for (int run = 1; run < 3; ++run) {
        EXPECT_EQ(out[run][kWords * i + form], out[0][kWords * i + form])
            << "input " << i << ", form " << form << ", run " << run;
      }
      if (form >= 12) continue;
      const int op = form / 4;  // dp4a, dp2a.lo, dp2a.hi
      const bool a_signed = form & 2, b_signed = form & 1;
      int64_t sum = v.c;
      for (int k = 0; k < (op == 0 ? 4 : 2); ++k) {
        sum += op == 0 ? element(v.a, k, 8, a_signed) * element(v.b, k, 8, b_signed)
                       : element(v.a, k, 16, a_signed) * element(v.b, k + (op == 2 ? 2 : 0), 8, b_signed);
      }
      EXPECT_EQ(out[0][kWords * i + form], static_cast<uint32_t>(sum)) << "input " << i << ", form " << form;
    }
  }
}

// Directed roundings (.rz, .rm, .rp) of f32 and f64 add, sub, mul, fma, mad, div, sqrt and
// rcp and of cvt into floats (from f64 and from 32- and 64-bit integers), and cvt with .ftz
// and .sat of floats and integers (JitRoundings.ptx), of inexact sums and products, exact
// zeros of both signs (x - x is -0 rounding down), overflow, underflow to subnormals,
// subnormals under .ftz, infinities, NaNs with payloads, integers past a float's 24 and a
// double's 53 bits and at every integer type's bounds: the interpreter's results bit for bit
// in vector code (64 threads in x) and in scalar code (64 in y), and a few by hand.
TEST(JitRoundings, DirectedRoundingsFtzAndSatGiveTheInterpretersResultsBitForBit) {
  auto module = PtxModule::Parse(KernelText("JitRoundings.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("roundings", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  constexpr int kForms = 95;
  const float kMax = std::numeric_limits<float>::max(), kMin = std::numeric_limits<float>::min();
  const float kDenorm = std::numeric_limits<float>::denorm_min(), kNaN = std::bit_cast<float>(0x7fc12345u);
  const float kSignalling = std::bit_cast<float>(0x7f812345u), kInf = std::numeric_limits<float>::infinity();
  // f32 a, b, c; the doubles are these widened, scaled or made inexact below.
  const float triples[][3] = {
      {1.0f, 1e-8f, 3.0f},    {1.0f, -1e-8f, -3.0f},     {0.1f, 0.2f, 0.3f},        {-0.1f, 0.7f, -1e-30f},
      {2.5f, -2.5f, 0.0f},    {-0.0f, 0.0f, -0.0f},      {-0.0f, -0.0f, 0.0f},      {kMax, kMax, -kMax},
      {-kMax, 3.0f, 1.0f},    {kMin, 0.5f, kDenorm},     {kDenorm, -0.75f, kMin},   {-kDenorm, 3.0f, -kDenorm},
      {1e-40f, 1e-40f, 1.0f}, {kInf, -kInf, 1.0f},       {kNaN, 1.0f, kSignalling}, {kSignalling, kNaN, 2.0f},
      {7.0f, 3.0f, -2.0f},    {16777217.0f, 1.0f, 0.5f}, {-1.0f, 3.0f, 1e30f},      {2.0f, 0.0f, -0.0f}};
  const int32_t ints[] = {0,
                          1,
                          -1,
                          16777217,
                          -16777219,
                          0x7fffffbf,
                          std::numeric_limits<int32_t>::min(),
                          std::numeric_limits<int32_t>::max(),
                          300,
                          -300,
                          65535,
                          65536,
                          127,
                          -129};
  const int64_t longs[] = {0,
                           -1,
                           (int64_t{1} << 53) + 1,
                           -(int64_t{1} << 60) - 3,
                           std::numeric_limits<int64_t>::min(),
                           std::numeric_limits<int64_t>::max(),
                           0x7fffff7fffffffffll,
                           4294967296ll,
                           -129,
                           255};
  struct Input {
    float a, b, c;
    int32_t i;
    double x, y, z;
    int64_t l;
    uint64_t ul;
    uint32_t u, pad;
  };
  static_assert(sizeof(Input) == 64);
  std::vector<Input> in;
  for (int k = 0; k < 64; ++k) {
    const float* t = triples[k % std::size(triples)];
    Input v{};
    v.a = t[0];
    v.b = t[1];
    v.c = t[2];
    v.i = ints[k % std::size(ints)];
    // The doubles: the floats, and past the first rows inexact sums, tiny and huge values.
    const double scale = k < 20 ? 1.0 : k < 40 ? 1.0 / 3.0 : 1e300;
    v.x = t[0] * scale;
    v.y = k % 7 == 0 ? 1e-320 : t[1] * (k < 40 ? scale : 1e-300);
    v.z = t[2] + (k % 3 == 1 ? 1e-17 : 0.0);
    v.l = longs[k % std::size(longs)];
    v.ul = static_cast<uint64_t>(longs[(k + 3) % std::size(longs)]) ^ (k >= 32 ? uint64_t{1} << 63 : 0);
    v.u = static_cast<uint32_t>(ints[(k + 5) % std::size(ints)]);
    in.push_back(v);
  }
  std::vector<uint64_t> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, kForms * 64, uint64_t{0xababababababababull}));
  auto f32 = [&](int thread, int form) {
    return std::bit_cast<float>(static_cast<uint32_t>(out[0][thread * kForms + form]));
  };
  auto bits = [&](int thread, int form) { return static_cast<uint32_t>(out[0][thread * kForms + form]); };
  // By hand (forms as JitRoundings.ptx lists them): 1 + 1e-8 (thread 0) is 1 rounding
  // towards zero or down and the next float up rounding up; 2.5 + -2.5 (thread 4) is +0,
  // but -0 rounding down; 16777217 (thread 3) is no float: 2^24 towards zero, 2^24 + 2 up;
  // .sat makes a NaN (thread 14) +0 and clamps 300 and -300 (threads 8, 9) into an s8.
  EXPECT_EQ(f32(0, 0), 1.0f);                        // add.rz.f32
  EXPECT_EQ(f32(0, 1), 1.0f);                        // add.rm.f32
  EXPECT_EQ(f32(0, 2), std::nextafter(1.0f, 2.0f));  // add.rp.f32
  EXPECT_EQ(bits(4, 0), 0u);                         // add.rz.f32
  EXPECT_EQ(bits(4, 1), 0x80000000u);                // add.rm.f32
  EXPECT_EQ(f32(3, 47), 16777216.0f);                // cvt.rz.f32.s32
  EXPECT_EQ(f32(3, 61), 16777218.0f);                // cvt.rp.f32.s32
  EXPECT_EQ(bits(14, 72), 0u);                       // cvt.sat.f32.f32
  EXPECT_EQ(bits(8, 85), 127u);                      // cvt.sat.s8.s32
  EXPECT_EQ(bits(9, 85), 0xffffff80u);               // cvt.sat.s8.s32
  for (int i = 0; i < 64; ++i) {
    for (int form = 0; form < kForms; ++form) {
      for (int run = 1; run < 3; ++run) {
        EXPECT_EQ(out[run][i * kForms + form], out[0][i * kForms + form])
            << "thread " << i << ", form " << form << ", run " << run;
      }
    }
  }
}

// min and max as the PTX ISA defines them: a NaN operand gives the other (both NaN, or
// either with .NaN: a NaN); otherwise the lesser (greater), -0 below +0.
template <typename T>
T IsaMinMax(T a, T b, bool max, bool nan) {
  if ((std::isnan(a) && std::isnan(b)) || (nan && (std::isnan(a) || std::isnan(b)))) {
    return std::numeric_limits<T>::quiet_NaN();
  }
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) != max ? a : b;
  return (a < b) != max ? a : b;
}

// min and max of f32 (.ftz, .NaN) and f64, and setp.ftz (JitMinMax.ptx) of zeros of both
// signs in either order, equal values, NaNs with payloads (quiet, signalling, negative) on either side and
// both, infinities and subnormals (flushed under .ftz): the PTX ISA's results (the
// interpreter's, -0 below +0; two NaNs give the canonical NaN) and, bit for bit, the same
// compiled in vector code (64 threads in x) and in scalar code (64 in y).
TEST(JitMinMax, GiveThePtxIsasAndTheInterpretersResults) {
  auto module = PtxModule::Parse(KernelText("JitMinMax.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("minmax", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  const uint32_t floats[] = {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x00000001, 0x80000001,
                             0x007fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7fc12345, 0x7f812345,
                             0xffc00001, 0x3f800000, 0x00800000, 0x80800000};
  const uint64_t doubles[] = {0,
                              uint64_t{1} << 63,
                              0x3ff0000000000000ull,
                              0xbff0000000000000ull,
                              1,
                              0x8000000000000001ull,
                              0x7ff0000000000000ull,
                              0xfff0000000000000ull,
                              0x7ff8000000000000ull,
                              0x7ff8000000012345ull,
                              0x7ff0000000012345ull,
                              0xfff8000000000001ull,
                              0x3ff0000000000000ull};
  struct Input {
    uint32_t a, b;
    uint64_t pad, x, y;
  };
  std::vector<Input> in;
  // Every pair of the first 8 floats (zeros, ones, subnormals) and of the first 8 doubles,
  // then pairs across all of them, NaNs included.
  for (uint32_t i = 0; i < 64; ++i) {
    const uint32_t j = i < 32 ? i / 8 * 2 + (i % 8 >= 4) : i;
    in.push_back({i < 32 ? floats[(i % 8)] : floats[i % std::size(floats)],
                  i < 32 ? floats[(i / 8 + i) % 8] : floats[(i * 7 + 3) % std::size(floats)], 0,
                  i < 32 ? doubles[i % 8] : doubles[j % std::size(doubles)],
                  i < 32 ? doubles[(i / 8 + i) % 8] : doubles[(i * 5 + 1) % std::size(doubles)]});
  }
  constexpr int kWords = 16;
  std::vector<uint32_t> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, kWords * 64, 0xdeadbeefu));
  auto flush = [](float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; };
  for (int i = 0; i < 64; ++i) {
    const float a = std::bit_cast<float>(in[i].a), b = std::bit_cast<float>(in[i].b);
    const double x = std::bit_cast<double>(in[i].x), y = std::bit_cast<double>(in[i].y);
    const uint32_t* r = &out[0][kWords * i];
    for (int k = 0; k < 8; ++k) {
      const bool max = k % 2, ftz = k == 2 || k == 3 || k >= 6, nan = k >= 4;
      const float expected = ftz ? flush(IsaMinMax(flush(a), flush(b), max, nan)) : IsaMinMax(a, b, max, nan);
      if (std::isnan(expected)) {
        EXPECT_EQ(r[k], 0x7fffffffu) << "input " << i << ", form " << k;  // the canonical NaN
      } else {
        EXPECT_EQ(r[k], std::bit_cast<uint32_t>(expected)) << "input " << i << ", form " << k;
      }
    }
    // setp.lt.ftz, setp.eq.ftz and setp.ltu.ftz of a, b: compared flushed.
    const float fa = flush(a), fb = flush(b);
    EXPECT_EQ(r[12], fa < fb ? 1u : 0u) << i;
    EXPECT_EQ(r[13], fa == fb ? 1u : 0u) << i;
    EXPECT_EQ(r[14], !(fa >= fb) ? 1u : 0u) << i;
    uint64_t wide[2];
    std::memcpy(wide, &r[8], sizeof(wide));
    for (int k = 0; k < 2; ++k) {
      const double expected = IsaMinMax(x, y, k == 1, false);
      EXPECT_EQ(wide[k], std::isnan(expected) ? 0x7fffffffffffffffull : std::bit_cast<uint64_t>(expected))
          << "input " << i << ", f64 form " << k;
    }
    for (int run = 1; run < 3; ++run) {
      for (int k = 0; k < kWords; ++k) {
        EXPECT_EQ(out[run][kWords * i + k], r[k]) << "input " << i << ", word " << k << ", run " << run;
      }
    }
  }
}

// Registers of a block's scope, as inline assembly declares them (JitScopedRegisters.ptx:
// a pair, a predicate guarding an add, a .b16 and a .b32 of one name in two scopes, one
// declared `.reg.b32`): the
// interpreter's results and the compiled ones alike in vector code (64 threads in x) and in
// scalar code (64 in y), as computed by hand.
TEST(JitScopedRegisters, InlineAssemblysRegistersAreRegisters) {
  auto module = PtxModule::Parse(KernelText("JitScopedRegisters.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("scoped", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  std::vector<uint64_t> in;
  for (uint64_t i = 0; i < 64; ++i) in.push_back((i * 0x9e3779b97f4a7c15ull) ^ (i << 10 | 0x3c00u * (i % 3 == 0)));
  std::vector<uint32_t> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, 5 * 64, 0xdeadbeefu));
  for (int i = 0; i < 64; ++i) {
    const uint32_t lo = static_cast<uint32_t>(in[i]), hi = static_cast<uint32_t>(in[i] >> 32);
    const uint16_t h = static_cast<uint16_t>(in[i]);
    const int exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
    for (int run = 0; run < 3; ++run) {
      const uint32_t* r = &out[run][5 * i];
      EXPECT_EQ(r[0], hi + lo) << i << ", run " << run;
      EXPECT_EQ(r[1], hi + (lo & 1)) << i << ", run " << run;
      if (exponent != 31) {
        const double value = exponent == 0 ? std::ldexp(fraction, -24) : std::ldexp(fraction + 1024, exponent - 25);
        EXPECT_EQ(std::bit_cast<float>(r[2]), static_cast<float>((h & 0x8000) ? -value : value))
            << i << ", run " << run;
      }
      EXPECT_EQ(r[2], out[0][5 * i + 2]) << i << ", run " << run;
      EXPECT_EQ(r[3], hi + 1) << i << ", run " << run;
      EXPECT_EQ(r[4], hi + lo + 7) << i << ", run " << run;
    }
  }
}

// The carry flag (add.cc, addc, sub.cc, subc, mad.cc, madc of 32 and 64 bits) and mul24,
// mad24 (JitCarries.ptx) of 0, 1, the extremes of 24 and 32 bits and sums that carry and
// borrow: the interpreter's results bit for bit in vector code (64 threads in x) and in
// scalar code (64 in y), where each thread's flag starts at 0 though the thread before
// left it set; and, by hand, the carries and products as the PTX ISA defines them.
TEST(JitCarries, CarriesAndTwentyFourBitProductsGiveTheInterpretersResultsBitForBit) {
  auto module = PtxModule::Parse(KernelText("JitCarries.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("carries", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  const uint32_t words[] = {0,          1,          0xffffffff, 0x80000000, 0x7fffffff, 0x00ffffff,
                            0x00800000, 0xff800000, 12345678,   0xfffffffe, 0x01000001, 0x007fffff};
  const uint64_t wides[] = {
      0, ~uint64_t{0}, uint64_t{1} << 63, (uint64_t{1} << 63) - 1, 0xffffffff, 0x123456789abcdef0ull, 1};
  struct Input {
    uint32_t a, b, c, pad;
    uint64_t x, y;
  };
  static_assert(sizeof(Input) == 32);
  std::vector<Input> in;
  for (uint32_t i = 0; i < 64; ++i) {
    in.push_back({words[i % 12], words[(i / 12 + i * 5) % 12], words[(i * 7 + 1) % 12], 0, wides[i % 7],
                  wides[(i / 7 + i) % 7]});
  }
  constexpr int kWords = 32;
  std::vector<uint32_t> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, kWords * 64, 0xdeadbeefu));
  for (int i = 0; i < 64; ++i) {
    for (int run = 1; run < 3; ++run) {
      for (int k = 0; k < kWords; ++k) {
        EXPECT_EQ(out[run][kWords * i + k], out[0][kWords * i + k])
            << "input " << i << ", word " << k << ", run " << run;
      }
    }
  }
  auto s24 = [](uint32_t v) { return static_cast<int64_t>(static_cast<int32_t>(v << 8) >> 8); };
  for (int i = 0; i < 64; ++i) {
    const uint32_t* r = &out[0][kWords * i];
    const uint64_t a = in[i].a, b = in[i].b, c = in[i].c;
    EXPECT_EQ(r[0], static_cast<uint32_t>(a + b)) << i;  // the flag starts at 0
    // {a, b, c} + {b, c, a}, little end first.
    const uint64_t s0 = a + b, s1 = b + c + (s0 >> 32), s2 = c + a + (s1 >> 32);
    EXPECT_EQ(r[1], static_cast<uint32_t>(s0)) << i;
    EXPECT_EQ(r[2], static_cast<uint32_t>(s1)) << i;
    EXPECT_EQ(r[3], static_cast<uint32_t>(s2)) << i;
    EXPECT_EQ(r[4], static_cast<uint32_t>(s2 >> 32)) << i;
    // {a, b, c} - {b, c, a}: a borrow sets the flag; subc.u32 0, 0 then is -1.
    const uint64_t d0 = a - b, d1 = b - c - ((d0 >> 32) & 1), d2 = c - a - ((d1 >> 32) & 1);
    EXPECT_EQ(r[5], static_cast<uint32_t>(d0)) << i;
    EXPECT_EQ(r[6], static_cast<uint32_t>(d1)) << i;
    EXPECT_EQ(r[7], static_cast<uint32_t>(d2)) << i;
    EXPECT_EQ(r[8], (d2 >> 32) & 1 ? 0xffffffffu : 0u) << i;
    // mad.lo.cc a*b + c, madc.hi a*b + a + carry.
    const uint64_t ab = a * b, lo = (ab & 0xffffffff) + c;
    EXPECT_EQ(r[9], static_cast<uint32_t>(lo)) << i;
    EXPECT_EQ(r[10], static_cast<uint32_t>((ab >> 32) + a + (lo >> 32))) << i;
    // 128-bit x + y (words 15-18).
    const unsigned __int128 x = in[i].x, y = in[i].y, sum = x + y;
    const uint64_t high = static_cast<uint64_t>(y + x + static_cast<uint64_t>(sum >> 64));
    EXPECT_EQ(r[15] | uint64_t{r[16]} << 32, static_cast<uint64_t>(sum)) << i;
    EXPECT_EQ(r[17] | uint64_t{r[18]} << 32, high) << i;
    // mul24 and mad24.
    EXPECT_EQ(r[22], static_cast<uint32_t>(s24(in[i].a) * s24(in[i].b))) << i;
    EXPECT_EQ(r[23], static_cast<uint32_t>((s24(in[i].a) * s24(in[i].b)) >> 16)) << i;
    EXPECT_EQ(r[24], static_cast<uint32_t>(((a & 0xffffff) * (b & 0xffffff)) >> 16)) << i;
    EXPECT_EQ(r[25], static_cast<uint32_t>((a & 0xffffff) * (b & 0xffffff))) << i;
    EXPECT_EQ(r[26], static_cast<uint32_t>((a & 0xffffff) * (b & 0xffffff) + c)) << i;
  }
}

// The carry flag set before a barrier and read after it (JitCarryAcrossBarrier.ptx), in a
// block whose threads alternate carrying and not: compiled (scalar code, one thread after
// another, the flag saved and restored at the barrier) as interpreted, each thread its own.
TEST(JitCarries, TheFlagLivesAcrossABarrier) {
  auto module = PtxModule::Parse(KernelText("JitCarryAcrossBarrier.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("carry_barrier", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  std::vector<uint32_t> in;
  for (uint32_t i = 0; i < 64; ++i) {
    in.push_back(i % 2 ? 0xffffffffu : 1u);
    in.push_back(i % 3 ? 1u : 0u);
  }
  std::vector<uint32_t> out[2];
  for (int run = 0; run < 2; ++run) {
    SetJitMode(run == 0 ? JitMode::kOff : JitMode::kAlways);
    out[run].assign(64, 0xdeadbeefu);
    Memory memory;
    const uint64_t din = memory.Add(in), dout = memory.Add(out[run]);
    std::string detail;
    ASSERT_EQ(Launch(kernel, {1, 1, 1}, {64, 1, 1}, Pack(din, dout), memory, nullptr, &detail), 0) << detail;
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  for (uint32_t i = 0; i < 64; ++i) {
    const uint32_t carry = (uint64_t{in[2 * i]} + in[2 * i + 1]) >> 32;
    EXPECT_EQ(out[0][i], carry) << i;
    EXPECT_EQ(out[1][i], carry) << i;
  }
}

// f16/bf16 arithmetic (.ftz, .sat, .relu, .NaN, pairs), setp of halves, cvt into and out
// of f16/bf16 in every rounding, to narrow integers and to tf32, set of halves, and cvt in a float
// rounding to integers (as .rzi...), .sat of bits and an integer rounding of an integer
// (JitHalves.ptx) of zeros of
// both signs, subnormals, infinities, NaNs with payloads (quiet, signalling, negative), the
// largest finite values and values on rounding ties: the interpreter's results bit for bit
// in vector code (64 threads in x) and in scalar code (64 in y); and, by hand, the PTX ISA's
// min/max of halves (-0 below +0, two NaNs the canonical 0x7fff), .ftz and tf32 roundings.
TEST(JitHalves, GiveThePtxIsasAndTheInterpretersResultsBitForBit) {
  auto module = PtxModule::Parse(KernelText("JitHalves.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("halves", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  const uint16_t halves[] = {0x0000, 0x8000, 0x3c00, 0xbc00, 0x0001, 0x8001, 0x03ff, 0x7c00,
                             0xfc00, 0x7e00, 0x7d00, 0xfe01, 0x7bff, 0x3555, 0x0400, 0xc200};
  const uint16_t bf16s[] = {0x0000, 0x8000, 0x3f80, 0xbf80, 0x0001, 0x7f80,
                            0xff80, 0x7fc0, 0x7f81, 0xffc1, 0x7f7f, 0x3eab};
  const uint32_t floats[] = {0x00000000, 0x80000000, 0x3f800000, 0x3f801000, 0x477fe000, 0x477ff000,
                             0x33800000, 0x2edbe6ff, 0x7fc12345, 0x7f812345, 0xff800000, 0x43960000,
                             0xc2ff0000, 0x471c4080, 0xbfc00000, 0x3f802001};
  const double doubles[] = {
      0.0, -0.0, 1.0 + std::ldexp(1.0, -11), 65504.0, -128.5, 127.9, 1e-30, std::numeric_limits<double>::quiet_NaN()};
  struct Input {
    uint32_t a, b, c, e;
    uint32_t x, y;
    double z;
  };
  static_assert(sizeof(Input) == 32);
  auto pair = [](uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16; };
  std::vector<Input> in;
  for (uint32_t i = 0; i < 64; ++i) {
    // The first 16 threads: +0 against every half in the low halves, -0 in the high; the
    // last 16 each half against the one 8 places on (the largest subnormal and the least
    // normal among them).
    const uint16_t lo_a = halves[i % 16];
    const uint16_t lo_b = i < 16 ? halves[i / 16] : halves[i < 48 ? (i * 5 + 3) % 16 : (i + 8) % 16];
    in.push_back({pair(lo_a, i < 16 ? 0x8000 : halves[(i * 3 + 1) % 16]),
                  pair(i < 16 ? halves[i % 16 == 0 ? 1 : 0] : lo_b, i < 16 ? halves[i] : halves[(i * 7 + 2) % 16]),
                  pair(halves[(i * 11 + 5) % 16], halves[(i + 9) % 16]), pair(bf16s[i % 12], bf16s[(i * 5 + 1) % 12]),
                  floats[i % 16], floats[(i * 3 + 2) % 16], doubles[i % 8]});
  }
  constexpr int kWords = 56;
  std::vector<uint32_t> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, kWords * 64, 0xdeadbeefu));
  for (int i = 0; i < 64; ++i) {
    for (int run = 1; run < 3; ++run) {
      for (int k = 0; k < kWords; ++k) {
        EXPECT_EQ(out[run][kWords * i + k], out[0][kWords * i + k])
            << "input " << i << ", word " << k << ", run " << run;
      }
    }
  }
  // By hand: min.f16 and max.f16 (words 6, 7) and min.f16x2 (word 15) as the PTX ISA.
  auto half_value = [](uint16_t h) {
    const int exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
    const double magnitude = exponent == 0    ? std::ldexp(fraction, -24)
                             : exponent == 31 ? (fraction ? std::numeric_limits<double>::quiet_NaN()
                                                          : std::numeric_limits<double>::infinity())
                                              : std::ldexp(fraction + 1024, exponent - 25);
    return (h & 0x8000) ? -magnitude : magnitude;
  };
  auto isa = [&](uint16_t a, uint16_t b, bool max) -> uint16_t {
    const double x = half_value(a), y = half_value(b);
    if (std::isnan(x) && std::isnan(y)) return 0x7fff;
    if (std::isnan(x)) return b;
    if (std::isnan(y)) return a;
    if (x == y) return ((a & 0x8000) != 0) != max ? a : b;  // -0 below +0
    return (x < y) != max ? a : b;
  };
  for (int i = 0; i < 64; ++i) {
    const uint32_t* r = &out[0][kWords * i];
    const auto a = static_cast<uint16_t>(in[i].a), b = static_cast<uint16_t>(in[i].b);
    EXPECT_EQ(r[6] & 0xffff, isa(a, b, false)) << "min, input " << i;
    EXPECT_EQ(r[7] & 0xffff, isa(a, b, true)) << "max, input " << i;
    EXPECT_EQ(r[15], pair(isa(a, b, false),
                          isa(static_cast<uint16_t>(in[i].a >> 16), static_cast<uint16_t>(in[i].b >> 16), false)))
        << "min.f16x2, input " << i;
    // set.gt.f16x2.f16x2 (word 52): 1.0 in each half where a's is greater than b's;
    // set.lt.u32.f16x2 (word 53): all ones in each half where a's is less.
    const auto a_hi = static_cast<uint16_t>(in[i].a >> 16), b_hi = static_cast<uint16_t>(in[i].b >> 16);
    EXPECT_EQ(r[52],
              (half_value(a) > half_value(b) ? 0x3c00u : 0u) | (half_value(a_hi) > half_value(b_hi) ? 0x3c000000u : 0u))
        << "set.gt, input " << i;
    EXPECT_EQ(r[53],
              (half_value(a) < half_value(b) ? 0xffffu : 0u) | (half_value(a_hi) < half_value(b_hi) ? 0xffff0000u : 0u))
        << "set.lt.u32, input " << i;
  }
  // Thread 1: a = -0, b = +0 (low halves): min -0, max +0; thread 27: two NaNs (0xfe01,
  // 0x7d00): the canonical NaN.
  EXPECT_EQ(out[0][kWords * 1 + 6] & 0xffff, 0x8000u);
  EXPECT_EQ(out[0][kWords * 1 + 7] & 0xffff, 0x0000u);
  EXPECT_EQ(out[0][kWords * 27 + 6] & 0xffff, 0x7fffu);
  // Thread 20: the least subnormal 0x0001 times infinity is infinity (mul, word 2), but
  // under .ftz (word 11) 0 times infinity, a NaN.
  EXPECT_EQ(out[0][kWords * 20 + 2] & 0xffff, 0x7c00u);
  EXPECT_EQ(out[0][kWords * 20 + 11] & 0x7c00, 0x7c00u);
  EXPECT_NE(out[0][kWords * 20 + 11] & 0x3ff, 0u);
  // cvt.rn.f16.f32 (word 28) of 1.0 (thread 2) and of 65520 (thread 5: rounds to infinity),
  // cvt.rz.f16.f32 (word 29) of 65520: the largest finite; tf32 (words 45-47) of
  // 0x3f801000 (thread 3, a tie): .rna away, .rn to even, .rz down.
  EXPECT_EQ(out[0][kWords * 2 + 28] & 0xffff, 0x3c00u);
  EXPECT_EQ(out[0][kWords * 5 + 28] & 0xffff, 0x7c00u);
  EXPECT_EQ(out[0][kWords * 5 + 29] & 0xffff, 0x7bffu);
  EXPECT_EQ(out[0][kWords * 3 + 45], 0x3f802000u);
  EXPECT_EQ(out[0][kWords * 3 + 46], 0x3f800000u);
  EXPECT_EQ(out[0][kWords * 3 + 47], 0x3f800000u);
  // cvt.rzi.u8.f32 (word 42) of 300 (thread 11) saturates to 255; cvt.rni.s16.f32 (word 41)
  // of 40000.5 (thread 13) to 32767, of -1.5 (thread 14) to -2.
  EXPECT_EQ(out[0][kWords * 11 + 42] & 0xffff, 255u);
  EXPECT_EQ(out[0][kWords * 13 + 41], 32767u);
  EXPECT_EQ(out[0][kWords * 14 + 41], static_cast<uint32_t>(-2));
  // cvt.rz.s32.f32 (word 48) rounds as .rzi: -1.5 (thread 14) to -1; cvt.rp.u32.f64 (word
  // 51) as .rpi: 127.9 (thread 5) to 128.
  EXPECT_EQ(out[0][kWords * 14 + 48], static_cast<uint32_t>(-1));
  EXPECT_EQ(out[0][kWords * 5 + 51], 128u);
}

// .ftz, .sat, .approx and .full forms of f32 arithmetic, rsqrt, rcp and copysign of f32
// and f64 (JitFloatForms.ptx) of zeros, subnormals, infinities, NaNs with payloads (quiet,
// signalling, negative) and ordinary values: the interpreter's results bit for bit in
// vector code (64 threads in x) and in scalar code (64 in y).
TEST(JitFloatForms, GiveTheInterpretersResultsBitForBit) {
  auto module = PtxModule::Parse(KernelText("JitFloatForms.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("forms", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  const uint32_t floats[] = {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x00000001, 0x80000001,
                             0x00800000, 0x000116c2, 0x807fffff, 0x7f800000, 0xff800000, 0x7fc00000,
                             0x7fc12345, 0x7f812345, 0xffc00001, 0x3f000000, 0x40800000, 0x7149f2ca,
                             0x406ccccd, 0xbe99999a, 0x1e3ce508, 0x3f7fffff, 0x3f800001, 0x7f7fffff};
  const uint64_t doubles[] = {0,
                              uint64_t{1} << 63,
                              0x3ff0000000000000ull,
                              0xbff0000000000000ull,
                              1,
                              0x000b8157268fdaf0ull,
                              0x7ff0000000000000ull,
                              0xfff0000000000000ull,
                              0x7ff8000000000000ull,
                              0x7ff8000000012345ull,
                              0x7ff0000000012345ull,
                              0x4010000000000000ull,
                              0x7e37e43c8800759cull,
                              0xc004000000000000ull};
  struct Input {
    uint32_t a, b, c, pad;
    uint64_t x, y;
  };
  std::vector<Input> in;
  for (uint32_t i = 0; i < 64; ++i) {
    in.push_back({floats[i % std::size(floats)], floats[(i * 7 + 3) % std::size(floats)],
                  floats[(i * 13 + 5) % std::size(floats)], 0, doubles[i % std::size(doubles)],
                  doubles[(i * 5 + 1) % std::size(doubles)]});
  }
  std::vector<uint32_t> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, 40 * 64, 0xdeadbeefu));
  for (int i = 0; i < 64; ++i) {
    // A subnormal under .ftz is a zero of its sign; .sat makes NaN +0.
    const float a = std::bit_cast<float>(in[i].a);
    if (std::fpclassify(a) == FP_SUBNORMAL) {
      EXPECT_EQ(out[0][40 * i + 7], std::signbit(a) ? 0u : 0x80000000u) << i;  // neg.ftz
    }
    if (std::isnan(a)) EXPECT_EQ(out[0][40 * i + 16], 0u) << i;  // add.sat
    for (int run = 1; run < 3; ++run) {
      for (int k = 0; k < 40; ++k) {
        EXPECT_EQ(out[run][40 * i + k], out[0][40 * i + k]) << "input " << i << ", word " << k << ", run " << run;
      }
    }
  }
}

// mov to and from vectors of elements (JitMovPairs.ptx): the interpreter's results bit for
// bit in vector code (64 threads in x) and in scalar code (64 in y), and the layout PTX
// gives them (the first element the lowest bits).
TEST(JitMovPairs, PackAndUnpackGiveTheInterpretersResults) {
  auto module = PtxModule::Parse(KernelText("JitMovPairs.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("pairs", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  std::vector<uint64_t> in(64);
  for (uint64_t k = 0; k < in.size(); ++k) in[k] = (k + 1) * 0x9e3779b97f4a7c15ull;
  struct Result {
    uint64_t swapped, reversed;
    uint32_t halves_swapped, low, low_half_and_7, lowest;
  };
  static_assert(sizeof(Result) == 32);
  std::vector<Result> out[3];
  ASSERT_NO_FATAL_FAILURE(RunInterpretedThenCompiled(kernel, in, out, 64, Result{}));
  for (int i = 0; i < 64; ++i) {
    const uint64_t v = in[i];
    const Result& r = out[0][i];
    EXPECT_EQ(r.swapped, (v << 32) | (v >> 32)) << i;
    EXPECT_EQ(r.reversed, ((v & 0xffff) << 48) | ((v >> 16 & 0xffff) << 32) | ((v >> 32 & 0xffff) << 16) | (v >> 48))
        << i;
    EXPECT_EQ(r.halves_swapped, static_cast<uint32_t>((v & 0xffff) << 16 | (v >> 16 & 0xffff))) << i;
    EXPECT_EQ(r.low, static_cast<uint32_t>(v)) << i;
    EXPECT_EQ(r.low_half_and_7, static_cast<uint32_t>((v & 0xffff) | 7u << 16)) << i;
    EXPECT_EQ(r.lowest, static_cast<uint32_t>(v & 0xffff)) << i;
    for (int run = 1; run < 3; ++run) {
      EXPECT_EQ(std::memcmp(&out[run][i], &r, sizeof(Result)), 0) << "value " << i << ", run " << run;
    }
  }
}

// cvt's integer roundings of floats (JitIntegerRounding.ptx: .rni, .rmi, .rpi, .rzi into
// integers and floats) of halves, ties, values past each integer's range, infinities,
// quiet and signalling NaNs with payloads and subnormals: the interpreter's results bit for
// bit in vector code (64 threads in x) and in scalar code (64 in y), and a few by hand.
TEST(JitIntegerRounding, ConversionsGiveTheInterpretersResultsBitForBit) {
  auto module = PtxModule::Parse(KernelText("JitIntegerRounding.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("round", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  constexpr int kConversions = 19;
  const double values[] = {0.0,
                           -0.0,
                           0.5,
                           1.5,
                           2.5,
                           -0.5,
                           -1.5,
                           -2.5,
                           0.49999997,
                           -1.0000001,
                           8388607.5,
                           4503599627370495.5,
                           2147483647.5,
                           -2147483648.5,
                           4294967295.5,
                           4294967296.0,
                           -1e10,
                           9.2233720368547758e18,
                           -9.2233720368547758e18,
                           1.8446744073709552e19,
                           1e300,
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::denorm_min(),
                           -std::numeric_limits<double>::denorm_min()};
  // Each thread's float and double (16 bytes): the values, NaNs with payloads (a signalling
  // one too), float subnormals, then more of every sign and size.
  std::vector<uint64_t> in;
  auto add = [&](float f, double d) {
    in.push_back(std::bit_cast<uint32_t>(f));
    in.push_back(std::bit_cast<uint64_t>(d));
  };
  for (double v : values) add(static_cast<float>(v), v);
  add(std::bit_cast<float>(0x7f800001u), std::bit_cast<double>(0x7ff0000000000001ull));
  add(std::bit_cast<float>(0xffc12345u), std::bit_cast<double>(0xfff8000000012345ull));
  add(std::numeric_limits<float>::denorm_min(), -1e-310);
  add(-std::numeric_limits<float>::denorm_min(), 1e-310);
  for (int k = 0; in.size() < 2 * 64; ++k) {
    const double v = std::ldexp(static_cast<double>(k % 11) - 5.25, k % 29 - 6);
    add(static_cast<float>(-v * 1.375), v);
  }
  std::vector<uint64_t> out[3];
  ASSERT_NO_FATAL_FAILURE(
      RunInterpretedThenCompiled(kernel, in, out, kConversions * 64, uint64_t{0xababababababababull}));
  // By hand: the first conversions of 2.5 and -2.5 (thread 4 and 7).
  EXPECT_EQ(static_cast<int32_t>(out[0][4 * kConversions + 0]), 2);       // cvt.rni.s32.f32
  EXPECT_EQ(static_cast<int32_t>(out[0][7 * kConversions + 1]), -3);      // cvt.rmi.s32.f32
  EXPECT_EQ(static_cast<int32_t>(out[0][7 * kConversions + 2]), -2);      // cvt.rpi.s32.f32
  EXPECT_EQ(std::bit_cast<double>(out[0][7 * kConversions + 14]), -3.0);  // cvt.rmi.f64.f64
  for (int i = 0; i < 64; ++i) {
    for (int c = 0; c < kConversions; ++c) {
      for (int run = 1; run < 3; ++run) {
        EXPECT_EQ(out[run][i * kConversions + c], out[0][i * kConversions + c])
            << "thread " << i << ", conversion " << c << ", run " << run;
      }
    }
  }
}

// %smid and %nsmid (JitSmid.ptx) on 105 CTAs of a launch on 13 SMs: the interpreter's
// values (the CTA's linear index modulo the SMs, and the SMs) in vector code (8 threads in
// x) and in scalar code (8 in y).
TEST(JitSmid, SmidAndNsmidAreTheInterpreters) {
  auto module = PtxModule::Parse(KernelText("JitSmid.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("smid", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  const uint32_t blocks[3][3] = {{8, 1, 1}, {8, 1, 1}, {1, 8, 1}};
  std::vector<uint32_t> out[3];
  for (int run = 0; run < 3; ++run) {
    SetJitMode(run == 0 ? JitMode::kOff : JitMode::kAlways);
    out[run].assign(2 * 105 * 8, 0xabababab);
    Memory memory;
    const std::vector<uint8_t> params = Pack(memory.Add(out[run]));
    LaunchSpec spec;
    const uint32_t grid[3] = {7, 5, 3};
    for (int i = 0; i < 3; ++i) {
      spec.grid[i] = grid[i];
      spec.block[i] = blocks[run][i];
    }
    spec.params = params.data();
    spec.param_size = params.size();
    spec.memory = memory.ranges;
    spec.sm_count = 13;
    ASSERT_EQ(RunKernel(kernel, spec), 0) << run;
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr);
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
  for (uint32_t t = 0; t < 105 * 8; ++t) {
    EXPECT_EQ(out[0][2 * t], t / 8 % 13) << "thread " << t;
    EXPECT_EQ(out[0][2 * t + 1], 13u) << "thread " << t;
    for (int run = 1; run < 3; ++run) {
      EXPECT_EQ(out[run][2 * t], out[0][2 * t]) << "thread " << t << ", run " << run;
      EXPECT_EQ(out[run][2 * t + 1], out[0][2 * t + 1]) << "thread " << t << ", run " << run;
    }
  }
}

// Local memory (JitLocalMemory.ptx: nvcc's per-thread arrays, .local): compiled in scalar
// code only, each thread's array in its own slice of the CTA's, the interpreter's results
// bit for bit, and a stray local access failing both tiers with the same detail.
class JitLocalMemory : public KernelFileTest {
 public:
  JitLocalMemory() : KernelFileTest("JitLocalMemory.ptx") {}

  // `local_array` over `blocks` blocks of `threads` with `seed` and `stray`, in `mode`: its
  // CUresult, *out and *detail.
  int32_t LocalArray(JitMode mode, uint32_t blocks, uint32_t threads, int32_t seed, int32_t stray,
                     std::vector<float>* out, std::string* detail) {
    SetJitMode(mode);
    std::vector<float> in(blocks * threads * 16);
    for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(static_cast<int>(k % 23) - 11);
    out->assign(blocks * threads, -1.0f);
    Memory memory;
    const uint64_t din = memory.Add(in), dout = memory.Add(*out);
    return Launch(Kernel("local_array"), {blocks, 1, 1}, {threads, 1, 1}, Pack(din, dout, seed, stray), memory, nullptr,
                  detail);
  }
};

// A float[16] indexed by a runtime value (ld.local at a computed offset, st.local.v4): on 4
// blocks of 96 threads (two workers, blocks whose x extent vector code would take), the
// interpreter's sums bit for bit, and the sums.
TEST_F(JitLocalMemory, APerThreadArrayIndexedAtRunTimeGivesTheInterpretersResults) {
  const uint32_t blocks = 4, threads = 96;
  std::vector<float> out[2];
  for (int compiled = 0; compiled < 2; ++compiled) {
    std::string detail;
    ASSERT_EQ(LocalArray(compiled ? JitMode::kAlways : JitMode::kOff, blocks, threads, 7, 0, &out[compiled], &detail),
              0)
        << detail;
  }
  const DecodedKernel& kernel = Kernel("local_array");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_FALSE(HasVectorCode(*kernel.jit->compiled));
  for (uint32_t t = 0; t < blocks * threads; ++t) {
    float a[16], sum = 0;
    for (int k = 0; k < 16; ++k) a[k] = static_cast<float>(static_cast<int>((t * 16 + k) % 23) - 11) * (k + 1);
    for (int k = 0; k < 8; ++k) sum += a[(7 + t * 3 + k * 5) % 16];
    ASSERT_EQ(out[0][t], sum) << t;
    ASSERT_EQ(std::bit_cast<uint32_t>(out[1][t]), std::bit_cast<uint32_t>(out[0][t])) << t;
  }
}

// Each thread's int[12] written before three barriers and read after them (its slice of
// the CTA's local memory kept while the other threads run their phases): the
// interpreter's results, and the values.
TEST_F(JitLocalMemory, LocalMemorySurvivesBarriers) {
  const DecodedKernel& kernel = Kernel("local_barrier");
  const uint32_t blocks = 4, threads = 128;
  const int seed = 5;
  std::vector<int32_t> in(blocks * threads);
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<int32_t>(k * 13 % 101) - 50;
  std::vector<int32_t> out[2];
  for (int compiled = 0; compiled < 2; ++compiled) {
    SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
    out[compiled].assign(in.size(), 0);
    Memory memory;
    const uint64_t din = memory.Add(in), dout = memory.Add(out[compiled]);
    std::string detail;
    ASSERT_EQ(Launch(kernel, {blocks, 1, 1}, {threads, 1, 1}, Pack(din, dout, seed), memory, nullptr, &detail), 0)
        << detail;
  }
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  for (uint32_t b = 0; b < blocks; ++b) {
    auto a = [&](uint32_t t, uint32_t k) { return in[b * threads + t] * 31 + static_cast<int32_t>(k) * seed; };
    std::vector<int32_t> tile(threads), other(threads);
    for (uint32_t t = 0; t < threads; ++t) tile[t] = a(t, (t + seed) % 12);
    for (uint32_t t = 0; t < threads; ++t) other[t] = tile[(t + 1) % threads];
    for (uint32_t t = 0; t < threads; ++t) tile[t] = other[t] + a(t, (t * 7 + seed) % 12);
    for (uint32_t t = 0; t < threads; ++t) {
      ASSERT_EQ(out[0][b * threads + t], tile[threads - 1 - t] + a(t, (seed + t) % 12) * 3) << b << ", " << t;
    }
  }
  EXPECT_EQ(out[1], out[0]);
}

// A generic pointer (cvta.local, then selp with a global one) that odd threads aim at their
// local array and even threads at global memory: generic loads and stores reach the
// thread's own local memory through the local window, the interpreter's results.
TEST_F(JitLocalMemory, AGenericPointerIntoALocalArrayReachesTheThreadsOwn) {
  const DecodedKernel& kernel = Kernel("local_pointer");
  const uint32_t blocks = 4, threads = 64;
  const int n = 11;
  std::vector<int32_t> data[2], out[2];
  for (int compiled = 0; compiled < 2; ++compiled) {
    SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
    data[compiled].assign(blocks * threads * 16, 0);
    for (size_t k = 0; k < data[compiled].size(); ++k) data[compiled][k] = static_cast<int32_t>(k * 3 + 1);
    out[compiled].assign(blocks * threads, 0);
    Memory memory;
    const uint64_t ddata = memory.Add(data[compiled]), dout = memory.Add(out[compiled]);
    std::string detail;
    ASSERT_EQ(Launch(kernel, {blocks, 1, 1}, {threads, 1, 1}, Pack(ddata, dout, n), memory, nullptr, &detail), 0)
        << detail;
  }
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  for (int32_t t = 0; t < static_cast<int32_t>(blocks * threads); ++t) {
    int32_t p[16];
    for (int32_t k = 0; k < 16; ++k) p[k] = t & 1 ? t * 100 + k : (t * 16 + k) * 3 + 1;
    p[(t * 5) % 16] = -t;
    int32_t s = 0;
    for (int32_t k = 0; k < n; ++k) s += p[(k * 7 + t) % 16] * (k + 1);
    ASSERT_EQ(out[0][t], s) << t;
    if (t % 2 == 0) {
      ASSERT_EQ(data[0][t * 16 + (t * 5) % 16], -t) << t;
    }
  }
  EXPECT_EQ(out[1], out[0]);
  EXPECT_EQ(data[1], data[0]);
}

// Reads past the 64 bytes of each thread's local memory (just past: where the next thread's
// slice starts on the host; far past; before it) fail the launch on both tiers with the
// same error and detail: thread 0's first read, at the address the instruction made.
TEST_F(JitLocalMemory, AStrayLocalAccessFailsTheLaunchAsOnTheInterpreter) {
  struct Case {
    int32_t stray;
    const char* detail;
  };
  const Case kCases[] = {
      {16, "load of 4 bytes at 0x40 (block 0, warp 0)"},
      {1 << 20, "load of 4 bytes at 0x400000 (block 0, warp 0)"},
      {-20, "load of 4 bytes at 0xffffffffffffffb0 (block 0, warp 0)"},
  };
  for (const Case& c : kCases) {
    for (int compiled = 0; compiled < 2; ++compiled) {
      std::vector<float> out;
      std::string detail;
      EXPECT_EQ(LocalArray(compiled ? JitMode::kAlways : JitMode::kOff, 1, 64, 0, c.stray, &out, &detail),
                kIllegalAddress)
          << c.stray;
      EXPECT_EQ(detail, c.detail) << "stray " << c.stray << ", compiled " << compiled;
    }
  }
  EXPECT_EQ(Kernel("local_array").jit->jit_launches.load(), 3u) << Kernel("local_array").jit->refused;
}

// Calls of device functions (JitCalls.ptx: nvcc's __noinline__ functions, .param arguments
// and results): inlined by the tier as the decoder inlines them, so that compiled code
// gives the interpreter's results, faults and failures bit for bit.
class JitCalls : public KernelFileTest {
 public:
  JitCalls() : KernelFileTest("JitCalls.ptx") {}

  struct Run {
    int32_t status = -1;
    std::string detail;
    std::vector<uint32_t> out;
  };

  // `name` over `blocks` blocks of `threads`, its parameters the `inputs` (device copies),
  // then an output of a word per thread (0xdeadbeef first), then the `scalars`: on the
  // interpreter (runs[0]), then compiled (runs[1]), which must have run compiled and given
  // the same CUresult, detail and (where the launch succeeded) output.
  void RunBoth(const std::string& name, uint32_t blocks, uint32_t threads, std::vector<std::vector<uint32_t>> inputs,
               const std::vector<int32_t>& scalars, Run runs[2]) {
    const DecodedKernel& kernel = Kernel(name);
    const uint64_t before = kernel.jit->jit_launches.load();
    for (int compiled = 0; compiled < 2; ++compiled) {
      SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
      std::vector<std::vector<uint32_t>> copies = inputs;
      Run& run = runs[compiled];
      run.out.assign(size_t{blocks} * threads, 0xdeadbeef);
      Memory memory;
      std::vector<uint8_t> params;
      auto put = [&](const void* value, size_t size) {
        params.resize((params.size() + size - 1) / size * size);
        params.insert(params.end(), static_cast<const uint8_t*>(value), static_cast<const uint8_t*>(value) + size);
      };
      for (std::vector<uint32_t>& copy : copies) {
        const uint64_t address = memory.Add(copy);
        put(&address, 8);
      }
      const uint64_t out = memory.Add(run.out);
      put(&out, 8);
      for (int32_t scalar : scalars) put(&scalar, 4);
      run.status = Launch(kernel, {blocks, 1, 1}, {threads, 1, 1}, params, memory, nullptr, &run.detail);
    }
    ASSERT_NE(kernel.jit->compiled, nullptr) << name << ": " << kernel.jit->refused;
    EXPECT_EQ(kernel.jit->jit_launches.load(), before + 1) << name;
    EXPECT_FALSE(HasVectorCode(*kernel.jit->compiled)) << name;
    EXPECT_EQ(runs[1].status, runs[0].status) << name;
    EXPECT_EQ(runs[1].detail, runs[0].detail) << name;
    // What a failed launch left in memory is the tiers' own (threads run in another order).
    if (runs[0].status == 0) EXPECT_EQ(runs[1].out, runs[0].out) << name;
  }
};

std::vector<uint32_t> Words(size_t n, const std::function<uint32_t(uint32_t)>& at) {
  std::vector<uint32_t> words(n);
  for (size_t k = 0; k < n; ++k) words[k] = at(static_cast<uint32_t>(k));
  return words;
}

// combine(float, int, double, const float*, unsigned char): five arguments of five types
// (.param .b32, .b64, a byte in a .b32) and a float result, called by the threads below n.
TEST_F(JitCalls, ACallWithSeveralArgumentsAndAResult) {
  const uint32_t blocks = 3, threads = 64;
  const int n = 170;
  std::vector<uint32_t> in = Words(blocks * threads, [](uint32_t k) { return std::bit_cast<uint32_t>(k * 0.75f - 9); });
  Run runs[2];
  RunBoth("call_args", blocks, threads, {in}, {n}, runs);
  ASSERT_EQ(runs[0].status, 0) << runs[0].detail;
  for (int t = 0; t < static_cast<int>(blocks * threads); ++t) {
    if (t >= n) {
      ASSERT_EQ(runs[0].out[t], 0xdeadbeef) << t;
      continue;
    }
    const int b = t % 13 - 6;
    const float want = std::bit_cast<float>(in[t]) * b + static_cast<float>(t * 0.25 / 3.0) +
                       std::bit_cast<float>(in[b & 7]) - static_cast<unsigned char>(t * 7);
    ASSERT_NEAR(std::bit_cast<float>(runs[0].out[t]), want, 1e-3) << t;
  }
}

uint32_t Inner(uint32_t x, uint32_t y) { return x * 31 + y; }
uint32_t Middle(uint32_t x) { return Inner(x, static_cast<uint32_t>(static_cast<int32_t>(x) >> 2)) ^ Inner(x + 1, 7); }
uint32_t Outer(uint32_t x, uint32_t y) { return Middle(x) + Middle(y) * 3; }

// outer -> middle (twice) -> inner (twice each): seven copies three deep, each its own
// registers and .param variables.
TEST_F(JitCalls, NestedCalls) {
  const uint32_t blocks = 2, threads = 96;
  std::vector<uint32_t> in = Words(blocks * threads, [](uint32_t k) { return k * 2654435761u; });
  Run runs[2];
  RunBoth("call_nested", blocks, threads, {in}, {}, runs);
  ASSERT_EQ(runs[0].status, 0) << runs[0].detail;
  for (uint32_t t = 0; t < blocks * threads; ++t) ASSERT_EQ(runs[0].out[t], Outer(in[t], t)) << t;
}

// local_sum, called twice, with a float[16] of its own (its local depot, one per copy after
// the call sites' .param variables, as the decoder lays them out); its reads moved past the
// array fail both tiers alike, at the same local address.
TEST_F(JitCalls, ACalleeWithItsOwnLocalArray) {
  const uint32_t blocks = 4, threads = 64;
  const int seed = 7;
  std::vector<uint32_t> in =
      Words(blocks * threads * 16, [](uint32_t k) { return std::bit_cast<uint32_t>(static_cast<float>(k % 23) - 11); });
  Run runs[2];
  RunBoth("call_local", blocks, threads, {in}, {seed, 0}, runs);
  ASSERT_EQ(runs[0].status, 0) << runs[0].detail;
  auto local_sum = [&](uint32_t t, int s) {
    float a[16], sum = 0;
    for (int k = 0; k < 16; ++k) a[k] = std::bit_cast<float>(in[t * 16 + k]) * (k + 1);
    for (int k = 0; k < 8; ++k) sum += a[(s + t * 3 + k * 5) % 16];
    return sum;
  };
  for (uint32_t t = 0; t < blocks * threads; ++t) {
    ASSERT_EQ(std::bit_cast<float>(runs[0].out[t]), local_sum(t, seed) - local_sum(t, seed + 1)) << t;
  }
  for (int stray : {1 << 20, -100}) {
    RunBoth("call_local", 1, threads, {in}, {seed, stray}, runs);
    EXPECT_EQ(runs[0].status, kIllegalAddress) << stray;
    EXPECT_NE(runs[0].detail.find("load of 4 bytes at"), std::string::npos) << runs[0].detail;
  }
}

// Calls under branches that some threads of each warp take and others skip (outer in one,
// inner and middle in the other, neither in the third).
TEST_F(JitCalls, CallsFromDivergentCode) {
  const uint32_t blocks = 2, threads = 96;
  std::vector<uint32_t> in = Words(blocks * threads, [](uint32_t k) { return k * 7 % 11 + k / 5; });
  Run runs[2];
  RunBoth("call_divergent", blocks, threads, {in}, {}, runs);
  ASSERT_EQ(runs[0].status, 0) << runs[0].detail;
  for (uint32_t t = 0; t < blocks * threads; ++t) {
    const uint32_t v = in[t];
    const uint32_t want = v % 3 == 0 ? Outer(v, t) : v % 3 == 1 ? Inner(v, 2) + Middle(t) : v;
    ASSERT_EQ(runs[0].out[t], want) << t;
  }
}

// exchange() waits at two barriers and swaps values through the kernel's __shared__ tile,
// which nvcc declares in exchange: each inlined copy its own tile, as the decoder places it.
TEST_F(JitCalls, ACalleeWithBarriers) {
  const uint32_t blocks = 4, threads = 128;
  std::vector<uint32_t> in = Words(blocks * threads, [](uint32_t k) { return k * 13 % 101; });
  Run runs[2];
  RunBoth("call_barrier", blocks, threads, {in}, {}, runs);
  ASSERT_EQ(runs[0].status, 0) << runs[0].detail;
  EXPECT_EQ(Kernel("call_barrier").static_shared, 2048u);
  for (uint32_t b = 0; b < blocks; ++b) {
    auto next = [&](uint32_t t) { return b * threads + (t + 1) % threads; };
    for (uint32_t t = 0; t < threads; ++t) {
      ASSERT_EQ(runs[0].out[b * threads + t], (in[next(next(t))]) * 2 + 1 - (b * threads + t)) << b << ", " << t;
    }
  }
}

uint32_t Walk(const std::vector<uint32_t>& in, int n, uint32_t acc) {
  if (n <= 0) return acc;
  return Walk(in, n - 1, acc * 3 + in[n & 15]) ^ static_cast<uint32_t>(n * 7);
}

// walk() recursing depth[t] times: within the decoder's 16 levels of inlined calls the
// interpreter's results; one thread a level deeper fails the launch on both tiers with
// CUDA_ERROR_LAUNCH_FAILED and the same detail.
TEST_F(JitCalls, RecursionWithinTheDepthAndPastIt) {
  const uint32_t blocks = 2, threads = 64;
  std::vector<uint32_t> in = Words(16, [](uint32_t k) { return k * 5 + 1; });
  std::vector<uint32_t> depth = Words(blocks * threads, [](uint32_t k) { return k % 16; });
  Run runs[2];
  RunBoth("call_recursive", blocks, threads, {in, depth}, {}, runs);
  ASSERT_EQ(runs[0].status, 0) << runs[0].detail;
  for (uint32_t t = 0; t < blocks * threads; ++t) ASSERT_EQ(runs[0].out[t], Walk(in, depth[t], t)) << t;
  depth[blocks * threads - 5] = 16;
  RunBoth("call_recursive", blocks, threads, {in, depth}, {}, runs);
  EXPECT_EQ(runs[0].status, 719);  // CUDA_ERROR_LAUNCH_FAILED
  EXPECT_NE(runs[0].detail.find("device function calls nested deeper than 16 (PTX line "), std::string::npos)
      << runs[0].detail;
}

// A call under a guard (nvcc branches around its calls; PTX may guard them): odd threads
// call twice(), even ones keep 7, on both tiers.
TEST_F(JitCalls, AGuardedCallRunsWhereItsGuardHolds) {
  Parse(R"(.version 8.0
.target sm_80
.address_size 64

.func (.param .b32 twice_ret) twice(.param .b32 twice_arg)
{
  .reg .b32 %r<3>;

  ld.param.b32 %r1, [twice_arg];
  shl.b32 %r2, %r1, 1;
  st.param.b32 [twice_ret], %r2;
  ret;
}

.visible .entry guarded_call(.param .u64 in, .param .u64 out)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .b64 %rd<6>;

  ld.param.u64 %rd1, [in];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.u32 %r2, [%rd4];
  mov.u32 %r3, 7;
  and.b32 %r4, %r1, 1;
  setp.eq.u32 %p1, %r4, 1;
  {
  .param .b32 arg;
  st.param.b32 [arg], %r2;
  .param .b32 res;
  @%p1 call.uni (res), twice, (arg);
  @%p1 ld.param.b32 %r3, [res];
  }
  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd2, %rd2;
  add.s64 %rd5, %rd2, %rd3;
  st.global.u32 [%rd5], %r3;
  ret;
}
)");
  const uint32_t threads = 64;
  std::vector<uint32_t> in = Words(threads, [](uint32_t k) { return k * 3 + 100; });
  Run runs[2];
  RunBoth("guarded_call", 1, threads, {in}, {}, runs);
  ASSERT_EQ(runs[0].status, 0) << runs[0].detail;
  for (uint32_t t = 0; t < threads; ++t) ASSERT_EQ(runs[0].out[t], t % 2 ? in[t] * 2 : 7u) << t;
}

// 40 calls of a function of 500 instructions: 20,000 instructions once inlined, which the
// decoder takes (at most 2^17) and the tier does not (at most 16384): the kernel runs on
// the interpreter, with its results, and the tier says why.
TEST_F(JitCalls, AKernelLargerThanTheTierOnceInlinedStaysInterpreted) {
  std::string text = R"(.version 8.0
.target sm_80
.address_size 64

.func (.param .b32 bump_ret) bump(.param .b32 bump_arg)
{
  .reg .b32 %r<2>;

  ld.param.b32 %r1, [bump_arg];
)";
  for (int k = 0; k < 500; ++k) text += "  add.s32 %r1, %r1, " + std::to_string(k % 7) + ";\n";
  text += R"(  st.param.b32 [bump_ret], %r1;
  ret;
}

.visible .entry many_calls(.param .u64 in, .param .u64 out)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<6>;

  ld.param.u64 %rd1, [in];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.u32 %r2, [%rd4];
)";
  for (int k = 0; k < 40; ++k) {
    text +=
        "  {\n  .param .b32 arg;\n  st.param.b32 [arg], %r2;\n  .param .b32 res;\n"
        "  call.uni (res), bump, (arg);\n  ld.param.b32 %r2, [res];\n  }\n";
  }
  text += R"(  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd2, %rd2;
  add.s64 %rd5, %rd2, %rd3;
  st.global.u32 [%rd5], %r2;
  ret;
}
)";
  Parse(text);
  const DecodedKernel& kernel = Kernel("many_calls");
  const uint32_t threads = 32;
  std::vector<uint32_t> in = Words(threads, [](uint32_t k) { return k * 11; });
  std::vector<uint32_t> out[2];
  for (int compiled = 0; compiled < 2; ++compiled) {
    SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
    out[compiled].assign(threads, 0);
    Memory memory;
    const uint64_t din = memory.Add(in), dout = memory.Add(out[compiled]);
    std::string detail;
    ASSERT_EQ(Launch(kernel, {1, 1, 1}, {threads, 1, 1}, Pack(din, dout), memory, nullptr, &detail), 0) << detail;
  }
  EXPECT_EQ(kernel.jit->compiled, nullptr);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 0u);
  EXPECT_NE(kernel.jit->refused.find("instructions once its calls are inlined"), std::string::npos)
      << kernel.jit->refused;
  uint32_t per_call = 0;
  for (int k = 0; k < 500; ++k) per_call += k % 7;
  for (uint32_t t = 0; t < threads; ++t) ASSERT_EQ(out[0][t], in[t] + 40 * per_call) << t;
  EXPECT_EQ(out[1], out[0]);
}

// The background compile (GPUPOOL_PTX_JIT=auto) inlines the calls on the caller's thread,
// while the module is there: the module may be gone before the compile runs.
TEST_F(JitCalls, TheBackgroundCompileInlinesWhileTheModuleIsThere) {
  auto parsed = LinkPtxTexts({KernelText("JitCalls.ptx")});
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  std::unique_ptr<ParsedModule> module = std::move(*parsed);
  auto slot = std::make_shared<JitSlot>();
  {
    std::lock_guard<std::mutex> lock(slot->mu);
    slot->tried = true;
    CompileInBackground(slot, *module, module->functions.at("call_nested"), SharedLayout{}, 16);
  }
  module.reset();
  WaitForCompile(*slot);
  std::lock_guard<std::mutex> lock(slot->mu);
  EXPECT_NE(slot->compiled, nullptr) << slot->refused;
}

// Warp-level operations and a thread's place in its warp (JitWarp.ptx): compiled, the
// interpreter's results bit for bit.
class JitWarp : public KernelFileTest {
 public:
  JitWarp() : KernelFileTest("JitWarp.ptx") {}

  // `name` over `blocks` blocks of `block` threads, with parameters (`in`, when not empty),
  // an output of `out_words` words, and `extra` (when given), in `mode`: the output (the
  // launch must succeed).
  std::vector<uint32_t> Run(JitMode mode, const std::string& name, uint32_t blocks, std::vector<uint32_t> block,
                            std::vector<uint32_t> in, size_t out_words, std::optional<int32_t> extra) {
    SetJitMode(mode);
    std::vector<uint32_t> out(out_words, 0xdeadbeefu);
    Memory memory;
    const uint64_t din = in.empty() ? 0 : memory.Add(in);
    const uint64_t dout = memory.Add(out);
    std::vector<uint8_t> params = in.empty() ? Pack(dout) : extra ? Pack(din, dout, *extra) : Pack(din, dout);
    std::string detail;
    EXPECT_EQ(Launch(Kernel(name), {blocks, 1, 1}, block, params, memory, nullptr, &detail), 0)
        << name << ": " << detail;
    return out;
  }

  // The same interpreted, then compiled: the interpreter's output, which the compiled one
  // must equal bit for bit, from the JIT's launch.
  std::vector<uint32_t> Both(const std::string& name, uint32_t blocks, std::vector<uint32_t> block,
                             const std::vector<uint32_t>& in, size_t out_words, std::optional<int32_t> extra = {}) {
    std::vector<uint32_t> interpreted = Run(JitMode::kOff, name, blocks, block, in, out_words, extra);
    const DecodedKernel& kernel = Kernel(name);
    const uint64_t launches = kernel.jit->jit_launches.load();
    std::vector<uint32_t> compiled = Run(JitMode::kAlways, name, blocks, block, in, out_words, extra);
    EXPECT_NE(kernel.jit->compiled, nullptr) << name << ": " << kernel.jit->refused;
    EXPECT_EQ(kernel.jit->jit_launches.load(), launches + 1) << name << ": " << kernel.jit->refused;
    for (size_t k = 0; k < out_words; ++k) {
      EXPECT_EQ(compiled[k], interpreted[k]) << name << ", word " << k;
      if (compiled[k] != interpreted[k]) break;
    }
    return interpreted;
  }
};

// %laneid, the lane masks, %warpid and %nwarpid on blocks of 24 x 3 threads (warps that
// span rows, a last warp of 8 threads) and of 64 x 2 (vector code's rows): the interpreter's
// values, and the values.
TEST_F(JitWarp, LaneAndWarpRegistersAreTheInterpreters) {
  for (std::vector<uint32_t> block : {std::vector<uint32_t>{24, 3, 1}, std::vector<uint32_t>{64, 2, 1}}) {
    const uint32_t threads = block[0] * block[1], blocks = 3;
    std::vector<uint32_t> out = Both("lane_ids", blocks, block, {}, blocks * threads * 8);
    for (uint32_t t = 0; t < blocks * threads; ++t) {
      const uint32_t index = t % threads, lane = index % 32;
      const uint32_t* w = &out[t * 8];
      ASSERT_EQ(w[0], lane) << t;
      ASSERT_EQ(w[1], (1u << lane) - 1) << t;
      ASSERT_EQ(w[2], (2u << lane) - 1) << t;
      ASSERT_EQ(w[3], ~((2u << lane) - 1)) << t;
      ASSERT_EQ(w[4], ~((1u << lane) - 1)) << t;
      ASSERT_EQ(w[5], 1u << lane) << t;
      ASSERT_EQ(w[6], index / 32) << t;
      ASSERT_EQ(w[7], 64u) << t;
    }
  }
}

// A grid-stride sum reduced in each warp by five __shfl_down_sync (warp_sum; the loop's last
// round run by part of each warp): each warp's sum, bit for bit the interpreter's.
TEST_F(JitWarp, AShuffleDownReductionGivesEachWarpsSum) {
  const uint32_t blocks = 5, threads = 128, n = 5000;
  std::vector<uint32_t> in(n);
  for (uint32_t k = 0; k < n; ++k) in[k] = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int>(k % 17) - 8));
  std::vector<uint32_t> out = Both("warp_sum", blocks, {threads, 1, 1}, in, blocks * threads / 32, int32_t{n});
  for (uint32_t w = 0; w < blocks * threads / 32; ++w) {
    float sum = 0;
    for (uint32_t t = w * 32; t < w * 32 + 32; ++t) {
      for (uint32_t i = t; i < n; i += blocks * threads) sum += std::bit_cast<float>(in[i]);
    }
    ASSERT_EQ(std::bit_cast<float>(out[w]), sum) << w;
  }
}

// A block reduction whose last round only warp 0 runs (block_sum: divergent by warp, after
// a barrier), on blocks of 256 threads and of 80 (a last warp of 16 threads, whose shuffles
// read the lanes past it): each block's sum, bit for bit the interpreter's.
TEST_F(JitWarp, OnlyWarpZeroShufflesTheBlocksLastRound) {
  for (uint32_t threads : {256u, 80u}) {
    const uint32_t blocks = 6;
    std::vector<uint32_t> in(blocks * threads);
    for (uint32_t k = 0; k < in.size(); ++k) in[k] = k * 7 % 101;
    std::vector<uint32_t> out = Both("block_sum", blocks, {threads, 1, 1}, in, blocks);
    for (uint32_t b = 0; b < blocks; ++b) {
      uint32_t sum = 0;
      for (uint32_t t = 0; t < threads; ++t) sum += in[b * threads + t];
      ASSERT_EQ(out[b], sum) << threads << ", block " << b;
    }
  }
}

// __activemask, __ballot_sync, __all_sync and __any_sync in a branch that the lanes with an
// odd value take (votes): the branch's lanes and their votes, the interpreter's.
TEST_F(JitWarp, VotesInABranchTakenByPartOfTheWarp) {
  const uint32_t blocks = 3, threads = 96;
  std::vector<uint32_t> in(blocks * threads);
  for (uint32_t k = 0; k < in.size(); ++k) in[k] = (k * 37 + k / 32) % 29;
  std::vector<uint32_t> out = Both("votes", blocks, {threads, 1, 1}, in, in.size() * 5);
  for (uint32_t w = 0; w < in.size() / 32; ++w) {
    uint32_t active = 0, big = 0, all = 1, any = 0, third = 0;
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t x = in[w * 32 + l];
      if (x % 2 == 0) continue;
      active |= 1u << l;
      big |= static_cast<uint32_t>(x > 10) << l;
      all &= x > 0;
      any |= x > 20;
      third |= static_cast<uint32_t>(x % 3 == 0) << l;
    }
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t* r = &out[(w * 32 + l) * 5];
      const bool odd = in[w * 32 + l] % 2 != 0;
      ASSERT_EQ(r[0], odd ? active : 0) << w << ", " << l;
      ASSERT_EQ(r[1], odd ? big : 0) << w << ", " << l;
      ASSERT_EQ(r[2], odd ? all : 0) << w << ", " << l;
      ASSERT_EQ(r[3], odd ? any : 0) << w << ", " << l;
      ASSERT_EQ(r[4], odd ? third : 0) << w << ", " << l;
    }
  }
}

// __shfl_sync with widths 8 and 16, __shfl_xor_sync within 16 and __shfl_up_sync within 8
// (shuffle_width: the segment masks of c), for several source lanes: the interpreter's.
TEST_F(JitWarp, ShufflesWithinSegmentsNarrowerThanTheWarp) {
  const uint32_t blocks = 2, threads = 64;
  std::vector<uint32_t> in(blocks * threads);
  for (uint32_t k = 0; k < in.size(); ++k) in[k] = k * 1000 + 1;
  for (int32_t src : {0, 3, 9, 31}) {
    std::vector<uint32_t> out = Both("shuffle_width", blocks, {threads, 1, 1}, in, in.size() * 4, src);
    for (uint32_t t = 0; t < in.size(); ++t) {
      const uint32_t lane = t % 32, base = t - lane, x = t % threads;
      ASSERT_EQ(out[t * 4], in[base + (lane & ~7u) + (src & 7)]) << src << ", " << t;
      ASSERT_EQ(out[t * 4 + 1], in[base + (lane & ~15u) + ((src + x) & 15)]) << src << ", " << t;
      ASSERT_EQ(out[t * 4 + 2], in[base + (lane ^ 5)]) << src << ", " << t;
      ASSERT_EQ(out[t * 4 + 3], in[(lane & 7) >= 3 ? t - 3 : t]) << src << ", " << t;
    }
  }
}

// An inclusive scan by __shfl_up_sync in each warp, then of the warps' totals by warp 0
// with __syncwarp (warp_scan), over 3000 elements on blocks of 256: each block's prefix
// sums, bit for bit the interpreter's.
TEST_F(JitWarp, AnInclusiveWarpScan) {
  const uint32_t threads = 256, n = 3000, blocks = (n + threads - 1) / threads;
  std::vector<uint32_t> in(n);
  for (uint32_t k = 0; k < n; ++k) in[k] = k % 13 + 1;
  std::vector<uint32_t> out = Both("warp_scan", blocks, {threads, 1, 1}, in, n, int32_t{n});
  uint32_t sum = 0;
  for (uint32_t k = 0; k < n; ++k) {
    sum = k % threads == 0 ? in[k] : sum + in[k];
    ASSERT_EQ(out[k], sum) << k;
  }
}

// shfl.sync's predicate (shuffle_predicate: up and down within segments of 16 by several
// deltas, each lane's value and whether its source lane was in the segment): the
// interpreter's.
TEST_F(JitWarp, AShufflesPredicateSaysWhetherItsSourceLaneWasInRange) {
  const uint32_t blocks = 2, threads = 64;
  std::vector<uint32_t> in(blocks * threads);
  for (uint32_t k = 0; k < in.size(); ++k) in[k] = k * 3 + 5;
  for (int32_t delta : {0, 1, 5, 15, 16}) {
    std::vector<uint32_t> out = Both("shuffle_predicate", blocks, {threads, 1, 1}, in, in.size() * 4, delta);
    for (uint32_t t = 0; t < in.size(); ++t) {
      const uint32_t lane = t % 16;
      const bool up = static_cast<int32_t>(lane) - delta >= 0, down = lane + delta <= 15;
      ASSERT_EQ(out[t * 4], in[up ? t - delta : t]) << delta << ", " << t;
      ASSERT_EQ(out[t * 4 + 1], up ? 1u : 0u) << delta << ", " << t;
      ASSERT_EQ(out[t * 4 + 2], in[down ? t + delta : t]) << delta << ", " << t;
      ASSERT_EQ(out[t * 4 + 3], down ? 1u : 0u) << delta << ", " << t;
    }
  }
}

// Lanes meeting at different warp-level operations (meet: the odd lanes at a __ballot_sync
// naming all 32, the even ones at an __activemask placed before it, then all at an
// __activemask after both): the interpreter runs the even lanes through the last one
// before the odd lanes' ballot, which names them; so does compiled code, each lane's
// masks the interpreter's.
TEST_F(JitWarp, LanesAtOtherOperationsThatAMembermaskNamesRunFirst) {
  const uint32_t blocks = 2, threads = 64;
  std::vector<uint32_t> in(blocks * threads);
  for (uint32_t k = 0; k < in.size(); ++k) in[k] = (k * 7 + k / 5) % 23;
  std::vector<uint32_t> out = Both("meet", blocks, {threads, 1, 1}, in, in.size() * 2);
  for (uint32_t w = 0; w < in.size() / 32; ++w) {
    uint32_t odd = 0, big = 0;
    for (uint32_t l = 0; l < 32; ++l) {
      odd |= (in[w * 32 + l] & 1) << l;
      big |= static_cast<uint32_t>((in[w * 32 + l] & 1) && in[w * 32 + l] > 10) << l;
    }
    for (uint32_t l = 0; l < 32; ++l) {
      const bool is_odd = (odd >> l) & 1;
      ASSERT_EQ(out[(w * 32 + l) * 2], is_odd ? big : ~odd) << w << ", " << l;
      ASSERT_EQ(out[(w * 32 + l) * 2 + 1], is_odd ? odd : ~odd) << w << ", " << l;
    }
  }
}

// A ballot of a negated predicate and vote.sync.uni (vote_negated), on warps whose lanes
// all agree, all disagree and differ: the interpreter's.
TEST_F(JitWarp, VotesOfANegatedPredicateAndUni) {
  const uint32_t blocks = 1, threads = 96;
  std::vector<uint32_t> in(blocks * threads);
  for (uint32_t k = 0; k < in.size(); ++k) in[k] = k < 32 ? 3 : k < 64 ? 12 : k % 20;
  std::vector<uint32_t> out = Both("vote_negated", blocks, {threads, 1, 1}, in, in.size() * 2);
  for (uint32_t w = 0; w < in.size() / 32; ++w) {
    uint32_t big = 0;
    for (uint32_t l = 0; l < 32; ++l) big |= static_cast<uint32_t>(in[w * 32 + l] >= 10) << l;
    for (uint32_t l = 0; l < 32; ++l) {
      ASSERT_EQ(out[(w * 32 + l) * 2], big) << w << ", " << l;
      ASSERT_EQ(out[(w * 32 + l) * 2 + 1], big == 0 || big == ~0u ? 1u : 0u) << w << ", " << l;
    }
  }
}

// A shuffle of a register computed from %tid alone (rotate), which the interpreter computes
// in every lane before the block runs: compiled for blocks of whole warps, the
// interpreter's results; a block with a last warp of 16 threads (whose lane 15 reads lane
// 16, past the block, which has a value there) runs on the interpreter.
TEST_F(JitWarp, AShuffleOfAValueOfTheThreadIndexAloneTakesWholeWarpsOnly) {
  std::vector<uint32_t> out = Both("rotate", 2, {64, 1, 1}, {}, 128);
  for (uint32_t t = 0; t < 128; ++t) ASSERT_EQ(out[t], (t % 64 / 32 * 32 + (t + 1) % 32) * 3 + 1) << t;
  SetJitMode(JitMode::kAlways);
  const DecodedKernel& kernel = Kernel("rotate");
  const uint64_t launches = kernel.jit->jit_launches.load();
  std::vector<uint32_t> partial = Run(JitMode::kAlways, "rotate", 1, {48, 1, 1}, {}, 48, {});
  EXPECT_EQ(kernel.jit->jit_launches.load(), launches);
  // Lane 16 of warp 1, past the block: the interpreter's coordinates wrap there (%tid.x 0).
  EXPECT_EQ(partial[47], 1u);
}

// __reduce_{add,min,max,and,or,xor}_sync (reductions: redux.sync over the whole warp, and
// over the lanes of a branch part of the warp takes, with negative values for the signed
// minimum and maximum): the interpreter's, and the values.
TEST_F(JitWarp, WarpReductionsOverTheWarpAndOverABranchsLanes) {
  const uint32_t blocks = 2, threads = 64;
  std::vector<uint32_t> in(blocks * threads);
  for (uint32_t k = 0; k < in.size(); ++k) in[k] = static_cast<uint32_t>(static_cast<int32_t>(k * 37 % 71) - 20);
  std::vector<uint32_t> out = Both("reductions", blocks, {threads, 1, 1}, in, in.size() * 7);
  for (uint32_t w = 0; w < in.size() / 32; ++w) {
    uint32_t add = 0, and_ = ~0u, or_ = 0, xor_ = 0, umax = 0;
    int32_t min = INT32_MAX, max = INT32_MIN;
    for (uint32_t l = 0; l < 32; ++l) {
      const int32_t x = static_cast<int32_t>(in[w * 32 + l]);
      add += static_cast<uint32_t>(x);
      min = std::min(min, x);
      if (x >= 40) continue;
      max = std::max(max, x);
      umax = std::max(umax, static_cast<uint32_t>(x));
      and_ &= static_cast<uint32_t>(x) | 0x100u;
      or_ |= static_cast<uint32_t>(x);
      xor_ ^= static_cast<uint32_t>(x);
    }
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t* r = &out[(w * 32 + l) * 7];
      const bool in_branch = static_cast<int32_t>(in[w * 32 + l]) < 40;
      ASSERT_EQ(r[0], add) << w << ", " << l;
      ASSERT_EQ(r[1], static_cast<uint32_t>(min)) << w << ", " << l;
      ASSERT_EQ(r[2], in_branch ? static_cast<uint32_t>(max) : 0u) << w << ", " << l;
      ASSERT_EQ(r[3], in_branch ? umax : 0u) << w << ", " << l;
      ASSERT_EQ(r[4], in_branch ? and_ : 0u) << w << ", " << l;
      ASSERT_EQ(r[5], in_branch ? or_ : 0u) << w << ", " << l;
      ASSERT_EQ(r[6], in_branch ? xor_ : 0u) << w << ", " << l;
    }
  }
}

// GPUPOOL_PTX_JIT=auto: a kernel whose threads stop at shuffles more than they run between
// them (warp_scan: no loop) stays on the interpreter once compiled; one with a loop free of
// them (warp_sum's grid-stride loop) runs compiled, from its first launch of 2^20 threads
// (which waits for its compile: kJitLaunchWaits).
TEST_F(JitWarp, AutoLeavesKernelsOfShufflesWithoutLoopsToTheInterpreter) {
  SetJitMode(JitMode::kAuto);
  const uint32_t n = uint32_t{1} << 20;
  std::vector<uint32_t> in(n, 1), out(n);
  Memory memory;
  const uint64_t din = memory.Add(in), dout = memory.Add(out);
  for (const char* name : {"warp_scan", "warp_sum"}) {
    const DecodedKernel& kernel = Kernel(name);
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(Launch(kernel, {n / 256, 1, 1}, {256, 1, 1}, Pack(din, dout, int32_t{1} << 20), memory), 0) << name;
    }
    WaitForCompile(*kernel.jit);
    ASSERT_NE(kernel.jit->compiled, nullptr) << name << ": " << kernel.jit->refused;
    ASSERT_EQ(Launch(kernel, {n / 256, 1, 1}, {256, 1, 1}, Pack(din, dout, int32_t{1} << 20), memory), 0) << name;
    EXPECT_EQ(kernel.jit->jit_launches.load(), std::string(name) == "warp_sum" ? 3u : 0u) << name;
  }
}

// Texture and surface instructions (JitTextures.ptx: nvcc's tex1D, tex2D, tex3D,
// tex2DLayered, tex1Dfetch, tex2Dgather, surf2Dread/write, surf3Dread/write and txq/suq of
// texture and surface objects): compiled as calls of the interpreter's own per-lane code
// (vector code: lane by lane), so that results, faults and their details are the
// interpreter's bit for bit. Each test runs blocks whose x extent is a multiple of 8 (vector
// code) and blocks whose is not (scalar code).
class JitTextures : public KernelFileTest {
 public:
  JitTextures() : KernelFileTest("JitTextures.ptx") {}

  // A launch's buffers, each a device allocation at the address Memory gives it: the same
  // addresses on both tiers, as they are added in the same order.
  struct Buffers {
    Memory memory;
    std::vector<std::unique_ptr<std::vector<uint8_t>>> data;
    template <typename T>
    uint64_t Add(const std::vector<T>& values) {
      auto bytes = std::make_unique<std::vector<uint8_t>>(values.size() * sizeof(T));
      if (!values.empty()) std::memcpy(bytes->data(), values.data(), bytes->size());
      data.push_back(std::move(bytes));
      return memory.Add(*data.back());
    }
  };
  struct Run {
    int32_t status = -1;
    std::string detail;
    std::vector<std::vector<uint8_t>> buffers;
  };
  // Makes a launch's buffers and returns its parameters.
  using Setup = std::function<std::vector<uint8_t>(Buffers&)>;

  // `name` over `blocks` blocks of threads x threads_y on the interpreter (runs[0]), then
  // compiled (runs[1]), which must have run compiled (vector code where threads is a
  // multiple of 8) and given the same CUresult, detail and (where the launch succeeded)
  // memory.
  void RunBoth(const std::string& name, uint32_t blocks, uint32_t threads, uint32_t threads_y, const Setup& setup,
               Run runs[2]) {
    const DecodedKernel& kernel = Kernel(name);
    const uint64_t before = kernel.jit->jit_launches.load();
    for (int compiled = 0; compiled < 2; ++compiled) {
      SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
      Buffers buffers;
      const std::vector<uint8_t> params = setup(buffers);
      Run& run = runs[compiled];
      run.status =
          Launch(kernel, {blocks, 1, 1}, {threads, threads_y, 1}, params, buffers.memory, nullptr, &run.detail);
      run.buffers.clear();
      for (const auto& data : buffers.data) run.buffers.push_back(*data);
    }
    ASSERT_NE(kernel.jit->compiled, nullptr) << name << ": " << kernel.jit->refused;
    EXPECT_EQ(kernel.jit->jit_launches.load(), before + 1) << name;
    EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled)) << name;
    EXPECT_EQ(runs[1].status, runs[0].status) << name;
    EXPECT_EQ(runs[1].detail, runs[0].detail) << name;
    // What a failed launch left in memory is the tiers' own (threads run in another order).
    if (runs[0].status == 0) {
      for (size_t k = 0; k < runs[0].buffers.size(); ++k) {
        EXPECT_EQ(runs[1].buffers[k], runs[0].buffers[k]) << name << ": buffer " << k;
      }
    }
  }

  // A descriptor over `texels` (its address) of `format` x `channels`, w x h x d.
  static dataplane::SimTextureDescriptor Descriptor(uint64_t texels, uint32_t format, uint32_t channels, uint64_t w,
                                                    uint64_t h, uint64_t d, uint32_t flags = 0,
                                                    uint32_t mode = dataplane::kAddressClamp) {
    dataplane::SimTextureDescriptor desc;
    desc.magic = dataplane::kSimTextureMagic;
    desc.format = format;
    desc.channels = channels;
    desc.dims = d > 1 && !(flags & dataplane::kSimTexLayered) ? 3 : h > 1 ? 2 : 1;
    desc.base = texels;
    desc.width = w;
    desc.height = h;
    desc.depth = d;
    desc.pitch = w * dataplane::SimTexelChannelBytes(format) * channels;
    desc.slice_pitch = desc.pitch * h;
    desc.flags = flags;
    for (uint32_t& m : desc.address_mode) m = mode;
    desc.border[0] = 0.25f;
    desc.border[1] = -3.0f;
    desc.border[2] = 7.5f;
    desc.border[3] = 1.0f;
    return desc;
  }

  // Float texels of 4 channels, each of its own value.
  static std::vector<float> FloatTexels(size_t n) {
    std::vector<float> texels(n * 4);
    for (size_t k = 0; k < texels.size(); ++k) texels[k] = static_cast<float>((k * 37) % 101) * 0.375f - 11.0f;
    return texels;
  }

  // Coordinates (x, y, z, w) for `threads` threads: inside, on and past the edges, negative,
  // NaN and infinite, scaled by `scale` (1: texels; 1/size: normalised).
  static std::vector<float> Coordinates(uint32_t threads, float scale) {
    const float kSpecial[] = {-0.0f, -1.25f, 1e9f, std::nanf(""), INFINITY, -INFINITY, 0.5f, 15.999f};
    std::vector<float> c(threads * 4);
    for (uint32_t t = 0; t < threads; ++t) {
      for (uint32_t i = 0; i < 4; ++i) {
        const uint32_t k = t * 4 + i;
        c[k] = k % 11 == 10 ? kSpecial[k / 11 % std::size(kSpecial)]
                            : (static_cast<float>((k * 53) % 97) * 0.23f - 3.1f) * scale;
      }
    }
    return c;
  }

  // `name`(handle, coordinates, out, n) over 2 blocks of 64 threads (vector code), then of
  // 60 (scalar code), a descriptor over `texels` as `make` makes it and `scale`d
  // coordinates: the results (16 bytes a thread).
  template <typename T>
  void Sample(const std::string& name, const std::vector<T>& texels,
              const std::function<dataplane::SimTextureDescriptor(uint64_t)>& make, float scale) {
    for (uint32_t threads : {64u, 60u}) Sample(name, texels, make, scale, threads);
  }
  template <typename T>
  void Sample(const std::string& name, const std::vector<T>& texels,
              const std::function<dataplane::SimTextureDescriptor(uint64_t)>& make, float scale, uint32_t threads) {
    const uint32_t blocks = 2;
    Run runs[2];
    RunBoth(
        name, blocks, threads, 1,
        [&](Buffers& b) {
          const uint64_t at = b.Add(texels);
          const uint64_t handle = b.Add(std::vector<dataplane::SimTextureDescriptor>{make(at)});
          const uint64_t coords = b.Add(Coordinates(blocks * threads, scale));
          const uint64_t out = b.Add(std::vector<uint32_t>(blocks * threads * 4, 0xdeadbeef));
          return Pack(handle, coords, out, static_cast<int32_t>(blocks * threads - 3));
        },
        runs);
    ASSERT_EQ(runs[0].status, 0) << name << ": " << runs[0].detail;
    // The interpreter sampled something: not every result is a zero or the fill.
    const std::vector<uint8_t>& out = runs[0].buffers.back();
    size_t written = 0;
    for (size_t k = 0; k + 4 <= out.size(); k += 4) {
      uint32_t word;
      std::memcpy(&word, &out[k], 4);
      written += word != 0 && word != 0xdeadbeef;
    }
    EXPECT_GT(written, out.size() / 16) << name;
  }
};

// tex.2d of a float texture of 4 channels, 16 x 12: point and linear filtering, each
// addressing mode, texel and normalised coordinates.
TEST_F(JitTextures, Tex2dFilteringAddressingAndNormalisedCoordinates) {
  const std::vector<float> texels = FloatTexels(16 * 12);
  for (uint32_t filter : {0u, dataplane::kSimTexLinearFilter}) {
    for (uint32_t mode :
         {dataplane::kAddressWrap, dataplane::kAddressClamp, dataplane::kAddressMirror, dataplane::kAddressBorder}) {
      for (bool normalized : {false, true}) {
        SCOPED_TRACE("filter " + std::to_string(filter) + ", mode " + std::to_string(mode) + ", normalised " +
                     std::to_string(normalized));
        Sample(
            "tex2d", texels,
            [&](uint64_t at) {
              return Descriptor(at, dataplane::kTexelF32, 4, 16, 12, 1,
                                filter | (normalized ? dataplane::kSimTexNormalized : 0), mode);
            },
            normalized ? 1.0f / 8 : 1.0f);
      }
    }
  }
}

// 8-bit texels read as normalised floats (linear), and 16-bit signed ones read as
// integers (tex.2d.v4.s32: sign-extended).
TEST_F(JitTextures, Tex2dOfIntegerTexels) {
  std::vector<uint8_t> bytes(16 * 12 * 4);
  for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<uint8_t>(k * 29 + 3);
  Sample(
      "tex2d", bytes,
      [](uint64_t at) {
        return Descriptor(at, dataplane::kTexelU8, 4, 16, 12, 1, dataplane::kSimTexLinearFilter,
                          dataplane::kAddressBorder);
      },
      1.0f);
  std::vector<int16_t> shorts(16 * 12 * 2);
  for (size_t k = 0; k < shorts.size(); ++k) shorts[k] = static_cast<int16_t>(k * 977 - 30000);
  Sample(
      "tex2d_int", shorts,
      [](uint64_t at) {
        return Descriptor(at, dataplane::kTexelS16, 2, 16, 12, 1, dataplane::kSimTexReadAsInteger,
                          dataplane::kAddressWrap);
      },
      1.0f);
}

// tex.1d (linear, normalised, wrap), tex.1d.s32 of linear memory (tex1Dfetch), tex.3d
// (linear, border) and tex.a2d (a layered texture, mirror).
TEST_F(JitTextures, OneDimensionalThreeDimensionalAndLayeredFetches) {
  const std::vector<float> texels = FloatTexels(16 * 12 * 3);
  Sample(
      "tex1d", texels,
      [](uint64_t at) {
        return Descriptor(at, dataplane::kTexelF32, 4, 40, 1, 1,
                          dataplane::kSimTexLinearFilter | dataplane::kSimTexNormalized, dataplane::kAddressWrap);
      },
      1.0f / 16);
  Sample(
      "fetch1d", texels,
      [](uint64_t at) { return Descriptor(at, dataplane::kTexelF32, 4, 40, 1, 1, dataplane::kSimTexLinearMemory); },
      4.0f);
  Sample(
      "tex3d", texels,
      [](uint64_t at) {
        return Descriptor(at, dataplane::kTexelF32, 4, 16, 12, 3, dataplane::kSimTexLinearFilter,
                          dataplane::kAddressBorder);
      },
      1.0f);
  Sample(
      "tex2d_layered", texels,
      [](uint64_t at) {
        return Descriptor(at, dataplane::kTexelF32, 4, 16, 12, 3,
                          dataplane::kSimTexLayered | dataplane::kSimTexNormalized | dataplane::kSimTexLinearFilter,
                          dataplane::kAddressMirror);
      },
      1.0f / 4);
}

// tld4.g (tex2Dgather of the second channel), point and border.
TEST_F(JitTextures, Tld4GathersTheFourTexelsOfAChannel) {
  const std::vector<float> texels = FloatTexels(16 * 12);
  for (uint32_t mode : {dataplane::kAddressClamp, dataplane::kAddressBorder}) {
    Sample(
        "gather2d", texels, [&](uint64_t at) { return Descriptor(at, dataplane::kTexelF32, 4, 16, 12, 1, 0, mode); },
        1.0f);
  }
}

// txq (width, height, depth, array size, normalised, filter, address modes) and suq.
TEST_F(JitTextures, TxqAndSuqAnswerAsTheInterpreter) {
  for (uint32_t threads : {40u, 37u}) {
    Run runs[2];
    RunBoth(
        "query", 1, threads, 1,
        [&](Buffers& b) {
          const uint64_t at = b.Add(FloatTexels(16 * 12 * 3));
          dataplane::SimTextureDescriptor t =
              Descriptor(at, dataplane::kTexelF32, 4, 16, 12, 3,
                         dataplane::kSimTexLayered | dataplane::kSimTexNormalized, dataplane::kAddressMirror);
          t.address_mode[1] = dataplane::kAddressBorder;
          dataplane::SimTextureDescriptor s = Descriptor(at, dataplane::kTexelF32, 1, 48, 12, 3);
          s.magic = dataplane::kSimSurfaceMagic;
          const uint64_t texture = b.Add(std::vector<dataplane::SimTextureDescriptor>{t});
          const uint64_t surface = b.Add(std::vector<dataplane::SimTextureDescriptor>{s});
          const uint64_t out = b.Add(std::vector<int32_t>(threads * 12, -1));
          return Pack(texture, surface, out, static_cast<int32_t>(threads));
        },
        runs);
    ASSERT_EQ(runs[0].status, 0) << runs[0].detail;
    std::vector<int32_t> out(threads * 12);
    std::memcpy(out.data(), runs[1].buffers.back().data(), out.size() * 4);
    const std::vector<int32_t> want = {16, 12, 1, 3, 1, 0, dataplane::kAddressMirror, dataplane::kAddressBorder,
                                       48, 12, 3, 5};
    EXPECT_EQ(std::vector<int32_t>(out.begin() + 60, out.begin() + 72), want);
  }
}

// surf2Dread / surf2Dwrite (suld.b.2d.b32, sust.b.2d.b32) under .trap, .clamp and .zero:
// each thread reads an element and writes it back changed into another surface; under
// .clamp and .zero coordinates past the edges too.
TEST_F(JitTextures, SurfaceLoadsAndStoresRoundTrip) {
  const uint32_t blocks = 2, w = 24, h = 10;
  for (uint32_t threads : {64u, 60u}) {
    for (const char* name : {"surface_trap", "surface_clamp", "surface_zero"}) {
      const bool inside = std::string(name) == "surface_trap";
      Run runs[2];
      RunBoth(
          name, blocks, threads, 1,
          [&](Buffers& b) {
            std::vector<float> source(w * h);
            for (size_t k = 0; k < source.size(); ++k) source[k] = static_cast<float>(k) * 0.5f - 7;
            dataplane::SimTextureDescriptor s = Descriptor(b.Add(source), dataplane::kTexelF32, 1, w, h, 1);
            s.magic = dataplane::kSimSurfaceMagic;
            dataplane::SimTextureDescriptor d = s;
            d.base = b.Add(std::vector<float>(w * h, -1.0f));
            const uint64_t sh = b.Add(std::vector<dataplane::SimTextureDescriptor>{s});
            const uint64_t dh = b.Add(std::vector<dataplane::SimTextureDescriptor>{d});
            std::vector<int32_t> c(blocks * threads * 2);
            for (uint32_t t = 0; t < blocks * threads; ++t) {
              c[2 * t] = inside ? static_cast<int32_t>(t * 7 % w) : static_cast<int32_t>(t * 7 % (w + 8)) - 4;
              c[2 * t + 1] = inside ? static_cast<int32_t>(t % h) : static_cast<int32_t>(t % (h + 4)) - 2;
            }
            const uint64_t dc = b.Add(c);
            const uint64_t out = b.Add(std::vector<float>(blocks * threads, 99.0f));
            return Pack(sh, dh, dc, out, static_cast<int32_t>(blocks * threads - 5));
          },
          runs);
      ASSERT_EQ(runs[0].status, 0) << name << ": " << runs[0].detail;
      // The destination surface's elements were written.
      EXPECT_NE(runs[0].buffers[1], std::vector<uint8_t>(runs[0].buffers[1].size(), 0)) << name;
    }
  }
}

// surf3Dwrite / surf3Dread of uchar4 (sust.b.3d.v4.b8 of 16-bit registers, suld.b.3d.v4.b8).
TEST_F(JitTextures, AThreeDimensionalSurfaceOfBytes) {
  for (uint32_t w : {8u, 7u}) {
    const uint32_t h = 6, d = 3;
    Run runs[2];
    RunBoth(
        "surface_3d", d, w, h,
        [&](Buffers& b) {
          dataplane::SimTextureDescriptor s =
              Descriptor(b.Add(std::vector<uint8_t>(w * h * d * 4, 0)), dataplane::kTexelU8, 4, w, h, d);
          s.magic = dataplane::kSimSurfaceMagic;
          const uint64_t handle = b.Add(std::vector<dataplane::SimTextureDescriptor>{s});
          const uint64_t out = b.Add(std::vector<uint32_t>(w * h * d, 0xdeadbeef));
          return Pack(handle, out, static_cast<int32_t>(w), static_cast<int32_t>(h));
        },
        runs);
    ASSERT_EQ(runs[0].status, 0) << runs[0].detail;
    uint32_t last;
    std::memcpy(&last, runs[1].buffers.back().data() + (w * h * d - 1) * 4, 4);
    EXPECT_EQ(last, (w - 1) | (h - 1) << 8 | (d - 1) << 16 | 7u << 24);
  }
}

// Faults end the launch with the interpreter's error and detail: a handle that names no
// descriptor (another buffer, memory outside the session's, a surface's handle given to
// tex), texels outside the session's memory, and a .trap surface access past the edge by
// one thread of the second warp.
TEST_F(JitTextures, BadHandlesAndStrayAccessesFaultAsOnTheInterpreter) {
  for (uint32_t threads : {64u, 60u}) {
    enum Case { kNotADescriptor, kOutside, kSurfaceAsTexture, kTexelsOutside };
    for (Case c : {kNotADescriptor, kOutside, kSurfaceAsTexture, kTexelsOutside}) {
      Run runs[2];
      RunBoth(
          "tex2d", 1, threads, 1,
          [&](Buffers& b) {
            const uint64_t at = b.Add(FloatTexels(16 * 12));
            dataplane::SimTextureDescriptor t = Descriptor(at, dataplane::kTexelF32, 4, 16, 12, 1);
            if (c == kSurfaceAsTexture) t.magic = dataplane::kSimSurfaceMagic;
            if (c == kTexelsOutside) t.base = uint64_t{1} << 40;
            uint64_t handle = b.Add(std::vector<dataplane::SimTextureDescriptor>{t});
            if (c == kNotADescriptor) handle = at;
            if (c == kOutside) handle = 0x1000;
            const uint64_t coords = b.Add(Coordinates(threads, 1.0f));
            const uint64_t out = b.Add(std::vector<uint32_t>(threads * 4, 0xdeadbeef));
            return Pack(handle, coords, out, static_cast<int32_t>(threads));
          },
          runs);
      EXPECT_EQ(runs[0].status, kIllegalAddress) << c;
      EXPECT_NE(runs[0].detail.find(c == kTexelsOutside ? "texture fetch" : "texture object"), std::string::npos)
          << runs[0].detail;
    }
    const uint32_t w = 24, h = 10;
    Run runs[2];
    RunBoth(
        "surface_trap", 1, threads, 1,
        [&](Buffers& b) {
          dataplane::SimTextureDescriptor s =
              Descriptor(b.Add(std::vector<float>(w * h, 1.0f)), dataplane::kTexelF32, 1, w, h, 1);
          s.magic = dataplane::kSimSurfaceMagic;
          const uint64_t sh = b.Add(std::vector<dataplane::SimTextureDescriptor>{s});
          std::vector<int32_t> c(threads * 2, 1);
          c[2 * 45] = static_cast<int32_t>(w);  // thread 45 (warp 1): one element past the row
          const uint64_t dc = b.Add(c);
          const uint64_t out = b.Add(std::vector<float>(threads, 99.0f));
          return Pack(sh, sh, dc, out, static_cast<int32_t>(threads));
        },
        runs);
    EXPECT_EQ(runs[0].status, kIllegalAddress);
    EXPECT_NE(runs[0].detail.find("surface load out of bounds of 4 bytes"), std::string::npos) << runs[0].detail;
    EXPECT_NE(runs[0].detail.find("warp 1"), std::string::npos) << runs[0].detail;
  }
}

// Module variables (JitModuleVariables.ptx): .global and .const variables placed as the sim
// executor places them (one allocation, each at its alignment and at least 8, initialised
// from the PTX) and the kernel decoded with their addresses; `fir` reads them through mov
// of their names, ld.const and ld.global at [name+offset] and through registers. Compiled
// code gives the interpreter's results and faults bit for bit.
class JitModuleVariables : public ::testing::Test {
 public:
  void TearDown() override { SetJitMode(JitMode::kAuto); }

  // One load of the module: its parse, where its variables are, their initial bytes.
  struct Load {
    std::unique_ptr<PtxModule> module;
    uint64_t base = 0;
    std::map<std::string, uint64_t> addresses;
    std::vector<uint8_t> image;
  };
  // Parses the module and places its variables at `base`.
  static void Place(uint64_t base, Load* load) {
    auto parsed = PtxModule::Parse(KernelText("JitModuleVariables.ptx"));
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    load->module = std::move(*parsed);
    load->base = base;
    std::map<std::string, uint64_t> offsets;
    uint64_t span = 0;
    for (const ModuleVariable& variable : load->module->variables()) {
      const uint64_t align = std::max<uint64_t>(variable.align, 8);
      span = (span + align - 1) / align * align;
      offsets[variable.name] = span;
      load->addresses[variable.name] = base + span;
      span += std::max<uint64_t>(variable.size, 1);
    }
    load->image.assign(span, 0);
    for (const ModuleVariable& variable : load->module->variables()) {
      auto init = load->module->InitialBytes(variable, load->addresses);
      ASSERT_TRUE(init.ok()) << init.status().message();
      std::copy(init->begin(), init->end(), load->image.begin() + offsets[variable.name]);
    }
  }
  const DecodedKernel& Fir(Load& load) {
    auto kernel = load.module->Decode("fir", load.addresses);
    EXPECT_TRUE(kernel.ok()) << kernel.status().message();
    return **kernel;
  }

  struct Run {
    int32_t status = -1;
    std::string detail;
    std::vector<float> out;
    std::vector<uint8_t> variables;
  };
  // `fir` of `load` in `mode` on `blocks` blocks of `threads`, its variables fresh.
  Run RunFir(Load& load, JitMode mode, uint32_t blocks, uint32_t threads, int32_t n, int32_t stray, int32_t far) {
    SetJitMode(mode);
    Run run;
    run.variables = load.image;
    run.out.assign(size_t{blocks} * threads, -1.0f);
    Memory memory;
    memory.next = load.base;
    EXPECT_EQ(memory.Add(run.variables), load.base);
    const uint64_t out = memory.Add(run.out);
    run.status =
        Launch(Fir(load), {blocks, 1, 1}, {threads, 1, 1}, Pack(out, n, stray, far), memory, nullptr, &run.detail);
    return run;
  }

  // Both tiers on the same launch: the same CUresult and detail, and where it succeeded the
  // same output and variables; the compiled one was the JIT's.
  void RunBoth(Load& load, uint32_t blocks, uint32_t threads, int32_t n, int32_t stray, int32_t far, Run runs[2]) {
    const DecodedKernel& kernel = Fir(load);
    const uint64_t before = kernel.jit->jit_launches.load();
    runs[0] = RunFir(load, JitMode::kOff, blocks, threads, n, stray, far);
    runs[1] = RunFir(load, JitMode::kAlways, blocks, threads, n, stray, far);
    ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
    EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
    EXPECT_EQ(kernel.jit->jit_launches.load(), before + 1);
    EXPECT_EQ(runs[1].status, runs[0].status);
    EXPECT_EQ(runs[1].detail, runs[0].detail);
    if (runs[0].status != 0) return;
    EXPECT_EQ(std::memcmp(runs[1].out.data(), runs[0].out.data(), runs[0].out.size() * sizeof(float)), 0);
    EXPECT_EQ(runs[1].variables, runs[0].variables);
  }

  // What `fir` gives thread i with the module's initial variables (fma and sums in its order).
  static float Expected(int i) {
    const float c[4] = {0.5f, -1.25f, 2.0f, 0.125f};
    const uint32_t table[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
    float s = 0.0f;
    for (int k = 0; k < 4; ++k) s = std::fma(c[k], static_cast<float>(table[(i + k) & 15]), s);
    s = s + (static_cast<float>(table[3]) + static_cast<float>(table[i & 15]));
    return c[0] + s;
  }
};

// Blocks of 64 threads (vector code) and of 36 (scalar code), the last threads past n: the
// sums over the variables, bit for bit the interpreter's.
TEST_F(JitModuleVariables, ReadsGiveTheInterpretersResults) {
  Load load;
  ASSERT_NO_FATAL_FAILURE(Place(uint64_t{1} << 44, &load));
  for (uint32_t threads : {64u, 36u}) {
    const uint32_t blocks = 3;
    const int32_t n = static_cast<int32_t>(blocks * threads) - 5;
    Run runs[2];
    RunBoth(load, blocks, threads, n, -10, 0, runs);
    ASSERT_EQ(runs[0].status, 0) << runs[0].detail;
    for (int i = 0; i < n; ++i) EXPECT_EQ(runs[0].out[i], Expected(i)) << "thread " << i;
    EXPECT_EQ(runs[0].out[n], -1.0f);
  }
}

// Thread 70 reads table[far], or (stray 69) c_coeffs[far]: past the variables' allocation,
// far past it and before it, an illegal address on both tiers with the same detail (its
// block and warp).
TEST_F(JitModuleVariables, StrayReadsThroughAVariablesAddressFaultAsOnTheInterpreter) {
  Load load;
  ASSERT_NO_FATAL_FAILURE(Place(uint64_t{1} << 44, &load));
  for (uint32_t threads : {64u, 36u}) {
    for (int32_t stray : {70, 69}) {
      for (int32_t far : {21, 1 << 20, -5}) {
        Run runs[2];
        RunBoth(load, 3, threads, 3 * threads, stray, far, runs);
        EXPECT_EQ(runs[0].status, kIllegalAddress) << stray << " " << far;
        const std::string where =
            "(block " + std::to_string(70 / threads) + ", warp " + std::to_string(70 % threads / 32) + ")";
        EXPECT_NE(runs[0].detail.find(where), std::string::npos) << runs[0].detail;
      }
    }
  }
}

// Two loads of the module, their variables at other addresses and table's words different:
// each load's compiled kernel reads its own (a JitSlot is its DecodedKernel's, one per load).
TEST_F(JitModuleVariables, EachLoadsCompiledKernelReadsItsOwnVariables) {
  Load loads[2];
  ASSERT_NO_FATAL_FAILURE(Place(uint64_t{1} << 44, &loads[0]));
  ASSERT_NO_FATAL_FAILURE(Place(uint64_t{1} << 45, &loads[1]));
  const uint64_t table = loads[1].addresses.at("table") - loads[1].base;
  for (int k = 0; k < 16; ++k) loads[1].image[table + 4 * k] += 10;
  Run runs[2][2];
  for (int l = 0; l < 2; ++l) RunBoth(loads[l], 2, 64, 128, -10, 0, runs[l]);
  for (int l = 0; l < 2; ++l) ASSERT_EQ(runs[l][1].status, 0) << runs[l][1].detail;
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(runs[0][1].out[i], Expected(i)) << "thread " << i;
    EXPECT_NE(runs[1][1].out[i], runs[0][1].out[i]) << "thread " << i;
  }
}

// A by-value array parameter indexed at run time (JitParamAddress.ptx: mov of the
// parameter's name, ld.param through a register), on blocks of 64 threads and of 36: the
// interpreter's words, and the same fault and detail where thread 70 reads past the
// launch's parameter bytes (which may be more than the kernel's: 20 here, read as they are).
class JitParamAddress : public KernelFileTest {
 public:
  JitParamAddress() : KernelFileTest("JitParamAddress.ptx") {}
};

TEST_F(JitParamAddress, AParametersAddressReadsTheLaunchsParameterBytes) {
  const DecodedKernel& kernel = Kernel("pick");
  for (uint32_t threads : {64u, 36u}) {
    for (int32_t far : {0, 45, 49, 50, -1, 1 << 20}) {
      int32_t status[2];
      std::string detail[2];
      std::vector<int32_t> out[2];
      const uint64_t before = kernel.jit->jit_launches.load();
      for (int compiled = 0; compiled < 2; ++compiled) {
        SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
        out[compiled].assign(3 * threads, -7);
        Memory memory;
        const uint64_t dout = memory.Add(out[compiled]);
        std::vector<uint8_t> params(200);
        for (int k = 0; k < 40; ++k) {
          const int32_t v = k * k - 300;
          std::memcpy(params.data() + 4 * k, &v, 4);
        }
        const int32_t scalars[3] = {static_cast<int32_t>(3 * threads), 70, far};
        std::memcpy(params.data() + 160, &dout, 8);
        std::memcpy(params.data() + 168, scalars, 12);
        for (int k = 180; k < 200; ++k) params[k] = static_cast<uint8_t>(0xa0 + k);
        status[compiled] = Launch(kernel, {3, 1, 1}, {threads, 1, 1}, params, memory, nullptr, &detail[compiled]);
      }
      ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
      EXPECT_FALSE(HasVectorCode(*kernel.jit->compiled));
      EXPECT_EQ(kernel.jit->jit_launches.load(), before + 1);
      EXPECT_EQ(status[1], status[0]) << far;
      EXPECT_EQ(detail[1], detail[0]) << far;
      if (far >= 50 || far < 0) {
        EXPECT_EQ(status[0], kIllegalAddress) << far;
        EXPECT_NE(detail[0].find("load of 4 bytes"), std::string::npos) << detail[0];
        continue;
      }
      ASSERT_EQ(status[0], 0) << detail[0];
      EXPECT_EQ(out[1], out[0]) << far;
      for (int i = 0; i < static_cast<int>(3 * threads); ++i) {
        if (i != 70) EXPECT_EQ(out[0][i], (i * 7 % 40) * (i * 7 % 40) - 300) << i;
      }
    }
  }
}

// Device-side malloc and free (JitDeviceHeap.ptx) on a heap of kHeap bytes: compiled code
// allocates from the interpreter's heap with its code (remote/ptx/device_heap.h). Threads
// run one after another compiled, where a warp's lanes allocate together interpreted, so
// the blocks' addresses may differ: the tests compare what the kernels compute with their
// memory, and the NULLs and faults, never the addresses.
class JitDeviceHeap : public KernelFileTest {
 public:
  static constexpr uint64_t kHeap = 64 * 1024;
  JitDeviceHeap() : KernelFileTest("JitDeviceHeap.ptx") {}
  void SetUp() override {
    auto parsed = PtxModule::Parse(KernelText("JitDeviceHeap.ptx"), kHeap);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    module_ = std::move(*parsed);
  }
  // `name` decoded with its heap at kHeapAddress: the first buffer a Memory adds.
  static constexpr uint64_t kHeapAddress = uint64_t{1} << 44;
  const DecodedKernel& HeapKernel(const std::string& name) {
    auto kernel = module_->Decode(name, {{kDeviceHeapVariable, kHeapAddress}});
    EXPECT_TRUE(kernel.ok()) << kernel.status().message();
    return **kernel;
  }
};

// Sizes of 0 (NULL), 1 to 5000 bytes, the whole heap and more (NULL: no room for its
// header), 2^63 and 2^64 - 1 (NULL): the same NULLs, sums, alignment and bytes read back
// on both tiers, in blocks of 64 threads in x and in y, launched twice on one heap (the
// second launch finds the first's blocks that were not freed).
TEST_F(JitDeviceHeap, MallocAndFreeGiveTheInterpretersResults) {
  const DecodedKernel& kernel = HeapKernel("heap");
  std::vector<uint64_t> sizes(64);
  const uint64_t edges[] = {
      0, 1, 15, 16, 17, 4096, 5000, kHeap, kHeap - 32, kHeap + 16, uint64_t{1} << 63, ~uint64_t{0}, 48, 100, 255, 256};
  for (size_t i = 0; i < sizes.size(); ++i) sizes[i] = i < std::size(edges) ? edges[i] : (i * 37) % 300;
  const std::vector<uint32_t> blocks[3] = {{64, 1, 1}, {64, 1, 1}, {1, 64, 1}};
  std::vector<uint64_t> out[3][2];
  for (int run = 0; run < 3; ++run) {
    SetJitMode(run == 0 ? JitMode::kOff : JitMode::kAlways);
    std::vector<uint8_t> heap(kHeap, 0);
    Memory memory;
    ASSERT_EQ(memory.Add(heap), kHeapAddress);
    const uint64_t dsizes = memory.Add(sizes);
    for (int launch = 0; launch < 2; ++launch) {
      out[run][launch].assign(4 * 64, 0xdeadbeefull);
      Memory with_out = memory;
      const uint64_t dout = with_out.Add(out[run][launch]);
      std::string detail;
      ASSERT_EQ(Launch(kernel, {1, 1, 1}, blocks[run], Pack(dsizes, dout), with_out, nullptr, &detail), 0) << detail;
    }
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 4u) << kernel.jit->refused;
  for (int launch = 0; launch < 2; ++launch) {
    const std::vector<uint64_t>& r = out[0][launch];
    for (uint64_t i = 0; i < 64; ++i) {
      const uint64_t n = sizes[i];
      const bool null = n == 0 || n > kHeap - 64;
      EXPECT_EQ(r[4 * i], null ? 1u : 0u) << "thread " << i << ", launch " << launch;
      if (!null) {
        uint64_t sum = 0, first = 0;
        for (uint64_t k = 0; k < std::min<uint64_t>(n, 4096); ++k) sum += (i + k) & 255;
        for (uint64_t k = 0; k < std::min<uint64_t>(n, 8); ++k) first |= ((i + k) & 255) << (8 * k);
        EXPECT_EQ(r[4 * i + 1], sum) << i;
        EXPECT_EQ(r[4 * i + 2], 0u) << i;  // 16-byte aligned
        EXPECT_EQ(r[4 * i + 3], first) << i;
      }
      for (int run = 1; run < 3; ++run) {
        for (int k = 0; k < 4; ++k) {
          EXPECT_EQ(out[run][launch][4 * i + k], r[4 * i + k])
              << "thread " << i << ", word " << k << ", launch " << launch << ", run " << run;
        }
      }
    }
  }
}

// free of NULL does nothing; of a pointer malloc did not give (inside the heap, past it, a
// global buffer's), and twice of one it gave (under a guard the second time), the launch
// fails with CUDA_ERROR_ILLEGAL_ADDRESS and the interpreter's text; with the heap outside
// the launch's memory, malloc and free fail it naming the heap.
TEST_F(JitDeviceHeap, BadFreesAndAMissingHeapFailAsOnTheInterpreter) {
  const DecodedKernel& frees = HeapKernel("heap_free");
  const DecodedKernel& twice = HeapKernel("heap_double_free");
  const uint64_t bad[] = {kHeapAddress + 48, kHeapAddress + 8, kHeapAddress + kHeap, 0};
  for (uint64_t pointer : bad) {
    int32_t result[2];
    std::string detail[2];
    for (int compiled = 0; compiled < 2; ++compiled) {
      SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
      std::vector<uint8_t> heap(kHeap, 0);
      Memory memory;
      ASSERT_EQ(memory.Add(heap), kHeapAddress);
      std::vector<uint64_t> global(8, 0);
      const uint64_t dglobal = memory.Add(global);
      // Thread 0 frees NULL; thread 1 the pointer (0: a global buffer's).
      std::vector<uint64_t> pointers = {0, pointer == 0 ? dglobal : pointer};
      const uint64_t dpointers = memory.Add(pointers);
      result[compiled] = Launch(frees, {1, 1, 1}, {2, 1, 1}, Pack(dpointers), memory, nullptr, &detail[compiled]);
    }
    EXPECT_EQ(result[0], kIllegalAddress) << pointer;
    EXPECT_EQ(result[1], result[0]) << pointer;
    EXPECT_NE(detail[0].find("free of a pointer device malloc did not return"), std::string::npos) << detail[0];
    EXPECT_EQ(detail[1], detail[0]);
  }
  // free(NULL) alone: no fault.
  for (int compiled = 0; compiled < 2; ++compiled) {
    SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
    std::vector<uint8_t> heap(kHeap, 0);
    Memory memory;
    ASSERT_EQ(memory.Add(heap), kHeapAddress);
    std::vector<uint64_t> pointers(32, 0);
    const uint64_t dpointers = memory.Add(pointers);
    std::string detail;
    EXPECT_EQ(Launch(frees, {1, 1, 1}, {32, 1, 1}, Pack(dpointers), memory, nullptr, &detail), 0) << detail;
  }
  // A second free only under the guard. The faulting block's address may differ between
  // the tiers (the order of allocation does), so its text is compared without it.
  for (uint32_t again : {0u, 1u}) {
    for (int compiled = 0; compiled < 2; ++compiled) {
      SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
      std::vector<uint8_t> heap(kHeap, 0);
      Memory memory;
      ASSERT_EQ(memory.Add(heap), kHeapAddress);
      std::vector<uint64_t> out(40, 7);
      const uint64_t dout = memory.Add(out);
      std::string detail;
      const int32_t result = Launch(twice, {1, 1, 1}, {40, 1, 1}, Pack(dout, again), memory, nullptr, &detail);
      if (again == 0) {
        EXPECT_EQ(result, 0) << detail << ", compiled " << compiled;
        EXPECT_EQ(out, std::vector<uint64_t>(40, 1)) << "compiled " << compiled;
      } else {
        EXPECT_EQ(result, kIllegalAddress) << "compiled " << compiled;
        EXPECT_NE(detail.find("free of a pointer device malloc did not return"), std::string::npos) << detail;
      }
    }
  }
  // The heap's variable outside the launch's memory.
  for (const char* name : {"heap_free", "heap_double_free"}) {
    const DecodedKernel& kernel = HeapKernel(name);
    std::string detail[2];
    for (int compiled = 0; compiled < 2; ++compiled) {
      SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
      std::vector<uint64_t> pointers(8, 0);
      Memory memory;
      memory.next = uint64_t{1} << 45;
      const uint64_t dpointers = memory.Add(pointers);
      EXPECT_EQ(Launch(kernel, {1, 1, 1}, {4, 1, 1}, Pack(dpointers, 0u), memory, nullptr, &detail[compiled]),
                kIllegalAddress)
          << name;
    }
    EXPECT_NE(detail[0].find("device heap"), std::string::npos) << detail[0];
    EXPECT_EQ(detail[1], detail[0]) << name;
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(frees.jit->jit_launches.load(), 6u) << frees.jit->refused;
  EXPECT_EQ(twice.jit->jit_launches.load(), 3u) << twice.jit->refused;
}

// Device printf and assert (JitPrintf.ptx): compiled code formats with the interpreter's
// code (remote/ptx/device_printf.h). Compiled, a CTA's threads run one after another, so
// each thread's lines come together, where a warp's lanes print each line together
// interpreted: the tests compare each thread's lines, in its order, and the whole text
// sorted, not the interleaving.
class JitPrintf : public KernelFileTest {
 public:
  JitPrintf() : KernelFileTest("JitPrintf.ptx") {}
  void SetUp() override {
    KernelFileTest::SetUp();
    // The module's variables (its strings) at fixed addresses, first in every Memory.
    uint64_t next = uint64_t{1} << 44;
    for (const ModuleVariable& v : module_->variables()) {
      addresses_[v.name] = next;
      next += (v.size + 4095) / 4096 * 4096 + 4096;
    }
  }
  const DecodedKernel& Decoded(const std::string& name) {
    auto kernel = module_->Decode(name, addresses_);
    EXPECT_TRUE(kernel.ok()) << kernel.status().message();
    return **kernel;
  }
  // `memory` with the module's variables added first, initialised (kept in storage_).
  Memory WithVariables() {
    Memory memory;
    storage_.clear();
    storage_.reserve(module_->variables().size());
    for (const ModuleVariable& v : module_->variables()) {
      storage_.emplace_back(v.size, 0);
      std::copy(v.init.begin(), v.init.end(), storage_.back().begin());
      EXPECT_EQ(memory.Add(storage_.back()), addresses_[v.name]);
    }
    return memory;
  }
  // Runs `kernel` and returns its CUresult; its text into *text, its failure's into *detail.
  int32_t Print(const DecodedKernel& kernel, std::vector<uint32_t> block, const std::vector<uint8_t>& params,
                Memory& memory, std::string* text, std::string* detail) {
    LaunchSpec spec;
    for (int i = 0; i < 3; ++i) spec.block[i] = block[i];
    spec.params = params.data();
    spec.param_size = params.size();
    spec.memory = memory.ranges;
    spec.printf_out = text;
    spec.error_detail = detail;
    return RunKernel(kernel, spec);
  }

  std::map<std::string, uint64_t> addresses_;
  std::vector<std::vector<uint8_t>> storage_;
};

// Lines of `text`, each with its newline.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line + "\n");
  return lines;
}

// Integers at their limits, ±0, NaNs with payloads (quiet, signalling, negative),
// infinities, subnormals of double and float, in every conversion: each thread's two lines
// and printf's results are the interpreter's on both block shapes compiled; the integer
// line is the host printf's; compiled, each thread's lines come together, in thread order.
TEST_F(JitPrintf, EachThreadPrintsTheInterpretersLinesInItsOrder) {
  const DecodedKernel& kernel = Decoded("print");
  const uint64_t edges[] = {0,
                            1,
                            ~uint64_t{0},
                            0x80000000u,
                            0x7fffffffu,
                            uint64_t{1} << 63,
                            ~uint64_t{0} >> 1,
                            0x7ff8000000012345ull,
                            0x7ff0000000000001ull,
                            0xfff8000000000000ull,
                            0x7ff0000000000000ull,
                            0xfff0000000000000ull,
                            0x000fffffffffffffull,
                            0x3ff0000000000000ull,
                            0x000000007fc12345ull,
                            0x000000007f800001ull,
                            0x00000000ff800000ull,
                            0x0000000000800000ull,
                            0x400921fb54442d18ull,
                            0xc1e0000000000000ull};
  std::vector<uint64_t> values(64);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = i < std::size(edges) ? edges[i] : 0x9e3779b97f4a7c15ull * (i + 1);
  }
  const std::vector<uint32_t> blocks[3] = {{64, 1, 1}, {64, 1, 1}, {1, 64, 1}};
  std::string text[3];
  std::vector<int32_t> out[3];
  for (int run = 0; run < 3; ++run) {
    SetJitMode(run == 0 ? JitMode::kOff : JitMode::kAlways);
    Memory memory = WithVariables();
    out[run].assign(128, -7);
    const uint64_t dvalues = memory.Add(values), dout = memory.Add(out[run]);
    std::string detail;
    ASSERT_EQ(Print(kernel, blocks[run], Pack(dvalues, dout), memory, &text[run], &detail), 0) << detail;
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  // Each thread's lines, in order, by the index each line starts with.
  std::vector<std::string> by_thread[3];
  for (int run = 0; run < 3; ++run) {
    by_thread[run].assign(64, "");
    std::vector<std::string> lines = Lines(text[run]);
    ASSERT_EQ(lines.size(), 128u) << text[run];
    for (const std::string& line : lines) {
      const size_t thread = std::strtoul(line.c_str(), nullptr, 10);
      ASSERT_LT(thread, 64u) << "run " << run << ": " << line;
      by_thread[run][thread] += line;
    }
  }
  for (uint32_t i = 0; i < 64; ++i) {
    const uint32_t lo = static_cast<uint32_t>(values[i]);
    char expected[512];
    std::snprintf(
        expected, sizeof(expected), "%u a %d %i %u %x %X %o %lld %llu %llx %hd %hhu %c|%5d|%-5d|%05d|%+d|% d|%%\n", i,
        static_cast<int>(lo), static_cast<int>(lo), lo, lo, lo, lo, static_cast<long long>(values[i]),
        static_cast<unsigned long long>(values[i]), static_cast<unsigned long long>(values[i]), static_cast<short>(lo),
        static_cast<unsigned char>(lo), static_cast<int>('A' + lo % 26), static_cast<int>(lo), static_cast<int>(lo),
        static_cast<int>(lo), static_cast<int>(lo), static_cast<int>(lo));
    EXPECT_EQ(by_thread[0][i].substr(0, by_thread[0][i].find('\n') + 1), expected) << i;
    EXPECT_EQ(out[0][2 * i], static_cast<int32_t>(std::strlen(expected))) << i;
    for (int run = 1; run < 3; ++run) {
      EXPECT_EQ(by_thread[run][i], by_thread[0][i]) << "thread " << i << ", run " << run;
      EXPECT_EQ(out[run][2 * i], out[0][2 * i]) << "thread " << i << ", run " << run;
      EXPECT_EQ(out[run][2 * i + 1], out[0][2 * i + 1]) << "thread " << i << ", run " << run;
    }
  }
  // Compiled, thread after thread.
  std::string in_order;
  for (uint32_t i = 0; i < 64; ++i) in_order += by_thread[0][i];
  EXPECT_EQ(text[1], in_order);
  EXPECT_EQ(text[2], in_order);
}

// printf without arguments and of a literal string, two lines a thread: the same lines.
TEST_F(JitPrintf, LinesWithoutArguments) {
  const DecodedKernel& kernel = Decoded("hello");
  std::string text[2];
  for (int compiled = 0; compiled < 2; ++compiled) {
    SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
    Memory memory = WithVariables();
    std::string detail;
    ASSERT_EQ(Print(kernel, {40, 1, 1}, {}, memory, &text[compiled], &detail), 0) << detail;
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  std::string expected;
  for (int i = 0; i < 40; ++i) expected += "hello from a thread\nplain\n";
  EXPECT_EQ(text[1], expected);
  std::vector<std::string> lines[2] = {Lines(text[0]), Lines(text[1])};
  std::sort(lines[0].begin(), lines[0].end());
  std::sort(lines[1].begin(), lines[1].end());
  EXPECT_EQ(lines[0], lines[1]);
}

// A failed assert: CUDA_ERROR_ASSERT on both tiers, with the GPU's message for the first
// thread that fails (its block and thread), after what the threads before it printed.
// Interpreted, its warp's other lanes printed their line too (they ran with it); compiled,
// only the threads before it did.
TEST_F(JitPrintf, AFailedAssertEndsTheLaunchWithTheInterpretersMessage) {
  const DecodedKernel& kernel = Decoded("check");
  std::vector<uint64_t> values(48, 1);
  values[5] = 0;
  values[40] = 0;
  std::string text[2], detail[2];
  for (int compiled = 0; compiled < 2; ++compiled) {
    SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
    Memory memory = WithVariables();
    const uint64_t dvalues = memory.Add(values);
    EXPECT_EQ(Print(kernel, {48, 1, 1}, Pack(dvalues), memory, &text[compiled], &detail[compiled]), 710);
  }
  // Without a failing thread: no message.
  std::vector<uint64_t> ones(48, 1);
  for (int compiled = 0; compiled < 2; ++compiled) {
    SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
    Memory memory = WithVariables();
    const uint64_t dvalues = memory.Add(ones);
    std::string passed, none;
    EXPECT_EQ(Print(kernel, {48, 1, 1}, Pack(dvalues), memory, &passed, &none), 0) << none;
    EXPECT_EQ(Lines(passed).size(), 48u) << passed;
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  EXPECT_EQ(detail[0], "device assertion failed");
  EXPECT_EQ(detail[1], detail[0]);
  const std::vector<std::string> lines[2] = {Lines(text[0]), Lines(text[1])};
  ASSERT_FALSE(lines[0].empty());
  ASSERT_FALSE(lines[1].empty());
  EXPECT_NE(lines[0].back().find("block: [0,0,0], thread: [5,0,0] Assertion `values[threadIdx.x] != 0` failed."),
            std::string::npos)
      << text[0];
  EXPECT_EQ(lines[1].back(), lines[0].back());
  std::string before;
  for (int i = 0; i < 32; ++i) before += "before " + std::to_string(i) + "\n";
  EXPECT_EQ(text[0], before + lines[0].back());
  before.clear();
  for (int i = 0; i <= 5; ++i) before += "before " + std::to_string(i) + "\n";
  EXPECT_EQ(text[1], before + lines[1].back());
}

// cudaGraphSetConditional (SetConditionalStoresTheValueAtItsHandle.ptx): compiled, the
// interpreter's store of the value at the handle, of every value (0, 1, INT_MIN, INT_MAX,
// all ones) at an aligned and an unaligned slot; a handle past its buffer, or 0, fails the
// launch with the interpreter's text.
TEST(JitSetConditional, StoresAtTheHandleAsTheInterpreter) {
  auto module = PtxModule::Parse(KernelText("SetConditionalStoresTheValueAtItsHandle.ptx"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto decoded = (*module)->Decode("set_conditional", {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const DecodedKernel& kernel = **decoded;
  const uint32_t values[] = {0, 1, 0x80000000u, 0x7fffffffu, 0xffffffffu};
  int launches = 0;
  for (uint32_t value : values) {
    for (uint64_t at : {4u, 9u}) {
      std::vector<uint8_t> slots[2];
      for (int compiled = 0; compiled < 2; ++compiled) {
        SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
        slots[compiled].assign(16, 0xab);
        Memory memory;
        const uint64_t d = memory.Add(slots[compiled]);
        std::string detail;
        ASSERT_EQ(Launch(kernel, {1, 1, 1}, {40, 1, 1}, Pack(d + at, value), memory, nullptr, &detail), 0) << detail;
        launches += compiled;
      }
      uint32_t stored = 0;
      std::memcpy(&stored, &slots[0][at], 4);
      EXPECT_EQ(stored, value) << at;
      EXPECT_EQ(slots[1], slots[0]) << "value " << value << ", at " << at;
    }
  }
  for (uint64_t at : {13u, 16u, 0u}) {
    std::string detail[2];
    for (int compiled = 0; compiled < 2; ++compiled) {
      SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
      std::vector<uint8_t> slot(16, 0);
      Memory memory;
      const uint64_t d = memory.Add(slot);
      EXPECT_EQ(
          Launch(kernel, {1, 1, 1}, {40, 1, 1}, Pack(at == 0 ? 0 : d + at, 5u), memory, nullptr, &detail[compiled]),
          kIllegalAddress)
          << at;
      launches += compiled;
    }
    EXPECT_NE(detail[0].find("cudaGraphSetConditional of a handle"), std::string::npos) << detail[0];
    EXPECT_EQ(detail[1], detail[0]) << at;
  }
  SetJitMode(JitMode::kAuto);
  EXPECT_EQ(kernel.jit->jit_launches.load(), static_cast<uint64_t>(launches)) << kernel.jit->refused;
}

// Loops in vector code (JitVectorLoops.ptx): `loops` on blocks of 64 threads in x (vector
// code) and in y (scalar code), against the interpreter: outer trip counts that differ per
// lane, nested inner loops, a forward branch out of the loop, `ret` inside it, the last
// block partly past n; the same results bit for bit, and vector code counts the
// thread-instructions scalar code counts.
class JitVectorLoops : public KernelFileTest {
 public:
  JitVectorLoops() : KernelFileTest("JitVectorLoops.ptx") {}

  // `loops` over blocks shaped `block` on the inputs `in` with `limit`, in `mode`: its
  // CUresult, *out and *instructions.
  int32_t Loops(JitMode mode, std::vector<uint32_t> block, uint32_t limit, const std::vector<uint32_t>& in,
                std::vector<uint32_t>* out, uint64_t* instructions) {
    SetJitMode(mode);
    std::vector<uint32_t> input = in;
    out->assign(in.size(), 0xdeadbeef);
    Memory memory;
    const uint64_t din = memory.Add(input), dout = memory.Add(*out);
    const uint32_t per_block = block[0] * block[1];
    const uint32_t blocks = static_cast<uint32_t>((in.size() + per_block - 1) / per_block);
    *instructions = 0;
    return Launch(Kernel("loops"), {blocks, 1, 1}, block, Pack(din, dout, static_cast<uint32_t>(in.size()), limit),
                  memory, instructions);
  }
};

TEST_F(JitVectorLoops, DivergentNestedLoopsWithEarlyReturnsGiveTheInterpretersResults) {
  std::vector<uint32_t> in(300);
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<uint32_t>(k * 2654435761u >> 3);
  // Uniform trip counts too: every lane the same input.
  std::vector<uint32_t> uniform_in(64 * 3, 40);
  uint64_t launches = 0;
  for (std::vector<uint32_t>* inputs : {&in, &uniform_in}) {
    for (uint32_t limit : {0xffffffffu, 0x80000000u}) {
      std::vector<uint32_t> interpreted;
      uint64_t interpreted_count = 0;
      ASSERT_EQ(Loops(JitMode::kOff, {64, 1, 1}, limit, *inputs, &interpreted, &interpreted_count), 0);
      // By hand, for the rule.
      for (uint32_t i = 0; i < inputs->size(); ++i) {
        const uint32_t v = (*inputs)[i];
        uint32_t acc = v;
        bool done = false;
        for (uint32_t k = 0; k < v % 13 && !done; ++k) {
          for (uint32_t j = 0; j < (k + i) % 5; ++j) {
            acc = (acc * 1664525u + 1013904223u) ^ j;
            if (v % 7 == 3 && j + 1 == 3) {
              done = true;
              break;
            }
          }
          if (done) break;
          acc += acc >> 7;
          if (acc > limit) break;
        }
        ASSERT_EQ(interpreted[i], acc) << i;
      }
      uint64_t counts[2] = {};
      for (int scalar = 0; scalar < 2; ++scalar) {
        const std::vector<uint32_t> block = scalar ? std::vector<uint32_t>{1, 64, 1} : std::vector<uint32_t>{64, 1, 1};
        std::vector<uint32_t> compiled;
        ASSERT_EQ(Loops(JitMode::kAlways, block, limit, *inputs, &compiled, &counts[scalar]), 0);
        ++launches;
        EXPECT_EQ(compiled, interpreted) << "block " << block[0] << " x " << block[1] << ", limit " << limit;
      }
      // Each running lane counts each instruction it runs, as a thread of scalar code does.
      EXPECT_EQ(counts[0], counts[1]);
    }
  }
  const DecodedKernel& kernel = Kernel("loops");
  EXPECT_EQ(kernel.jit->jit_launches.load(), launches) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
}

// A loop of one block whose back edge is its only exit test (`spin`): each lane leaves
// after its own trip count (1 to 300), the others go round again; the interpreter's
// results in vector code.
TEST_F(JitVectorLoops, EachLaneLeavesALoopAfterItsOwnTrips) {
  const DecodedKernel& kernel = Kernel("spin");
  std::vector<uint32_t> in(128);
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<uint32_t>(1 + (k * 37) % 300);
  std::vector<uint32_t> out[2];
  for (int compiled = 0; compiled < 2; ++compiled) {
    SetJitMode(compiled ? JitMode::kAlways : JitMode::kOff);
    std::vector<uint32_t> input = in;
    out[compiled].assign(in.size(), 0);
    Memory memory;
    const uint64_t din = memory.Add(input), dout = memory.Add(out[compiled]);
    ASSERT_EQ(Launch(kernel, {2, 1, 1}, {64, 1, 1}, Pack(din, dout), memory), 0);
  }
  EXPECT_EQ(out[0], in);
  EXPECT_EQ(out[1], out[0]);
  EXPECT_EQ(kernel.jit->jit_launches.load(), 1u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
}

// Shared memory and barriers in vector code (JitVectorShared.ptx): each kernel on blocks of
// 256 threads in x (vector code) and in y (scalar code), against the interpreter.
class JitVectorShared : public KernelFileTest {
 public:
  JitVectorShared() : KernelFileTest("JitVectorShared.ptx") {}

  // `name` over 4 blocks shaped `block` (256 threads), in `mode`: its CUresult, *out and
  // *detail; `extra` packed after the in and out pointers.
  template <typename... Extra>
  int32_t Run(const std::string& name, JitMode mode, std::vector<uint32_t> block, std::vector<uint32_t>* out,
              std::string* detail, uint64_t* instructions, Extra... extra) {
    SetJitMode(mode);
    std::vector<uint32_t> in(4 * 256);
    for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<uint32_t>(k) * 2654435761u >> 9;
    out->assign(in.size(), 0xdeadbeef);
    Memory memory;
    const uint64_t din = memory.Add(in), dout = memory.Add(*out);
    *instructions = 0;
    return Launch(Kernel(name), {4, 1, 1}, block, Pack(din, dout, extra...), memory, instructions, detail);
  }
};

// An inclusive scan of each block by a loop around two barriers, a shared tile read at
// consecutive offsets (one vector access) and at offsets that some lanes skip (lane by
// lane): the interpreter's results and thread-instruction count, and the scan.
TEST_F(JitVectorShared, AScanInASharedTileGivesTheInterpretersResults) {
  std::vector<uint32_t> interpreted;
  std::string detail;
  uint64_t interpreted_count = 0;
  ASSERT_EQ(Run("shared_scan", JitMode::kOff, {256, 1, 1}, &interpreted, &detail, &interpreted_count, 0u, 0u), 0)
      << detail;
  for (uint32_t b = 0; b < 4; ++b) {
    uint32_t sum = 0;
    for (uint32_t t = 0; t < 256; ++t) {
      sum += static_cast<uint32_t>((b * 256 + t) * 2654435761u >> 9);
      ASSERT_EQ(interpreted[b * 256 + t], sum) << b << ", " << t;
    }
  }
  uint64_t counts[2] = {};
  for (int scalar = 0; scalar < 2; ++scalar) {
    const std::vector<uint32_t> block = scalar ? std::vector<uint32_t>{1, 256, 1} : std::vector<uint32_t>{256, 1, 1};
    std::vector<uint32_t> compiled;
    ASSERT_EQ(Run("shared_scan", JitMode::kAlways, block, &compiled, &detail, &counts[scalar], 0u, 0u), 0) << detail;
    EXPECT_EQ(compiled, interpreted) << "block " << block[0] << " x " << block[1];
  }
  EXPECT_EQ(counts[0], counts[1]);
  const DecodedKernel& kernel = Kernel("shared_scan");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
}

// A shared load past the tile by one thread of the grid (77, and 506: lanes 5 and 2 of
// their rows, in blocks 0 and 1) fails the launch on both tiers with the same detail: the
// stray thread's own.
TEST_F(JitVectorShared, AStraySharedLoadFailsTheLaunchAsOnTheInterpreter) {
  const DecodedKernel& kernel = Kernel("shared_scan");
  uint64_t launches = 0;
  for (uint32_t victim : {77u, 506u}) {
    for (uint32_t stray : {300u, 0x10000000u}) {
      std::string detail[2];
      std::vector<uint32_t> out;
      uint64_t count = 0;
      ASSERT_EQ(Run("shared_scan", JitMode::kOff, {256, 1, 1}, &out, &detail[0], &count, stray, victim),
                kIllegalAddress);
      for (std::vector<uint32_t> block : {std::vector<uint32_t>{256, 1, 1}, std::vector<uint32_t>{1, 256, 1}}) {
        ASSERT_EQ(Run("shared_scan", JitMode::kAlways, block, &out, &detail[1], &count, stray, victim),
                  kIllegalAddress);
        ++launches;
        EXPECT_EQ(detail[1], detail[0]) << "victim " << victim << ", stray " << stray << ", block " << block[0];
      }
      EXPECT_NE(detail[0].find("load of 4 bytes"), std::string::npos) << detail[0];
    }
  }
  EXPECT_EQ(kernel.jit->jit_launches.load(), launches) << kernel.jit->refused;
}

// Lanes of one row split over two barriers (4 of each 16 threads branch past the first):
// each thread waits at the barrier it reaches, as on the interpreter; scalar code's
// thread-instruction count.
TEST_F(JitVectorShared, LanesSplitOverTwoBarriersGiveTheInterpretersResults) {
  std::vector<uint32_t> interpreted;
  std::string detail;
  uint64_t interpreted_count = 0;
  ASSERT_EQ(Run("two_barriers", JitMode::kOff, {256, 1, 1}, &interpreted, &detail, &interpreted_count), 0) << detail;
  for (uint32_t i = 0; i < 4 * 256; ++i) {
    const uint32_t t = i % 256, b = i / 256;
    auto in = [](uint32_t k) { return static_cast<uint32_t>(k * 2654435761u >> 9); };
    const uint32_t read = t % 16 < 4 ? in(i) : in(b * 256 + (t + 1) % 256) * 7;
    ASSERT_EQ(interpreted[i], read + in(i)*7) << i;
  }
  uint64_t counts[2] = {};
  for (int scalar = 0; scalar < 2; ++scalar) {
    const std::vector<uint32_t> block = scalar ? std::vector<uint32_t>{1, 256, 1} : std::vector<uint32_t>{256, 1, 1};
    std::vector<uint32_t> compiled;
    ASSERT_EQ(Run("two_barriers", JitMode::kAlways, block, &compiled, &detail, &counts[scalar]), 0) << detail;
    EXPECT_EQ(compiled, interpreted) << "block " << block[0] << " x " << block[1];
  }
  EXPECT_EQ(counts[0], counts[1]);
  const DecodedKernel& kernel = Kernel("two_barriers");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
}

// Every lane of a row loading one shared word and one global word (row_broadcast: one load
// for the row in vector code): the interpreter's results on one block of 256 threads in
// vector and in scalar code; a whole row's load past the tile or past the input fails the
// launch with the interpreter's detail.
TEST_F(JitVectorShared, ARowLoadingOneAddressGivesTheInterpretersResultsAndFaults) {
  const DecodedKernel& kernel = Kernel("row_broadcast");
  std::vector<uint32_t> in(256);
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<uint32_t>(k) * 2654435761u >> 9;
  auto run = [&](int tier, uint32_t shared_shift, uint32_t global_shift, std::vector<uint32_t>* out,
                 std::string* detail) {
    SetJitMode(tier > 0 ? JitMode::kAlways : JitMode::kOff);
    const std::vector<uint32_t> block = tier == 2 ? std::vector<uint32_t>{1, 256, 1} : std::vector<uint32_t>{256, 1, 1};
    std::vector<uint32_t> input = in;
    out->assign(in.size(), 0xdeadbeef);
    Memory memory;
    const uint64_t din = memory.Add(input), dout = memory.Add(*out);
    return Launch(kernel, {1, 1, 1}, block, Pack(din, dout, shared_shift, global_shift), memory, nullptr, detail);
  };
  std::vector<uint32_t> out[3];
  std::string detail[3];
  for (int tier = 0; tier < 3; ++tier) ASSERT_EQ(run(tier, 4, 8, &out[tier], &detail[tier]), 0) << detail[tier];
  for (uint32_t t = 0; t < 256; ++t) ASSERT_EQ(out[0][t], in[(t & ~7u) + 1] + in[(t & ~7u) + 2]) << t;
  EXPECT_EQ(out[1], out[0]);
  EXPECT_EQ(out[2], out[0]);
  for (auto [shared_shift, global_shift] : {std::pair{1024u, 0u}, std::pair{0u, 0x10000000u}}) {
    for (int tier = 0; tier < 3; ++tier) {
      ASSERT_EQ(run(tier, shared_shift, global_shift, &out[tier], &detail[tier]), kIllegalAddress) << tier;
    }
    EXPECT_NE(detail[0].find("load of 4 bytes"), std::string::npos) << detail[0];
    EXPECT_NE(detail[0].find("(block 0, warp 0)"), std::string::npos) << detail[0];
    EXPECT_EQ(detail[1], detail[0]);
    EXPECT_EQ(detail[2], detail[0]);
  }
  EXPECT_EQ(kernel.jit->jit_launches.load(), 6u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
}

// Cache hints and ordered loads and stores (JitOrderedLoads.ptx): the interpreter's
// results in vector code (blocks of 64 x 1 threads) and in scalar code (1 x 64).
class JitOrderedLoads : public KernelFileTest {
 public:
  JitOrderedLoads() : KernelFileTest("JitOrderedLoads.ptx") {}

  // `name` on one block of 64 threads shaped `block` (or the interpreter's, tier 0; vector
  // code 1; scalar code 2) over `in`, `out_words` words of output: its CUresult and *out.
  template <typename... Extra>
  int32_t Run(const std::string& name, int tier, const std::vector<uint32_t>& in, size_t out_words,
              std::vector<uint32_t>* out, Extra... extra) {
    SetJitMode(tier > 0 ? JitMode::kAlways : JitMode::kOff);
    const std::vector<uint32_t> block = tier == 2 ? std::vector<uint32_t>{1, 64, 1} : std::vector<uint32_t>{64, 1, 1};
    std::vector<uint32_t> input = in;
    out->assign(out_words, 0xdeadbeef);
    Memory memory;
    const uint64_t din = memory.Add(input), dout = memory.Add(*out);
    return Launch(Kernel(name), {1, 1, 1}, block, Pack(din, dout, extra...), memory);
  }
};

// .cg, .cs, .lu, .cv, .volatile, .relaxed and .acquire loads (a .v2 too), a volatile
// shared store and load across a barrier, and a .release store: what plain accesses
// give, on every tier.
TEST_F(JitOrderedLoads, HintsAndOrderedAccessesGiveTheInterpretersResults) {
  std::vector<uint32_t> in(576);
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<uint32_t>(k) * 2654435761u >> 7;
  std::vector<uint32_t> out[3];
  for (int tier = 0; tier < 3; ++tier) ASSERT_EQ(Run("ordered", tier, in, 704, &out[tier]), 0) << tier;
  for (uint32_t t = 0; t < 64; ++t) {
    for (uint32_t k = 0; k < 7; ++k) ASSERT_EQ(out[0][k * 64 + t], in[t + 64 * k]) << k << ", " << t;
    ASSERT_EQ(out[0][7 * 64 + t], in[448 + 2 * t]) << t;
    ASSERT_EQ(out[0][8 * 64 + t], in[449 + 2 * t]) << t;
    ASSERT_EQ(out[0][9 * 64 + t], 3 * ((t + 1) % 64)) << t;
    ASSERT_EQ(out[0][640 + t], t) << t;
  }
  EXPECT_EQ(out[1], out[0]);
  EXPECT_EQ(out[2], out[0]);
  const DecodedKernel& kernel = Kernel("ordered");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
}

// A load a thread may spin on (.volatile, .relaxed, .acquire, .cv, and .cg, the polling
// load of CUB's look-back) runs in vector code where no branch can run it again (after a
// loop: `poll`); inside a loop (`spin`) it runs in scalar code only, each thread stopping
// before it so that the CTA can yield its worker (run.cc), with the interpreter's results.
TEST_F(JitOrderedLoads, ALoadAThreadMaySpinOnYieldsInsideALoop) {
  for (const std::string qualifier :
       {"volatile.global", "relaxed.gpu.global", "acquire.gpu.global", "global.cv", "global.cg"}) {
    std::string text = KernelText("JitOrderedLoads.ptx");
    const std::string load = "ld.volatile.global.u32 %r7,", replaced = "ld." + qualifier + ".u32 %r7,";
    for (size_t at = text.find(load); at != std::string::npos; at = text.find(load, at + replaced.size())) {
      text.replace(at, load.size(), replaced);
    }
    Parse(text);
    std::vector<uint32_t> out[3];
    for (int tier = 0; tier < 3; ++tier) ASSERT_EQ(Run("poll", tier, {5}, 64, &out[tier], 10u), 0) << tier;
    EXPECT_EQ(out[0], std::vector<uint32_t>(64, 45 + 5)) << qualifier;
    EXPECT_EQ(out[1], out[0]) << qualifier;
    EXPECT_EQ(out[2], out[0]) << qualifier;
    const DecodedKernel& poll = Kernel("poll");
    EXPECT_EQ(poll.jit->jit_launches.load(), 2u) << qualifier << ": " << poll.jit->refused;
    ASSERT_NE(poll.jit->compiled, nullptr) << poll.jit->refused;
    EXPECT_TRUE(HasVectorCode(*poll.jit->compiled)) << qualifier;
    std::vector<uint32_t> spun;
    ASSERT_EQ(Run("spin", 1, {7}, 64, &spun), 0);
    EXPECT_EQ(spun, std::vector<uint32_t>(64, 7)) << qualifier;
    const DecodedKernel& spin = Kernel("spin");
    EXPECT_EQ(spin.jit->jit_launches.load(), 1u) << qualifier << ": " << spin.jit->refused;
    ASSERT_NE(spin.jit->compiled, nullptr) << spin.jit->refused;
    EXPECT_TRUE(Yields(*spin.jit->compiled)) << qualifier;
    EXPECT_FALSE(HasVectorCode(*spin.jit->compiled)) << qualifier;
  }
}

// CTAs that wait for later CTAs (`await`: CTA c's thread 0 spins until CTA c + 1 set its
// flag, its other threads wait at a barrier) complete compiled as on the interpreter: a
// worker whose CTA yields takes on the next of its CTAs and runs them in turns, across
// two workers (8 CTAs) and on one (3), in vector-shaped and scalar-shaped blocks.
TEST_F(JitOrderedLoads, CtasWaitingForLaterCtasCompleteCompiled) {
  for (uint32_t ctas : {8u, 3u}) {
    for (int tier = 0; tier < 3; ++tier) {
      SetJitMode(tier > 0 ? JitMode::kAlways : JitMode::kOff);
      const std::vector<uint32_t> block = tier == 2 ? std::vector<uint32_t>{1, 64, 1} : std::vector<uint32_t>{64, 1, 1};
      std::vector<uint32_t> flags(ctas, 0), out(ctas * 64, 0xdeadbeef);
      Memory memory;
      const uint64_t dflags = memory.Add(flags), dout = memory.Add(out);
      ASSERT_EQ(Launch(Kernel("await"), {ctas, 1, 1}, block, Pack(dflags, dout), memory), 0) << tier;
      for (uint32_t c = 0; c < ctas; ++c) {
        EXPECT_EQ(flags[c], ctas - c) << "tier " << tier << ", CTA " << c;
        for (uint32_t t = 0; t < 64; ++t) ASSERT_EQ(out[c * 64 + t], ctas - c) << tier << ", " << c << ", " << t;
      }
    }
  }
  const DecodedKernel& await = Kernel("await");
  EXPECT_EQ(await.jit->jit_launches.load(), 4u) << await.jit->refused;
  ASSERT_NE(await.jit->compiled, nullptr) << await.jit->refused;
  EXPECT_TRUE(Yields(*await.jit->compiled));
}

// A cooperative launch runs compiled, every CTA held at once across the workers: a
// barrier of the whole grid by hand (`grid_barrier`: atom.release, then an ld.acquire spin
// until all 48 CTAs added theirs) completes with the interpreter's results, and the
// kernel reads the launch's grid workspace through %envreg1 and %envreg2 as there. One too
// large to hold at once is refused on both tiers alike.
TEST_F(JitOrderedLoads, ACooperativeLaunchRunsCompiledWithItsCtasResidentTogether) {
  constexpr uint32_t kCtas = 48;
  constexpr uint64_t kWorkspace = 0x1234567800abcdefull;
  auto run = [&](int tier, std::vector<uint32_t> grid, std::vector<uint32_t>* out, std::string* detail) {
    SetJitMode(tier > 0 ? JitMode::kAlways : JitMode::kOff);
    const std::vector<uint32_t> block = tier == 2 ? std::vector<uint32_t>{1, 64, 1} : std::vector<uint32_t>{64, 1, 1};
    std::vector<uint32_t> counter(1, 0);
    out->assign(uint64_t{grid[0]} * 64 * 2, 0xdeadbeef);
    Memory memory;
    const uint64_t dcounter = memory.Add(counter), dout = memory.Add(*out);
    return Launch(Kernel("grid_barrier"), grid, block, Pack(dcounter, dout), memory, nullptr, detail, 0, kWorkspace);
  };
  std::vector<uint32_t> out[3];
  std::string detail;
  for (int tier = 0; tier < 3; ++tier) ASSERT_EQ(run(tier, {kCtas, 1, 1}, &out[tier], &detail), 0) << detail;
  for (uint64_t t = 0; t < kCtas * 64; ++t) {
    ASSERT_EQ(out[0][2 * t], kCtas) << t;
    ASSERT_EQ(out[0][2 * t + 1], 0x12345678u ^ 0x00abcdefu) << t;
  }
  EXPECT_EQ(out[1], out[0]);
  EXPECT_EQ(out[2], out[0]);
  const DecodedKernel& kernel = Kernel("grid_barrier");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_TRUE(Yields(*kernel.jit->compiled));
  for (int tier = 0; tier < 2; ++tier) {
    std::vector<uint32_t> unused;
    detail.clear();
    EXPECT_EQ(run(tier, {70000, 1, 1}, &unused, &detail), dataplane::kCuCooperativeLaunchTooLarge) << tier;
    EXPECT_NE(detail.find("does not fit the sim GPU at once"), std::string::npos) << detail;
  }
}

// Under GPUPOOL_PTX_JIT=auto, once a kernel that yields is compiled and past the threads
// auto waits for: a cooperative launch of it runs compiled, a plain one stays on the
// interpreter (CTAs waiting on each other through memory: CUB's look-back ran slower
// compiled), with the same results.
TEST_F(JitOrderedLoads, AutoRunsCooperativeLaunchesOfAYieldingKernelCompiledAndPlainOnesInterpreted) {
  const DecodedKernel& barrier = Kernel("grid_barrier");
  const DecodedKernel& await = Kernel("await");
  auto cooperative = [&] {
    std::vector<uint32_t> counter(1, 0), out(8 * 64 * 2, 0);
    Memory memory;
    const uint64_t dcounter = memory.Add(counter), dout = memory.Add(out);
    EXPECT_EQ(Launch(barrier, {8, 1, 1}, {64, 1, 1}, Pack(dcounter, dout), memory, nullptr, nullptr, 0, 4096), 0);
    return out[0];
  };
  auto plain = [&] {
    std::vector<uint32_t> flags(4, 0), out(4 * 64, 0);
    Memory memory;
    const uint64_t dflags = memory.Add(flags), dout = memory.Add(out);
    EXPECT_EQ(Launch(await, {4, 1, 1}, {64, 1, 1}, Pack(dflags, dout), memory), 0);
    return out[0];
  };
  SetJitMode(JitMode::kAlways);  // compiles both
  EXPECT_EQ(cooperative(), 8u);
  EXPECT_EQ(plain(), 4u);
  ASSERT_EQ(barrier.jit->jit_launches.load(), 1u) << barrier.jit->refused;
  ASSERT_EQ(await.jit->jit_launches.load(), 1u) << await.jit->refused;
  SetJitMode(JitMode::kAuto);
  barrier.jit->threads_run = kJitAfterThreads;
  await.jit->threads_run = kJitAfterThreads;
  EXPECT_EQ(cooperative(), 8u);
  EXPECT_EQ(plain(), 4u);
  EXPECT_EQ(barrier.jit->jit_launches.load(), 2u);
  EXPECT_EQ(await.jit->jit_launches.load(), 1u);
}

// Atomics in vector code (JitVectorAtomics.ptx): `bins` over 9 blocks of 64 threads in x
// (vector code) and in y (scalar code), against the interpreter.
class JitVectorAtomics : public KernelFileTest {
 public:
  JitVectorAtomics() : KernelFileTest("JitVectorAtomics.ptx") {}

  // `bins` of the n = 550 inputs on tier 0 (the interpreter), 1 (vector code) or 2 (scalar
  // code), the thread `victim`'s shared address `shift` bytes on: its CUresult, *out and
  // *detail.
  int32_t Bins(int tier, uint32_t victim, uint32_t shift, std::vector<uint32_t>* out, std::string* detail) {
    SetJitMode(tier > 0 ? JitMode::kAlways : JitMode::kOff);
    const std::vector<uint32_t> block = tier == 2 ? std::vector<uint32_t>{1, 64, 1} : std::vector<uint32_t>{64, 1, 1};
    std::vector<uint32_t> in(kN);
    for (uint32_t k = 0; k < kN; ++k) in[k] = k * 2654435761u >> 8;
    out->assign(66 + 4 * kBlocks, 0);
    Memory memory;
    const uint64_t din = memory.Add(in), dout = memory.Add(*out);
    return Launch(Kernel("bins"), {kBlocks, 1, 1}, block, Pack(din, dout, kN, victim, shift), memory, nullptr, detail);
  }

  static constexpr uint32_t kN = 550, kBlocks = 9;
};

// Shared and global atomics whose results no instruction reads (add, max, or; an f32 add
// rounded in thread order), lanes past n masked off: the interpreter's memory bit for bit.
TEST_F(JitVectorAtomics, AtomicsGiveTheInterpretersResults) {
  std::vector<uint32_t> out[3];
  std::string detail;
  for (int tier = 0; tier < 3; ++tier) ASSERT_EQ(Bins(tier, ~0u, 0, &out[tier], &detail), 0) << detail;
  std::vector<uint32_t> counts(64, 0);
  uint32_t max = 0, any = 0;
  for (uint32_t k = 0; k < kN; ++k) {
    const uint32_t v = k * 2654435761u >> 8;
    ++counts[v & 63];
    max = std::max(max, v);
    any |= v;
  }
  EXPECT_EQ(std::vector<uint32_t>(out[0].begin(), out[0].begin() + 64), counts);
  EXPECT_EQ(out[0][64], max);
  EXPECT_EQ(out[0][65], any);
  EXPECT_EQ(out[1], out[0]);
  EXPECT_EQ(out[2], out[0]);
  const DecodedKernel& kernel = Kernel("bins");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
  EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
}

// A lane's atomic past the CTA's shared bytes, or misaligned, fails the launch as on the
// interpreter, with the same detail (threads 77 and 134: lanes 5 and 6 of their rows).
TEST_F(JitVectorAtomics, AStrayOrMisalignedLaneFailsTheLaunchAsOnTheInterpreter) {
  for (uint32_t victim : {77u, 134u}) {
    for (uint32_t shift : {1024u, 2u}) {
      std::vector<uint32_t> out;
      std::string detail[3];
      for (int tier = 0; tier < 3; ++tier) {
        ASSERT_EQ(Bins(tier, victim, shift, &out, &detail[tier]), kIllegalAddress) << tier;
      }
      EXPECT_NE(detail[0].find(shift == 2 ? "misaligned atomic of 4 bytes" : "atomic of 4 bytes"), std::string::npos)
          << detail[0];
      EXPECT_EQ(detail[1], detail[0]) << victim << ", " << shift;
      EXPECT_EQ(detail[2], detail[0]) << victim << ", " << shift;
    }
  }
}

// cp.async in vector code (JitVectorCpAsync.ptx): nvcc's tiled matrix multiplies by the
// thread's linear index in its block, on blocks of 256 x 1 and 16 x 16 threads (vector
// code) and 1 x 256 (scalar code), against the interpreter.
class JitVectorAsyncCopy : public KernelFileTest {
 public:
  JitVectorAsyncCopy() : KernelFileTest("JitVectorCpAsync.ptx") {}

  // C = A * B (n x n) by `name` on blocks of 256 threads, interpreted and compiled in each
  // shape: the product (small integers and fractions of a power of two, exact in any
  // order), the compiled results bit for bit the interpreter's, and the vector code's
  // thread-instruction count the scalar code's.
  void MultiplyInEveryShape(const std::string& name, int n) {
    const DecodedKernel& kernel = Kernel(name);
    const uint32_t tiles = static_cast<uint32_t>((n + 15) / 16);
    std::vector<float> a(n * n), b(n * n);
    for (int k = 0; k < n * n; ++k) {
      a[k] = static_cast<float>(k % 7) - 3;
      b[k] = static_cast<float>(k % 5) * 0.5f;
    }
    const std::vector<uint32_t> blocks[4] = {{256, 1, 1}, {256, 1, 1}, {16, 16, 1}, {1, 256, 1}};
    std::vector<float> c[4];
    uint64_t counts[4] = {};
    for (int run = 0; run < 4; ++run) {
      SetJitMode(run > 0 ? JitMode::kAlways : JitMode::kOff);
      c[run].assign(n * n, -1.0f);
      Memory memory;
      const uint64_t da = memory.Add(a), db = memory.Add(b), dc = memory.Add(c[run]);
      std::string detail;
      ASSERT_EQ(Launch(kernel, {tiles, tiles, 1}, blocks[run], Pack(da, db, dc, n), memory, &counts[run], &detail), 0)
          << detail;
    }
    EXPECT_EQ(kernel.jit->jit_launches.load(), 3u) << kernel.jit->refused;
    ASSERT_NE(kernel.jit->compiled, nullptr) << kernel.jit->refused;
    EXPECT_TRUE(HasVectorCode(*kernel.jit->compiled));
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        float sum = 0;
        for (int k = 0; k < n; ++k) sum += a[i * n + k] * b[k * n + j];
        ASSERT_EQ(c[0][i * n + j], sum) << i << ", " << j;
        for (int run = 1; run < 4; ++run) {
          ASSERT_EQ(std::bit_cast<uint32_t>(c[run][i * n + j]), std::bit_cast<uint32_t>(c[0][i * n + j]))
              << "block " << blocks[run][0] << " x " << blocks[run][1] << ": " << i << ", " << j;
        }
      }
    }
    EXPECT_EQ(counts[1], counts[3]);
    EXPECT_EQ(counts[2], counts[3]);
  }
};

// 4-byte copies of consecutive words (a row's 8 lanes one copy), src-size and ignore-src
// zero-filling the tiles past the matrix's edge (n = 37: the last tiles partly zeros,
// lanes copying different sizes), and a multiple of the tile.
TEST_F(JitVectorAsyncCopy, ATiledMatrixMultiplyGivesTheInterpretersResults) {
  MultiplyInEveryShape("matmul_rows", 37);
  SetUp();
  MultiplyInEveryShape("matmul_rows", 64);
}

// Double buffering (CUDA's pipeline primitives): the next tiles' copies issued into the
// other buffer before the current one is read, cp.async.wait_group 1 then the barrier;
// each thread reads what the group it waited for copied, as on the interpreter.
TEST_F(JitVectorAsyncCopy, ADoubleBufferedPipelineWaitsForItsGroup) { MultiplyInEveryShape("pipe_rows", 64); }

// A run of a row's lanes that copy 16 bytes each (lanes 0-3, 4-7 or 2-5 of each row of 8,
// as where a quarter of a block's threads copy float4s): one copy of the run's bytes; a row
// whose running lanes have a hole (0, 1, 3) copies lane by lane; a whole row, one copy.
// The bytes, and the interpreter's bit for bit. A run whose last lane reads past its
// source's allocation fails the launch as on the interpreter, naming that lane's thread.
TEST_F(JitVectorAsyncCopy, ARunOfARowsLanesCopiesItsBytesAsTheInterpreter) {
  std::vector<uint8_t> in(1024);
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<uint8_t>(k * 7 + 1);
  for (uint32_t pattern : {0x0fu, 0xf0u, 0x3cu, 0x0bu, 0xffu}) {
    jit_test::Outcome out = Both("quarter_stage", 1, {64}, {in, std::vector<uint8_t>(1024, 0xee)}, {0, pattern});
    ASSERT_EQ(out.error, 0) << out.detail;
    for (uint32_t t = 0; t < 64; ++t) {
      for (uint32_t k = 0; k < 16; ++k) {
        const uint8_t expected = (pattern >> (t % 8)) & 1 ? in[16 * t + k] : 0;
        ASSERT_EQ(out.buffers[1][16 * t + k], expected) << "pattern " << pattern << ", thread " << t << ", byte " << k;
      }
    }
  }
  EXPECT_TRUE(Vector("quarter_stage"));
  struct Stray {
    uint32_t pattern, shift, thread;
  };
  for (const Stray& stray : {Stray{0xf0, 16, 63}, Stray{0x0f, 80, 59}}) {
    jit_test::Outcome out =
        Both("quarter_stage", 1, {64}, {in, std::vector<uint8_t>(1024, 0xee)}, {stray.shift, stray.pattern});
    EXPECT_EQ(out.error, kIllegalAddress);
    char expected[96];
    // The first buffer's address (jit_fixture.h's Run): 2^44.
    std::snprintf(expected, sizeof(expected), "cp.async load of 16 bytes at 0x%llx (block 0, warp 1)",
                  static_cast<unsigned long long>((uint64_t{1} << 44) + stray.shift + 16 * stray.thread));
    EXPECT_EQ(out.detail, expected) << "pattern " << stray.pattern;
  }
}

// A four-stage pipeline whose copies a quarter of each row of a 16 x 16 block makes, 16
// bytes each: the product (exact), the interpreter's bit for bit.
TEST_F(JitVectorAsyncCopy, AFourStagePipelineOfQuarterRowCopiesMultiplies) {
  const int n = 64;
  std::vector<float> a(n * n), b(n * n);
  for (int k = 0; k < n * n; ++k) {
    a[k] = static_cast<float>(k % 7) - 3;
    b[k] = static_cast<float>(k % 5) * 0.5f;
  }
  // One row of blocks (blockIdx.y 0): the first 16 rows of C.
  jit_test::Outcome out =
      Both("quarter_rows", n / 16, {16, 16},
           {jit_test::Bytes(a), jit_test::Bytes(b), jit_test::Bytes(std::vector<float>(n * n, -1.0f))},
           {static_cast<uint32_t>(n)});
  ASSERT_EQ(out.error, 0) << out.detail;
  const std::vector<float> c = jit_test::Values<float>(out.buffers[2]);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < n; ++j) {
      float sum = 0;
      for (int k = 0; k < n; ++k) sum += a[i * n + k] * b[k * n + j];
      ASSERT_EQ(c[i * n + j], sum) << i << ", " << j;
    }
  }
  EXPECT_TRUE(Vector("quarter_rows"));
}

// Small kernels written for the tests below (one module).
class JitSmallKernels : public jit_test::JitModuleTest {
 protected:
  std::string Text() override {
    return R"(.version 7.0
.target sm_70
.address_size 64
.visible .entry setp_ops(.param .u64 in_param, .param .u64 out_param)
{
  .reg .pred %p<8>;
  .reg .b32 %r<20>;
  .reg .b64 %rd<8>;
  .reg .f32 %f<2>;
  ld.param.u64 %rd1, [in_param];
  ld.param.u64 %rd2, [out_param];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.u32 %r2, [%rd4];
  and.b32 %r3, %r1, 1;
  setp.ne.u32 %p1, %r3, 0;
  setp.lt.and.u32 %p2|%p3, %r2, 100, %p1;
  setp.ge.or.s32 %p4|%p5, %r2, 50, !%p1;
  cvt.rn.f32.u32 %f1, %r2;
  setp.gt.xor.f32 %p6|%p7, %f1, 0f42C80000, %p1;
  selp.u32 %r4, 1, 0, %p2;
  selp.u32 %r5, 2, 0, %p3;
  or.b32 %r4, %r4, %r5;
  selp.u32 %r5, 4, 0, %p4;
  or.b32 %r4, %r4, %r5;
  selp.u32 %r5, 8, 0, %p5;
  or.b32 %r4, %r4, %r5;
  selp.u32 %r5, 16, 0, %p6;
  or.b32 %r4, %r4, %r5;
  selp.u32 %r5, 32, 0, %p7;
  or.b32 %r4, %r4, %r5;
  add.s64 %rd5, %rd2, %rd3;
  st.global.u32 [%rd5], %r4;
  ret;
}
.visible .entry tile_rows(.param .u64 in_param, .param .u64 out_param)
{
  .reg .pred %p<2>;
  .reg .b32 %r<12>;
  .reg .f32 %f<12>;
  .reg .b64 %rd<8>;
  .shared .align 16 .b8 tile[1024];
  ld.param.u64 %rd1, [in_param];
  ld.param.u64 %rd2, [out_param];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %tid.y;
  mad.lo.u32 %r3, %r2, 16, %r1;
  mul.wide.u32 %rd3, %r3, 4;
  mov.f32 %f1, 0f00000000;
  mov.u32 %r4, 0;
  mov.u32 %r10, tile;
  shl.b32 %r5, %r3, 2;
  add.u32 %r6, %r10, %r5;
  shl.b32 %r7, %r2, 6;
  add.u32 %r8, %r10, %r7;
  cvt.rn.f32.u32 %f11, %r1;
ROUND:
  mad.lo.u32 %r9, %r4, 256, %r3;
  mul.wide.u32 %rd4, %r9, 4;
  add.s64 %rd5, %rd1, %rd4;
  ld.global.f32 %f2, [%rd5];
  st.shared.f32 [%r6], %f2;
  bar.sync 0;
  ld.shared.v4.f32 {%f3, %f4, %f5, %f6}, [%r8];
  ld.shared.v4.f32 {%f7, %f8, %f9, %f10}, [%r8+16];
  fma.rn.f32 %f1, %f3, %f11, %f1;
  add.f32 %f1, %f1, %f4;
  fma.rn.f32 %f1, %f5, %f11, %f1;
  add.f32 %f1, %f1, %f6;
  fma.rn.f32 %f1, %f7, %f11, %f1;
  add.f32 %f1, %f1, %f8;
  fma.rn.f32 %f1, %f9, %f11, %f1;
  add.f32 %f1, %f1, %f10;
  bar.sync 0;
  add.u32 %r4, %r4, 1;
  setp.lt.u32 %p1, %r4, 4;
  @%p1 bra ROUND;
  add.s64 %rd6, %rd2, %rd3;
  st.global.f32 [%rd6], %f1;
  ret;
}
.visible .entry divergent_barriers(.param .u64 out_param)
{
  .reg .pred %p<2>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<4>;
  .shared .align 4 .b8 slots[64];
  ld.param.u64 %rd1, [out_param];
  mov.u32 %r1, %tid.x;
  shl.b32 %r2, %r1, 2;
  mov.u32 %r3, slots;
  add.u32 %r4, %r3, %r2;
  xor.b32 %r5, %r1, 1;
  shl.b32 %r6, %r5, 2;
  add.u32 %r7, %r3, %r6;
  and.b32 %r8, %r1, 1;
  setp.ne.u32 %p1, %r8, 0;
  @%p1 bra ODD;
  add.u32 %r9, %r1, 100;
  st.shared.u32 [%r4], %r9;
  bar.sync 0;
  ld.shared.u32 %r10, [%r7];
  bra DONE;
ODD:
  add.u32 %r9, %r1, 200;
  st.shared.u32 [%r4], %r9;
  bar.sync 0;
  ld.shared.u32 %r10, [%r7];
  add.u32 %r10, %r10, 1000;
DONE:
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r10;
  ret;
}
.visible .entry waiting_lanes(.param .u64 out_param)
{
  .reg .pred %p<4>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out_param];
  mov.u32 %r1, %tid.x;
  and.b32 %r4, %r1, 3;
  mov.u32 %r5, 0;
LOOP:
  add.u32 %r6, %r5, 100;
  add.u32 %r5, %r5, 1;
  setp.le.u32 %p2, %r5, %r4;
  @%p2 bra LOOP;
  mul.lo.u32 %r8, %r6, 10;
  mul.lo.u32 %r2, %r1, 10;
  and.b32 %r3, %r1, 1;
  setp.ne.u32 %p1, %r3, 0;
  @%p1 bra SKIP;
  mov.u32 %r2, 7;
SKIP:
  mov.u32 %r7, 5;
  setp.lt.u32 %p3, %r1, 4;
  @%p3 add.u32 %r7, %r7, 1;
  mad.lo.u32 %r9, %r2, 1000, %r7;
  add.u32 %r9, %r9, %r8;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r9;
  ret;
}
)";
  }
};

// Threads of one row of vector code waiting at two barriers of one ID (the even ones at
// the first, the odd ones at the second, as Volta's independent scheduling allows): a row
// whose lanes all branched away skips the code up to the next label (SkipIfNoLane), but
// never past a barrier, where lanes of the row wait to be restored: without that bound
// the odd lanes' results were never written. Rows of 16 (whole) and 12 threads (a row
// with lanes past the block's edge).
TEST_F(JitSmallKernels, RowsWithNoRunningLaneSkipToTheNextLabelButNotPastABarrier) {
  for (uint32_t threads : {16u, 12u}) {
    jit_test::Outcome out =
        Both("divergent_barriers", 1, {threads}, {jit_test::Bytes(std::vector<uint32_t>(threads, 0xdeadbeef))});
    ASSERT_EQ(out.error, 0) << out.detail;
    const std::vector<uint32_t> got = jit_test::Values<uint32_t>(out.buffers[0]);
    for (uint32_t t = 0; t < threads; ++t) {
      EXPECT_EQ(got[t], t & 1 ? t - 1 + 100 + 1000 : t + 1 + 200) << "thread " << t << " of " << threads;
    }
  }
  EXPECT_TRUE(Vector("divergent_barriers"));
}

// In vector code a register no waiting lane needs is written for every lane (no select of
// the running ones: Dest, free_writes_); one that a lane waiting at a label reads after it,
// or one that a lane that left a loop reads after the loop, keeps the waiting lanes'
// values; a guarded write keeps the values of the lanes its guard leaves out.
TEST_F(JitSmallKernels, WritesForEveryLaneKeepWhatWaitingLanesAndGuardsNeed) {
  for (const std::vector<uint32_t>& block : {std::vector<uint32_t>{16}, {12}}) {
    jit_test::Outcome out =
        Both("waiting_lanes", 1, block, {jit_test::Bytes(std::vector<uint32_t>(block[0], 0xdeadbeef))});
    ASSERT_EQ(out.error, 0) << out.detail;
    const std::vector<uint32_t> got = jit_test::Values<uint32_t>(out.buffers[0]);
    for (uint32_t t = 0; t < block[0]; ++t) {
      const uint32_t branched = t & 1 ? t * 10 : 7;  // the odd lanes waited at SKIP
      const uint32_t looped = 100 + (t & 3);         // each left the loop after t % 4 + 1 trips
      const uint32_t guarded = t < 4 ? 6 : 5;
      EXPECT_EQ(got[t], branched * 1000 + guarded + looped * 10) << "thread " << t;
    }
  }
  EXPECT_TRUE(Vector("waiting_lanes"));
}

// setp with a BoolOp (.and, .or, .xor), its predicate operand negated or not, writing
// p|q (q: the comparison's negation combined the same way), on integers and floats.
TEST_F(JitSmallKernels, SetpBoolOpsAndPairsGiveThePredicatesThePtxIsaDefines) {
  std::vector<uint32_t> in(64);
  for (uint32_t t = 0; t < 64; ++t) in[t] = t * 37 % 160;
  jit_test::Outcome out =
      Both("setp_ops", 1, {64}, {jit_test::Bytes(in), jit_test::Bytes(std::vector<uint32_t>(64, 0xdeadbeef))});
  ASSERT_EQ(out.error, 0) << out.detail;
  EXPECT_TRUE(Vector("setp_ops"));
  const std::vector<uint32_t> got = jit_test::Values<uint32_t>(out.buffers[1]);
  for (uint32_t t = 0; t < 64; ++t) {
    const bool c = t & 1;
    const bool lt = in[t] < 100u;
    const bool ge = static_cast<int32_t>(in[t]) >= 50;
    const bool gt = static_cast<float>(in[t]) > 100.0f;
    const uint32_t want =
        (lt && c) | (!lt && c) << 1 | (ge || !c) << 2 | (!ge || !c) << 3 | (gt != c) << 4 | (!gt != c) << 5;
    EXPECT_EQ(got[t], want) << "thread " << t << ", input " << in[t];
  }
}

// A tile every lane of a row reads whole (ld.shared.v4 of one address for all lanes of a
// vector-code chunk, as a tiled matrix multiply reads As[ty][k..k+3]) between two barriers
// in a loop: one access for all lanes (VectorLanesAccess), and the loaded elements are not
// live across the barrier before them, so the barriers save only what lives on.
TEST_F(JitSmallKernels, ARowEveryLaneReadsIsOneAccessAndItsElementsAreNotSavedAtBarriers) {
  std::vector<float> in(4 * 256);
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(static_cast<int>(k * 37 % 101) - 50) / 8.0f;
  jit_test::Outcome out =
      Both("tile_rows", 1, {16, 16}, {jit_test::Bytes(in), jit_test::Bytes(std::vector<float>(256, -1.0f))});
  ASSERT_EQ(out.error, 0) << out.detail;
  const std::vector<float> got = jit_test::Values<float>(out.buffers[1]);
  for (uint32_t y = 0; y < 16; ++y) {
    for (uint32_t x = 0; x < 16; ++x) {
      float sum = 0.0f;
      for (uint32_t round = 0; round < 4; ++round) {
        const float* row = &in[round * 256 + y * 16];
        for (int k = 0; k < 8; k += 2) sum = std::fma(row[k], static_cast<float>(x), sum) + row[k + 1];
      }
      EXPECT_EQ(got[y * 16 + x], sum) << "thread (" << x << ", " << y << ")";
    }
  }
  ASSERT_TRUE(Vector("tile_rows"));
  // Saved at a barrier: %f1, %f11, %r3, %r4, %r6, %r8, %rd1, %rd2 and %rd3 (what the
  // round and the end read), not the ld.shared.v4 elements %f3-%f10.
  EXPECT_EQ(SavedRegisters(*Kernel("tile_rows").jit->compiled), 9u);
  // Vector code saves only the sum %f1 and the round %r4: the others, each defined once from
  // the thread's indices, the tile's address and the parameters, it computes again.
  EXPECT_EQ(VectorSavedRegisters(*Kernel("tile_rows").jit->compiled), 2u);
}

}  // namespace
}  // namespace gpupool::sim

// Atomics whose results are read, in the JIT tier's scalar and vector code
// (kernels/JitAtomicResults.ptx): the old values a GPU may hand out in some order of its
// threads, which differs between the tiers (a CTA's threads one after another compiled,
// in lockstep interpreted), so each launch is judged by what every order gives alike: the
// set of old values, the memory left, the failure's detail. And the kernels whose loops an
// atomic's result steers, which stay on the interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "remote/ptx/half_float.h"
#include "tests/remote/ptx/jit_fixture.h"

namespace gpupool::sim {
namespace {

using jit_test::Bytes;
using jit_test::kIllegalAddress;
using jit_test::Outcome;
using jit_test::Values;

constexpr uint32_t kBlocks = 9, kThreads = 64, kN = 550;

class JitAtomics : public jit_test::JitKernelFileTest {
 public:
  JitAtomics() : JitKernelFileTest("JitAtomicResults.ptx") {}

  static std::vector<uint32_t> Inputs(uint32_t n) {
    std::vector<uint32_t> in(n);
    for (uint32_t k = 0; k < n; ++k) in[k] = k * 2654435761u >> 8;
    return in;
  }

  // `results` on tier 0 (the interpreter), 1 (vector code: blocks of 64 x 1) or 2 (scalar
  // code: 1 x 64); buffers in, out, words, olds.
  Outcome Results(int tier, uint32_t victim = ~0u, uint32_t shift = 0, uint32_t row = ~0u) {
    const std::vector<uint32_t> block =
        tier == 2 ? std::vector<uint32_t>{1, kThreads} : std::vector<uint32_t>{kThreads};
    return Run(tier == 0 ? JitMode::kOff : JitMode::kAlways, "results", kBlocks, block,
               {Bytes(Inputs(kN)), Bytes(std::vector<uint32_t>(kN, 0)), Bytes(std::vector<uint32_t>(8, 0)),
                Bytes(std::vector<uint32_t>(8 * kN, 0xdeadbeefu))},
               {kN, victim, shift, row});
  }
};

template <typename T>
std::vector<T> Sorted(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Every kind of atomic with its result read, once by each thread: each tier's old values
// are those of some order of the threads (tickets a permutation, one winner per claim, the
// exchanged, counted and summed values each once), the memory every order leaves is the
// interpreter's, and the compaction appends every odd input once.
TEST_F(JitAtomics, ResultsAreThoseOfSomeOrderOfTheThreads) {
  const std::vector<uint32_t> in = Inputs(kN);
  std::vector<uint32_t> words[3];
  for (int tier = 0; tier < 3; ++tier) {
    SCOPED_TRACE("tier " + std::to_string(tier));
    Outcome out = Results(tier);
    ASSERT_EQ(out.error, 0) << out.detail;
    const std::vector<uint32_t> compacted = Values<uint32_t>(out.buffers[1]);
    words[tier] = Values<uint32_t>(out.buffers[2]);
    const std::vector<uint32_t> olds = Values<uint32_t>(out.buffers[3]);
    auto old = [&](uint32_t i, int k) { return olds[8 * i + k]; };
    for (uint32_t b = 0; b < kBlocks; ++b) {
      const uint32_t first = b * kThreads, running = std::min(kThreads, kN - first);
      std::vector<uint32_t> tickets, expected(running);
      for (uint32_t t = 0; t < running; ++t) tickets.push_back(old(first + t, 0)), expected[t] = t;
      EXPECT_EQ(Sorted(tickets), expected) << "block " << b;
      for (uint32_t slot = 0; slot < 4; ++slot) {
        std::vector<uint32_t> winners;
        for (uint32_t t = slot; t < running; t += 4) {
          if (old(first + t, 1) == 0) winners.push_back(t);
        }
        ASSERT_EQ(winners.size(), 1u) << "block " << b << ", slot " << slot;
        for (uint32_t t = slot; t < running; t += 4) {
          if (t != winners[0]) {
            EXPECT_EQ(old(first + t, 1), winners[0] + 1) << "block " << b << ", thread " << t;
          }
        }
      }
    }
    std::vector<uint32_t> exchanged{words[tier][1]}, all{0}, counted, expected_counted, down, expected_down;
    std::vector<float> summed, expected_sums;
    uint32_t counter_down = 0;
    int32_t max = 0;
    for (uint32_t i = 0; i < kN; ++i) {
      exchanged.push_back(old(i, 2));
      all.push_back(i + 1);
      counted.push_back(old(i, 3));
      expected_counted.push_back(i % 10);
      down.push_back(old(i, 4));
      expected_down.push_back(counter_down);
      counter_down = counter_down == 0 || counter_down > 6 ? 6 : counter_down - 1;
      float sum;
      std::memcpy(&sum, &olds[8 * i + 5], 4);
      summed.push_back(sum);
      expected_sums.push_back(static_cast<float>(i));
      max = std::max(max, static_cast<int32_t>(in[i]));
      EXPECT_LE(static_cast<int32_t>(old(i, 6)), static_cast<int32_t>(words[tier][5])) << "thread " << i;
      EXPECT_TRUE(old(i, 6) == 0 || std::find(in.begin(), in.end(), old(i, 6)) != in.end()) << "thread " << i;
    }
    EXPECT_EQ(Sorted(exchanged), Sorted(all));
    EXPECT_EQ(Sorted(counted), Sorted(expected_counted));
    EXPECT_EQ(words[tier][2], kN % 10);
    EXPECT_EQ(Sorted(down), Sorted(expected_down));
    EXPECT_EQ(words[tier][3], counter_down);
    EXPECT_EQ(Sorted(summed), expected_sums);
    float total;
    std::memcpy(&total, &words[tier][4], 4);
    EXPECT_EQ(total, static_cast<float>(kN));
    EXPECT_EQ(words[tier][5], static_cast<uint32_t>(max));
    std::vector<uint32_t> odd;
    for (uint32_t v : in) {
      if (v & 1) odd.push_back(v);
    }
    ASSERT_EQ(words[tier][0], odd.size());
    EXPECT_EQ(Sorted(std::vector<uint32_t>(compacted.begin(), compacted.begin() + odd.size())), Sorted(odd));
    EXPECT_EQ(std::vector<uint32_t>(compacted.begin() + odd.size(), compacted.end()),
              std::vector<uint32_t>(kN - odd.size(), 0));
  }
  // What every order leaves alike (not the last exchanged value).
  for (int tier = 1; tier < 3; ++tier) {
    words[tier][1] = words[0][1];
    EXPECT_EQ(words[tier], words[0]) << "tier " << tier;
  }
  const DecodedKernel& kernel = Kernel("results");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  EXPECT_TRUE(Vector("results")) << kernel.jit->refused;
}

// A thread's stray or misaligned atomic, its result read, fails the launch as on the
// interpreter with the same detail: threads 78 and 130 (lanes 6 and 2 of their rows in
// vector code, which run their atomics lane by lane), and threads 88 to 95, whose running
// lanes (the odd inputs: 91, 92, 93) run one atomic of their row together.
TEST_F(JitAtomics, AStrayOrMisalignedTicketFailsTheLaunchAsOnTheInterpreter) {
  const std::vector<uint32_t> in = Inputs(kN);
  for (uint32_t victim : {78u, 130u, ~0u}) {
    const uint32_t row = victim == ~0u ? 11 : ~0u;
    if (victim != ~0u) {
      ASSERT_EQ(in[victim] & 1, 1u) << "the victim must append (an odd input)";
    }
    for (uint32_t shift : {1u << 24, 2u}) {
      Outcome out[3];
      for (int tier = 0; tier < 3; ++tier) out[tier] = Results(tier, victim, shift, row);
      EXPECT_EQ(out[0].error, kIllegalAddress) << out[0].detail;
      EXPECT_NE(out[0].detail.find(shift == 2 ? "misaligned atomic of 4 bytes" : "atomic of 4 bytes"),
                std::string::npos)
          << out[0].detail;
      for (int tier = 1; tier < 3; ++tier) {
        EXPECT_EQ(out[tier].error, out[0].error) << tier;
        EXPECT_EQ(out[tier].detail, out[0].detail) << "tier " << tier << ", " << victim << ", " << shift;
      }
    }
  }
}

// A ticket inside a grid-stride loop whose branches it does not steer: compiled (vector
// code), every odd input appended once, on 2 and on 7 blocks of 256 threads.
TEST_F(JitAtomics, ATicketInsideALoopItDoesNotSteerIsCompiled) {
  const uint32_t n = 100000;
  const std::vector<uint32_t> in = Inputs(n);
  std::vector<uint32_t> odd;
  for (uint32_t v : in) {
    if (v & 1) odd.push_back(v);
  }
  for (uint32_t blocks : {2u, 7u}) {
    for (JitMode mode : {JitMode::kOff, JitMode::kAlways}) {
      Outcome out = Run(mode, "grid_compact", blocks, {256},
                        {Bytes(in), Bytes(std::vector<uint32_t>(n, 0)), Bytes(std::vector<uint32_t>(1, 0))}, {n});
      ASSERT_EQ(out.error, 0) << out.detail;
      ASSERT_EQ(Values<uint32_t>(out.buffers[2])[0], odd.size());
      const std::vector<uint32_t> compacted = Values<uint32_t>(out.buffers[1]);
      EXPECT_EQ(Sorted(std::vector<uint32_t>(compacted.begin(), compacted.begin() + odd.size())), Sorted(odd));
    }
  }
  const DecodedKernel& kernel = Kernel("grid_compact");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  EXPECT_TRUE(Vector("grid_compact")) << kernel.jit->refused;
}

// Compare-and-swap retries (nvcc's): a double sum and a float max over global memory and a
// float max over a block's shared memory, in a grid-stride loop, compiled in vector code
// (blocks of 64 threads) and scalar code (blocks of 12), the sums exact in every order.
TEST_F(JitAtomics, CompareAndSwapRetriesAreCompiled) {
  const uint32_t n = 20000, blocks = 5;
  std::vector<float> in(n);
  double sum = 0;
  float max = 0;
  for (uint32_t k = 0; k < n; ++k) {
    in[k] = static_cast<float>((k * 2654435761u >> 12) % 1000) * 0.5f;
    sum += in[k];
    max = std::max(max, in[k]);
  }
  for (uint32_t threads : {64u, 12u}) {
    for (JitMode mode : {JitMode::kOff, JitMode::kAlways}) {
      SCOPED_TRACE(std::to_string(threads) + (mode == JitMode::kOff ? " interpreted" : " compiled"));
      Outcome out = Run(mode, "cas_sums", blocks, {threads},
                        {Bytes(in), Bytes(std::vector<double>(1, 0)), Bytes(std::vector<float>(1, 0)),
                         Bytes(std::vector<float>(blocks, -1))},
                        {n});
      ASSERT_EQ(out.error, 0) << out.detail;
      EXPECT_EQ(Values<double>(out.buffers[1])[0], sum);
      EXPECT_EQ(Values<float>(out.buffers[2])[0], max);
      const std::vector<float> block_max = Values<float>(out.buffers[3]);
      for (uint32_t b = 0; b < blocks; ++b) {
        float want = 0;
        for (uint32_t i = b * threads; i < n; i += blocks * threads) {
          for (uint32_t t = 0; t < threads && i + t < n; ++t) want = std::max(want, in[i + t]);
        }
        EXPECT_EQ(block_max[b], want) << "block " << b;
      }
    }
  }
  const DecodedKernel& kernel = Kernel("cas_sums");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  EXPECT_TRUE(Vector("cas_sums")) << kernel.jit->refused;
  // The word read again in the loop: 3 blocks of 64 and 3 of 12 threads add 3 each.
  for (uint32_t threads : {64u, 12u}) {
    Outcome out = Run(JitMode::kAlways, "cas_reload", 3, {threads}, {Bytes(std::vector<uint32_t>(1, 5))}, {});
    ASSERT_EQ(out.error, 0) << out.detail;
    EXPECT_EQ(Values<uint32_t>(out.buffers[0])[0], 5 + 3 * 3 * threads);
  }
  EXPECT_EQ(Kernel("cas_reload").jit->jit_launches.load(), 2u) << Kernel("cas_reload").jit->refused;
}

// Atomics of 16-bit values and half pairs with their results read (add of f16x2 and bf16,
// max of f16, cas of b16 in shared memory), in vector and scalar code: each tier's old
// values are those of some order (the adds' old values the same set in every order: the
// bf16 sum stops at 256, where adding 1 rounds back), and what they leave the
// interpreter's.
TEST_F(JitAtomics, SixteenBitAtomicsWithTheirResults) {
  std::vector<uint32_t> words[3];
  std::vector<std::vector<float>> added[3];
  for (int tier = 0; tier < 3; ++tier) {
    SCOPED_TRACE("tier " + std::to_string(tier));
    const std::vector<uint32_t> block =
        tier == 2 ? std::vector<uint32_t>{1, kThreads} : std::vector<uint32_t>{kThreads};
    Outcome out = Run(tier == 0 ? JitMode::kOff : JitMode::kAlways, "halves", kBlocks, block,
                      {Bytes(std::vector<uint32_t>(2, 0)), Bytes(std::vector<uint32_t>(4 * kN, 0xdeadbeefu))}, {kN});
    ASSERT_EQ(out.error, 0) << out.detail;
    words[tier] = Values<uint32_t>(out.buffers[0]);
    const std::vector<uint16_t> olds = Values<uint16_t>(out.buffers[1]);
    added[tier].assign(3, {});
    for (uint32_t i = 0; i < kN; ++i) {
      added[tier][0].push_back(HalfBitsToFloat(olds[8 * i], false));
      added[tier][1].push_back(HalfBitsToFloat(olds[8 * i + 1], false));
      added[tier][2].push_back(HalfBitsToFloat(olds[8 * i + 2], true));
      EXPECT_LE(HalfBitsToFloat(olds[8 * i + 3], false), static_cast<float>(kN - 1)) << i;
    }
    for (std::vector<float>& v : added[tier]) v = Sorted(v);
    for (uint32_t k = 0; k < kN; ++k) {
      ASSERT_EQ(added[tier][0][k], static_cast<float>(k)) << k;
      ASSERT_EQ(added[tier][1][k], static_cast<float>(2 * k)) << k;
      ASSERT_EQ(added[tier][2][k], static_cast<float>(std::min(k, 256u))) << k;
    }
    EXPECT_EQ(HalfBitsToFloat(static_cast<uint16_t>(words[tier][0]), false), static_cast<float>(kN));
    EXPECT_EQ(HalfBitsToFloat(static_cast<uint16_t>(words[tier][0] >> 16), false), static_cast<float>(2 * kN));
    EXPECT_EQ(HalfBitsToFloat(static_cast<uint16_t>(words[tier][1]), true), 256.0f);
    EXPECT_EQ(HalfBitsToFloat(static_cast<uint16_t>(words[tier][1] >> 16), false), static_cast<float>(kN - 1));
    for (uint32_t b = 0; b < kBlocks; ++b) {
      const uint32_t first = b * kThreads, running = std::min(kThreads, kN - first);
      for (uint32_t slot = 0; slot < 4; ++slot) {
        std::vector<uint32_t> winners;
        for (uint32_t t = slot; t < running; t += 4) {
          if (olds[8 * (first + t) + 4] == 0) winners.push_back(t);
        }
        ASSERT_EQ(winners.size(), 1u) << "block " << b << ", slot " << slot;
        for (uint32_t t = slot; t < running; t += 4) {
          if (t != winners[0]) {
            EXPECT_EQ(olds[8 * (first + t) + 4], winners[0] + 1) << "block " << b << ", thread " << t;
          }
        }
      }
    }
  }
  EXPECT_EQ(words[1], words[0]);
  EXPECT_EQ(words[2], words[0]);
  const DecodedKernel& kernel = Kernel("halves");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 2u) << kernel.jit->refused;
  EXPECT_TRUE(Vector("halves")) << kernel.jit->refused;
}

// Loops whose exit an atomic's result decides stay on the interpreter, which lets the
// threads of a CTA take turns (compiled, a thread spinning for another of its CTA would wait
// for a thread that runs only after it), and end there with their results: a lock taken by
// compare-and-swap, compare-and-swaps retried until the word holds what they expect
// (their compare operand a constant, or read from another word), and a queue whose threads take indices
// until they run past its end (which would end in any order; the rule does not tell it
// from a wait).
TEST_F(JitAtomics, LoopsAnAtomicsResultSteersRunOnTheInterpreter) {
  Outcome locked = Run(JitMode::kAlways, "lock_spin", 8, {1}, {Bytes(std::vector<uint32_t>(2, 0))}, {});
  ASSERT_EQ(locked.error, 0) << locked.detail;
  EXPECT_EQ(Values<uint32_t>(locked.buffers[0]), (std::vector<uint32_t>{0, 8}));
  const uint32_t n = 1000;
  Outcome queued = Run(JitMode::kAlways, "queue", 3, {64},
                       {Bytes(std::vector<uint32_t>(1, 0)), Bytes(std::vector<uint32_t>(n, 0))}, {n});
  ASSERT_EQ(queued.error, 0) << queued.detail;
  EXPECT_EQ(Values<uint32_t>(queued.buffers[0])[0], n + 3 * 64);
  const std::vector<uint32_t> out = Values<uint32_t>(queued.buffers[1]);
  for (uint32_t k = 0; k < n; ++k) ASSERT_EQ(out[k], 3 * k + 1) << k;
  Outcome waited = Run(JitMode::kAlways, "cas_wait", 1, {1}, {Bytes(std::vector<uint32_t>(1, 5))}, {});
  ASSERT_EQ(waited.error, 0) << waited.detail;
  EXPECT_EQ(Values<uint32_t>(waited.buffers[0])[0], 6u);
  Outcome agreed = Run(JitMode::kAlways, "cas_other", 1, {1}, {Bytes(std::vector<uint32_t>{7, 7})}, {});
  ASSERT_EQ(agreed.error, 0) << agreed.detail;
  EXPECT_EQ(Values<uint32_t>(agreed.buffers[0]), (std::vector<uint32_t>{10, 7}));
  for (const char* name : {"lock_spin", "queue", "cas_wait", "cas_other"}) {
    const DecodedKernel& kernel = Kernel(name);
    EXPECT_EQ(kernel.jit->jit_launches.load(), 0u) << name;
    EXPECT_NE(kernel.jit->refused.find("an atomic whose result a branch of a loop around it reads"), std::string::npos)
        << name << ": " << kernel.jit->refused;
  }
}

// Checking the loops around atomics whose results are read is bounded (as liveness is): a
// kernel of 6000 tickets in one loop is refused for its compile work, not compiled for long,
// and runs on the interpreter.
TEST_F(JitAtomics, ManyTicketsInALoopAreBoundedCompileWork) {
  constexpr int kTickets = 6000;
  std::string text =
      ".version 7.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry many(.param .u64 words, .param .u32 rounds)\n{\n"
      "  .reg .pred %p<2>;\n  .reg .b32 %r<8>;\n  .reg .b64 %rd<4>;\n"
      "  ld.param.u64 %rd1, [words];\n  ld.param.u32 %r1, [rounds];\n  cvta.to.global.u64 %rd1, %rd1;\n"
      "  mov.u32 %r2, 0;\n$Lround:\n";
  for (int k = 0; k < kTickets; ++k) {
    text += "  atom.global.add.u32 %r3, [%rd1], 1;\n  st.global.u32 [%rd1+4], %r3;\n";
  }
  text += "  add.u32 %r2, %r2, 1;\n  setp.lt.u32 %p1, %r2, %r1;\n  @%p1 bra $Lround;\n  ret;\n}\n";
  Parse(text);
  const auto began = std::chrono::steady_clock::now();
  Outcome out = Run(JitMode::kAlways, "many", 1, {1}, {Bytes(std::vector<uint32_t>(2, 0))}, {2});
  ASSERT_EQ(out.error, 0) << out.detail;
  EXPECT_EQ(Values<uint32_t>(out.buffers[0]), (std::vector<uint32_t>{2 * kTickets, 2 * kTickets - 1}));
  const DecodedKernel& kernel = Kernel("many");
  EXPECT_EQ(kernel.jit->jit_launches.load(), 0u);
  EXPECT_NE(kernel.jit->refused.find("compile work"), std::string::npos) << kernel.jit->refused;
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(60));
}

}  // namespace
}  // namespace gpupool::sim

// The PTX engine's tests: modules: declarations refused, translation units linked, images, hoisting, parsing (front/,
// the decoder, hoist.cc). The fixture and helpers: engine_fixture.h.
#include "common/gpu_models.h"
#include "common/occupancy.h"
#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

using ptx_test::Engine;
using ptx_test::KernelText;
using ptx_test::kGiB;
using ptx_test::ReadFile;

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
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(21, 92, "OversizedDeclarationsAreRefused_big_local.ptx", "big_local"));
  uint64_t out = Zeros<uint32_t>(1);
  EXPECT_EQ(LaunchLoaded(92, 1, 32, out), kCuLaunchOutOfResources);
  std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("local memory"), std::string::npos) << detail;
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
  const std::string unit1 = KernelText("TranslationUnitsAreLinked_unit1.ptx");
  const std::string unit2 = KernelText("TranslationUnitsAreLinked_unit2.ptx");
  const auto fatbin = PtxFatbin({unit1, unit2, unit1}, 75);
  ASSERT_EQ(executor_.LoadModule(30, fatbin.data(), fatbin.size(), {}), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(30, 130, "first"), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(30, 131, "second"), kCuSuccess) << executor_.TakeErrorDetail();
  uint64_t out = Zeros<uint32_t>(2), second_out = out + 4;
  device::LaunchConfig config;
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

// Compressed fatbins (zstd and LZ4 entries) load and run; a cubin (SASS only)
// does not.
TEST(EngineImages, CompressedFatbinsRunAndCubinsAreRefused) {
  devices::SimDeviceMemory memory(0, kGiB);
  for (const char* name : {"engine_kernels_zstd.fatbin", "engine_kernels_lz4.fatbin"}) {
    devices::SimExecutor executor(&memory);
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
    device::LaunchConfig config;
    ASSERT_EQ(executor.Launch(2, config, params, sizeof(params)), kCuSuccess) << name;
    const void* data = nullptr;
    ASSERT_EQ(executor.CopyFromDevice(p + 12, 4, 0, &data), kCuSuccess);
    EXPECT_EQ(*static_cast<const int*>(data), 1) << name;
  }
  devices::SimExecutor executor(&memory);
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
  const std::string ptx = KernelText("InvariantsRunOncePerWarpAndTheRestStays.ptx");
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

// A warp whose mbarrier wait finds the phase incomplete ends its turn there (Warp::yield),
// so the warp it waits for runs next: warp 0 waits while warp 1 counts to 100 before it
// arrives. Without that, warp 0 spun through a whole slice (2^14 warp instructions, over
// half a million thread instructions) first: a TMA tile kernel ran 59 times slower.
// The same for a thread that sleeps (nanosleep) in a spin-wait on a flag in shared memory,
// and for one that spins with plain volatile loads, once its load reads what it read before
// (534,592 thread instructions without: a whole slice).
// (Under GPUPOOL_PTX_JIT=always the JIT tier compiles that kernel, whose compiled warps
// yield at their spin load, and the bound holds there too.)
// The parameter is the kernel, of the file of the same name's.
class EngineScheduling : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineScheduling, AWaitThatMustWaitEndsTheWarpsTurn) {
  const std::string entry = GetParam();
  const char* file = entry == "mbarrier_handoff" ? "MbarrierWaitEndsTheWarpsTurn.ptx"
                     : entry == "sleeping_spin"  ? "NanosleepEndsTheWarpsTurn.ptx"
                                                 : "VolatileSpinEndsTheWarpsTurn.ptx";
  auto module = sim::PtxModule::Parse(KernelText(file));
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto kernel = (*module)->Decode(entry, {});
  ASSERT_TRUE(kernel.ok()) << kernel.status().message();
  std::vector<uint32_t> out(64, 0xdeadbeef);
  const uint64_t address = 1ull << 44;
  sim::LaunchSpec spec;
  spec.block[0] = 64;
  spec.params = reinterpret_cast<const uint8_t*>(&address);
  spec.param_size = sizeof(address);
  spec.memory = {sim::MemoryRange{address, out.size() * 4, reinterpret_cast<char*>(out.data())}};
  uint64_t instructions = 0;
  std::string detail;
  spec.thread_instructions = &instructions;
  spec.error_detail = &detail;
  ASSERT_EQ(sim::RunKernel(**kernel, spec), kCuSuccess) << detail;
  for (uint32_t t = 0; t < 64; ++t) EXPECT_EQ(out[t], t);
  // Warp 1's count is 32 x 300 thread instructions; the rest, a few hundred more, with
  // warp 0's waits a handful of tries.
  EXPECT_LT(instructions, 12000u);
}
INSTANTIATE_TEST_SUITE_P(MbarrierNanosleepAndVolatileSpin, EngineScheduling,
                         ::testing::Values("mbarrier_handoff", "sleeping_spin", "volatile_spin"));

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

// The sim allocates no registers, but holds a cooperative grid's threads in host memory:
// a kernel of much state per thread (a -G build's thousands of PTX registers and its
// local frames) reports more registers than the library's assumption (32), so that the
// grid a program sizes by occupancy (cudaOccupancyMaxActiveBlocksPerMultiprocessor x SMs)
// is one the sim runs; at most 64, so that a block of 1024 threads stays launchable. Before,
// the executor reported 0 and such a grid ended "does not fit the sim GPU at once".
TEST(EngineOccupancy, AKernelOfMuchStatePerThreadReportsTheRegistersItsCooperativeGridFitsBy) {
  const std::string ptx =
      ".version 8.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry heavy(.param .u64 out) {\n"
      "  .local .align 4 .b8 depot[16384];\n"
      "  .reg .b32 %r<2>;\n  .reg .b64 %rd<2>;\n"
      "  ld.param.u64 %rd1, [out];\n  mov.u32 %r1, 7;\n  st.local.u32 [depot+16380], %r1;\n"
      "  ld.local.u32 %r1, [depot+16380];\n  st.global.u32 [%rd1], %r1;\n  ret;\n}\n"
      ".visible .entry light(.param .u64 out) {\n"
      "  .reg .b32 %r<2>;\n  .reg .b64 %rd<2>;\n"
      "  ld.param.u64 %rd1, [out];\n  mov.u32 %r1, 7;\n  st.global.u32 [%rd1], %r1;\n  ret;\n}\n";
  auto module = sim::PtxModule::Parse(ptx);
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto heavy = (*module)->Decode("heavy", {});
  auto light = (*module)->Decode("light", {});
  ASSERT_TRUE(heavy.ok() && light.ok());
  for (const char* name : {"A100", "H100"}) {
    SCOPED_TRACE(name);
    const GpuModel* model = FindGpuModel(name);
    ASSERT_NE(model, nullptr);
    const uint32_t sms = static_cast<uint32_t>(model->multiprocessors);
    EXPECT_EQ(sim::NeedsOf(**light, sms).registers, 0u);
    const uint32_t registers = sim::NeedsOf(**heavy, sms).registers;
    EXPECT_GT(registers, 32u);
    EXPECT_LE(registers, 64u);
    bool assumed_too_large = false;
    for (int block = 32; block <= 1024; block += 32) {
      const KernelResources reported{static_cast<int>(registers), 0, 1024};
      const int per_sm = ActiveBlocksPerMultiprocessor(*model, reported, block, 0);
      ASSERT_GT(per_sm, 0) << block;
      EXPECT_TRUE(sim::CooperativeGridFits(**heavy, uint64_t(per_sm) * sms, block, 0)) << block;
      const KernelResources assumed{32, 0, 1024};
      assumed_too_large |= !sim::CooperativeGridFits(
          **heavy, uint64_t(ActiveBlocksPerMultiprocessor(*model, assumed, block, 0)) * sms, block, 0);
    }
    EXPECT_TRUE(assumed_too_large) << "the kernel needs no more than the assumption: the test shows nothing";
    // What the executor tells the library (cuFuncGetAttribute, the occupancy calculator).
    devices::SimDeviceMemory memory(0, kGiB);
    devices::SimExecutor executor(&memory, sms);
    ASSERT_EQ(executor.LoadModule(1, ptx.c_str(), ptx.size() + 1, {}), kCuSuccess) << executor.TakeErrorDetail();
    ASSERT_EQ(executor.GetFunction(1, 2, "heavy"), kCuSuccess);
    FunctionResources resources;
    ASSERT_TRUE(executor.Resources(2, &resources));
    EXPECT_EQ(resources.registers, static_cast<int32_t>(registers));
    EXPECT_EQ(resources.local_bytes, 16384);
  }
}

}  // namespace
}  // namespace gpupool::dataplane

// PTX engine benchmark: each kernel of bench_kernels.cu on the engine, compiled by its JIT
// tier (_Jit, after one launch outside the timing that compiles it) and on its interpreter
// (_Interpreter), and a plain C++ loop doing the same work on one core (_Native), in the
// same run. Counters: items/s (elements, multiply-adds or bytes) for all, thread_instr/s
// for the engine; rates use wall-clock time (the engine runs the CTAs of a launch on two
// threads); the engine's cpu_time is the process's (both workers), from which the script
// gives its rate per core.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "remote/protocol/sim_tensor_map.h"
#include "remote/protocol/sim_texture.h"
#include "remote/ptx/jit/jit.h"
#include "remote/ptx/ptx_engine.h"

namespace {

using gpupool::sim::JitMode;
using gpupool::sim::LaunchSpec;
using gpupool::sim::MemoryRange;
using gpupool::sim::PtxModule;

std::unique_ptr<PtxModule> ParseFile(const char* path) {
  std::ifstream file(path);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto parsed = PtxModule::Parse(text);
  if (!parsed.ok()) throw std::runtime_error(parsed.status().message());
  return std::move(*parsed);
}

PtxModule& Module() {
  static std::unique_ptr<PtxModule> module = ParseFile(GPUPOOL_BENCH_PTX);
  return *module;
}

// The sm_90 kernels (bench_kernels_sm90.cu), which have no module variables.
PtxModule& Sm90Module() {
  static std::unique_ptr<PtxModule> module = ParseFile(GPUPOOL_BENCH_PTX_SM90);
  return *module;
}

// Device memory for the engine: host buffers at made-up device addresses.
struct Memory {
  std::vector<MemoryRange> ranges;
  uint64_t next = 1ull << 44;
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

// The module's variables (fir_constant's __constant__ taps), placed once as the sim executor
// places them (each at its alignment, at least 8, initialised from the PTX) in one
// allocation below the benchmarks' buffers, which every launch may reach.
struct Variables {
  std::map<std::string, uint64_t> addresses;
  std::vector<uint8_t> bytes;
  MemoryRange range;
};
Variables& ModuleVariables() {
  static Variables variables = [] {
    constexpr uint64_t kBase = 1ull << 43;
    Variables v;
    std::map<std::string, uint64_t> offsets;
    uint64_t span = 0;
    for (const gpupool::sim::ModuleVariable& variable : Module().variables()) {
      const uint64_t align = std::max<uint64_t>(variable.align, 8);
      span = (span + align - 1) / align * align;
      offsets[variable.name] = span;
      v.addresses[variable.name] = kBase + span;
      span += std::max<uint64_t>(variable.size, 1);
    }
    v.bytes.assign(std::max<uint64_t>(span, 1), 0);
    for (const gpupool::sim::ModuleVariable& variable : Module().variables()) {
      auto init = Module().InitialBytes(variable, v.addresses);
      if (!init.ok()) throw std::runtime_error(init.status().message());
      std::copy(init->begin(), init->end(), v.bytes.begin() + offsets[variable.name]);
    }
    v.range = MemoryRange{kBase, v.bytes.size(), reinterpret_cast<char*>(v.bytes.data())};
    return v;
  }();
  return variables;
}

void Launch(benchmark::State& state, const char* name, uint32_t grid[3], uint32_t block[3],
            const std::vector<uint8_t>& params, Memory& memory, uint64_t* instructions, uint32_t dynamic_shared = 0,
            uint64_t grid_workspace = 0, PtxModule* module = nullptr) {
  static const std::map<std::string, uint64_t> kNoVariables;
  auto kernel =
      module != nullptr ? module->Decode(name, kNoVariables) : Module().Decode(name, ModuleVariables().addresses);
  if (!kernel.ok()) throw std::runtime_error(kernel.status().message());
  LaunchSpec spec;
  for (int i = 0; i < 3; ++i) {
    spec.grid[i] = grid[i];
    spec.block[i] = block[i];
  }
  spec.params = params.data();
  spec.param_size = params.size();
  spec.memory = memory.ranges;
  spec.memory.insert(spec.memory.begin(), ModuleVariables().range);
  spec.thread_instructions = instructions;
  spec.dynamic_shared = dynamic_shared;
  // A cooperative launch (grid_workspace: zeroed memory of kGridWorkspaceBytes in `memory`).
  spec.cooperative = grid_workspace != 0;
  spec.grid_workspace = grid_workspace;
  std::string detail;
  spec.error_detail = &detail;
  if (int32_t status = gpupool::sim::RunKernel(**kernel, spec); status != 0) {
    state.SkipWithError(("launch failed: " + std::to_string(status) + " " + detail).c_str());
  }
}

constexpr int kElements = 1 << 20;

void BM_Saxpy_Engine(benchmark::State& state, JitMode mode) {
  std::vector<float> x(kElements, 1.5f), y(kElements, 2.0f);
  Memory memory;
  uint64_t dx = memory.Add(x), dy = memory.Add(y);
  auto params = Pack(kElements, 0.5f, dx, dy);
  uint32_t grid[3] = {kElements / 256, 1, 1}, block[3] = {256, 1, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, "saxpy", grid, block, params, memory, nullptr);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, "saxpy", grid, block, params, memory, &instructions);
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

// fir_constant: 16 taps from constant memory (a module variable) over 2^20 floats.
constexpr float kFirTaps[16] = {0.01f, -0.02f, 0.03f, -0.04f, 0.05f,  0.1f,  0.2f,   0.3f,
                                0.3f,  0.2f,   0.1f,  0.05f,  -0.04f, 0.03f, -0.02f, 0.01f};

void BM_FirConstant_Engine(benchmark::State& state, JitMode mode) {
  std::vector<float> x(kElements), y(kElements);
  for (int i = 0; i < kElements; ++i) x[i] = static_cast<float>(i % 97) * 0.25f;
  Memory memory;
  uint64_t dx = memory.Add(x), dy = memory.Add(y);
  auto params = Pack(kElements, dx, dy);
  uint32_t grid[3] = {kElements / 256, 1, 1}, block[3] = {256, 1, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, "fir_constant", grid, block, params, memory, nullptr);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, "fir_constant", grid, block, params, memory, &instructions);
  float first = 0;
  for (int k = 0; k < 16; ++k) first = std::fma(kFirTaps[k], x[k], first);
  if (y[0] != first) state.SkipWithError("wrong filter");
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

void BM_FirConstant_Native(benchmark::State& state) {
  std::vector<float> x(kElements), y(kElements);
  for (int i = 0; i < kElements; ++i) x[i] = static_cast<float>(i % 97) * 0.25f;
  for (auto _ : state) {
    for (int i = 0; i < kElements; ++i) {
      float s = 0;
      for (int k = 0; k < 16; ++k) s += kFirTaps[k] * x[std::min(i + k, kElements - 1)];
      y[i] = s;
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

void BM_Saxpy_Native(benchmark::State& state) {
  std::vector<float> x(kElements, 1.5f), y(kElements, 2.0f);
  for (auto _ : state) {
    for (int i = 0; i < kElements; ++i) y[i] = 0.5f * x[i] + y[i];
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

constexpr int kMatrix = 128;

void BM_Matmul_Engine(benchmark::State& state, JitMode mode) {
  std::vector<float> a(kMatrix * kMatrix, 1.0f), b(kMatrix * kMatrix, 0.5f), c(kMatrix * kMatrix);
  Memory memory;
  uint64_t da = memory.Add(a), db = memory.Add(b), dc = memory.Add(c);
  auto params = Pack(da, db, dc, kMatrix);
  uint32_t grid[3] = {kMatrix / 16, kMatrix / 16, 1}, block[3] = {16, 16, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, "matmul_tiled", grid, block, params, memory, nullptr);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, "matmul_tiled", grid, block, params, memory, &instructions);
  if (c[0] != kMatrix * 0.5f) state.SkipWithError("wrong product");
  state.SetItemsProcessed(state.iterations() * kMatrix * kMatrix * kMatrix);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

void BM_Matmul_Native(benchmark::State& state) {
  std::vector<float> a(kMatrix * kMatrix, 1.0f), b(kMatrix * kMatrix, 0.5f), c(kMatrix * kMatrix);
  for (auto _ : state) {
    for (int i = 0; i < kMatrix; ++i) {
      for (int j = 0; j < kMatrix; ++j) {
        float sum = 0;
        for (int k = 0; k < kMatrix; ++k) sum += a[i * kMatrix + k] * b[k * kMatrix + j];
        c[i * kMatrix + j] = sum;
      }
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kMatrix * kMatrix * kMatrix);
}

// matmul_cp_async (its tiles staged by cp.async) on n x n matrices: kMatrix, or
// GPUPOOL_BENCH_MATMUL_N (a larger one, measured on its own: scripts/bench/ptx's table is
// kMatrix's).
int CpAsyncMatrix() {
  const char* n = std::getenv("GPUPOOL_BENCH_MATMUL_N");
  return n != nullptr && std::atoi(n) > 0 ? std::atoi(n) : kMatrix;
}

// `kernel` (matmul_cp_async or matmul_pipeline4: 16 x 16 blocks, C = A * B) on n x n.
void TiledMultiply(benchmark::State& state, JitMode mode, const char* kernel) {
  const int n = CpAsyncMatrix();
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n);
  Memory memory;
  uint64_t da = memory.Add(a), db = memory.Add(b), dc = memory.Add(c);
  auto params = Pack(da, db, dc, n);
  uint32_t grid[3] = {static_cast<uint32_t>((n + 15) / 16), static_cast<uint32_t>((n + 15) / 16), 1};
  uint32_t block[3] = {16, 16, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, kernel, grid, block, params, memory, nullptr);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, kernel, grid, block, params, memory, &instructions);
  if (c[0] != n * 0.5f || c[n * n - 1] != n * 0.5f) state.SkipWithError("wrong product");
  state.SetItemsProcessed(state.iterations() * int64_t{n} * n * n);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
  state.SetLabel("n=" + std::to_string(n));
}

void BM_MatmulCpAsync_Engine(benchmark::State& state, JitMode mode) { TiledMultiply(state, mode, "matmul_cp_async"); }

void BM_MatmulCpAsync_Native(benchmark::State& state) {
  const int n = CpAsyncMatrix();
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n);
  for (auto _ : state) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        float sum = 0;
        for (int k = 0; k < n; ++k) sum += a[i * n + k] * b[k * n + j];
        c[i * n + j] = sum;
      }
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * int64_t{n} * n * n);
  state.SetLabel("n=" + std::to_string(n));
}

// matmul_pipeline4 (NVIDIA's async-copy sample's shape: four stages of float4 copies by a
// quarter of the threads; n a multiple of 16) on the same n x n as matmul_cp_async (its
// native loop is the same: BM_MatmulCpAsync_Native).
void BM_MatmulPipeline4_Engine(benchmark::State& state, JitMode mode) {
  TiledMultiply(state, mode, "matmul_pipeline4");
}

// matmul_float4_dynamic (float4 tiles in dynamic shared memory) on kMatrix x kMatrix.
void BM_MatmulFloat4_Engine(benchmark::State& state, JitMode mode) {
  std::vector<float> a(kMatrix * kMatrix, 1.0f), b(kMatrix * kMatrix, 0.5f), c(kMatrix * kMatrix);
  Memory memory;
  uint64_t da = memory.Add(a), db = memory.Add(b), dc = memory.Add(c);
  auto params = Pack(da, db, dc, kMatrix);
  uint32_t grid[3] = {kMatrix / 32, kMatrix / 32, 1}, block[3] = {8, 32, 1};
  const uint32_t tiles = 2 * 32 * 32 * sizeof(float);
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, "matmul_float4_dynamic", grid, block, params, memory, nullptr, tiles);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, "matmul_float4_dynamic", grid, block, params, memory, &instructions, tiles);
  if (c[0] != kMatrix * 0.5f || c[kMatrix * kMatrix - 1] != kMatrix * 0.5f) state.SkipWithError("wrong product");
  state.SetItemsProcessed(state.iterations() * kMatrix * kMatrix * kMatrix);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

// The same work as matmul_tiled's: the same loop.
void BM_MatmulFloat4_Native(benchmark::State& state) { BM_Matmul_Native(state); }

void BM_Histogram_Engine(benchmark::State& state, JitMode mode) {
  std::vector<unsigned char> data(kElements);
  for (int i = 0; i < kElements; ++i) data[i] = static_cast<unsigned char>(i * 2654435761u >> 24);
  std::vector<unsigned> bins(256);
  Memory memory;
  uint64_t dd = memory.Add(data), db = memory.Add(bins);
  auto params = Pack(dd, kElements, db);
  uint32_t grid[3] = {64, 1, 1}, block[3] = {256, 1, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, "histogram", grid, block, params, memory, nullptr);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, "histogram", grid, block, params, memory, &instructions);
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

void BM_Histogram_Native(benchmark::State& state) {
  std::vector<unsigned char> data(kElements);
  for (int i = 0; i < kElements; ++i) data[i] = static_cast<unsigned char>(i * 2654435761u >> 24);
  std::vector<unsigned> bins(256);
  for (auto _ : state) {
    for (int i = 0; i < kElements; ++i) ++bins[data[i]];
    benchmark::DoNotOptimize(bins.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

// compact of 2^20 uints, about half of them odd; the counter reset before each launch.
std::vector<unsigned> CompactInput() {
  std::vector<unsigned> in(kElements);
  for (int i = 0; i < kElements; ++i) in[i] = i * 2654435761u >> 8;
  return in;
}

void BM_Compact_Engine(benchmark::State& state, JitMode mode) {
  std::vector<unsigned> in = CompactInput();
  std::vector<unsigned> out(kElements), count(1);
  Memory memory;
  uint64_t din = memory.Add(in), dout = memory.Add(out), dcount = memory.Add(count);
  auto params = Pack(din, kElements, dout, dcount);
  uint32_t grid[3] = {64, 1, 1}, block[3] = {256, 1, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, "compact", grid, block, params, memory, nullptr);  // compiles it (_Jit)
  for (auto _ : state) {
    count[0] = 0;
    Launch(state, "compact", grid, block, params, memory, &instructions);
  }
  uint64_t sum = 0, odd = 0;
  for (unsigned v : in) odd += v & 1, sum += (v & 1) ? v : 0;
  for (unsigned k = 0; k < count[0]; ++k) sum -= out[k];
  if (count[0] != odd || sum != 0) state.SkipWithError("wrong compaction");
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

void BM_Compact_Native(benchmark::State& state) {
  const std::vector<unsigned> in = CompactInput();
  std::vector<unsigned> out(kElements);
  for (auto _ : state) {
    unsigned count = 0;
    for (int i = 0; i < kElements; ++i) {
      if (in[i] & 1) out[count++] = in[i];
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(count);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

// A degree-8 and a degree-4 polynomial of each of 2^20 floats, each by a call of a device
// function (horner: .param arguments and result, which the JIT inlines).
float Horner(const float* coeffs, int degree, float x) {
  float r = 0;
  for (int k = degree; k >= 0; --k) r = r * x + coeffs[k];
  return r;
}

void BM_Calls_Engine(benchmark::State& state, JitMode mode) {
  std::vector<float> coeffs(14), x(kElements), y(kElements);
  for (int k = 0; k < 14; ++k) coeffs[k] = 1.0f / (k + 1);
  for (int i = 0; i < kElements; ++i) x[i] = static_cast<float>(i % 1000) / 1000;
  Memory memory;
  uint64_t dc = memory.Add(coeffs), dx = memory.Add(x), dy = memory.Add(y);
  auto params = Pack(kElements, dc, dx, dy);
  uint32_t grid[3] = {kElements / 256, 1, 1}, block[3] = {256, 1, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, "poly_call", grid, block, params, memory, nullptr);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, "poly_call", grid, block, params, memory, &instructions);
  const float want = Horner(coeffs.data(), 8, x[777]) - Horner(coeffs.data() + 9, 4, x[777]);
  if (std::fabs(y[777] - want) > 1e-5f) state.SkipWithError("wrong polynomial");
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

void BM_Calls_Native(benchmark::State& state) {
  std::vector<float> coeffs(14), x(kElements), y(kElements);
  for (int k = 0; k < 14; ++k) coeffs[k] = 1.0f / (k + 1);
  for (int i = 0; i < kElements; ++i) x[i] = static_cast<float>(i % 1000) / 1000;
  for (auto _ : state) {
    for (int i = 0; i < kElements; ++i) y[i] = Horner(coeffs.data(), 8, x[i]) - Horner(coeffs.data() + 9, 4, x[i]);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

// Block scans of 2^20 ones, 256 per block, by `kernel`: each block's 1..256.
void ScanBlocks(benchmark::State& state, JitMode mode, const char* kernel) {
  std::vector<unsigned> in(kElements, 1), out(kElements);
  Memory memory;
  uint64_t din = memory.Add(in), dout = memory.Add(out);
  auto params = Pack(din, dout);
  uint32_t grid[3] = {kElements / 256, 1, 1}, block[3] = {256, 1, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, kernel, grid, block, params, memory, nullptr);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, kernel, grid, block, params, memory, &instructions);
  if (out[255] != 256 || out[256] != 1 || out[kElements - 1] != 256) {
    state.SkipWithError("wrong scan");
  }
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

// block_scan: 17 barriers per thread.
void BM_Scan_Engine(benchmark::State& state, JitMode mode) { ScanBlocks(state, mode, "block_scan"); }

// The same scans by warp shuffles (warp_scan): 2 barriers and 5 to 8 shuffles per thread.
void BM_WarpScan_Engine(benchmark::State& state, JitMode mode) { ScanBlocks(state, mode, "warp_scan"); }

void BM_Scan_Native(benchmark::State& state) {
  std::vector<unsigned> in(kElements, 1), out(kElements);
  for (auto _ : state) {
    for (int b = 0; b < kElements; b += 256) {
      unsigned sum = 0;
      for (int t = 0; t < 256; ++t) out[b + t] = sum += in[b + t];
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

void BM_WarpScan_Native(benchmark::State& state) { BM_Scan_Native(state); }

// A grid-stride sum of 2^20 floats by 64 blocks of 256 threads (64 elements a thread),
// then five shuffles per thread (warp_sum).
void BM_WarpSum_Engine(benchmark::State& state, JitMode mode) {
  std::vector<float> in(kElements, 1.0f), out(64 * 256 / 32);
  Memory memory;
  uint64_t din = memory.Add(in), dout = memory.Add(out);
  auto params = Pack(din, dout, kElements);
  uint32_t grid[3] = {64, 1, 1}, block[3] = {256, 1, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, "warp_sum", grid, block, params, memory, nullptr);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, "warp_sum", grid, block, params, memory, &instructions);
  if (out[0] != 2048 || out.back() != 2048) state.SkipWithError("wrong sum");
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

// C = A * B of 128 x 128 by mma.sync (mma_gemm: halves, f32 sums; 128 warps, a 16 x 8 tile
// each) on 32 blocks of 128 threads. Native: the same multiply-adds of floats.
void BM_MmaGemm_Engine(benchmark::State& state, JitMode mode) {
  // 1.0 and 0.5 as f16 pairs: every sum is kMatrix * 0.5, exactly.
  std::vector<uint32_t> a(kMatrix * kMatrix / 2, 0x3c003c00u), bt(kMatrix * kMatrix / 2, 0x38003800u);
  std::vector<float> c(kMatrix * kMatrix);
  Memory memory;
  uint64_t da = memory.Add(a), db = memory.Add(bt), dc = memory.Add(c);
  auto params = Pack(da, db, dc, kMatrix);
  uint32_t grid[3] = {kMatrix * kMatrix / 128 * 32 / 128, 1, 1}, block[3] = {128, 1, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, "mma_gemm", grid, block, params, memory, nullptr);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, "mma_gemm", grid, block, params, memory, &instructions);
  if (c[0] != kMatrix * 0.5f || c.back() != kMatrix * 0.5f) state.SkipWithError("wrong product");
  state.SetItemsProcessed(state.iterations() * kMatrix * kMatrix * kMatrix);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

void BM_MmaGemm_Native(benchmark::State& state) { BM_Matmul_Native(state); }

// A cooperative launch: grid_sum of 2^20 floats by 64 blocks of 256 threads (64 elements a
// thread, a shared-memory tree per block, grid.sync(), block 0 adds the 64 partials). On
// the engine every block is resident at once; compiled, a block waiting at grid.sync()
// yields its worker to the others (jit/run.cc). Native: the same sums.
void BM_GridSum_Engine(benchmark::State& state, JitMode mode) {
  std::vector<float> in(kElements, 1.0f), partial(64), out(1);
  std::vector<uint8_t> workspace(gpupool::sim::kGridWorkspaceBytes);
  Memory memory;
  uint64_t din = memory.Add(in), dpartial = memory.Add(partial), dout = memory.Add(out);
  uint64_t dworkspace = memory.Add(workspace);
  auto params = Pack(din, dpartial, dout, kElements);
  uint32_t grid[3] = {64, 1, 1}, block[3] = {256, 1, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  // The workspace counts arrivals across launches as a GPU's does (its barrier word flips).
  Launch(state, "grid_sum", grid, block, params, memory, nullptr, 0, dworkspace);  // compiles it (_Jit)
  for (auto _ : state) Launch(state, "grid_sum", grid, block, params, memory, &instructions, 0, dworkspace);
  if (out[0] != kElements) state.SkipWithError("wrong sum");
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

void BM_GridSum_Native(benchmark::State& state) {
  std::vector<float> in(kElements, 1.0f), partial(64), out(1);
  for (auto _ : state) {
    for (int b = 0; b < 64; ++b) {
      float sum = 0;
      for (int t = b * 256; t < b * 256 + 256; ++t) {
        for (int i = t; i < kElements; i += 64 * 256) sum += in[i];
      }
      partial[b] = sum;
    }
    out[0] = 0;
    for (float p : partial) out[0] += p;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

void BM_WarpSum_Native(benchmark::State& state) {
  std::vector<float> in(kElements, 1.0f), out(64 * 256 / 32);
  for (auto _ : state) {
    for (int w = 0; w < 64 * 256 / 32; ++w) {
      float sum = 0;
      for (int t = w * 32; t < w * 32 + 32; ++t) {
        float v = 0;
        for (int i = t; i < kElements; i += 64 * 256) v += in[i];
        sum += v;
      }
      out[w] = sum;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

// Bilinear texture sampling (tex.2d, linear filter, clamp) of a 1024x1024 float image, one
// sample per output pixel; the JIT row's code calls the interpreter's per-lane sampling
// (vector code: lane by lane), so that both engine rows spend most of their time in the
// same code. Native: the same arithmetic (9-bit weights) in a loop.
constexpr int kImage = 1024;

float Bilinear(const std::vector<float>& image, float fx, float fy) {
  auto at = [&](long x, long y) {
    x = std::min<long>(std::max<long>(x, 0), kImage - 1);
    y = std::min<long>(std::max<long>(y, 0), kImage - 1);
    return image[y * kImage + x];
  };
  const float xb = fx - 0.5f, yb = fy - 0.5f;
  const long i = static_cast<long>(std::floor(xb)), j = static_cast<long>(std::floor(yb));
  const float a = std::round((xb - i) * 256) / 256, b = std::round((yb - j) * 256) / 256;
  return (1 - a) * (1 - b) * at(i, j) + a * (1 - b) * at(i + 1, j) + (1 - a) * b * at(i, j + 1) +
         a * b * at(i + 1, j + 1);
}

std::vector<float> Image() {
  std::vector<float> image(kImage * kImage);
  for (int i = 0; i < kImage * kImage; ++i) image[i] = static_cast<float>(i % 977) * 0.125f;
  return image;
}

void BM_Bilinear_Engine(benchmark::State& state, JitMode mode) {
  std::vector<float> image = Image(), out(kImage * kImage);
  Memory memory;
  gpupool::dataplane::SimTextureDescriptor d;
  d.magic = gpupool::dataplane::kSimTextureMagic;
  d.format = gpupool::dataplane::kTexelF32;
  d.channels = 1;
  d.dims = 2;
  d.base = memory.Add(image);
  d.width = d.height = kImage;
  d.pitch = kImage * sizeof(float);
  d.slice_pitch = d.pitch * kImage;
  d.flags = gpupool::dataplane::kSimTexLinearFilter;
  std::vector<gpupool::dataplane::SimTextureDescriptor> descriptor = {d};
  uint64_t handle = memory.Add(descriptor), dout = memory.Add(out);
  auto params = Pack(handle, dout, kImage, kImage);
  uint32_t grid[3] = {kImage / 256, kImage, 1}, block[3] = {256, 1, 1};
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, "bilinear", grid, block, params, memory, nullptr);
  for (auto _ : state) {
    Launch(state, "bilinear", grid, block, params, memory, &instructions);
  }
  if (std::fabs(out[5 * kImage + 7] - Bilinear(image, 7.3f, 5.7f)) > 1e-3f) {
    state.SkipWithError("wrong sample");
  }
  state.SetItemsProcessed(state.iterations() * kImage * kImage);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}

void BM_Bilinear_Native(benchmark::State& state) {
  std::vector<float> image = Image(), out(kImage * kImage);
  for (auto _ : state) {
    for (int y = 0; y < kImage; ++y) {
      for (int x = 0; x < kImage; ++x) out[y * kImage + x] = Bilinear(image, x + 0.3f, y + 0.7f);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kImage * kImage);
}

}  // namespace

// Tiles of a 1024x1024 float matrix scaled through shared memory (bench_kernels_sm90.cu):
// moved by tensor copies (TensorTiles: the JIT refuses them, so both its rows are the
// interpreter's) or by plain loads and stores (SharedTiles), against one native loop.
constexpr int kTileMatrix = 1024;

void TileRun(benchmark::State& state, JitMode mode, bool tensor) {
  std::vector<float> in(kTileMatrix * kTileMatrix), out(kTileMatrix * kTileMatrix);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 1013) * 0.5f;
  Memory memory;
  const uint64_t din = memory.Add(in), dout = memory.Add(out);
  std::vector<uint8_t> params;
  if (tensor) {
    auto map_of = [](uint64_t address) {
      gpupool::dataplane::SimTensorMap m;
      m.magic = gpupool::dataplane::kSimTensorMapMagic;
      m.rank = 2;
      m.type = gpupool::dataplane::kTensorF32;
      m.address = address;
      m.dims[0] = m.dims[1] = kTileMatrix;
      m.strides[0] = kTileMatrix * sizeof(float);
      m.box[0] = m.box[1] = 32;
      m.element_strides[0] = m.element_strides[1] = 1;
      return m;
    };
    params = Pack(map_of(din), map_of(dout));
  } else {
    params = Pack(din, dout, kTileMatrix);
  }
  uint32_t grid[3] = {kTileMatrix / 32, kTileMatrix / 32, 1}, block[3] = {128, 1, 1};
  const char* name = tensor ? "tensor_tiles" : "shared_tiles";
  uint64_t instructions = 0;
  gpupool::sim::SetJitMode(mode);
  Launch(state, name, grid, block, params, memory, nullptr, 0, 0, &Sm90Module());  // compiles it (_Jit)
  for (auto _ : state) Launch(state, name, grid, block, params, memory, &instructions, 0, 0, &Sm90Module());
  if (out[5 * kTileMatrix + 7] != in[5 * kTileMatrix + 7] * 2 + 1) state.SkipWithError("wrong tile");
  state.SetItemsProcessed(state.iterations() * kTileMatrix * kTileMatrix);
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
}
void BM_TensorTiles_Engine(benchmark::State& state, JitMode mode) { TileRun(state, mode, true); }
void BM_SharedTiles_Engine(benchmark::State& state, JitMode mode) { TileRun(state, mode, false); }

void BM_Tiles_Native(benchmark::State& state) {
  std::vector<float> in(kTileMatrix * kTileMatrix), out(kTileMatrix * kTileMatrix);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 1013) * 0.5f;
  for (auto _ : state) {
    for (size_t i = 0; i < in.size(); ++i) out[i] = in[i] * 2 + 1;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kTileMatrix * kTileMatrix);
}

BENCHMARK_CAPTURE(BM_TensorTiles_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TensorTiles_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_SharedTiles_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_SharedTiles_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Tiles_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_FirConstant_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_FirConstant_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FirConstant_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Bilinear_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Bilinear_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Bilinear_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Saxpy_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Saxpy_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Saxpy_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Matmul_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulCpAsync_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulCpAsync_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MatmulCpAsync_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulPipeline4_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulPipeline4_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulFloat4_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulFloat4_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MatmulFloat4_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Histogram_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Histogram_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Histogram_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Compact_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Compact_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Compact_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Calls_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Calls_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Calls_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Scan_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Scan_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Scan_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WarpScan_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WarpScan_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_WarpScan_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WarpSum_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WarpSum_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_WarpSum_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MmaGemm_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MmaGemm_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MmaGemm_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GridSum_Engine, Jit, JitMode::kAlways)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GridSum_Engine, Interpreter, JitMode::kOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GridSum_Native)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();

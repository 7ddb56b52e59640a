// The PTX engine's tests (tests/remote/ptx/*_test.cc, one file per instruction family as
// in remote/ptx/interp/): each kernel of engine_kernels.cu (compiled by nvcc at build time)
// runs on the engine through the sim executor and its results are checked against a CPU
// reference computed in the test. This header holds what they share: the Engine fixture
// (the module loaded, upload, download, launch by the kernel's declared parameters) and
// the half-precision helpers.
#pragma once

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
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "remote/devices/sim/sim_executor.h"
#include "tests/remote/ptx/device_buffers.h"
#include "tests/remote/ptx/kernel_text.h"
#include "remote/image/ptx_signature.h"
#include "remote/protocol/protocol.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::dataplane::ptx_test {
constexpr uint64_t kGiB = 1ull << 30;

inline std::string ReadFile(const std::string& name) {
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
    // Unused where the kernel takes no arguments (the fold below is then empty).
    [[maybe_unused]] auto put = [&](auto value) {
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
    device::LaunchConfig config;
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
  // Launches `function` (of LoadKernel) over `grid` CTAs of `block` threads, `params` the
  // bytes of the kernel's parameters as it declares them; the launch's CUresult.
  template <typename Params>
  int32_t LaunchLoaded(uint64_t function, uint32_t grid, uint32_t block, const Params& params) {
    device::LaunchConfig config;
    config.grid[0] = grid;
    config.block[0] = block;
    return executor_.Launch(function, config, &params, sizeof(params));
  }
  // LaunchLoaded with one parameter, an output of `count` T set to zero first: what the
  // kernel wrote there; empty (and a test failure) if the launch failed.
  template <typename T>
  std::vector<T> LaunchForOutput(uint64_t function, uint32_t grid, uint32_t block, size_t count) {
    const uint64_t out = Zeros<T>(count);
    const int32_t result = LaunchLoaded(function, grid, block, out);
    EXPECT_EQ(result, kCuSuccess) << executor_.TakeErrorDetail();
    if (result != kCuSuccess) return {};
    return Download<T>(out, count);
  }
  // LoadKernel of tests/remote/ptx/kernels/`file`.
  void LoadKernelFile(uint64_t module, uint64_t function, const std::string& file, const std::string& name) {
    LoadKernel(module, function, KernelText(file), name);
  }

  devices::SimDeviceMemory memory_{0, 4 * kGiB};
  devices::SimExecutor executor_{&memory_};
  std::string ptx_;
  std::map<std::string, image::KernelLayout> layouts_;
  uint64_t next_function_ = 100;
  std::string last_detail_;
};

// op() computed in rounding mode `mode` (FE_UPWARD, ...), the mode set back after. The
// result goes through a volatile before the mode is set back: without -frounding-math the
// compiler may otherwise compute it after the second call.
template <typename Op>
auto InRoundingMode(int mode, Op op) {
  const int saved = std::fegetround();
  std::fesetround(mode);
  volatile auto r = op();
  std::fesetround(saved);
  return static_cast<decltype(op())>(r);
}

// Half-precision values in 16-bit storage: exact for these inputs (normal numbers, zero,
// NaN).
inline uint16_t ToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  if (value == 0.0f) return 0;
  if (std::isnan(value)) return 0x7e00;
  uint32_t exponent = ((x >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(((x >> 16) & 0x8000) | (exponent << 10) | ((x >> 13) & 0x3ff));
}

inline float FromHalf(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  const float sign = bits & 0x8000 ? -1.0f : 1.0f;
  if (exponent == 0x1f) return mantissa != 0 ? std::nanf("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  return sign * std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
}

}  // namespace gpupool::dataplane::ptx_test

// PTX text through the whole sim engine, JIT tier included (remote/ptx): parsed, each
// kernel decoded, compiled by the JIT tier (jit/jit.h), and run in a tiny launch on both
// tiers, with its module's variables placed and initialised in memory of their own. The
// PTX comes from a job; what it must never do is crash, leak, hit undefined behaviour or
// take the process's memory, whatever it computes.
//
// A fuzzed kernel may loop for ever, as a real one may: each launch runs under
// LaunchSpec::cancel, set by a watchdog after kLaunchMillis, so that an endless kernel ends
// as a cancelled session's does (CUDA_ERROR_LAUNCH_TIMEOUT).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "remote/ptx/front/program.h"
#include "remote/ptx/jit/jit.h"
#include "remote/ptx/ptx_engine.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using namespace gpupool::sim;

constexpr int kLaunchMillis = 50;
constexpr size_t kMaxKernels = 4;
// Memory the module's variables may take here (a larger module is only parsed and
// decoded: the executor's own checks of its variables are the sim executor tests').
constexpr uint64_t kMaxVariableBytes = uint64_t{4} << 20;
constexpr uint64_t kScratchBytes = 64 << 10;

// Sets *cancel once a launch has run kLaunchMillis (one watchdog for the process).
class Watchdog {
 public:
  static Watchdog& Get() {
    static Watchdog* watchdog = new Watchdog();  // lives as long as the process
    return *watchdog;
  }
  void Arm(std::atomic<bool>* cancel) {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_ = cancel;
    deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLaunchMillis);
    wake_.notify_one();
  }
  void Disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_ = nullptr;
  }

 private:
  Watchdog() : thread_([this] { Run(); }) { thread_.detach(); }
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (cancel_ == nullptr) {
        wake_.wait(lock);
        continue;
      }
      if (wake_.wait_until(lock, deadline_) == std::cv_status::timeout && cancel_ != nullptr &&
          std::chrono::steady_clock::now() >= deadline_) {
        cancel_->store(true);
        cancel_ = nullptr;
      }
    }
  }
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<bool>* cancel_ = nullptr;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

struct Buffer {
  uint64_t address = 0;
  std::vector<char> bytes;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = gpupool::fuzz::AsText(data, size);
  auto module = PtxModule::Parse(text);
  if (!module.ok()) return 0;
  // The module's variables, each in a buffer of its own at a made-up device address, and
  // a scratch buffer every pointer parameter points to.
  std::map<std::string, uint64_t> addresses;
  std::vector<Buffer> buffers;
  uint64_t next = uint64_t{1} << 44, total = 0;
  for (const ModuleVariable& variable : (*module)->variables()) {
    const uint64_t bytes = std::max<uint64_t>(variable.size, 1);
    if (bytes > kMaxVariableBytes - total) return 0;
    total += bytes;
    buffers.push_back(Buffer{next, std::vector<char>(bytes, 0)});
    addresses[variable.name] = next;
    next += (bytes + 4095) / 4096 * 4096 + 4096;
  }
  size_t index = 0;
  for (const ModuleVariable& variable : (*module)->variables()) {
    auto init = (*module)->InitialBytes(variable, addresses);
    Buffer& buffer = buffers[index++];
    if (init.ok() && !init->empty()) {
      std::memcpy(buffer.bytes.data(), init->data(), std::min(init->size(), buffer.bytes.size()));
    }
  }
  buffers.push_back(Buffer{next, std::vector<char>(kScratchBytes, 0)});
  const uint64_t scratch = next;
  std::vector<MemoryRange> memory;
  for (Buffer& buffer : buffers) {
    memory.push_back(MemoryRange{buffer.address, buffer.bytes.size(), buffer.bytes.data()});
  }

  std::vector<std::string> names = (*module)->KernelNames();
  if (names.size() > kMaxKernels) names.resize(kMaxKernels);
  for (const std::string& name : names) {
    auto kernel = (*module)->Decode(name, addresses);
    if (!kernel.ok()) continue;
    const DecodedKernel& decoded = **kernel;
    // Parameters: every 8 bytes the scratch buffer's address.
    std::vector<uint8_t> params((decoded.param_size + 7) / 8 * 8 + 8, 0);
    for (size_t at = 0; at + 8 <= params.size(); at += 8) std::memcpy(&params[at], &scratch, 8);
    // Interpreted, then compiled at its first launch (GPUPOOL_PTX_JIT=always): what the
    // tier refuses runs interpreted again.
    for (JitMode mode : {JitMode::kOff, JitMode::kAlways}) {
      SetJitMode(mode);
      std::atomic<bool> cancel{false};
      std::string printf_out, detail;
      uint64_t dropped = 0;
      DeviceLaunches children;
      LaunchSpec spec;
      spec.grid[0] = 2;
      spec.block[0] = 33;  // two warps, the second of one thread
      spec.params = params.data();
      spec.param_size = params.size();
      spec.memory = memory;
      spec.sm_count = 2;
      spec.printf_out = &printf_out;
      spec.printf_dropped = &dropped;
      spec.error_detail = &detail;
      spec.device_launches = &children;
      spec.cancel = &cancel;
      Watchdog::Get().Arm(&cancel);
      (void)RunKernel(decoded, spec);
      Watchdog::Get().Disarm();
      if (printf_out.size() > kMaxPrintfBytes) __builtin_trap();  // the cap must hold
    }
  }
  SetJitMode(JitMode::kAuto);
  return 0;
}

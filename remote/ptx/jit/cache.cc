// When the JIT tier compiles a kernel (jit.h: JitMode, from GPUPOOL_PTX_JIT) and the
// background compiler that fills a kernel's JitSlot (launch.h) for GPUPOOL_PTX_JIT=auto:
// one thread per process, so that no launch waits for LLVM.

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "remote/ptx/jit/internal.h"
#include "remote/ptx/jit/jit.h"
#include "remote/ptx/launch.h"

namespace gpupool::sim {

namespace {

JitMode ModeFromEnvironment() {
  const char* value = std::getenv("GPUPOOL_PTX_JIT");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return JitMode::kAuto;
  if (std::strcmp(value, "off") == 0) return JitMode::kOff;
  if (std::strcmp(value, "always") == 0) return JitMode::kAlways;
  std::fprintf(stderr, "GPUPOOL_PTX_JIT='%s': expected off, auto or always; using auto\n", value);
  return JitMode::kAuto;
}

std::atomic<JitMode>& Mode() {
  static std::atomic<JitMode> mode{ModeFromEnvironment()};
  return mode;
}

}  // namespace

JitMode CurrentJitMode() { return Mode().load(std::memory_order_relaxed); }
void SetJitMode(JitMode mode) { Mode().store(mode); }

namespace {

// One thread that compiles kernels for GPUPOOL_PTX_JIT=auto, in the order asked. At exit
// it finishes the compile at hand and drops the rest.
class BackgroundCompiler {
 public:
  static BackgroundCompiler& Get() {
    static BackgroundCompiler compiler;
    return compiler;
  }
  void Add(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    wake_.notify_one();
  }
  ~BackgroundCompiler() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    // The compile runs at the priority of the launches it speeds up (it once ran at nice
    // 19: beside two workers running the kernel's launches on the interpreter, a 2-core
    // host gave it a few percent, and a 1 s compile took a minute, every launch of it
    // interpreted). Its work is bounded (jit.h: kMaxLivenessWork and the limits below it).
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

void CompileInBackground(std::shared_ptr<JitSlot> slot, const ParsedModule& module, const RawFunction& entry,
                         const SharedLayout& shared, uint32_t param_size) {
  // Inlined here, while the module is there (bounded by the tier's instructions: cheap).
  RawFunction storage;
  const RawFunction* inlined = nullptr;
  try {
    inlined = jit::InlineCalls(module, entry, &storage, &slot->refused);
  } catch (const std::bad_alloc&) {
    slot->refused = "compile failed: out of memory";
  } catch (const std::exception& error) {
    slot->refused = std::string("compile failed: ") + error.what();
  }
  if (inlined == nullptr) return;
  slot->compiling = true;
  BackgroundCompiler::Get().Add([slot, entry = *inlined, shared = shared, param_size]() {
    std::string refused;
    std::shared_ptr<CompiledKernel> compiled = jit::CompileInlined(entry, shared, param_size, &refused);
    std::lock_guard<std::mutex> lock(slot->mu);
    slot->compiled = std::move(compiled);
    slot->refused = std::move(refused);
    slot->compiling = false;
    slot->compiled_cv.notify_all();
  });
}

void WaitForCompile(JitSlot& slot) {
  std::unique_lock<std::mutex> lock(slot.mu);
  slot.compiled_cv.wait(lock, [&] { return !slot.compiling; });
}

}  // namespace gpupool::sim

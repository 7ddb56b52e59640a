// What both tiers of the PTX engine (interp/ and jit/) share about running a launch: how
// its CTAs are split over worker threads, which worker's failure the launch reports, and
// the per-kernel state of the choice between the tiers (launch.cc: RunKernel checks a
// launch's limits, then runs it compiled or interpreted).
#pragma once

#include <atomic>
#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace gpupool::sim {

class CompiledKernel;  // jit/jit.h
struct DecodedKernel;  // ir/kernel.h
struct LaunchSpec;     // ptx_engine.h

// The thread block cluster a launch of `kernel` runs in (*shape; 1, 1, 1 for none): the
// launch's (LaunchSpec::cluster), or the kernel's compiled one (.reqnctapercluster) when the
// launch names none. Checked as a driver checks it: CUDA_ERROR_INVALID_CLUSTER_SIZE for a
// shape that differs from the compiled one, has more than 16 blocks (or more than the
// kernel's .maxclusterrank), or does not divide the grid; CUDA_ERROR_NOT_SUPPORTED for a
// cooperative launch in clusters. *detail (when not null) says why.
int32_t ClusterShapeOf(const DecodedKernel& kernel, const LaunchSpec& spec, uint32_t shape[3], std::string* detail);

// Threads that run the CTAs of one launch (the agent's hosts have few cores to spare).
constexpr uint32_t kMaxWorkers = 2;

// A thread that runs launches keeps one launch's scratch for the next (the interpreter's
// CTA context, the compiled code's worker state), so that a stream of small launches
// allocates nothing per launch; scratch over this size is let go after its launch, so that
// one large launch does not pin its memory to the thread.
inline constexpr size_t kKeptScratchBytes = size_t{16} << 20;

// The workers a launch of `ctas` CTAs runs on: CTAs are independent, so two workers take
// every other one (worker w runs CTAs w, w + workers, ...) when there are enough.
uint32_t WorkersFor(uint64_t ctas);

// Runs run(w, on_calling_thread) for each worker w < workers: worker 0, and any whose thread
// could not be started, on the calling thread; the others on threads of their own, joined
// before it returns. `run` lets no exception out (a helper thread's would end the process).
void RunOnWorkers(uint32_t workers, const std::function<void(uint32_t, bool)>& run);

// The failure a launch reports when several workers failed: as on a GPU, the one of the
// lowest-numbered CTA. Offer each worker's outcome; Offer returns true when this one is the
// first so far (the caller then takes its detail).
class FirstFailure {
 public:
  bool Offer(int32_t error, uint64_t cta) {
    if (error == 0 || cta >= first_cta_) return false;
    first_cta_ = cta;
    error_ = error;
    return true;
  }
  int32_t error() const { return error_; }

 private:
  int32_t error_ = 0;  // CUDA_SUCCESS
  uint64_t first_cta_ = UINT64_MAX;
};

// Per decoded kernel (DecodedKernel::jit): its compiled form once made, and why not when it
// cannot be. RunKernel's tier choice reads and fills it; jit/jit.h compiles into it.
struct JitSlot {
  std::mutex mu;
  std::condition_variable compiled_cv;  // a background compile is done
  bool tried = false;
  bool compiling = false;                    // in the background
  std::string refused;                       // why the tier cannot take the kernel
  std::shared_ptr<CompiledKernel> compiled;  // set when tried and not refused
  std::atomic<uint64_t> threads_run{0};      // on the interpreter, for kAuto
  std::atomic<uint64_t> jit_launches{0};     // run compiled (tests check the tier ran)
};

}  // namespace gpupool::sim

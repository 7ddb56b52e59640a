// Running compiled code (jit.h: RunCompiled): a launch's CTAs split over its workers as
// the interpreter splits them (launch.h), each worker with its Context (internal.h: what
// compiled code reads and writes besides the kernel's memory), its hints and its CTA's
// shared memory; the slow path of a checked access (Translate); the first failure reported
// with the interpreter's fault text (memory.h).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "remote/ptx/interp/texture.h"
#include "remote/ptx/jit/internal.h"
#include "remote/ptx/jit/jit.h"
#include "remote/ptx/launch.h"
#include "remote/ptx/memory.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim {

using jit::Context;
using jit::CtaFunction;
using jit::Hint;
using jit::kLaunchOutOfResources;
using jit::kLaunchTimeout;
using jit::kVectorLanes;
using jit::MemoryAccess;

namespace {

// What Context::cancel points to when the launch has no cancel flag.
const std::atomic<bool> kNeverCancelled{false};

// The slow path of a checked access: the allocation holding [address, address + size)
// among the launch's, remembered in the instruction's hint; nullptr if none holds it.
char* Translate(Context* context, uint32_t access, uint64_t address) {
  const uint32_t size = (*context->accesses)[access].size;
  const std::vector<MemoryRange>& ranges = context->spec->memory;
  const MemoryRange* found = AllocationAtOrBelow(ranges, address);
  if (found == nullptr) return nullptr;
  const MemoryRange& range = *found;
  // Global memory stays below the shared window, as the interpreter keeps it.
  if (range.size < size || range.start + range.size > kSharedWindow) return nullptr;
  if (address - range.start > range.size - size) return nullptr;
  Hint& hint = context->hints[access];
  hint.start = range.start;
  hint.limit = range.size - size + 1;
  hint.delta = reinterpret_cast<int64_t>(range.host) - static_cast<int64_t>(range.start);
  return range.host + (address - range.start);
}

// The host address of [address, address + size) inside one allocation of the launch,
// nullptr if none holds it: the interpreter's global memory (Warp::Global), which its
// texture handler reads descriptors and texels through.
uint8_t* TextureMemory(void* opaque, uint64_t address, uint32_t size) {
  Context* context = static_cast<Context*>(opaque);
  const std::vector<MemoryRange>& ranges = context->spec->memory;
  // The allocation holding `address` (allocations do not overlap): the last one found, else
  // the search's.
  const size_t hint = context->texture_range;
  const MemoryRange* range = hint < ranges.size() && address - ranges[hint].start < ranges[hint].size
                                 ? &ranges[hint]
                                 : AllocationAtOrBelow(ranges, address);
  if (range == nullptr) return nullptr;
  const uint64_t offset = address - range->start;
  if (offset > range->size || size > range->size - offset) return nullptr;
  context->texture_range = static_cast<size_t>(range - ranges.data());
  return reinterpret_cast<uint8_t*>(range->host) + offset;
}

}  // namespace

namespace jit {

int32_t TextureLane(Context* context, uint32_t op, uint64_t handle, const uint64_t* coords, uint64_t* values) {
  // A fresh descriptor cache per call, as the interpreter's handler starts one per
  // instruction: the descriptor is read again, as another thread's store may have changed it.
  texture::DescriptorCache cache;
  texture::Fault fault;
  if (texture::RunLane(texture::Unpack(op), texture::Memory{context, &TextureMemory}, handle, coords, values, &fault,
                       &cache)) {
    return 0;
  }
  context->fault_address = fault.address;
  context->fault_size = fault.size;
  context->fault_what = fault.what;
  return 1;
}

}  // namespace jit

bool HasVectorCode(const CompiledKernel& kernel) { return kernel.cta_vector != nullptr; }

int32_t RunCompiled(const CompiledKernel& kernel, const LaunchSpec& spec, uint32_t workers) {
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  const uint32_t threads = spec.block[0] * spec.block[1] * spec.block[2];
  // RunKernel checked the decoder's layout, which the tier takes, with the launch's dynamic
  // shared bytes: checked again, so that no launch of compiled code allocates what a launch
  // of the interpreter may not (a 64-bit sum of a 32-bit size: no wrap).
  const uint64_t shared_size = kernel.shared_bytes + spec.dynamic_shared;
  if (shared_size > kMaxSharedBytes || threads == 0 || threads > 1024) {
    if (spec.error_detail) {
      *spec.error_detail = "compiled kernel needs " + std::to_string(shared_size) +
                           " bytes of shared memory: more than " + std::to_string(kMaxSharedBytes);
    }
    return kLaunchOutOfResources;
  }
  // Each thread's local memory, its slice of the worker's (kept from barrier to barrier,
  // as its saved registers): the decoder's size per thread, which RunKernel bounded, checked
  // again here with the CTA's threads (no product wraps).
  uint64_t local_size = 0;
  if (__builtin_mul_overflow(kernel.local_bytes, uint64_t{threads}, &local_size) ||
      kernel.local_bytes > jit::kMaxLocalPerThread || local_size > jit::kMaxLocalPerCta) {
    if (spec.error_detail) {
      *spec.error_detail = "compiled kernel needs " + std::to_string(kernel.local_bytes) +
                           " bytes of local memory per thread: more than the sim GPU holds";
    }
    return kLaunchOutOfResources;
  }
  struct alignas(64) Worker {
    Context context;
    std::vector<Hint> hints;
    std::vector<uint8_t> shared;
    std::vector<uint8_t> local;
    std::vector<int32_t> resume;
    std::vector<uint64_t> saved;
    std::atomic<uint64_t> unwatched{0};  // progress of a launch nobody watches
    int32_t error = 0;
    uint64_t failed_cta = 0;
    bool out_of_memory = false;  // the worker's host memory could not be had
  };
  // A launch on one worker (most launches of small grids) runs on the calling thread's
  // kept scratch (kKeptScratchBytes): fresh vectors per launch cost a stream of small
  // launches a tenth of the agent's time (scripts/bench/remote).
  thread_local Worker kept;
  thread_local bool kept_in_use = false;
  std::vector<Worker> own;
  std::span<Worker> states;
  const bool keep = workers == 1 && !kept_in_use;
  if (keep) {
    kept.context = Context{};
    kept.unwatched.store(0, std::memory_order_relaxed);
    kept.error = 0;
    kept.out_of_memory = false;
    kept.failed_cta = 0;
    kept_in_use = true;
    states = std::span<Worker>(&kept, 1);
  } else {
    own = std::vector<Worker>(workers);
    states = own;
  }
  struct Release {
    bool keep;
    ~Release() {
      if (!keep) return;
      kept_in_use = false;
      const size_t held = kept.hints.capacity() * sizeof(Hint) + kept.shared.capacity() + kept.local.capacity() +
                          kept.resume.capacity() * sizeof(int32_t) + kept.saved.capacity() * sizeof(uint64_t);
      if (held > kKeptScratchBytes) {
        kept.hints = {};
        kept.shared = {};
        kept.local = {};
        kept.resume = {};
        kept.saved = {};
      }
    }
  } release{keep};
  std::atomic<bool> stop{false};
  const CtaFunction run_cta =
      kernel.cta_vector != nullptr && spec.block[0] % kVectorLanes == 0 ? kernel.cta_vector : kernel.cta;
  auto run_or_fail = [&](uint32_t index) {
    Worker& worker = states[index];
    worker.hints.assign(kernel.accesses.size(), Hint{});
    worker.shared.assign(std::max<uint64_t>(shared_size, 1), 0);
    worker.resume.assign(threads, 0);
    // Zeroed once per launch and worker, then left from CTA to CTA, as the interpreter
    // leaves its CTA context's (PrepareCta).
    worker.local.assign(std::max<uint64_t>(local_size, 1), 0);
    if (kernel.barriers) worker.saved.assign(uint64_t{threads} * std::max(kernel.registers, 1u), 0);
    Context& context = worker.context;
    context.hints = worker.hints.data();
    context.translate = &Translate;
    context.progress = spec.progress != nullptr ? spec.progress : &worker.unwatched;
    context.cancel = spec.cancel != nullptr ? spec.cancel : &kNeverCancelled;
    context.spec = &spec;
    context.accesses = &kernel.accesses;
    context.shared_size = shared_size;
    context.local = worker.local.data();
    for (int i = 0; i < 3; ++i) {
      context.ntid[i] = spec.block[i];
      context.nctaid[i] = spec.grid[i];
    }
    for (uint64_t cta = index; cta < ctas; cta += workers) {
      if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
      if (stop.load(std::memory_order_relaxed)) break;
      if (context.cancel->load(std::memory_order_relaxed)) {
        worker.error = kLaunchTimeout;
        worker.failed_cta = cta;
        stop.store(true);
        break;
      }
      const uint32_t x = static_cast<uint32_t>(cta % spec.grid[0]);
      const uint32_t y = static_cast<uint32_t>(cta / spec.grid[0] % spec.grid[1]);
      const uint32_t z = static_cast<uint32_t>(cta / spec.grid[0] / spec.grid[1]);
      if (kernel.barriers) std::fill(worker.resume.begin(), worker.resume.end(), 0);
      int32_t error =
          run_cta(&context, spec.params, x, y, z, worker.shared.data(), worker.resume.data(), worker.saved.data());
      if (error != 0) {
        worker.error = error;
        worker.failed_cta = cta;
        stop.store(true);
        break;
      }
    }
  };
  // No exception leaves a worker (a helper's would end the process): out of host memory
  // fails the launch.
  auto run = [&](uint32_t index) {
    try {
      run_or_fail(index);
    } catch (const std::exception&) {
      states[index].error = kLaunchOutOfResources;
      states[index].failed_cta = 0;
      states[index].out_of_memory = true;
      stop.store(true);
    }
  };
  RunOnWorkers(workers, [&](uint32_t index, bool) { run(index); });
  FirstFailure failure;
  for (Worker& worker : states) {
    if (spec.thread_instructions) *spec.thread_instructions += worker.context.instructions;
    if (failure.Offer(worker.error, worker.failed_cta)) {
      const int32_t error = worker.error;
      if (spec.error_detail && worker.out_of_memory) {
        *spec.error_detail = "the launch ran out of host memory";
      } else if (spec.error_detail && error == kLaunchTimeout) {
        *spec.error_detail = kCancelledDetail;
      } else if (spec.error_detail && error == jit::kLaunchFailed) {
        *spec.error_detail = CallsTooDeepDetail(worker.context.trap_line);
      } else if (spec.error_detail) {
        const Context& c = worker.context;
        if (c.fault_what != nullptr) {
          *spec.error_detail =
              FaultText(c.fault_what, c.fault_size, c.fault_address, worker.failed_cta, c.fault_thread / 32);
        } else {
          const MemoryAccess& access = kernel.accesses[c.fault_access];
          *spec.error_detail =
              FaultText(access.what, access.size, c.fault_address, worker.failed_cta, c.fault_thread / 32);
        }
      }
    }
  }
  return failure.error();
}

}  // namespace gpupool::sim

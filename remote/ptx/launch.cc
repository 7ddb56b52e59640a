#include "remote/ptx/launch.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "remote/protocol/protocol.h"
#include "remote/ptx/ir/kernel.h"
#include "remote/ptx/interp/interpreter.h"
#include "remote/ptx/jit/jit.h"
#include "remote/ptx/memory.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim {

namespace {

// The CUresult values a launch is refused with: the protocol's (remote/protocol/protocol.h).
constexpr int32_t kInvalidValue = dataplane::kCuInvalidValue;
constexpr int32_t kOutOfResources = dataplane::kCuLaunchOutOfResources;
constexpr int32_t kNotSupported = dataplane::kCuNotSupported;
constexpr int32_t kInvalidClusterSize = dataplane::kCuInvalidClusterSize;
constexpr int32_t kSuccess = dataplane::kCuSuccess;
constexpr uint32_t kMaxClusterBlocks = dataplane::kMaxClusterBlocks;

// Local memory of one thread (CUDA's limit), and host memory of one CTA's registers and
// local memory together.
constexpr uint64_t kMaxLocalPerThread = 512 * 1024;
constexpr uint64_t kMaxCtaBytes = uint64_t{1} << 30;
// Host memory of the blocks of one cluster together (each worker runs one cluster at a
// time).
constexpr uint64_t kMaxClusterBytes = uint64_t{2} << 30;

}  // namespace

uint32_t WorkersFor(uint64_t ctas) { return ctas >= 4 && std::thread::hardware_concurrency() >= 2 ? kMaxWorkers : 1; }

void RunOnWorkers(uint32_t workers, const std::function<void(uint32_t, bool)>& run) {
  std::vector<std::thread> threads_of_workers;
  std::vector<uint32_t> inline_workers;  // whose thread could not be started: run here
  for (uint32_t worker = 1; worker < workers; ++worker) {
    try {
      threads_of_workers.emplace_back([&run, worker] { run(worker, false); });
    } catch (const std::exception&) {
      inline_workers.push_back(worker);
    }
  }
  run(0, true);
  for (uint32_t worker : inline_workers) run(worker, true);
  for (std::thread& thread : threads_of_workers) thread.join();
}

bool CooperativeGridFits(const DecodedKernel& kernel, uint64_t ctas, uint32_t threads, uint64_t shared_size) {
  // (no wrap: threads <= 1024 and the decoder's sizes are bounded, as RunInterpreted's)
  uint64_t total = 0;
  return !__builtin_mul_overflow(CooperativeCtaBytes(kernel, threads, shared_size), ctas, &total) &&
         total <= CooperativeBytesLimit();
}

KernelNeeds NeedsOf(const DecodedKernel& kernel, uint32_t sm_count) {
  KernelNeeds needs;
  needs.registers = CooperativeRegisters(kernel, sm_count);
  needs.max_threads = kernel.max_threads != 0 ? std::min<uint32_t>(kernel.max_threads, 1024) : 1024;
  needs.static_shared = kernel.declared_shared;
  needs.const_bytes = kernel.const_bytes;
  needs.local_bytes = kernel.local_size;
  return needs;
}

// The kernel's compiled form when this launch should run it (jit/jit.h): not for what the
// tier leaves to the interpreter (dynamic shared memory for a kernel that names no shared
// variable, whose compiled code takes no generic address for a shared one). A cooperative
// launch runs compiled too, its CTAs resident together (RunCompiled). Under GPUPOOL_PTX_JIT=auto the kernel is compiled
// in the background once its launches, this one included, reach kJitAfterThreads threads, and its launches run on the
// interpreter until the code is there.
static const CompiledKernel* CompiledFor(const DecodedKernel& kernel, const LaunchSpec& spec, uint64_t threads) {
  const JitMode mode = CurrentJitMode();
  const bool names_shared = !kernel.shared_layout.offsets.empty() || !kernel.shared_layout.dynamic.empty();
  if (mode == JitMode::kOff || kernel.source == nullptr || kernel.module == nullptr ||
      (spec.dynamic_shared != 0 && !names_shared)) {
    return nullptr;
  }
  JitSlot& slot = *kernel.jit;
  // This launch counts: the one that brings the kernel to kJitAfterThreads starts the
  // compile, so that a kernel of a few large launches (NVIDIA's samples: a warm-up launch,
  // then 100 more) has its code from the first on, not the second.
  const uint64_t counted = std::max(threads, kJitLaunchThreads);
  if (mode == JitMode::kAuto) {
    const uint64_t before = slot.threads_run.fetch_add(counted);
    if (before < kJitAfterThreads && counted < kJitAfterThreads - before) return nullptr;  // (no sum to wrap)
  }
  std::unique_lock<std::mutex> lock(slot.mu);
  if (!slot.tried) {
    slot.tried = true;
    if (mode == JitMode::kAuto) {
      CompileInBackground(kernel.jit, *kernel.module, *kernel.source, kernel.shared_layout, kernel.param_size);
    } else {
      slot.compiled =
          CompileKernel(*kernel.module, *kernel.source, kernel.shared_layout, kernel.param_size, &slot.refused);
    }
  }
  if (mode == JitMode::kAuto && threads >= kJitAfterThreads && slot.compiling) {
    // A launch that large waits a little for its code (a compile takes 0.02-1 s; the
    // interpreter took 9 s over the first launch of a 1280 x 1280 tiled multiply shaped as
    // NVIDIA's async-copy sample, 0.7 s compiled), well inside the agent's watchdog's patience.
    slot.compiled_cv.wait_for(lock, kJitLaunchWaits, [&] { return !slot.compiling; });
  }
  // Compiled code slower than the interpreter (CompiledKernel::auto_interpreted): auto
  // leaves its launches there. So too a plain launch of a kernel that yields (a thread
  // spinning on a load): CTAs that wait on each other through memory may take turns
  // faster there (CUB's decoupled look-back, compiled with its vote allowed, ran 2x slower
  // than interpreted); a cooperative launch's (grid.sync()) run compiled, 6.8x faster
  // (scripts/bench/ptx: GridSum).
  if (mode == JitMode::kAuto && slot.compiled != nullptr &&
      (AutoInterpreted(*slot.compiled) || (Yields(*slot.compiled) && !spec.cooperative))) {
    return nullptr;
  }
  const uint32_t block = spec.block[0] * spec.block[1] * spec.block[2];
  if (slot.compiled != nullptr && !TakesBlock(*slot.compiled, block)) return nullptr;
  return slot.compiled.get();
}

int32_t ClusterShapeOf(const DecodedKernel& kernel, const LaunchSpec& spec, uint32_t shape[3], std::string* detail) {
  auto fail = [&](int32_t status, const std::string& why) {
    if (detail != nullptr) *detail = "kernel " + kernel.name + ": " + why;
    return status;
  };
  auto text = [](const uint32_t dims[3]) {
    return std::to_string(dims[0]) + "x" + std::to_string(dims[1]) + "x" + std::to_string(dims[2]);
  };
  const bool asked = spec.cluster[0] != 1 || spec.cluster[1] != 1 || spec.cluster[2] != 1;
  const bool compiled = kernel.required_cluster[0] != 0;
  if (spec.cluster[0] == 0 || spec.cluster[1] == 0 || spec.cluster[2] == 0) {
    return fail(kInvalidClusterSize, "a cluster dimension of 0");
  }
  if (compiled && asked && !std::equal(spec.cluster, spec.cluster + 3, kernel.required_cluster)) {
    return fail(kInvalidClusterSize, "compiled for clusters of " + text(kernel.required_cluster) +
                                         " blocks, launched with clusters of " + text(spec.cluster));
  }
  std::copy_n(compiled ? kernel.required_cluster : spec.cluster, 3, shape);
  uint64_t blocks = 1;
  for (int axis = 0; axis < 3; ++axis) {
    // Each dimension is at most the grid's (divisibility below), so the product is bounded
    // before it is compared; checked per axis against 16 first so that it cannot wrap.
    if (shape[axis] > kMaxClusterBlocks) return fail(kInvalidClusterSize, "a cluster of more than 16 blocks");
    blocks *= shape[axis];
  }
  if (blocks > kMaxClusterBlocks)
    return fail(kInvalidClusterSize, "a cluster of " + text(shape) + " blocks (at most 16)");
  if (kernel.max_cluster_rank != 0 && blocks > kernel.max_cluster_rank) {
    return fail(kInvalidClusterSize, "a cluster of " + std::to_string(blocks) + " blocks, the kernel allows " +
                                         std::to_string(kernel.max_cluster_rank));
  }
  for (int axis = 0; axis < 3; ++axis) {
    if (spec.grid[axis] % shape[axis] != 0) {
      return fail(kInvalidClusterSize, "a grid of " + text(spec.grid) + " blocks in clusters of " + text(shape));
    }
  }
  if (blocks > 1 && spec.cooperative) return fail(kNotSupported, "a cooperative launch in clusters");
  return kSuccess;
}

int32_t RunKernel(const DecodedKernel& kernel, const LaunchSpec& spec) {
  if (!kernel.unsupported.empty()) {
    if (spec.error_detail) *spec.error_detail = kernel.unsupported;
    return kNotSupported;
  }
  if (spec.param_size < kernel.param_size) {
    if (spec.error_detail) *spec.error_detail = "parameter buffer smaller than the kernel's parameters";
    return kInvalidValue;
  }
  const uint32_t threads = spec.block[0] * spec.block[1] * spec.block[2];
  if (threads == 0 || threads > 1024) return kInvalidValue;
  if (kernel.max_threads != 0 && threads > kernel.max_threads) {
    // As a GPU refuses a block larger than the kernel's __launch_bounds__.
    if (spec.error_detail) {
      *spec.error_detail = "kernel " + kernel.name + " was compiled for at most " + std::to_string(kernel.max_threads) +
                           " threads per block, launched with " + std::to_string(threads);
    }
    return kOutOfResources;
  }
  const uint64_t shared_size = kernel.static_shared + spec.dynamic_shared;
  if (shared_size > 228 * 1024) return kOutOfResources;
  // What a CTA holds in host memory: bounded, as a GPU bounds local memory (512 KiB per
  // thread) and registers, so that a job's PTX cannot make the agent allocate without end.
  {
    const uint64_t warps = (threads + 31) / 32;
    const uint64_t per_cta = warps * 32 * (uint64_t{kernel.slot_count} * 8 + kernel.local_size);
    if (kernel.local_size > kMaxLocalPerThread || per_cta > kMaxCtaBytes) {
      if (spec.error_detail) {
        *spec.error_detail = "kernel " + kernel.name + " needs " + std::to_string(kernel.local_size) +
                             " bytes of local memory and " + std::to_string(kernel.slot_count) +
                             " registers per thread: more than the sim GPU holds";
      }
      return kOutOfResources;
    }
  }
  uint32_t cluster[3];
  if (int32_t status = ClusterShapeOf(kernel, spec, cluster, spec.error_detail); status != kSuccess) return status;
  if (const uint64_t blocks = uint64_t{cluster[0]} * cluster[1] * cluster[2]; blocks > 1) {
    // A cluster's blocks are resident at once: their registers, local and shared memory
    // together must fit, as a cooperative grid's must.
    const uint64_t warps = (threads + 31) / 32;
    const uint64_t per_cta = warps * 32 * (uint64_t{kernel.slot_count} * 8 + kernel.local_size) + shared_size;
    if (per_cta * blocks > kMaxClusterBytes) {
      if (spec.error_detail) {
        *spec.error_detail = "kernel " + kernel.name + ": a cluster of " + std::to_string(blocks) +
                             " blocks does not fit the sim GPU at once";
      }
      return kOutOfResources;
    }
  }
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  const uint32_t workers = WorkersFor(ctas);
  // The JIT tier runs no clusters: a kernel that names its cluster, or launched in one of
  // more than a block, runs on the interpreter.
  const bool clustered = kernel.names_cluster || cluster[0] * cluster[1] * cluster[2] > 1;
  if (const CompiledKernel* compiled = clustered ? nullptr : CompiledFor(kernel, spec, threads * ctas)) {
    kernel.jit->jit_launches.fetch_add(1, std::memory_order_relaxed);
    return RunCompiled(*compiled, spec, workers);
  }
  return RunInterpreted(kernel, spec, workers);
}

namespace {

// The host bytes of [address, address + bytes), where one allocation of `memory` holds them
// all; nullptr otherwise (the arithmetic checked: every value is the tenant's).
char* HostSpan(const std::vector<MemoryRange>& memory, uint64_t address, uint64_t bytes) {
  const MemoryRange* range = AllocationAtOrBelow(memory, address);
  if (range == nullptr) return nullptr;
  const uint64_t offset = address - range->start;
  if (offset > range->size || bytes > range->size - offset) return nullptr;
  return range->host + offset;
}

// The bytes from a pitched region's first byte to past its last: (depth - 1) * slice_pitch
// + (height - 1) * pitch + width, with height and depth >= 1; false where that does not
// fit in 64 bits.
bool PitchedSpan(uint64_t slice_pitch, uint64_t depth, uint64_t pitch, uint64_t width, uint64_t height,
                 uint64_t* span) {
  uint64_t slices = 0, rows = 0, both = 0;
  return !__builtin_mul_overflow(depth - 1, slice_pitch, &slices) &&
         !__builtin_mul_overflow(height - 1, pitch, &rows) && !__builtin_add_overflow(slices, rows, &both) &&
         !__builtin_add_overflow(both, width, span);
}

}  // namespace

int32_t RunDeviceCopy(const DeviceLaunch& copy, const LaunchSpec& spec) {
  if (copy.width == 0 || copy.height == 0 || copy.depth == 0) return dataplane::kCuSuccess;
  uint64_t dst_span = 0, src_span = 0;
  char* dst = PitchedSpan(copy.dst_slice_pitch, copy.depth, copy.dst_pitch, copy.width, copy.height, &dst_span)
                  ? HostSpan(spec.memory, copy.dst, dst_span)
                  : nullptr;
  const char* src = nullptr;
  if (copy.kind == DeviceLaunch::kCopy &&
      PitchedSpan(copy.src_slice_pitch, copy.depth, copy.src_pitch, copy.width, copy.height, &src_span)) {
    src = HostSpan(spec.memory, copy.src, src_span);
  }
  if (dst == nullptr || (copy.kind == DeviceLaunch::kCopy && src == nullptr)) {
    if (spec.error_detail != nullptr) {
      static constexpr const char* kCopies[] = {"cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync"};
      static constexpr const char* kSets[] = {"cudaMemsetAsync", "cudaMemset2DAsync", "cudaMemset3DAsync"};
      const int dimensions = std::clamp<int>(copy.dimensions, 1, 3) - 1;
      const char* call = copy.kind == DeviceLaunch::kCopy ? kCopies[dimensions] : kSets[dimensions];
      const char* outside = dst == nullptr ? "its destination" : "its source";
      char extent[96];
      if (copy.dimensions == 3) {
        std::snprintf(extent, sizeof(extent), "%llu slice(s) of %llu row(s) of %llu bytes",
                      static_cast<unsigned long long>(copy.depth), static_cast<unsigned long long>(copy.height),
                      static_cast<unsigned long long>(copy.width));
      } else {
        std::snprintf(extent, sizeof(extent), "%llu row(s) of %llu bytes", static_cast<unsigned long long>(copy.height),
                      static_cast<unsigned long long>(copy.width));
      }
      char text[384];
      if (copy.kind == DeviceLaunch::kCopy) {
        std::snprintf(text, sizeof(text),
                      "%s in device code (kernel %.100s): %s from 0x%llx to 0x%llx: %s is not within one allocation "
                      "of the session",
                      call, copy.kernel.c_str(), extent, static_cast<unsigned long long>(copy.src),
                      static_cast<unsigned long long>(copy.dst), outside);
      } else {
        std::snprintf(text, sizeof(text),
                      "%s in device code (kernel %.100s): %s at 0x%llx: %s is not within one allocation of the "
                      "session",
                      call, copy.kernel.c_str(), extent, static_cast<unsigned long long>(copy.dst), outside);
      }
      *spec.error_detail = text;
    }
    return dataplane::kCuIllegalAddress;
  }
  // Within the spans checked above: no offset below can wrap.
  for (uint64_t slice = 0; slice < copy.depth; ++slice) {
    for (uint64_t row = 0; row < copy.height; ++row) {
      const uint64_t to = slice * copy.dst_slice_pitch + row * copy.dst_pitch;
      // memmove: ranges that overlap (undefined in CUDA) still copy only the checked bytes.
      if (copy.kind == DeviceLaunch::kCopy) {
        std::memmove(dst + to, src + slice * copy.src_slice_pitch + row * copy.src_pitch, copy.width);
      } else {
        std::memset(dst + to, copy.value, copy.width);
      }
    }
  }
  return dataplane::kCuSuccess;
}

}  // namespace gpupool::sim

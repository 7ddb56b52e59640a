// Running compiled code (jit.h: RunCompiled): a launch's CTAs split over its workers as
// the interpreter splits them (launch.h), each worker with its Context (internal.h: what
// compiled code reads and writes besides the kernel's memory), its hints and its CTA's
// shared memory; the slow path of a checked access (Translate); the first failure reported
// with the interpreter's fault text (memory.h).
#include <algorithm>
#include <atomic>
#include <mutex>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "remote/ptx/device_heap.h"
#include "remote/ptx/device_printf.h"
#include "remote/ptx/texture.h"
#include "remote/ptx/jit/internal.h"
#include "remote/ptx/jit/jit.h"
#include "remote/ptx/jit/line_vector.h"
#include "remote/ptx/launch.h"
#include "remote/ptx/matrix_ops.h"
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

// Warp-level operations (internal.h: WarpOp), as the interpreter runs them
// (interp/warp_ops.cc), for the lanes it runs them with (interp/scheduler.cc: RunWarp).

// The lanes `op`, run by `lanes` of warp `w`, waits for (the interpreter's SyncLanes): the
// union of their membermasks.
uint32_t SyncLanes(const jit::WarpOp& op, const uint64_t* slots, uint32_t stride, uint32_t w, uint32_t lanes) {
  // Matrix operations wait for the whole warp (the interpreter's kSyncWarp).
  if (op.kind == jit::WarpOp::kMma || op.kind == jit::WarpOp::kLdmatrix || op.kind == jit::WarpOp::kMatrixSync) {
    return 0xffffffffu;
  }
  if (!op.member) return 0;
  uint32_t sync = 0;
  for (uint32_t left = lanes; left != 0; left &= left - 1) {
    const uint32_t t = w * 32 + static_cast<uint32_t>(std::countr_zero(left));
    sync |= static_cast<uint32_t>(slots[t * stride + jit::kSlotMember]);
  }
  return sync;
}

// Runs `op` for `lanes` of warp `w`: each lane's results in its slots.
void RunWarpOp(const jit::WarpOp& op, const Context& context, uint64_t* slots, uint32_t w, uint32_t lanes) {
  auto slot = [&](uint32_t lane, uint32_t which) -> uint64_t& {
    return slots[(w * 32 + lane) * context.kernel->warp_slots + which];
  };
  auto each = [&](uint32_t mask, auto f) {
    for (uint32_t left = mask; left != 0; left &= left - 1) f(static_cast<uint32_t>(std::countr_zero(left)));
  };
  // f(group, same) for each lane's membermask among the lanes running (`group`) and the
  // lanes whose membermask names that group (`same`), as the interpreter's ForMemberGroups.
  auto member_groups = [&](auto f) {
    uint32_t left = lanes;
    while (left != 0) {
      const uint32_t group =
          static_cast<uint32_t>(slot(static_cast<uint32_t>(std::countr_zero(left)), jit::kSlotMember)) & lanes;
      uint32_t same = 0;
      each(left, [&](uint32_t lane) {
        if ((static_cast<uint32_t>(slot(lane, jit::kSlotMember)) & lanes) == group) same |= 1u << lane;
      });
      f(group, same);
      left &= ~same;
    }
  };
  switch (op.kind) {
    case jit::WarpOp::kShfl: {
      // A lane reads its source lane's register as that lane last wrote it, whether or not
      // it runs the shuffle (its shadow).
      const uint32_t shadows = context.kernel->shadows;
      each(lanes, [&](uint32_t lane) {
        const uint64_t b = slot(lane, jit::kSlotB), c = slot(lane, jit::kSlotC);
        const uint32_t bval = b & 0x1f, cval = c & 0x1f, segmask = (c >> 8) & 0x1f;
        const int max_lane = static_cast<int>((lane & segmask) | (cval & ~segmask));
        const int min_lane = static_cast<int>(lane & segmask);
        int j = static_cast<int>(lane);
        bool ok = false;
        switch (op.mode) {
          case 1:
            j = static_cast<int>(lane) - static_cast<int>(bval);
            ok = j >= max_lane;
            break;
          case 2:
            j = static_cast<int>(lane) + static_cast<int>(bval);
            ok = j <= max_lane;
            break;
          case 3:
            j = static_cast<int>(lane) ^ static_cast<int>(bval);
            ok = j <= max_lane;
            break;
          default:
            j = min_lane | static_cast<int>(bval & ~segmask);
            ok = j <= max_lane;
            break;
        }
        if (!ok || j < 0 || j > 31) j = static_cast<int>(lane);
        slot(lane, jit::kSlotResult) =
            op.source < 0
                ? op.value
                : context
                      .shadow[uint64_t{w * 32 + static_cast<uint32_t>(j)} * shadows + static_cast<uint32_t>(op.source)];
        slot(lane, jit::kSlotResultPredicate) = ok;
      });
      break;
    }
    case jit::WarpOp::kVote: {
      uint32_t ballot = 0;
      each(lanes, [&](uint32_t lane) { ballot |= static_cast<uint32_t>(slot(lane, jit::kSlotPredicate) & 1) << lane; });
      // Over the lanes of each lane's membermask among those running.
      member_groups([&](uint32_t group, uint32_t same) {
        const uint32_t votes = ballot & group;
        const uint64_t r = op.mode == 0   ? votes == group
                           : op.mode == 1 ? votes != 0
                           : op.mode == 2 ? votes == 0 || votes == group
                                          : votes;
        each(same, [&](uint32_t lane) { slot(lane, jit::kSlotResult) = r; });
      });
      break;
    }
    case jit::WarpOp::kRedux: {
      // Over the 32-bit values of each lane's membermask among the lanes running (interp:
      // HRedux).
      const uint32_t mode = op.mode & 7;
      const bool is_signed = op.mode & 8;
      member_groups([&](uint32_t group, uint32_t same) {
        uint32_t acc = mode == 1   ? (is_signed ? 0x7fffffffu : 0xffffffffu)
                       : mode == 2 ? (is_signed ? 0x80000000u : 0u)
                       : mode == 3 ? 0xffffffffu
                                   : 0u;
        each(group, [&](uint32_t lane) {
          const uint32_t v = static_cast<uint32_t>(slot(lane, jit::kSlotPredicate));
          switch (mode) {
            case 0:
              acc += v;
              break;
            case 1:
              acc = is_signed ? static_cast<uint32_t>(std::min(static_cast<int32_t>(acc), static_cast<int32_t>(v)))
                              : std::min(acc, v);
              break;
            case 2:
              acc = is_signed ? static_cast<uint32_t>(std::max(static_cast<int32_t>(acc), static_cast<int32_t>(v)))
                              : std::max(acc, v);
              break;
            case 3:
              acc &= v;
              break;
            case 4:
              acc |= v;
              break;
            default:
              acc ^= v;
              break;
          }
        });
        each(same, [&](uint32_t lane) { slot(lane, jit::kSlotResult) = acc; });
      });
      break;
    }
    case jit::WarpOp::kMatch:
      // Over the values of each lane's membermask among the lanes running (interp: HMatch):
      // any, the lanes holding the lane's value; all, the group if every lane holds one value.
      member_groups([&](uint32_t group, uint32_t same) {
        const uint64_t first =
            group != 0 ? slot(static_cast<uint32_t>(std::countr_zero(group)), jit::kSlotPredicate) : 0;
        bool all_same = true;
        each(group, [&](uint32_t lane) { all_same = all_same && slot(lane, jit::kSlotPredicate) == first; });
        each(same, [&](uint32_t lane) {
          const uint64_t value = slot(lane, jit::kSlotPredicate);
          uint32_t equal = 0;
          each(group, [&](uint32_t k) { equal |= static_cast<uint32_t>(slot(k, jit::kSlotPredicate) == value) << k; });
          slot(lane, jit::kSlotResult) = op.mode == 0 ? equal : all_same ? group : 0;
          slot(lane, jit::kSlotResultPredicate) = all_same;
        });
      });
      break;
    case jit::WarpOp::kActivemask:
      each(lanes, [&](uint32_t lane) { slot(lane, jit::kSlotResult) = lanes; });
      break;
    case jit::WarpOp::kMma: {
      // The interpreter's HWmmaMma: a, b and c of all 32 lanes (their shadows), d to the
      // lanes running it.
      const WmmaOp& matrix = *op.matrix;
      const uint32_t shadows = context.kernel->shadows;
      uint64_t in[3][kMaxFragmentRegisters][32];
      const uint64_t* rows[3][kMaxFragmentRegisters];
      for (int m = 0; m < 3; ++m) {
        for (size_t r = 0; r < matrix.fragments[m + 1].size(); ++r) {
          const uint32_t index = static_cast<uint32_t>(matrix.fragments[m + 1][r]);
          for (uint32_t l = 0; l < 32; ++l) in[m][r][l] = context.shadow[uint64_t{w * 32 + l} * shadows + index];
          rows[m][r] = in[m][r];
        }
      }
      uint64_t out[kMaxFragmentRegisters][32];
      uint64_t* out_rows[kMaxFragmentRegisters];
      for (uint32_t r = 0; r < kMaxFragmentRegisters; ++r) out_rows[r] = out[r];
      WarpMma(matrix, rows[0], rows[1], rows[2], out_rows, lanes);
      each(lanes, [&](uint32_t lane) {
        for (size_t r = 0; r < matrix.fragments[0].size(); ++r) {
          slot(lane, jit::kSlotMatrix + static_cast<uint32_t>(r)) = out[r][lane];
        }
      });
      break;
    }
    case jit::WarpOp::kLdmatrix: {
      // The interpreter's HLdmatrix: the rows the 32 lanes' address registers give (their
      // shadows), each running lane's elements' addresses, which the thread loads.
      const uint32_t shadows = context.kernel->shadows;
      uint64_t rows[32];
      for (uint32_t l = 0; l < 32; ++l) {
        rows[l] = context.shadow[uint64_t{w * 32 + l} * shadows + static_cast<uint32_t>(op.source)] + op.value;
      }
      const uint32_t count = op.mode & 7;
      const bool transpose = (op.mode & 8) != 0;
      each(lanes, [&](uint32_t lane) {
        for (uint32_t j = 0; j < count; ++j) {
          for (uint32_t h = 0; h < 2; ++h) {
            slot(lane, jit::kSlotMatrix + 2 * j + h) = LdmatrixAddress(rows, lane, j, h, transpose);
          }
        }
      });
      break;
    }
    default:
      break;
  }
}

// Context::settle: every thread of the CTA stopped (at a barrier or a warp-level operation)
// or ended. In each warp with lanes at warp-level operations, runs one as the interpreter
// picks it: the one placed first, for the lanes stopped there; but where its membermasks
// name lanes stopped at another, that one first if the lowest placed of those waits for no
// lane outside it (RunWarp: lanes "behind"). Else, with threads at the barrier, releases it.
int32_t Settle(Context* context, int32_t* resume, uint64_t*) {
  const std::vector<jit::WarpOp>& ops = context->kernel->warp_ops;
  const uint32_t threads = context->ntid[0] * context->ntid[1] * context->ntid[2];
  uint64_t* slots = context->slots;
  const uint32_t stride = context->kernel->warp_slots;
  // Lane l of a warp: at which op (index into ops), or -1 (ended, or at the barrier).
  auto op_of = [&](uint32_t t) -> int32_t {
    if (t >= threads || resume[t] < 0) return -1;
    const int32_t k = (resume[t] & ~jit::kStopped) - 1;
    return ops[k].kind == jit::WarpOp::kBarrier || ops[k].kind == jit::WarpOp::kYield ? -1 : k;
  };
  // Thread t stopped before a load it may spin on.
  auto at_yield = [&](uint32_t t) {
    return t < threads && resume[t] > 0 && (resume[t] & jit::kStopped) != 0 &&
           ops[(resume[t] & ~jit::kStopped) - 1].kind == jit::WarpOp::kYield;
  };
  bool ran = false;
  for (uint32_t w = 0; w * 32 < threads; ++w) {
    int32_t at[32];
    uint32_t ready = 0, yielding = 0;
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t t = w * 32 + l;
      at[l] = op_of(t);
      if (at[l] >= 0) ready |= 1u << l;
      if (at_yield(t)) yielding |= 1u << l;
    }
    if (ready == 0) continue;
    // The lowest placed operation among `among`, and the lanes (of `ready`) stopped there.
    auto lowest = [&](uint32_t among, uint32_t* lanes) {
      int32_t k = -1;
      for (uint32_t left = among; left != 0; left &= left - 1) {
        const int32_t o = at[std::countr_zero(left)];
        if (k < 0 || ops[o].pc < ops[k].pc) k = o;
      }
      *lanes = 0;
      for (uint32_t l = 0; l < 32; ++l) *lanes |= static_cast<uint32_t>(at[l] == k) << l;
      return k;
    };
    uint32_t lanes = 0;
    int32_t k = lowest(ready, &lanes);
    if (const uint32_t behind = SyncLanes(ops[k], slots, stride, w, lanes) & ready & ~lanes; behind != 0) {
      uint32_t other_lanes = 0;
      const int32_t other = lowest(behind, &other_lanes);
      if ((SyncLanes(ops[other], slots, stride, w, other_lanes) & ready & ~other_lanes) == 0) {
        k = other;
        lanes = other_lanes;
      }
    }
    // Lanes it waits for stopped at a yield go on first (the CTA yields, below): they are on
    // their way to it.
    if ((SyncLanes(ops[k], slots, stride, w, lanes) & yielding) != 0) continue;
    RunWarpOp(ops[k], *context, slots, w, lanes);
    for (uint32_t left = lanes; left != 0; left &= left - 1) {
      resume[w * 32 + static_cast<uint32_t>(std::countr_zero(left))] &= ~jit::kStopped;
    }
    ran = true;
  }
  if (ran) return 1;
  // Threads before a load they may spin on go on with it, after the CTA yielded its worker
  // (RunCompiled): what they wait for may be another CTA's to do. The others wait on.
  bool yielded = false;
  for (uint32_t t = 0; t < threads; ++t) {
    if (at_yield(t)) {
      resume[t] &= ~jit::kStopped;
      yielded = true;
    }
  }
  if (yielded) return jit::kSettleYield;
  // Every thread at the barrier or ended: the barrier releases them.
  bool waiting = false;
  for (uint32_t t = 0; t < threads; ++t) {
    if (resume[t] > 0) {
      resume[t] &= ~jit::kStopped;
      waiting = true;
    }
  }
  return waiting ? 1 : 0;
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

namespace {

// The module's heap as the interpreter's handlers find it (interp/device_heap.cc,
// DeviceHeap: the launch's global memory), or nullptr with the fault set as they set it.
uint8_t* DeviceHeapMemory(Context* context, uint64_t heap, uint64_t heap_size) {
  uint8_t* memory = TextureMemory(context, heap, static_cast<uint32_t>(heap_size));
  if (memory == nullptr) {
    context->fault_address = heap;
    context->fault_size = 16;
    context->fault_what = "device heap";
  }
  return memory;
}

// A thread's generic memory as the interpreter's Warp::Address resolves it: its local and
// shared memory and the launch's parameters through their windows, else global memory.
struct ThreadMemory {
  Context* context;
  uint8_t* local;
  uint8_t* shared;
  static const uint8_t* At(void* opaque, uint64_t address, uint32_t size) {
    const ThreadMemory& self = *static_cast<ThreadMemory*>(opaque);
    auto within = [&](uint64_t window, uint64_t bytes, const uint8_t* base) -> const uint8_t* {
      const uint64_t offset = (address - window) & 0xffffffffffffull;
      if (offset > bytes || size > bytes - offset) return nullptr;
      return base + offset;
    };
    if (address >= kSharedWindow && address - kSharedWindow < kWindowSize) {
      return within(kSharedWindow, self.context->shared_size, self.shared);
    }
    if (address >= kLocalWindow && address - kLocalWindow < kWindowSize) {
      return within(kLocalWindow, self.context->kernel->local_bytes, self.local);
    }
    if (address >= kParamWindow && address - kParamWindow < kWindowSize) {
      return within(kParamWindow, self.context->spec->param_size, self.context->spec->params);
    }
    return TextureMemory(self.context, address, size);
  }
};

}  // namespace

int32_t PrintfLane(Context* context, uint64_t format, uint64_t args, uint8_t* local, uint8_t* shared) {
  ThreadMemory thread{context, local, shared};
  const DeviceMemory memory{&thread, &ThreadMemory::At};
  const std::string text = FormatDevicePrintf(memory, ReadDeviceString(memory, format), args);
  AppendPrintf(&context->printf_text, text, &context->printf_dropped);
  return static_cast<int32_t>(text.size());
}

void AssertLane(Context* context, uint64_t message, uint64_t file, uint32_t line, uint64_t function, uint8_t* local,
                uint8_t* shared, uint32_t thread, uint32_t ctaid_x, uint32_t ctaid_y, uint32_t ctaid_z) {
  ThreadMemory memory{context, local, shared};
  const uint32_t* block = context->ntid;
  const uint32_t tid[3] = {thread % block[0], thread / block[0] % block[1], thread / (block[0] * block[1])};
  const uint32_t ctaid[3] = {ctaid_x, ctaid_y, ctaid_z};
  AppendPrintf(&context->printf_text,
               FormatDeviceAssert(DeviceMemory{&memory, &ThreadMemory::At}, message, file, line, function, ctaid, tid),
               &context->printf_dropped);
}

int32_t SetConditionalLane(Context* context, uint64_t handle, uint32_t value) {
  uint8_t* slot = TextureMemory(context, handle, 4);
  if (slot == nullptr) {
    context->fault_address = handle;
    context->fault_size = 4;
    context->fault_what = "cudaGraphSetConditional of a handle that is not a conditional's";
    return 1;
  }
  // As the interpreter's StoreWhole: one store where aligned (another thread reading the
  // word sees it whole).
  if (reinterpret_cast<uintptr_t>(slot) % 4 == 0) {
    __atomic_store_n(reinterpret_cast<uint32_t*>(slot), value, __ATOMIC_RELAXED);
  } else {
    std::memcpy(slot, &value, 4);
  }
  return 0;
}

int32_t MallocLane(Context* context, uint64_t heap, uint64_t heap_size, uint64_t bytes, uint64_t* address) {
  uint8_t* memory = DeviceHeapMemory(context, heap, heap_size);
  if (memory == nullptr) return 1;
  std::lock_guard<std::mutex> lock(device_heap_mu);
  *address = DeviceMalloc(memory, heap, heap_size, bytes);
  return 0;
}

int32_t FreeLane(Context* context, uint64_t heap, uint64_t heap_size, uint64_t address) {
  uint8_t* memory = DeviceHeapMemory(context, heap, heap_size);
  if (memory == nullptr) return 1;
  std::lock_guard<std::mutex> lock(device_heap_mu);
  if (DeviceFree(memory, heap, heap_size, address)) return 0;
  context->fault_address = address;
  context->fault_size = 1;
  context->fault_what = "free of a pointer device malloc did not return (or freed twice)";
  return 1;
}

}  // namespace jit

bool HasVectorCode(const CompiledKernel& kernel) { return kernel.cta_vector != nullptr; }

bool Yields(const CompiledKernel& kernel) { return kernel.yields; }

uint32_t SavedRegisters(const CompiledKernel& kernel) { return kernel.registers; }
uint32_t VectorSavedRegisters(const CompiledKernel& kernel) { return kernel.vector_registers; }

bool AutoInterpreted(const CompiledKernel& kernel) { return kernel.auto_interpreted; }

bool TakesBlock(const CompiledKernel& kernel, uint32_t threads) { return !kernel.whole_warps || threads % 32 == 0; }

namespace {

// A CTA a worker holds while it yields (CompiledKernel::yields): its own shared memory,
// its threads' resume points, saved registers, local memory, warp slots and shadows.
struct ResidentCta {
  uint64_t cta = 0;
  jit::LineVector<uint8_t> shared;
  jit::LineVector<uint8_t> local;
  jit::LineVector<int32_t> resume;
  jit::LineVector<uint64_t> saved;
  jit::LineVector<uint64_t> slots;
  jit::LineVector<uint64_t> shadow;
};

// A worker of a kernel whose CTAs may yield holds this many of a plain launch at once (of a
// cooperative launch, as many as it draws): a CTA spinning on what a later one of its
// worker writes waits for it among them, as the interpreter's resident CTAs do.
constexpr size_t kMaxResidentCtas = 32;

}  // namespace

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
    jit::LineVector<uint8_t> shared;
    jit::LineVector<uint8_t> local;
    jit::LineVector<int32_t> resume;
    jit::LineVector<uint64_t> saved;
    jit::LineVector<uint64_t> slots;     // warp-level operations' (warp_slots per thread)
    jit::LineVector<uint64_t> shadow;    // the shuffled registers' (per lane of the CTA's warps)
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
                          kept.resume.capacity() * sizeof(int32_t) +
                          (kept.saved.capacity() + kept.slots.capacity() + kept.shadow.capacity()) * sizeof(uint64_t);
      if (held > kKeptScratchBytes) {
        kept.hints = {};
        kept.shared = {};
        kept.local = {};
        kept.resume = {};
        kept.saved = {};
        kept.slots = {};
        kept.shadow = {};
      }
    }
  } release{keep};
  std::atomic<bool> stop{false};
  const CtaFunction run_cta =
      kernel.cta_vector != nullptr && spec.block[0] % kVectorLanes == 0 ? kernel.cta_vector : kernel.cta;
  // The host bytes of a CTA held while it yields (ResidentCta; no product wraps: each
  // factor was bounded above).
  const uint64_t held_lanes = (uint64_t{threads} + 31) / 32 * 32;
  const uint64_t per_cta = uint64_t{threads} * (uint64_t{kernel.registers} * 8 + 4 + uint64_t{kernel.warp_slots} * 8) +
                           held_lanes * kernel.shadows * 8 + local_size + shared_size + sizeof(ResidentCta);
  if (spec.cooperative && (ctas > jit::kMaxResidentGrid || per_cta * ctas > jit::kMaxResidentBytes)) {
    // Every CTA at once: their states together must fit, as the interpreter's must.
    if (spec.error_detail) {
      *spec.error_detail =
          "a cooperative launch of " + std::to_string(ctas) + " blocks does not fit the sim GPU at once";
    }
    return jit::kCooperativeTooLarge;
  }
  // The CTAs of worker `index`, several held at once, each run until it ends or yields, in
  // turns: index, index + workers, ... of a plain launch; of a cooperative one, the next
  // from `pool`, which every worker draws from, so that a worker whose thread could not be
  // started (RunOnWorkers runs it after the others) leaves its share to the others instead
  // of stranding CTAs that the others' wait at grid.sync(). A CTA that yields has its
  // worker take on another (one of a plain launch's while it holds fewer than
  // kMaxResidentCtas), run in the same turn; one that ends, the next in its place.
  std::atomic<uint64_t> pool{0};
  auto run_resident = [&](Worker& worker, uint32_t index) {
    Context& context = worker.context;
    std::vector<ResidentCta> held;
    uint64_t next = index;
    // The next CTA into `r`: a fresh one's state allocated and zeroed; one that ended leaves
    // its place as the non-yielding path leaves its worker's (shared and local memory,
    // saved registers, slots and shadows kept from CTA to CTA), its resume points cleared.
    auto take = [&](ResidentCta* r, bool fresh) {
      if (spec.cooperative) {
        r->cta = pool.fetch_add(1, std::memory_order_relaxed);
        if (r->cta >= ctas) return false;
      } else {
        if (next >= ctas) return false;
        r->cta = next;
        next += workers;
      }
      r->resume.assign(threads, 0);
      if (fresh) {
        r->shared.assign(std::max<uint64_t>(shared_size, 1), 0);
        r->local.assign(std::max<uint64_t>(local_size, 1), 0);
        r->saved.assign(uint64_t{threads} * std::max(kernel.registers, 1u), 0);
        r->slots.assign(std::max<uint64_t>(uint64_t{threads} * kernel.warp_slots, 1), 0);
        r->shadow.assign(std::max<uint64_t>(held_lanes * kernel.shadows, 1), 0);
      }
      if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
      return true;
    };
    // A plain launch's workers hold at most kMaxResidentCtas each, and all of them at most
    // kMaxResidentBytes together (at least one CTA each).
    const size_t most = spec.cooperative ? SIZE_MAX
                                         : static_cast<size_t>(std::clamp<uint64_t>(
                                               jit::kMaxResidentBytes / workers / per_cta, 1, kMaxResidentCtas));
    held.emplace_back();
    if (!take(&held.back(), true)) return;
    while (!held.empty()) {
      // A turn of the CTAs held is progress, as the interpreter counts a spinning warp's
      // instructions: the agent's watchdog must not take a kernel whose CTAs wait on each
      // other (or spin forever: the tenant's, ended by its cancel) for a hung GPU, and
      // compiled code's own count (kProgressEvery back edges) starts again at each call.
      if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
      for (size_t i = 0; i < held.size();) {
        if (stop.load(std::memory_order_relaxed)) return;
        ResidentCta& r = held[i];
        if (context.cancel->load(std::memory_order_relaxed)) {
          worker.error = kLaunchTimeout;
          worker.failed_cta = r.cta;
          stop.store(true);
          return;
        }
        context.local = r.local.data();
        context.slots = r.slots.data();
        context.shadow = r.shadow.data();
        const uint32_t x = static_cast<uint32_t>(r.cta % spec.grid[0]);
        const uint32_t y = static_cast<uint32_t>(r.cta / spec.grid[0] % spec.grid[1]);
        const uint32_t z = static_cast<uint32_t>(r.cta / spec.grid[0] / spec.grid[1]);
        const int32_t error = run_cta(&context, spec.params, x, y, z, r.shared.data(), r.resume.data(), r.saved.data());
        if (error == jit::kCtaYielded) {
          ++i;
          if (held.size() < most) {
            held.emplace_back();
            if (!take(&held.back(), true)) held.pop_back();
          }
          continue;
        }
        if (error != 0) {
          worker.error = error;
          worker.failed_cta = r.cta;
          stop.store(true);
          return;
        }
        if (take(&r, false)) {
          ++i;
        } else {
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
    }
  };
  auto run_or_fail = [&](uint32_t index) {
    Worker& worker = states[index];
    worker.hints.assign(kernel.accesses.size(), Hint{});
    // The CTA's state, one at a time (a kernel that yields has it per CTA held:
    // run_resident).
    if (!kernel.yields) {
      worker.shared.assign(std::max<uint64_t>(shared_size, 1), 0);
      worker.resume.assign(threads, 0);
      // Zeroed once per launch and worker, then left from CTA to CTA, as the interpreter
      // leaves its CTA context's (PrepareCta).
      worker.local.assign(std::max<uint64_t>(local_size, 1), 0);
      if (kernel.barriers) worker.saved.assign(uint64_t{threads} * std::max(kernel.registers, 1u), 0);
      if (kernel.warp_level) {
        // The shadows start at 0 per launch and stay from CTA to CTA, as the interpreter's
        // registers do (its lanes past the CTA's last thread included).
        const uint64_t lanes = (uint64_t{threads} + 31) / 32 * 32;
        worker.slots.assign(uint64_t{threads} * kernel.warp_slots, 0);
        worker.shadow.assign(lanes * std::max(kernel.shadows, 1u), 0);
      }
    }
    Context& context = worker.context;
    context.hints = worker.hints.data();
    context.translate = &Translate;
    context.progress = spec.progress != nullptr ? spec.progress : &worker.unwatched;
    context.cancel = spec.cancel != nullptr ? spec.cancel : &kNeverCancelled;
    context.spec = &spec;
    context.accesses = &kernel.accesses;
    context.shared_size = shared_size;
    context.local = worker.local.data();
    context.kernel = &kernel;
    context.settle = &Settle;
    context.slots = worker.slots.data();
    context.shadow = worker.shadow.data();
    context.sm_count = std::max<uint32_t>(spec.sm_count, 1);
    context.param_size = spec.param_size;
    for (int i = 0; i < 3; ++i) {
      context.ntid[i] = spec.block[i];
      context.nctaid[i] = spec.grid[i];
    }
    context.grid_workspace = spec.grid_workspace;
    if (kernel.yields) {
      run_resident(worker, index);
      return;
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
    // The workers' printf text in their order, as the interpreter's (RunKernel).
    if (spec.printf_out != nullptr) {
      uint64_t dropped = worker.context.printf_dropped;
      AppendPrintf(spec.printf_out, worker.context.printf_text, &dropped);
      if (spec.printf_dropped != nullptr) *spec.printf_dropped += dropped;
    }
    if (spec.thread_instructions) *spec.thread_instructions += worker.context.instructions;
    if (failure.Offer(worker.error, worker.failed_cta)) {
      const int32_t error = worker.error;
      if (spec.error_detail && worker.out_of_memory) {
        *spec.error_detail = "the launch ran out of host memory";
      } else if (spec.error_detail && error == kLaunchTimeout) {
        *spec.error_detail = kCancelledDetail;
      } else if (spec.error_detail && error == jit::kAssertFailed) {
        *spec.error_detail = "device assertion failed";
      } else if (spec.error_detail && error == jit::kLaunchFailed) {
        // trap (the interpreter's detail), or a call nested too deep.
        *spec.error_detail =
            worker.context.trap_line < 0 ? std::string("trap") : CallsTooDeepDetail(worker.context.trap_line);
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

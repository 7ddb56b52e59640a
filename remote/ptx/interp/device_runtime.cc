// The interpreter's device runtime for dynamic parallelism (CDP2): parameter buffers,
// device launches queued on the launch, streams and last errors. Private interface:
// device_runtime.h and internal.h.
//
// The named streams of CUDA 12's device runtime, as the executor runs the queued grids
// (SimExecutor::RunChildren): a grid launched into the NULL stream, a stream the kernel
// created or cudaStreamFireAndForget runs after its parent grid, and is complete before
// the parent is; one launched into cudaStreamTailLaunch runs after the parent grid and
// all of those, in the order tail launches were made, at the parent's nesting depth (a
// chain of tail launches does not nest), and the parent is complete when its tail
// launches are. Per-thread default stream builds (--default-stream per-thread) call the
// same entry points with a _ptsz suffix. Events (cudaEventCreateWithFlags, Record,
// RecordWithFlags, cudaStreamWaitEvent, cudaEventDestroy) are handles whose order the
// launch order keeps already. cudaGetDevice, cudaDeviceGetAttribute and cudaDeviceGetLimit
// answer what the remoting library answers on the host for the module's device and context
// (LaunchSpec::device_ordinal, device_facts), and so do cudaGetDeviceCount and
// cudaDeviceGetCacheConfig; cudaDeviceGetSharedMemConfig says four-byte banks, as the library
// does. cudaFuncGetAttributes and the occupancy calculator
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor[WithFlags]) take a kernel's needs from the
// executor (LaunchSpec::entry_needs, what its host-side queries say too) and the device's
// figures from its attributes, with the calculator the library uses (common/occupancy.h).
// cudaRuntimeGetVersion says the CUDA release of the kernel's PTX ISA version;
// cudaGetErrorName and cudaGetErrorString point into the module's kErrorStringsVariable.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/device_runtime.h"

#include <climits>
#include <cstddef>
#include <functional>

#include "common/occupancy.h"
#include "remote/ptx/front/error_strings.h"

namespace gpupool::sim::interp {

// A parameter buffer is a block of the module's heap: this header, then the kernel's
// parameters, which the kernel writes before it launches the buffer.
struct ParamBufferHeader {
  uint64_t magic;
  uint32_t entry;  // index in DecodedKernel::entries
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared;
  uint32_t param_size;
  uint32_t reserved;
};
static_assert(sizeof(ParamBufferHeader) == 48);
constexpr uint64_t kParamBufferMagic = 0x6370646275666672ull;
// The device runtime's error numbers (driver_types.h).
constexpr uint32_t kCudaErrorMemoryAllocation = 2;
constexpr uint32_t kCudaErrorInvalidConfiguration = 9;
constexpr uint32_t kCudaErrorInvalidPitchValue = 12;
constexpr uint32_t kCudaErrorInvalidMemcpyDirection = 21;
constexpr uint32_t kCudaErrorLaunchMaxDepthExceeded = 65;
constexpr uint32_t kCudaErrorLaunchPendingCountExceeded = 69;
constexpr uint32_t kCudaErrorInvalidDeviceFunction = 98;
constexpr uint32_t kCudaErrorInvalidDevice = 101;
constexpr uint32_t kCudaErrorUnsupportedLimit = 215;
constexpr uint32_t kCudaErrorNotSupported = 801;
constexpr uint64_t kCudaStreamTailLaunch = 3;
constexpr uint32_t kCudaMemcpyDeviceToDevice = 3;
constexpr uint32_t kCudaMemcpyDefault = 4;
constexpr uint32_t kMaxDeviceLaunchParams = 4096;
constexpr uint32_t kCudaLimitDevRuntimePendingLaunchCount = 4;
constexpr uint32_t kCudaOccupancyDisableCachingOverride = 1;
constexpr uint32_t kCudaSharedMemBankSizeFourByte = 1;
// Registers per thread the sim says a kernel has (it allocates none): what the remoting
// library assumes on the host too (cudaFuncGetAttributes' numRegs, the occupancy).
constexpr int kModelRegistersPerThread = 32;

// Queues a grid, copy or memset the kernel launched; the device runtime's error, if any.
uint32_t Queue(const LaunchSpec& spec, DeviceLaunch launch) {
  if (spec.device_launches == nullptr) return kCudaErrorNotSupported;
  std::lock_guard<std::mutex> lock(spec.device_launches->mu);
  // Bounded, as the device runtime's pool of pending launches is: a kernel that launches
  // without end fails its launches instead of holding the agent's memory.
  if (spec.device_launches->queued.size() >= std::min(spec.pending_launch_limit, kMaxPendingLaunchLimit)) {
    return kCudaErrorLaunchPendingCountExceeded;
  }
  spec.device_launches->queued.push_back(std::move(launch));
  return kSuccess;
}

// cudaMemcpyAsync, cudaMemcpy2DAsync, cudaMemsetAsync, cudaMemset2DAsync in device code
// (`arg(i, bytes)`: the call's i-th argument, of 8 or 4 bytes): queued
// in stream order with the grids the kernel launches, as the device runtime runs them as
// grids of its own. Bad arguments are the runtime's errors, returned to the thread; where
// the bytes are is checked when the copy runs (RunDeviceCopy), as a GPU faults then.
uint32_t QueueCopy(const DeviceRuntimeCall& call, const std::string& parent, const LaunchSpec& spec,
                   const std::function<uint64_t(int, int)>& arg) {
  DeviceLaunch copy;
  copy.kernel = parent;
  copy.height = 1;
  uint64_t stream = 0;
  uint32_t kind = kCudaMemcpyDeviceToDevice;
  switch (call.op) {
    case DeviceRuntimeCall::kMemcpyAsync:  // (dst, src, bytes, kind, stream)
      copy.kind = DeviceLaunch::kCopy;
      copy.dst = arg(0, 8), copy.src = arg(1, 8), copy.width = arg(2, 8);
      kind = static_cast<uint32_t>(arg(3, 4));
      stream = arg(4, 8);
      break;
    case DeviceRuntimeCall::kMemcpy2DAsync:  // (dst, dpitch, src, spitch, width, height, kind, stream)
      copy.kind = DeviceLaunch::kCopy;
      copy.dimensions = 2;
      copy.dst = arg(0, 8), copy.dst_pitch = arg(1, 8), copy.src = arg(2, 8), copy.src_pitch = arg(3, 8);
      copy.width = arg(4, 8), copy.height = arg(5, 8);
      kind = static_cast<uint32_t>(arg(6, 4));
      stream = arg(7, 8);
      if (copy.width > copy.dst_pitch || copy.width > copy.src_pitch) return kCudaErrorInvalidPitchValue;
      break;
    case DeviceRuntimeCall::kMemsetAsync:  // (dst, value, bytes, stream)
      copy.kind = DeviceLaunch::kSet;
      copy.dst = arg(0, 8), copy.value = static_cast<uint8_t>(arg(1, 4)), copy.width = arg(2, 8);
      stream = arg(3, 8);
      break;
    default:  // kMemset2DAsync: (dst, pitch, value, width, height, stream)
      copy.kind = DeviceLaunch::kSet;
      copy.dimensions = 2;
      copy.dst = arg(0, 8), copy.dst_pitch = arg(1, 8), copy.value = static_cast<uint8_t>(arg(2, 4));
      copy.width = arg(3, 8), copy.height = arg(4, 8);
      stream = arg(5, 8);
      if (copy.width > copy.dst_pitch) return kCudaErrorInvalidPitchValue;
      break;
  }
  // Device code reaches device memory only (the programming guide: device-to-device copies).
  if (kind != kCudaMemcpyDeviceToDevice && kind != kCudaMemcpyDefault) return kCudaErrorInvalidMemcpyDirection;
  copy.tail = stream == kCudaStreamTailLaunch;
  return Queue(spec, std::move(copy));
}

// cudaMemcpy3DParms (driver_types.h) as a 64-bit device holds it.
struct Memcpy3DParms {
  struct Side {
    uint64_t array;
    uint64_t x, y, z;                   // cudaPos: bytes, rows, slices
    uint64_t ptr, pitch, xsize, ysize;  // cudaPitchedPtr
  };
  Side src, dst;
  uint64_t width, height, depth;  // cudaExtent: bytes, rows, slices (no arrays here)
  uint32_t kind;
  uint32_t padding;
};
static_assert(sizeof(Memcpy3DParms) == 160);

// One side of a 3D copy: its first byte, row pitch and slice pitch (0 where slices do not
// count) into *address, *pitch and *slice_pitch; the device runtime's error otherwise. The
// arithmetic is checked (every value is the tenant's), as RunDeviceCopy's is.
uint32_t Place3D(const Memcpy3DParms::Side& side, const Memcpy3DParms& p, uint64_t* address, uint64_t* pitch,
                 uint64_t* slice_pitch) {
  uint64_t row_end = 0;
  if (__builtin_add_overflow(side.x, p.width, &row_end) || row_end > side.pitch) return kCudaErrorInvalidPitchValue;
  // Slices are ysize rows apart: where they count (more than one, or a slice past the
  // first), the rows copied must lie within one.
  uint64_t slice = 0, rows_end = 0;
  if (p.depth > 1 || side.z > 0) {
    if (__builtin_mul_overflow(side.pitch, side.ysize, &slice) || __builtin_add_overflow(side.y, p.height, &rows_end) ||
        rows_end > side.ysize) {
      return kInvalidValue;
    }
  }
  uint64_t z_offset = 0, y_offset = 0, offset = 0;
  if (__builtin_mul_overflow(side.z, slice, &z_offset) || __builtin_mul_overflow(side.y, side.pitch, &y_offset) ||
      __builtin_add_overflow(z_offset, y_offset, &offset) || __builtin_add_overflow(offset, side.x, &offset) ||
      __builtin_add_overflow(side.ptr, offset, address)) {
    return kInvalidValue;
  }
  *pitch = side.pitch;
  *slice_pitch = slice;
  return kSuccess;
}

// cudaMemcpy3DAsync in device code: between pitched or linear device memory, queued as
// the 1D and 2D copies are (QueueCopy). CUDA arrays are cudaErrorInvalidValue (the device
// runtime has none to name).
uint32_t QueueCopy3D(const Memcpy3DParms& p, uint64_t stream, const std::string& parent, const LaunchSpec& spec) {
  if (p.src.array != 0 || p.dst.array != 0) return kInvalidValue;
  if (p.kind != kCudaMemcpyDeviceToDevice && p.kind != kCudaMemcpyDefault) return kCudaErrorInvalidMemcpyDirection;
  DeviceLaunch copy;
  copy.kind = DeviceLaunch::kCopy;
  copy.kernel = parent;
  copy.dimensions = 3;
  copy.width = p.width, copy.height = p.height, copy.depth = p.depth;
  if (uint32_t error = Place3D(p.dst, p, &copy.dst, &copy.dst_pitch, &copy.dst_slice_pitch); error != kSuccess) {
    return error;
  }
  if (uint32_t error = Place3D(p.src, p, &copy.src, &copy.src_pitch, &copy.src_slice_pitch); error != kSuccess) {
    return error;
  }
  copy.tail = stream == kCudaStreamTailLaunch;
  return Queue(spec, std::move(copy));
}

// cudaMemset3DAsync in device code: `extent` (bytes, rows, slices) of `pitched` (its
// ptr, pitch, xsize, ysize; slices ysize rows apart) set to `value`, queued as the 1D and
// 2D memsets are, with Place3D's checks of a 3D copy's side.
uint32_t QueueSet3D(const Memcpy3DParms::Side& pitched, uint8_t value, uint64_t width, uint64_t height, uint64_t depth,
                    uint64_t stream, const std::string& parent, const LaunchSpec& spec) {
  Memcpy3DParms p{};
  p.dst = pitched;
  p.width = width, p.height = height, p.depth = depth;
  DeviceLaunch set;
  set.kind = DeviceLaunch::kSet;
  set.kernel = parent;
  set.dimensions = 3;
  set.value = value;
  set.width = width, set.height = height, set.depth = depth;
  if (uint32_t error = Place3D(p.dst, p, &set.dst, &set.dst_pitch, &set.dst_slice_pitch); error != kSuccess) {
    return error;
  }
  set.tail = stream == kCudaStreamTailLaunch;
  return Queue(spec, std::move(set));
}

// cudaFuncAttributes (driver_types.h, CUDA 12 and 13) as a 64-bit device holds it.
struct FuncAttributes {
  uint64_t shared_size_bytes, const_size_bytes, local_size_bytes;
  int32_t max_threads_per_block, num_regs, ptx_version, binary_version, cache_mode_ca;
  int32_t max_dynamic_shared_size_bytes, preferred_shmem_carveout, cluster_dim_must_be_set;
  int32_t required_cluster_width, required_cluster_height, required_cluster_depth;
  int32_t cluster_scheduling_policy_preference, non_portable_cluster_size_allowed;
  int32_t reserved[16];
};
static_assert(sizeof(FuncAttributes) == 144 && offsetof(FuncAttributes, reserved) == 76);

// The kernel of the module at device address `function` (a kernel's address as device code
// takes it), or null: another function, or none.
const LaunchableEntry* EntryAt(const DecodedKernel& kernel, uint64_t function) {
  for (const LaunchableEntry& entry : kernel.entries) {
    if (entry.address == function) return &entry;
  }
  return nullptr;
}

// The device's figures the occupancy calculator reads, from its attributes as the client
// sent them (the same the library's calculator reads on the host); false: none sent.
bool ModelOf(const dataplane::DeviceRuntimeFacts* facts, GpuModel* model) {
  constexpr uint32_t kReservedSharedPerBlock = 111;  // the highest attribute read here
  if (facts == nullptr || facts->attribute_count <= kReservedSharedPerBlock) return false;
  const int32_t* a = facts->attributes;
  *model = GpuModel{};
  model->cc_major = a[75], model->cc_minor = a[76];
  model->multiprocessors = a[16];
  model->shared_per_block = a[8], model->shared_per_block_optin = a[97], model->shared_per_multiprocessor = a[81];
  model->reserved_shared_per_block = a[kReservedSharedPerBlock];
  model->registers_per_block = a[12], model->registers_per_multiprocessor = a[82];
  model->max_threads_per_multiprocessor = a[39], model->max_blocks_per_multiprocessor = a[106];
  return true;
}

// The CUDA release (cudaRuntimeGetVersion's 1000 * major + 10 * minor) whose nvcc writes
// PTX ISA `isa` (major * 10 + minor, .version): CUDA 11.x wrote 7.x, 12.0-12.4 wrote
// 8.0-8.4, 12.5 and 12.6 both 8.5 (12.5 said here), 12.7-12.9 wrote 8.6-8.8, 13.x 9.x.
// 0: older than 7.0 (no CUDA 12 device runtime), or none.
uint32_t RuntimeVersionOf(uint32_t isa) {
  const uint32_t major = isa / 10, minor = isa % 10;
  if (major == 7) return 11000 + minor * 10;
  if (major == 8) return minor <= 5 ? 12000 + minor * 10 : 12010 + minor * 10;
  if (major >= 9 && major < 100) return (major + 4) * 1000 + minor * 10;
  return 0;
}

// One device-runtime call (DeviceRuntimeCall, by in.aux) for each lane, in lane order.
void HDeviceRuntime(Warp& w, const Inst& in, uint32_t mask) {
  const DecodedKernel& kernel = *w.launch->kernel;
  const DeviceRuntimeCall& call = kernel.device_calls[in.aux];
  const LaunchSpec& spec = *w.launch->spec;
  auto arg64 = [&](int l, int i) {
    uint64_t value = 0;
    std::memcpy(&value, w.LocalOf(l) + call.args[i], 8);
    return value;
  };
  // The call's result; an error is also the thread's last error (cudaGetLastError).
  const uint32_t cta_tag = w.launch->cta_linear + 1;
  auto result32 = [&](int l, uint32_t value) {
    std::memcpy(w.LocalOf(l) + call.result, &value, 4);
    if (value == kSuccess) return;
    const uint32_t last[2] = {value, cta_tag};
    std::memcpy(w.LocalOf(l) + call.last_error, last, 8);
  };
  uint8_t* heap = nullptr;
  const bool needs_heap = call.op == DeviceRuntimeCall::kGetParameterBuffer ||
                          call.op == DeviceRuntimeCall::kLaunchDevice || call.op == DeviceRuntimeCall::kMalloc ||
                          call.op == DeviceRuntimeCall::kFree;
  if (needs_heap) {
    heap = call.heap == 0
               ? nullptr
               : w.Address(Space::kGlobal, call.heap, static_cast<uint32_t>(call.heap_size), std::countr_zero(mask));
    if (heap == nullptr) {
      w.Fault(call.heap, 16, "device heap");
      return;
    }
  }
  std::unique_lock<std::mutex> heap_lock(device_heap_mu, std::defer_lock);
  if (needs_heap) heap_lock.lock();
  ForLanes(mask, [&](int l) {
    switch (call.op) {
      case DeviceRuntimeCall::kGetParameterBuffer: {
        ParamBufferHeader header{};
        header.magic = kParamBufferMagic;
        const uint64_t function = arg64(l, 0);
        std::memcpy(header.grid, w.LocalOf(l) + call.args[1], 12);
        std::memcpy(header.block, w.LocalOf(l) + call.args[2], 12);
        std::memcpy(&header.shared, w.LocalOf(l) + call.args[3], 4);
        uint64_t buffer = 0;
        for (size_t i = 0; i < kernel.entries.size(); ++i) {
          // A kernel of more than 4 KiB of parameters gets none: queued launches' parameters
          // are held by the agent until they run.
          if (kernel.entries[i].address != function || kernel.entries[i].param_size > kMaxDeviceLaunchParams) {
            continue;
          }
          header.entry = static_cast<uint32_t>(i);
          header.param_size = kernel.entries[i].param_size;
          const uint64_t offset = HeapAllocate(heap, call.heap_size, sizeof(header) + header.param_size);
          if (offset != 0) {
            std::memcpy(heap + offset, &header, sizeof(header));
            buffer = call.heap + offset + sizeof(header);
          }
          break;
        }
        std::memcpy(w.LocalOf(l) + call.result, &buffer, 8);  // NULL: no such kernel, or full
        break;
      }
      case DeviceRuntimeCall::kLaunchDevice: {
        const uint64_t buffer = arg64(l, 0), stream = arg64(l, 1);
        ParamBufferHeader header{};
        const uint64_t offset = buffer - call.heap - sizeof(header);
        if (buffer < call.heap + sizeof(header) || offset >= call.heap_size ||
            call.heap_size - offset < sizeof(header)) {
          result32(l, kInvalidValue);  // not a buffer of the device runtime
          return;
        }
        std::memcpy(&header, heap + offset, sizeof(header));
        if (header.magic != kParamBufferMagic || header.entry >= kernel.entries.size() ||
            header.param_size != kernel.entries[header.entry].param_size ||
            call.heap_size - offset - sizeof(header) < header.param_size) {
          result32(l, kInvalidValue);
          return;
        }
        DeviceLaunch launch;
        launch.kernel = kernel.entries[header.entry].name;
        std::memcpy(launch.grid, header.grid, sizeof(launch.grid));
        std::memcpy(launch.block, header.block, sizeof(launch.block));
        launch.dynamic_shared = header.shared;
        launch.tail = stream == kCudaStreamTailLaunch;
        launch.params.assign(heap + offset + sizeof(header), heap + offset + sizeof(header) + header.param_size);
        // The buffer is the device runtime's again once launched.
        std::memset(heap + offset, 0, sizeof(header));
        if (!HeapFree(heap, call.heap_size, offset)) {
          w.Fault(buffer, 1, "launch of a parameter buffer the device heap does not hold");
          return;
        }
        const uint64_t threads = uint64_t{launch.block[0]} * launch.block[1] * launch.block[2];
        if (launch.grid[0] == 0 || launch.grid[1] == 0 || launch.grid[2] == 0 || launch.grid[1] > 65535 ||
            launch.grid[2] > 65535 || threads == 0 || threads > 1024 || launch.block[2] > 64) {
          result32(l, kCudaErrorInvalidConfiguration);
          return;
        }
        // A tail launch takes the place of the grid that made it (it runs once that grid is
        // complete, at its depth); any other grid nests one deeper.
        if ((launch.tail ? spec.depth : spec.depth + 1) >= kMaxLaunchDepth) {
          result32(l, kCudaErrorLaunchMaxDepthExceeded);
          return;
        }
        result32(l, Queue(spec, std::move(launch)));
        break;
      }
      case DeviceRuntimeCall::kMemcpyAsync:
      case DeviceRuntimeCall::kMemcpy2DAsync:
      case DeviceRuntimeCall::kMemsetAsync:
      case DeviceRuntimeCall::kMemset2DAsync:
        result32(l, QueueCopy(call, kernel.name, spec, [&](int i, int bytes) {
                   uint64_t value = 0;
                   std::memcpy(&value, w.LocalOf(l) + call.args[i], bytes);
                   return value;
                 }));
        break;
      case DeviceRuntimeCall::kGetDevice: {
        const uint64_t where = arg64(l, 0);
        uint8_t* target = w.Address(Space::kGeneric, where, 4, l);
        if (target == nullptr) {
          w.Fault(where, 4, "cudaGetDevice's device");
          return;
        }
        std::memcpy(target, &spec.device_ordinal, 4);
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kDeviceGetAttribute: {
        // (value*, attribute, device): only the current device is known here.
        const uint64_t where = arg64(l, 0);
        uint32_t attribute = 0;
        int32_t device = 0;
        std::memcpy(&attribute, w.LocalOf(l) + call.args[1], 4);
        std::memcpy(&device, w.LocalOf(l) + call.args[2], 4);
        const dataplane::DeviceRuntimeFacts* facts = spec.device_facts;
        if (device != spec.device_ordinal) {
          result32(l, kCudaErrorInvalidDevice);
          return;
        }
        if (facts == nullptr || facts->attribute_count == 0) {
          result32(l, kCudaErrorNotSupported);  // loaded with no attributes (not by the client)
          return;
        }
        if (attribute == 0 || attribute >= facts->attribute_count) {
          result32(l, kInvalidValue);
          return;
        }
        uint8_t* target = w.Address(Space::kGeneric, where, 4, l);
        if (target == nullptr) {
          w.Fault(where, 4, "cudaDeviceGetAttribute's value");
          return;
        }
        std::memcpy(target, &facts->attributes[attribute], 4);
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kDeviceGetLimit: {
        // (value*, limit): the context's limits at the load, the module's heap and the
        // launch's pending-launch limit as they are.
        const uint64_t where = arg64(l, 0);
        uint32_t limit = 0;
        std::memcpy(&limit, w.LocalOf(l) + call.args[1], 4);
        if (limit >= dataplane::kDeviceLimitCount) {
          result32(l, kCudaErrorUnsupportedLimit);
          return;
        }
        uint8_t* target = w.Address(Space::kGeneric, where, 8, l);
        if (target == nullptr) {
          w.Fault(where, 8, "cudaDeviceGetLimit's value");
          return;
        }
        uint64_t value = spec.device_facts != nullptr ? spec.device_facts->limits[limit] : kDefaultDeviceLimits[limit];
        if (limit == kCudaLimitDevRuntimePendingLaunchCount) value = spec.pending_launch_limit;
        std::memcpy(target, &value, 8);
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kMemcpy3DAsync: {
        const uint64_t where = arg64(l, 0), stream = arg64(l, 1);
        const uint8_t* bytes = w.Address(Space::kGeneric, where, sizeof(Memcpy3DParms), l);
        if (bytes == nullptr) {
          w.Fault(where, sizeof(Memcpy3DParms), "cudaMemcpy3DAsync's parameters");
          return;
        }
        Memcpy3DParms parms;
        std::memcpy(&parms, bytes, sizeof(parms));
        result32(l, QueueCopy3D(parms, stream, kernel.name, spec));
        break;
      }
      case DeviceRuntimeCall::kMemset3DAsync: {
        // (cudaPitchedPtr {ptr, pitch, xsize, ysize}, value, cudaExtent {width, height, depth}, stream)
        uint64_t pitched[4], extent[3];
        uint32_t value = 0;
        std::memcpy(pitched, w.LocalOf(l) + call.args[0], sizeof(pitched));
        std::memcpy(&value, w.LocalOf(l) + call.args[1], 4);
        std::memcpy(extent, w.LocalOf(l) + call.args[2], sizeof(extent));
        Memcpy3DParms::Side side{};
        side.ptr = pitched[0], side.pitch = pitched[1], side.xsize = pitched[2], side.ysize = pitched[3];
        result32(l, QueueSet3D(side, static_cast<uint8_t>(value), extent[0], extent[1], extent[2], arg64(l, 3),
                               kernel.name, spec));
        break;
      }
      case DeviceRuntimeCall::kGetDeviceCount: {
        const uint64_t where = arg64(l, 0);
        if (spec.device_facts == nullptr || spec.device_facts->device_count <= 0) {
          result32(l, kCudaErrorNotSupported);  // loaded with no facts (not by the client)
          return;
        }
        uint8_t* target = w.Address(Space::kGeneric, where, 4, l);
        if (target == nullptr) {
          w.Fault(where, 4, "cudaGetDeviceCount's count");
          return;
        }
        std::memcpy(target, &spec.device_facts->device_count, 4);
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kDeviceGetCacheConfig:
      case DeviceRuntimeCall::kDeviceGetSharedMemConfig:
      case DeviceRuntimeCall::kRuntimeGetVersion: {
        const uint64_t where = arg64(l, 0);
        uint32_t value = 0;
        const char* what = nullptr;
        if (call.op == DeviceRuntimeCall::kDeviceGetCacheConfig) {
          // The context's preference when the module was loaded (cudaFuncCachePreferNone
          // where the client sent none).
          value = spec.device_facts != nullptr ? spec.device_facts->cache_config : 0;
          what = "cudaDeviceGetCacheConfig's config";
        } else if (call.op == DeviceRuntimeCall::kDeviceGetSharedMemConfig) {
          value = kCudaSharedMemBankSizeFourByte;  // what GPUs since Maxwell say, and the library
          what = "cudaDeviceGetSharedMemConfig's config";
        } else {
          const LaunchableEntry* self = nullptr;
          for (const LaunchableEntry& entry : kernel.entries) {
            if (entry.name == kernel.name) self = &entry;
          }
          value = self != nullptr ? RuntimeVersionOf(self->ptx_version) : 0;
          if (value == 0) {
            result32(l, kCudaErrorNotSupported);  // no .version we know
            return;
          }
          what = "cudaRuntimeGetVersion's version";
        }
        uint8_t* target = w.Address(Space::kGeneric, where, 4, l);
        if (target == nullptr) {
          w.Fault(where, 4, what);
          return;
        }
        std::memcpy(target, &value, 4);
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kFuncGetAttributes: {
        // (cudaFuncAttributes*, func): what the library says of the kernel on the host.
        const uint64_t where = arg64(l, 0), function = arg64(l, 1);
        const LaunchableEntry* entry = EntryAt(kernel, function);
        KernelNeeds needs;
        if (entry == nullptr) {
          result32(l, kCudaErrorInvalidDeviceFunction);
          return;
        }
        if (spec.entry_needs == nullptr) {
          result32(l, kCudaErrorNotSupported);
          return;
        }
        if (!(*spec.entry_needs)(entry->name, &needs)) {
          result32(l, kCudaErrorInvalidDeviceFunction);  // a kernel the engine cannot run
          return;
        }
        uint8_t* target = w.Address(Space::kGeneric, where, sizeof(FuncAttributes), l);
        if (target == nullptr) {
          w.Fault(where, sizeof(FuncAttributes), "cudaFuncGetAttributes' attributes");
          return;
        }
        auto clamp = [](uint64_t value) { return static_cast<int32_t>(std::min<uint64_t>(value, INT32_MAX)); };
        GpuModel model{};
        const bool known = ModelOf(spec.device_facts, &model);
        FuncAttributes attributes{};
        attributes.shared_size_bytes = needs.static_shared;
        attributes.const_size_bytes = needs.const_bytes;
        attributes.local_size_bytes = needs.local_bytes;
        attributes.max_threads_per_block = clamp(needs.max_threads);
        attributes.num_regs = needs.registers > 0 ? static_cast<int32_t>(needs.registers) : kModelRegistersPerThread;
        // The PTX the sim runs, and what a GPU of the device's model would run: the SASS
        // the client chose from the image (the host's answer), else the device's
        // architecture, else (no facts) the PTX's.
        attributes.ptx_version = static_cast<int32_t>(entry->target_arch);
        attributes.binary_version = spec.device_facts != nullptr && spec.device_facts->binary_version > 0
                                        ? spec.device_facts->binary_version
                                    : known ? model.cc_major * 10 + model.cc_minor
                                            : static_cast<int32_t>(entry->target_arch);
        attributes.max_dynamic_shared_size_bytes =
            known ? std::max(model.shared_per_block - clamp(needs.static_shared), 0) : 0;
        attributes.preferred_shmem_carveout = -1;  // none set (a host-side setting is not seen here)
        std::memcpy(target, &attributes, sizeof(attributes));
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kOccupancy:
      case DeviceRuntimeCall::kOccupancyWithFlags: {
        // (blocks*, func, block size, dynamic shared[, flags])
        const uint64_t where = arg64(l, 0), function = arg64(l, 1), dynamic_shared = arg64(l, 3);
        int32_t block_size = 0;
        uint32_t flags = 0;
        std::memcpy(&block_size, w.LocalOf(l) + call.args[2], 4);
        if (call.op == DeviceRuntimeCall::kOccupancyWithFlags) std::memcpy(&flags, w.LocalOf(l) + call.args[4], 4);
        const LaunchableEntry* entry = EntryAt(kernel, function);
        if (entry == nullptr) {
          result32(l, kCudaErrorInvalidDeviceFunction);
          return;
        }
        if ((flags & ~kCudaOccupancyDisableCachingOverride) != 0 || block_size <= 0) {
          result32(l, kInvalidValue);
          return;
        }
        GpuModel model{};
        KernelNeeds needs;
        if (spec.entry_needs == nullptr || !ModelOf(spec.device_facts, &model)) {
          result32(l, kCudaErrorNotSupported);
          return;
        }
        if (!(*spec.entry_needs)(entry->name, &needs)) {
          result32(l, kCudaErrorInvalidDeviceFunction);
          return;
        }
        uint8_t* target = w.Address(Space::kGeneric, where, 4, l);
        if (target == nullptr) {
          w.Fault(where, 4, "cudaOccupancyMaxActiveBlocksPerMultiprocessor's blocks");
          return;
        }
        KernelResources resources;
        resources.registers_per_thread =
            needs.registers > 0 ? static_cast<int>(needs.registers) : kModelRegistersPerThread;
        resources.static_shared_bytes = static_cast<int>(std::min<uint64_t>(needs.static_shared, INT_MAX));
        resources.max_threads_per_block = static_cast<int>(std::min<uint64_t>(needs.max_threads, 1024));
        const int32_t blocks = ActiveBlocksPerMultiprocessor(model, resources, block_size, dynamic_shared);
        std::memcpy(target, &blocks, 4);
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kGetErrorString:
      case DeviceRuntimeCall::kGetErrorName: {
        // A pointer into the module's table (any number: "unrecognized error code").
        uint32_t error = 0;
        std::memcpy(&error, w.LocalOf(l) + call.args[0], 4);
        const uint64_t text =
            call.strings == 0 ? 0
                              : call.strings + ErrorStringOffset(error, call.op == DeviceRuntimeCall::kGetErrorName);
        std::memcpy(w.LocalOf(l) + call.result, &text, 8);
        break;
      }
      case DeviceRuntimeCall::kGetLastError:
      case DeviceRuntimeCall::kPeekAtLastError: {
        uint32_t last[2] = {0, 0};
        std::memcpy(last, w.LocalOf(l) + call.last_error, 8);
        const uint32_t error = last[1] == cta_tag ? last[0] : kSuccess;
        std::memcpy(w.LocalOf(l) + call.result, &error, 4);
        if (call.op == DeviceRuntimeCall::kGetLastError) {
          std::memset(w.LocalOf(l) + call.last_error, 0, 8);
        }
        break;
      }
      case DeviceRuntimeCall::kStreamCreate: {
        // A stream of the device runtime: a handle only, launches into it run in order.
        const uint64_t where = arg64(l, 0);
        const uint64_t handle = 0x100 + (static_cast<uint64_t>(w.launch->cta_linear) << 5) + l;
        uint8_t* target = w.Address(Space::kGeneric, where, 8, l);
        if (target == nullptr) {
          w.Fault(where, 8, "cudaStreamCreateWithFlags' stream");
          return;
        }
        std::memcpy(target, &handle, 8);
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kStreamDestroy:
        result32(l, kSuccess);
        break;
      case DeviceRuntimeCall::kEventCreate: {
        // An event of the device runtime: a handle only (kEventOrder).
        const uint64_t where = arg64(l, 0);
        const uint64_t handle = 0x200 + (static_cast<uint64_t>(w.launch->cta_linear) << 5) + l;
        uint8_t* target = w.Address(Space::kGeneric, where, 8, l);
        if (target == nullptr) {
          w.Fault(where, 8, "cudaEventCreateWithFlags' event");
          return;
        }
        std::memcpy(target, &handle, 8);
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kEventOrder:
        // cudaEventRecord, cudaStreamWaitEvent, cudaEventDestroy: the grids a grid launches
        // run one after another in launch order, so work launched after a wait already
        // runs after the work recorded before it.
        result32(l, kSuccess);
        break;
      case DeviceRuntimeCall::kMalloc: {
        const uint64_t where = arg64(l, 0), bytes = arg64(l, 1);
        uint8_t* target = w.Address(Space::kGeneric, where, 8, l);
        if (target == nullptr) {
          w.Fault(where, 8, "cudaMalloc's pointer");
          return;
        }
        const uint64_t offset = HeapAllocate(heap, call.heap_size, bytes);
        const uint64_t address = offset == 0 ? 0 : call.heap + offset;
        std::memcpy(target, &address, 8);
        result32(l, offset == 0 ? kCudaErrorMemoryAllocation : kSuccess);
        break;
      }
      case DeviceRuntimeCall::kFree: {
        const uint64_t address = arg64(l, 0);
        if (address != 0 && (address < call.heap || address - call.heap >= call.heap_size ||
                             !HeapFree(heap, call.heap_size, address - call.heap))) {
          w.Fault(address, 1, "cudaFree of a pointer device cudaMalloc did not return");
          return;
        }
        result32(l, kSuccess);
        break;
      }
    }
  });
}

}  // namespace gpupool::sim::interp

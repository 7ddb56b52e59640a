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
// (LaunchSpec::device_ordinal, device_facts).
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/device_runtime.h"

#include <functional>

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
constexpr uint32_t kCudaErrorInvalidDevice = 101;
constexpr uint32_t kCudaErrorUnsupportedLimit = 215;
constexpr uint32_t kCudaErrorNotSupported = 801;
constexpr uint64_t kCudaStreamTailLaunch = 3;
constexpr uint32_t kCudaMemcpyDeviceToDevice = 3;
constexpr uint32_t kCudaMemcpyDefault = 4;
constexpr uint32_t kMaxDeviceLaunchParams = 4096;
constexpr uint32_t kCudaLimitDevRuntimePendingLaunchCount = 4;

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

#include "remote/dataplane/session.h"

#include <cstdio>
#include <cstring>

#include "remote/protocol/protocol.h"
#include "remote/protocol/sim_texture.h"
#include "remote/transport/wire.h"

namespace gpupool::dataplane {
namespace {

template <typename T>
bool Decode(std::string_view args, T* out) {
  if (args.size() != sizeof(T)) return false;
  std::memcpy(out, args.data(), sizeof(T));
  return true;
}

template <typename T>
void Encode(const T& value, std::string* out) {
  out->assign(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Errors after which the context cannot be used any more (as on a real GPU).
bool IsSticky(int32_t status) {
  return status == kCuIllegalAddress || status == kCuLaunchFailed || status == kCuAssert ||
         status == kCuEccUncorrectable || status == kCuUnknown;
}

// Errors that mean the GPU itself failed, which the backend must hear about.
bool IsGpuFailure(int32_t status) {
  return status == kCuEccUncorrectable || status == kCuUnknown || status == kCuDeviceUnavailable;
}

// A launch's thread block cluster (LaunchArgs::cluster) into `cluster` (1, 1, 1: none), as a
// driver checks it: each dimension at least 1 and dividing the grid's, at most
// kMaxClusterBlocks together (CUDA_ERROR_INVALID_CLUSTER_SIZE); no dimensions without the
// flag (CUDA_ERROR_INVALID_VALUE). The executor checks what its GPU takes.
int32_t ClusterOf(const LaunchArgs& a, uint32_t cluster[3]) {
  if ((a.flags & kLaunchCluster) == 0) {
    if (a.cluster[0] != 0 || a.cluster[1] != 0 || a.cluster[2] != 0) return kCuInvalidValue;
    cluster[0] = cluster[1] = cluster[2] = 1;
    return kCuSuccess;
  }
  uint32_t blocks = 1;
  for (int i = 0; i < 3; ++i) {
    cluster[i] = a.cluster[i];
    if (cluster[i] == 0 || a.grid[i] % cluster[i] != 0) return kCuInvalidClusterSize;
    blocks *= cluster[i];  // at most 255^3: no overflow
  }
  return blocks > kMaxClusterBlocks ? kCuInvalidClusterSize : kCuSuccess;
}

// The device range a texture object's resource covers (*start, *bytes), checked as a driver
// checks the fields: a known resource type, format and channel count, texture fields within
// their enums, and no size that overflows. CUDA_ERROR_INVALID_VALUE otherwise; whether the
// range is the session's own is the executor's to say.
int32_t TexObjectRange(const TexObjectCreateArgs& a, uint64_t* start, uint64_t* bytes) {
  for (uint32_t mode : a.address_mode) {
    if (mode > 3) return kCuInvalidValue;  // wrap, clamp, mirror, border
  }
  if (a.filter_mode > 1 || a.mipmap_filter_mode > 1 || (a.flags & ~kTextureFlagsKnown) != 0 || a.max_anisotropy > 16 ||
      a.reserved != 0) {
    return kCuInvalidValue;
  }
  *start = a.device_ptr;
  if (a.resource_type == kResourceTypeArray || a.resource_type == kResourceTypeMipmappedArray) {
    // The array's own format; *start is its id, and nothing of device memory is read.
    if (a.device_ptr == 0 || a.size_bytes != 0 || a.width != 0 || a.height != 0 || a.pitch != 0 || a.format != 0 ||
        a.channels != 0) {
      return kCuInvalidValue;
    }
    *bytes = 0;
    return kCuSuccess;
  }
  const uint32_t channel = SimTexelChannelBytes(a.format);
  if (channel == 0 || (a.channels != 1 && a.channels != 2 && a.channels != 4)) return kCuInvalidValue;
  const uint64_t element = uint64_t{channel} * a.channels;
  if (a.resource_type == kResourceTypeLinear) {
    if (a.size_bytes < element || a.width != 0 || a.height != 0 || a.pitch != 0) return kCuInvalidValue;
    *bytes = a.size_bytes;
    return kCuSuccess;
  }
  if (a.resource_type != kResourceTypePitch2D || a.size_bytes != 0 || a.width == 0 || a.height == 0) {
    return kCuInvalidValue;
  }
  uint64_t row = 0, rows = 0;
  if (__builtin_mul_overflow(a.width, element, &row) || row > a.pitch ||
      __builtin_mul_overflow(a.pitch, a.height - 1, &rows) || __builtin_add_overflow(rows, row, bytes)) {
    return kCuInvalidValue;
  }
  return kCuSuccess;
}

// An array's descriptor as the wire carries it (the driver checks the sizes against the GPU).
int32_t CheckArrayCreate(const ArrayCreateArgs& a) {
  constexpr uint32_t kKnownFlags = 0x01 | 0x02 | 0x04 | 0x08;  // LAYERED, SURFACE_LDST, CUBEMAP, TEXTURE_GATHER
  if (a.array == 0 || a.width == 0 || a.reserved != 0 || (a.flags & ~kKnownFlags) != 0 ||
      SimTexelChannelBytes(a.format) == 0 || (a.channels != 1 && a.channels != 2 && a.channels != 4)) {
    return kCuInvalidValue;
  }
  return kCuSuccess;
}

// A mipmapped array's descriptor, level count and ids: its own and its levels' nonzero, the
// levels' not wrapping past 2^64, neither naming the other.
int32_t CheckMipmappedArrayCreate(const MipmappedArrayCreateArgs& a) {
  if (int32_t status = CheckArrayCreate(a.descriptor); status != kCuSuccess) return status;
  uint64_t last = 0;
  if (a.levels == 0 || a.levels > kMaxMipmapLevels || a.reserved != 0 || a.first_level == 0 ||
      __builtin_add_overflow(a.first_level, a.levels - 1, &last) ||
      (a.descriptor.array >= a.first_level && a.descriptor.array <= last)) {
    return kCuInvalidValue;
  }
  return kCuSuccess;
}

// An array copy's shape; for one from the host, its payload's size. The executor checks the
// regions against its arrays and memory.
int32_t CheckArrayCopy(const ArrayCopyArgs& a, size_t payload_len) {
  if (a.width_bytes == 0 || a.height == 0 || a.depth == 0 || a.to_array > 1 || a.other_kind > kArrayCopyArray) {
    return kCuInvalidValue;
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(a.width_bytes, a.height, &bytes) || __builtin_mul_overflow(bytes, a.depth, &bytes)) {
    return kCuInvalidValue;
  }
  const bool from_host = a.other_kind == kArrayCopyHost && a.to_array == 1;
  if (payload_len != (from_host ? bytes : 0)) return kCuInvalidValue;
  return kCuSuccess;
}

}  // namespace

void Session::Authorize(const std::string& lease_id, const std::string& token, const device::GpuInfo& gpu,
                        device::GpuBackend* backend, std::unique_ptr<device::Executor> executor, uint64_t epoch) {
  lease_id_ = lease_id;
  token_ = token;
  gpu_ = gpu;
  backend_ = backend;
  executor_ = std::move(executor);
  checked_epoch_ = epoch;
}

void* Session::BulkDestination(const transport::RequestHeader& header, std::string_view args, size_t len) {
  MemcpyHtoDArgs copy;
  if (!authorized() || sticky_error_ != 0 || header.op != kOpMemcpyHtoD || !Decode(args, &copy) || copy.size != len) {
    return nullptr;
  }
  return executor_->ReceiveView(copy.dst, copy.size);
}

void Session::Run(const transport::RequestHeader& header, std::string_view args, const void* payload,
                  size_t payload_len, transport::ServerReply* reply) {
  if (revoked()) {
    reply->status = kCuNotPermitted;
    reply->out = revoked_;
    reply->close_after = !retained();  // a retained session waits for its handoff
    return;
  }
  if (!authorized()) {
    reply->status = kCuNotPermitted;
    reply->out = "not attached: the first request must be a hello with a lease credential";
    reply->close_after = true;
    return;
  }
  int32_t status = sticky_error_;
  if (status == 0) {
    Status usable = backend_->BeforeOperation(gpu_.index);
    if (!usable.ok()) {
      status = kCuEccUncorrectable;
      std::string why = usable.message();
      log_->Log("unusable " + gpu_.uuid + " " + lease_id_ + " " + why,
                "GPU " + gpu_.uuid + " unusable for client " + peer_ + " (lease " + lease_id_ + "): " + why);
    } else {
      status = Dispatch(header.op, args, payload, payload_len, reply);
    }
    if (IsGpuFailure(status) && usable.ok()) {
      backend_->ReportFailure(gpu_.index, "CUDA error " + std::to_string(status) + " in-band");
    }
    if (IsSticky(status)) sticky_error_ = status;
    if (status != kCuSuccess) {
      // The executor's reason (the sim's PTX engine names the instruction or address).
      std::string detail = executor_->TakeErrorDetail();
      if (!detail.empty()) {
        log_->Log("detail " + lease_id_ + " " + std::to_string(status) + " " + detail.substr(0, 80),
                  "gpupool-dataplane: client " + peer_ + " (lease " + lease_id_ + "): CUDA error " +
                      std::to_string(status) + ": " + detail);
      }
    }
    // Device printf text reaches the client with the replies of synchronising calls.
    if (Synchronises(header.op)) reply->out += executor_->TakeOutput();
  }
  if (header.flags & transport::kFlagOneWay) {
    if (status != 0 && async_error_ == 0) async_error_ = status;
    return;
  }
  reply->status = status;
  reply->async_status = async_error_;
  async_error_ = 0;
}

// A module load's arguments travel in the request header with the device's attributes.
static_assert(sizeof(ModuleLoadArgs) <= transport::kMaxArgsLen);

int32_t Session::LoadModule(std::string_view args, const void* payload, size_t payload_len, std::string* out) {
  ModuleLoadArgs load;
  if (!Decode(args, &load)) return kCuInvalidValue;
  const char* p = static_cast<const char*>(payload);
  const char* end = p + payload_len;
  ModuleImageHeader header;
  if (payload_len < sizeof(header)) return kCuInvalidImage;
  std::memcpy(&header, p, sizeof(header));
  p += sizeof(header);
  if (header.image_size > static_cast<uint64_t>(end - p)) return kCuInvalidImage;
  const char* image = p;
  p += header.image_size;
  std::vector<device::KernelInfo> kernels;
  for (uint32_t i = 0; i < header.kernel_count; ++i) {
    KernelEntry entry;
    if (static_cast<size_t>(end - p) < sizeof(entry)) return kCuInvalidImage;
    std::memcpy(&entry, p, sizeof(entry));
    p += sizeof(entry);
    if (entry.name_len > static_cast<size_t>(end - p)) return kCuInvalidImage;
    kernels.push_back(device::KernelInfo{std::string(p, entry.name_len), entry.param_size});
    p += entry.name_len;
  }
  int32_t status = executor_->LoadModule(load.module, image, header.image_size, kernels, load.globals_base,
                                         load.device_heap, load.pending_launches, load.device_ordinal, &load.facts);
  ModuleLoadResult result{0, 0};
  if (status == kCuSuccess && !executor_->GlobalsRange(load.module, &result.globals_base, &result.globals_size)) {
    result = {0, 0};
  }
  Encode(result, out);
  return status;
}

int32_t Session::Dispatch(uint32_t op, std::string_view args, const void* payload, size_t payload_len,
                          transport::ServerReply* reply) {
  device::Executor& ex = *executor_;
  switch (op) {
    case kOpMemAlloc: {
      MemAllocArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      MemAllocResult result{0};
      int32_t status = kCuNotSupported;
      if (a.address != 0) {
        status = ex.AllocateAt(a.address, a.size);
        if (status == kCuSuccess) result.dptr = a.address;
        // Said once per session (the client then runs unprotected against GPU failures).
        std::string why = status == kCuNotSupported ? ex.TakeErrorDetail() : std::string();
        if (!why.empty() && !said_unplaced_) {
          said_unplaced_ = true;
          log_->Log("unplaced " + lease_id_, "gpupool-dataplane: client " + peer_ + " (lease " + lease_id_ +
                                                 "): memory not placed at the address it chose (" + why +
                                                 "); allocated where the driver chooses");
        }
      }
      // An executor that cannot place memory chooses itself; the client sees the address.
      if (status == kCuNotSupported) status = ex.Allocate(a.size, &result.dptr);
      Encode(result, &reply->out);
      return status;
    }
    case kOpMemFree: {
      MemFreeArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.Free(a.dptr);
    }
    case kOpRecovered: {
      RecoveredArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      a.from[sizeof(a.from) - 1] = '\0';
      // Client text bound for logs and gpupoold's JSON: printable ASCII only.
      for (char* c = a.from; *c != '\0'; ++c) {
        if (*c < 0x20 || *c > 0x7e) *c = '?';
      }
      // The lease and GPU are the session's own: a client speaks only for itself.
      if (on_recovered_) {
        on_recovered_(gpu_.uuid, lease_id_, a.from, a.pause_ms, a.restored_bytes, a.replayed, a.copied_bytes);
      }
      return kCuSuccess;
    }
    case kOpMemGetInfo: {
      MemInfoResult result{};
      ex.MemoryInfo(&result.free, &result.total);
      Encode(result, &reply->out);
      return kCuSuccess;
    }
    case kOpMemcpyHtoD: {
      MemcpyHtoDArgs a;
      if (!Decode(args, &a) || a.size != payload_len) return kCuInvalidValue;
      return ex.CopyToDevice(a.dst, payload, a.size, a.stream);
    }
    case kOpMemcpyDtoH: {
      MemcpyDtoHArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      const void* data = nullptr;
      int32_t status = ex.CopyFromDevice(a.src, a.size, a.stream, &data);
      if (status == kCuSuccess) {
        reply->bulk = data;
        reply->bulk_len = a.size;
      }
      return status;
    }
    case kOpMemcpyDtoD: {
      MemcpyDtoDArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.CopyDeviceToDevice(a.dst, a.src, a.size, a.stream);
    }
    case kOpMemset: {
      MemsetArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.Memset(a.dst, a.value, a.element_size, a.count, a.stream);
    }
    case kOpModuleLoad:
      return LoadModule(args, payload, payload_len, &reply->out);
    case kOpModuleUnload: {
      ModuleUnloadArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.UnloadModule(a.module);
    }
    case kOpGetFunction: {
      GetFunctionArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      a.name[sizeof(a.name) - 1] = '\0';
      int32_t status = ex.GetFunction(a.module, a.function, a.name);
      if (status != kCuSuccess) {
        log_->Log("kernel " + lease_id_ + " " + a.name + " " + std::to_string(status),
                  "client " + peer_ + " (lease " + lease_id_ + "): kernel '" + a.name + "' not available (CUDA error " +
                      std::to_string(status) + ")");
        return status;
      }
      FunctionResources resources;
      if (ex.Resources(a.function, &resources)) Encode(resources, &reply->out);
      return status;
    }
    case kOpLaunch: {
      LaunchArgs a;
      if (!Decode(args, &a) || a.param_size != payload_len) return kCuInvalidValue;
      if ((a.flags & ~(kLaunchCooperative | kLaunchCluster)) != 0 || a.reserved != 0) return kCuInvalidValue;
      device::LaunchConfig config;
      std::memcpy(config.grid, a.grid, sizeof(config.grid));
      std::memcpy(config.block, a.block, sizeof(config.block));
      config.shared_mem = a.shared_mem;
      config.stream = a.stream;
      config.cooperative = (a.flags & kLaunchCooperative) != 0;
      if (int32_t status = ClusterOf(a, config.cluster); status != kCuSuccess) return status;
      return ex.Launch(a.function, config, payload, payload_len);
    }
    case kOpStreamCreate: {
      StreamArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.CreateStream(a.stream, a.flags, a.priority);
    }
    case kOpStreamDestroy: {
      StreamArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.DestroyStream(a.stream);
    }
    case kOpStreamSynchronize:
    case kOpStreamQuery: {
      StreamArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return op == kOpStreamQuery ? ex.QueryStream(a.stream) : ex.SynchronizeStream(a.stream);
    }
    case kOpStreamWaitEvent: {
      StreamWaitEventArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.StreamWaitEvent(a.stream, a.event);
    }
    case kOpEventCreate:
    case kOpEventDestroy:
    case kOpEventSynchronize:
    case kOpEventQuery: {
      EventArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      if (op == kOpEventCreate) return ex.CreateEvent(a.event, a.flags);
      if (op == kOpEventDestroy) return ex.DestroyEvent(a.event);
      if (op == kOpEventSynchronize) return ex.SynchronizeEvent(a.event);
      return ex.QueryEvent(a.event);
    }
    case kOpEventRecord: {
      EventRecordArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.RecordEvent(a.event, a.stream);
    }
    case kOpEventElapsed: {
      EventElapsedArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      EventElapsedResult result{};
      int32_t status = ex.ElapsedTime(a.start, a.end, &result.milliseconds);
      Encode(result, &reply->out);
      return status;
    }
    case kOpContextSynchronize:
      return ex.SynchronizeStream(0);
    case kOpModuleGetGlobal: {
      ModuleGetGlobalArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      a.name[sizeof(a.name) - 1] = '\0';
      ModuleGetGlobalResult result{};
      int32_t status = ex.GetGlobal(a.module, a.name, &result.dptr, &result.size);
      Encode(result, &reply->out);
      return status;
    }
    case kOpTexObjectCreate: {
      TexObjectCreateArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      uint64_t start = 0, bytes = 0;
      if (int32_t status = TexObjectRange(a, &start, &bytes); status != kCuSuccess) return status;
      uint64_t handle = 0;
      int32_t status = ex.CreateTextureObject(a, start, bytes, &handle);
      if (status == kCuSuccess) Encode(handle, &reply->out);
      return status;
    }
    case kOpTexObjectDestroy: {
      TexObjectDestroyArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.DestroyTextureObject(a.handle);
    }
    case kOpArrayCreate: {
      ArrayCreateArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      if (int32_t status = CheckArrayCreate(a); status != kCuSuccess) return status;
      return ex.CreateArray(a);
    }
    case kOpArrayDestroy: {
      ArrayDestroyArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.DestroyArray(a.array);
    }
    case kOpMipmappedArrayCreate: {
      MipmappedArrayCreateArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      if (int32_t status = CheckMipmappedArrayCreate(a); status != kCuSuccess) return status;
      return ex.CreateMipmappedArray(a);
    }
    case kOpMipmappedArrayDestroy: {
      ArrayDestroyArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.DestroyMipmappedArray(a.array);
    }
    case kOpArrayCopy: {
      ArrayCopyArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      if (int32_t status = CheckArrayCopy(a, payload_len); status != kCuSuccess) return status;
      const void* bulk = nullptr;
      uint64_t bulk_len = 0;
      int32_t status = ex.CopyArray(a, payload, &bulk, &bulk_len);
      if (status == kCuSuccess && bulk != nullptr) {
        reply->bulk = bulk;
        reply->bulk_len = bulk_len;
      }
      return status;
    }
    case kOpSurfObjectCreate: {
      SurfObjectCreateArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      uint64_t handle = 0;
      int32_t status = ex.CreateSurfaceObject(a.array, &handle);
      if (status == kCuSuccess) Encode(handle, &reply->out);
      return status;
    }
    case kOpSurfObjectDestroy: {
      TexObjectDestroyArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      return ex.DestroySurfaceObject(a.handle);
    }
    case kOpTensorMap: {
      TensorMapArgs a;
      if (!Decode(args, &a)) return kCuInvalidValue;
      if (a.kind > kTensorMapReplaceAddress ||
          (a.kind == kTensorMapEncodeTiled && (a.rank < 1 || a.rank > kTensorMapMaxRank))) {
        return kCuInvalidValue;
      }
      uint8_t map[128];
      const int32_t status = ex.TensorMap(a, map);
      if (status == kCuSuccess) reply->out.assign(reinterpret_cast<const char*>(map), sizeof(map));
      return status;
    }
    default:
      return kCuNotSupported;
  }
}

}  // namespace gpupool::dataplane

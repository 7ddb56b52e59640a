// The tables of CUDA arrays and texture and surface objects (ops/arrays.h).
#include "remote/client/ops/arrays.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "remote/client/core/api_common.h"
#include "remote/client/ops/memory.h"
#include "remote/protocol/texture_desc.h"

namespace gpupool::client::ops {
namespace {

constexpr uint32_t kArrayMagic = 0x41525259;      // "ARRY"
constexpr uint32_t kMipmappedMagic = 0x4d49504d;  // "MIPM"

// A CUarray points at its record (the magic marks one in a debugger; the table decides).
struct ArrayRecord {
  uint32_t magic = kArrayMagic;
  ArrayInfo info;
};

std::mutex& Mutex() {
  static std::mutex mu;
  return mu;
}
// Live arrays, and objects by handle. GUARDED_BY(Mutex())
std::set<const ArrayRecord*>& Arrays() {
  static auto* arrays = new std::set<const ArrayRecord*>;
  return *arrays;
}
// A CUmipmappedArray points at its record: its levels' arrays and its allocation.
struct MipmappedRecord {
  uint32_t magic = kMipmappedMagic;
  std::vector<CUarray> levels;
  CUdeviceptr base = 0;
  // A GPU host's GPU whose driver holds it (NewForwardedMipmappedArray), and its id there.
  int forwarded_device = -1;
  uint64_t remote = 0;
};
// GUARDED_BY(Mutex())
std::set<const MipmappedRecord*>& Mipmapped() {
  static auto* mipmapped = new std::set<const MipmappedRecord*>;
  return *mipmapped;
}
std::map<uint64_t, ObjectRecord>& Objects() {
  static auto* objects = new std::map<uint64_t, ObjectRecord>;
  return *objects;
}

// After `device`'s agent made arrays its driver holds: the process is no longer protected.
void UnprotectForArrays(int device) {
  if (Device* owner = Runtime::Get().device(device); owner != nullptr && owner->failover) {
    owner->failover->Unprotect("it made CUDA arrays, which its GPU's driver holds (another GPU's driver would not)");
  }
}

// REQUIRES: Mutex() held.
const ArrayInfo* Find(CUarray array) {
  auto* record = reinterpret_cast<const ArrayRecord*>(array);
  return Arrays().count(record) ? &record->info : nullptr;
}

}  // namespace

CUresult NewArray(const ArrayInfo& info, size_t bytes, CUarray* handle) {
  auto record = std::make_unique<ArrayRecord>();
  record->info = info;
  if (CUresult status = AllocDeviceMemory(&record->info.base, bytes); status != CUDA_SUCCESS) return status;
  std::lock_guard<std::mutex> lock(Mutex());
  *handle = reinterpret_cast<CUarray>(record.get());
  Arrays().insert(record.release());
  return CUDA_SUCCESS;
}

CUresult NewMipmappedArray(const std::vector<ArrayInfo>& levels, const std::vector<size_t>& offsets, size_t bytes,
                           CUmipmappedArray* handle) {
  auto record = std::make_unique<MipmappedRecord>();
  if (CUresult status = AllocDeviceMemory(&record->base, bytes); status != CUDA_SUCCESS) return status;
  std::lock_guard<std::mutex> lock(Mutex());
  for (size_t l = 0; l < levels.size(); ++l) {
    auto level = std::make_unique<ArrayRecord>();
    level->info = levels[l];
    level->info.base = record->base + offsets[l];
    level->info.mipmap_level = true;
    record->levels.push_back(reinterpret_cast<CUarray>(level.get()));
    Arrays().insert(level.release());
  }
  *handle = reinterpret_cast<CUmipmappedArray>(record.get());
  Mipmapped().insert(record.release());
  return CUDA_SUCCESS;
}

CUresult NewForwardedMipmappedArray(const CUDA_ARRAY3D_DESCRIPTOR& descriptor, const std::vector<ArrayInfo>& levels,
                                    int device, CUmipmappedArray* handle) {
  auto record = std::make_unique<MipmappedRecord>();
  record->forwarded_device = device;
  record->remote = Runtime::Get().NewId();
  dataplane::MipmappedArrayCreateArgs args;
  args.descriptor = dataplane::ArrayToWire(descriptor, record->remote);
  args.levels = static_cast<uint32_t>(levels.size());
  args.first_level = Runtime::Get().NewIds(levels.size());
  if (CUresult status = Runtime::Get().Call(device, dataplane::kOpMipmappedArrayCreate, &args, sizeof(args));
      status != CUDA_SUCCESS) {
    return status;
  }
  UnprotectForArrays(device);
  std::lock_guard<std::mutex> lock(Mutex());
  for (size_t l = 0; l < levels.size(); ++l) {
    auto level = std::make_unique<ArrayRecord>();
    level->info = levels[l];
    level->info.base = 0;
    level->info.forwarded_device = device;
    level->info.remote = args.first_level + l;
    level->info.mipmap_level = true;
    record->levels.push_back(reinterpret_cast<CUarray>(level.get()));
    Arrays().insert(level.release());
  }
  *handle = reinterpret_cast<CUmipmappedArray>(record.get());
  Mipmapped().insert(record.release());
  return CUDA_SUCCESS;
}

CUresult FindMipmappedArray(CUmipmappedArray mipmapped, int* forwarded_device, uint64_t* remote) {
  std::lock_guard<std::mutex> lock(Mutex());
  auto* record = reinterpret_cast<const MipmappedRecord*>(mipmapped);
  if (Mipmapped().count(record) == 0) return CUDA_ERROR_INVALID_HANDLE;
  *forwarded_device = record->forwarded_device;
  *remote = record->remote;
  return CUDA_SUCCESS;
}

CUresult MipmappedArrayLevel(CUmipmappedArray mipmapped, unsigned level, CUarray* array, unsigned* count) {
  std::lock_guard<std::mutex> lock(Mutex());
  auto* record = reinterpret_cast<const MipmappedRecord*>(mipmapped);
  if (Mipmapped().count(record) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (count != nullptr) *count = static_cast<unsigned>(record->levels.size());
  if (level >= record->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *array = record->levels[level];
  return CUDA_SUCCESS;
}

CUresult DestroyMipmappedArray(CUmipmappedArray mipmapped) {
  CUdeviceptr base = 0;
  int forwarded_device = -1;
  uint64_t remote = 0;
  {
    std::lock_guard<std::mutex> lock(Mutex());
    auto* record = reinterpret_cast<const MipmappedRecord*>(mipmapped);
    if (Mipmapped().erase(record) == 0) return CUDA_ERROR_INVALID_HANDLE;
    for (CUarray level : record->levels) {
      auto* array = reinterpret_cast<const ArrayRecord*>(level);
      Arrays().erase(array);
      delete array;
    }
    base = record->base;
    forwarded_device = record->forwarded_device;
    remote = record->remote;
    delete record;
  }
  if (forwarded_device < 0) return FreeDeviceMemory(base);
  dataplane::ArrayDestroyArgs args{remote};
  return Runtime::Get().Call(forwarded_device, dataplane::kOpMipmappedArrayDestroy, &args, sizeof(args));
}

CUresult NewForwardedArray(const ArrayInfo& info, int device, CUarray* handle) {
  auto record = std::make_unique<ArrayRecord>();
  record->info = info;
  record->info.base = 0;
  record->info.forwarded_device = device;
  record->info.remote = Runtime::Get().NewId();
  dataplane::ArrayCreateArgs args = dataplane::ArrayToWire(info.descriptor, record->info.remote);
  if (CUresult status = Runtime::Get().Call(device, dataplane::kOpArrayCreate, &args, sizeof(args));
      status != CUDA_SUCCESS) {
    return status;
  }
  UnprotectForArrays(device);
  std::lock_guard<std::mutex> lock(Mutex());
  *handle = reinterpret_cast<CUarray>(record.get());
  Arrays().insert(record.release());
  return CUDA_SUCCESS;
}

CUresult FindArray(CUarray array, ArrayInfo* info) {
  std::lock_guard<std::mutex> lock(Mutex());
  const ArrayInfo* found = Find(array);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *info = *found;
  return CUDA_SUCCESS;
}

CUresult DestroyArray(CUarray array) {
  ArrayInfo info;
  {
    std::lock_guard<std::mutex> lock(Mutex());
    auto* record = reinterpret_cast<const ArrayRecord*>(array);
    if (Arrays().count(record) == 0) return CUDA_ERROR_INVALID_HANDLE;
    // A level lives as long as its mipmapped array (cuMipmappedArrayDestroy frees it).
    if (record->info.mipmap_level) return CUDA_ERROR_INVALID_VALUE;
    Arrays().erase(record);
    info = record->info;
    delete record;
  }
  if (info.forwarded_device < 0) return FreeDeviceMemory(info.base);
  dataplane::ArrayDestroyArgs args{info.remote};
  return Runtime::Get().Call(info.forwarded_device, dataplane::kOpArrayDestroy, &args, sizeof(args));
}

CUresult ArrayBytes(CUarray array, size_t offset, size_t bytes, CUdeviceptr* at) {
  std::lock_guard<std::mutex> lock(Mutex());
  const ArrayInfo* info = Find(array);
  if (info == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (info->forwarded_device >= 0) return CUDA_ERROR_NOT_SUPPORTED;  // no device address
  // The product was checked when the array was made.
  const size_t size = info->row_bytes * info->rows * info->slices;
  size_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > size) return CUDA_ERROR_INVALID_VALUE;
  *at = info->base + offset;
  return CUDA_SUCCESS;
}

CUresult ArrayBacking(CUarray array, uintptr_t* base, size_t* row_bytes, size_t* rows) {
  std::lock_guard<std::mutex> lock(Mutex());
  const ArrayInfo* info = Find(array);
  if (info == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *base = info->base;
  *row_bytes = info->row_bytes;
  *rows = info->rows;
  return CUDA_SUCCESS;
}

CUresult CheckArrayRegion(CUmemorytype type, CUarray array, size_t x, size_t y, size_t z, size_t width, size_t height,
                          size_t depth) {
  if (type != CU_MEMORYTYPE_ARRAY) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(Mutex());
  const ArrayInfo* info = Find(array);
  if (info == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  size_t end = 0;
  if (__builtin_add_overflow(x, width, &end) || end > info->row_bytes || __builtin_add_overflow(y, height, &end) ||
      end > info->rows || __builtin_add_overflow(z, depth, &end) || end > info->slices) {
    LogError("cuMemcpy2D/3D: the region reaches outside the array");
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

namespace {

// One side of a copy with a forwarded array: the array's record, if that side is one.
CUresult ForwardedSide(CUmemorytype type, CUarray array, ArrayInfo* info, bool* forwarded, bool* sim_array) {
  *forwarded = *sim_array = false;
  if (type != CU_MEMORYTYPE_ARRAY) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(Mutex());
  const ArrayInfo* found = Find(array);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *info = *found;
  *forwarded = found->forwarded_device >= 0;
  *sim_array = !*forwarded;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult CopyForwardedArray(const CUDA_MEMCPY3D& copy, CUstream stream, bool* handled) {
  *handled = false;
  ArrayInfo src_array, dst_array;
  bool src_forwarded = false, dst_forwarded = false, src_sim = false, dst_sim = false;
  if (CUresult status = ForwardedSide(copy.srcMemoryType, copy.srcArray, &src_array, &src_forwarded, &src_sim);
      status != CUDA_SUCCESS) {
    return status;
  }
  if (CUresult status = ForwardedSide(copy.dstMemoryType, copy.dstArray, &dst_array, &dst_forwarded, &dst_sim);
      status != CUDA_SUCCESS) {
    return status;
  }
  if (!src_forwarded && !dst_forwarded) return CUDA_SUCCESS;
  *handled = true;
  if (src_sim || dst_sim) {
    return static_cast<CUresult>(
        ReportUnsupported("cuMemcpy2D/3D", "a copy between arrays of a sim GPU and of a GPU host's GPU"));
  }
  if (copy.WidthInBytes == 0 || copy.Height == 0 || copy.Depth == 0) return CUDA_SUCCESS;
  // The array side the request names: the destination where it is a forwarded array.
  const bool to_array = dst_forwarded;
  const ArrayInfo& array = to_array ? dst_array : src_array;
  const int device = array.forwarded_device;
  dataplane::ArrayCopyArgs args;
  args.array = array.remote;
  args.to_array = to_array ? 1 : 0;
  args.x_bytes = to_array ? copy.dstXInBytes : copy.srcXInBytes;
  args.y = to_array ? copy.dstY : copy.srcY;
  args.z = to_array ? copy.dstZ : copy.srcZ;
  args.width_bytes = copy.WidthInBytes;
  args.height = copy.Height;
  args.depth = copy.Depth;
  int stream_device = device;
  if (CUresult status = ResolveDevice(stream, &stream_device, &args.stream); status != CUDA_SUCCESS) return status;
  if (stream_device != device) args.stream = 0;  // a stream of another GPU: the array's own order
  // The other side.
  const CUmemorytype other_type = to_array ? copy.srcMemoryType : copy.dstMemoryType;
  const void* other_host = to_array ? copy.srcHost : copy.dstHost;
  const CUdeviceptr other_device = to_array ? copy.srcDevice : copy.dstDevice;
  const size_t ox = to_array ? copy.srcXInBytes : copy.dstXInBytes, oy = to_array ? copy.srcY : copy.dstY,
               oz = to_array ? copy.srcZ : copy.dstZ;
  const size_t pitch = to_array ? copy.srcPitch : copy.dstPitch;
  const size_t given_height = to_array ? copy.srcHeight : copy.dstHeight;
  if (copy.Depth > 1 && given_height < copy.Height) return CUDA_ERROR_INVALID_VALUE;  // slices overlap
  const size_t height = std::max<size_t>(given_height, copy.Height);
  if (src_forwarded && dst_forwarded) {
    if (src_array.forwarded_device != device) {
      return static_cast<CUresult>(ReportUnsupported("cuMemcpy2D/3D", "a copy between arrays of two GPUs"));
    }
    args.other_kind = dataplane::kArrayCopyArray;
    args.other = src_array.remote;
    args.other_x_bytes = copy.srcXInBytes;
    args.other_y = copy.srcY;
    args.other_z = copy.srcZ;
    return Runtime::Get().Call(device, dataplane::kOpArrayCopy, &args, sizeof(args));
  }
  if (other_type != CU_MEMORYTYPE_HOST && other_type != CU_MEMORYTYPE_DEVICE && other_type != CU_MEMORYTYPE_UNIFIED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Unified addressing: the pointer itself says where it lives.
  const bool on_device =
      other_type == CU_MEMORYTYPE_DEVICE || (other_type == CU_MEMORYTYPE_UNIFIED && DeviceOf(other_device, 1) >= 0);
  uintptr_t base = other_type == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(other_host) : other_device;
  if (base == 0) return CUDA_ERROR_INVALID_VALUE;
  if ((copy.Height > 1 || copy.Depth > 1) && pitch < copy.WidthInBytes) return CUDA_ERROR_INVALID_VALUE;
  // The other side's first byte; the rows and slices after it, pitch and height apart (the
  // agent checks device memory is the session's; host memory is the program's own).
  size_t first = 0;
  if (__builtin_mul_overflow(oz, height, &first) || __builtin_add_overflow(first, oy, &first) ||
      __builtin_mul_overflow(first, pitch, &first) || __builtin_add_overflow(first, ox, &first) ||
      __builtin_add_overflow(base, first, &base)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (on_device) {
    if (DeviceOf(base, 1) != device) {
      return static_cast<CUresult>(
          ReportUnsupported("cuMemcpy2D/3D", "a copy between an array and memory of another GPU"));
    }
    args.other_kind = dataplane::kArrayCopyDevice;
    args.other = base;
    args.other_pitch = pitch;
    args.other_height = height;
    return Runtime::Get().Call(device, dataplane::kOpArrayCopy, &args, sizeof(args));
  }
  // The host's rows, packed for the wire (the session checks the size).
  args.other_kind = dataplane::kArrayCopyHost;
  const size_t bytes = copy.WidthInBytes * copy.Height * copy.Depth;  // inside the array: no overflow
  std::vector<char> packed(bytes);
  auto row = [&](size_t r, size_t s) { return reinterpret_cast<char*>(base + (s * height + r) * pitch); };
  if (to_array) {
    for (size_t s = 0; s < copy.Depth; ++s) {
      for (size_t r = 0; r < copy.Height; ++r) {
        std::memcpy(packed.data() + (s * copy.Height + r) * copy.WidthInBytes, row(r, s), copy.WidthInBytes);
      }
    }
    return Runtime::Get().Call(device, dataplane::kOpArrayCopy, &args, sizeof(args), packed.data(), packed.size());
  }
  if (CUresult status = Runtime::Get().Call(device, dataplane::kOpArrayCopy, &args, sizeof(args), nullptr, 0,
                                            packed.data(), packed.size());
      status != CUDA_SUCCESS) {
    return status;
  }
  for (size_t s = 0; s < copy.Depth; ++s) {
    for (size_t r = 0; r < copy.Height; ++r) {
      std::memcpy(row(r, s), packed.data() + (s * copy.Height + r) * copy.WidthInBytes, copy.WidthInBytes);
    }
  }
  return CUDA_SUCCESS;
}

CUresult PublishObject(const dataplane::SimTextureDescriptor& descriptor, const ObjectRecord& record, uint64_t* handle,
                       const std::vector<uint8_t>& trailer) {
  std::vector<uint8_t> bytes(sizeof(descriptor) + trailer.size());
  std::memcpy(bytes.data(), &descriptor, sizeof(descriptor));
  if (!trailer.empty()) std::memcpy(bytes.data() + sizeof(descriptor), trailer.data(), trailer.size());
  CUdeviceptr at = 0;
  if (CUresult status = AllocDeviceMemory(&at, bytes.size()); status != CUDA_SUCCESS) return status;
  if (CUresult status = CopyHtoD(at, bytes.data(), bytes.size(), nullptr); status != CUDA_SUCCESS) {
    FreeDeviceMemory(at);
    return status;
  }
  std::lock_guard<std::mutex> lock(Mutex());
  Objects()[at] = record;
  *handle = at;
  return CUDA_SUCCESS;
}

CUresult ListForwardedObject(uint64_t handle, int device, const ObjectRecord& record) {
  std::lock_guard<std::mutex> lock(Mutex());
  auto [at, added] = Objects().try_emplace(handle, record);
  if (!added) return CUDA_ERROR_NOT_SUPPORTED;
  at->second.forwarded_device = device;
  return CUDA_SUCCESS;
}

CUresult FindObject(uint64_t handle, bool surface, ObjectRecord* record) {
  std::lock_guard<std::mutex> lock(Mutex());
  auto found = Objects().find(handle);
  if (found == Objects().end() || found->second.surface != surface) return CUDA_ERROR_INVALID_VALUE;
  *record = found->second;
  return CUDA_SUCCESS;
}

CUresult DestroyObject(uint64_t handle, bool surface) {
  int forwarded_device = -1;
  {
    std::lock_guard<std::mutex> lock(Mutex());
    auto found = Objects().find(handle);
    if (found == Objects().end() || found->second.surface != surface) return CUDA_ERROR_INVALID_VALUE;
    forwarded_device = found->second.forwarded_device;
    Objects().erase(found);
  }
  if (forwarded_device < 0) return FreeDeviceMemory(handle);
  dataplane::TexObjectDestroyArgs args{handle};
  CUresult status =
      Runtime::Get().Call(forwarded_device, surface ? dataplane::kOpSurfObjectDestroy : dataplane::kOpTexObjectDestroy,
                          &args, sizeof(args));
  // The agent destroyed it already with the memory under it (freed first, as cleanup code
  // often does): the program's destroy still succeeds, as a driver's would.
  return status == CUDA_ERROR_INVALID_HANDLE ? CUDA_SUCCESS : status;
}

}  // namespace gpupool::client::ops

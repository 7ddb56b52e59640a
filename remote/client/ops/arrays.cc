// The tables of CUDA arrays and texture and surface objects (ops/arrays.h).
#include "remote/client/ops/arrays.h"

#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "remote/client/core/api_common.h"
#include "remote/client/ops/memory.h"

namespace gpupool::client::ops {
namespace {

constexpr uint32_t kArrayMagic = 0x41525259;  // "ARRY"

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
std::map<uint64_t, ObjectRecord>& Objects() {
  static auto* objects = new std::map<uint64_t, ObjectRecord>;
  return *objects;
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

CUresult FindArray(CUarray array, ArrayInfo* info) {
  std::lock_guard<std::mutex> lock(Mutex());
  const ArrayInfo* found = Find(array);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *info = *found;
  return CUDA_SUCCESS;
}

CUresult DestroyArray(CUarray array) {
  CUdeviceptr base = 0;
  {
    std::lock_guard<std::mutex> lock(Mutex());
    auto* record = reinterpret_cast<const ArrayRecord*>(array);
    if (Arrays().erase(record) == 0) return CUDA_ERROR_INVALID_HANDLE;
    base = record->info.base;
    delete record;
  }
  return FreeDeviceMemory(base);
}

CUresult ArrayBytes(CUarray array, size_t offset, size_t bytes, CUdeviceptr* at) {
  std::lock_guard<std::mutex> lock(Mutex());
  const ArrayInfo* info = Find(array);
  if (info == nullptr) return CUDA_ERROR_INVALID_HANDLE;
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

CUresult PublishObject(const dataplane::SimTextureDescriptor& descriptor, const ObjectRecord& record,
                       uint64_t* handle) {
  CUdeviceptr at = 0;
  if (CUresult status = AllocDeviceMemory(&at, sizeof(descriptor)); status != CUDA_SUCCESS) return status;
  if (CUresult status = CopyHtoD(at, &descriptor, sizeof(descriptor), nullptr); status != CUDA_SUCCESS) {
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
  CUresult status = Runtime::Get().Call(forwarded_device, dataplane::kOpTexObjectDestroy, &args, sizeof(args));
  // The agent destroyed it already with the memory under it (freed first, as cleanup code
  // often does): the program's destroy still succeeds, as a driver's would.
  return status == CUDA_ERROR_INVALID_HANDLE ? CUDA_SUCCESS : status;
}

}  // namespace gpupool::client::ops

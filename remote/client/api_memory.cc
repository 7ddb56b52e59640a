// Driver API: device memory, page-locked host memory, copies, memset, pointer queries.
//
// Copies are checked here against the allocations this process made, so a bad pointer is
// reported at once (CUDA_ERROR_INVALID_VALUE) even for copies that travel one-way:
// host-to-device, device-to-device and memset return when the data has left this process
// (the host buffer is reusable), like CUDA's staging of pageable memory; their device-side
// errors arrive at the next synchronising call. Device-to-host waits for the data, except
// asynchronous copies into page-locked memory, which complete by the next synchronisation.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "remote/client/api_common.h"

using namespace gpupool::client;  // NOLINT

namespace {

namespace dp = gpupool::dataplane;

// Marks host ranges we allocated (munmap on cuMemFreeHost) as opposed to registered ones.
constexpr unsigned kOwnedHostMemory = 0x80000000u;

// The device owning [ptr, ptr+size), or -1 when it is not device memory we allocated.
int DeviceOf(CUdeviceptr ptr, size_t size) {
  Allocation allocation{};
  if (!Runtime::Get().FindAllocation(ptr, size == 0 ? 1 : size, nullptr, &allocation)) return -1;
  return allocation.device;
}

CUresult StreamId(CUstream stream, uint64_t* id) {
  if (IsDefaultStream(stream)) {
    *id = 0;
    return CUDA_SUCCESS;
  }
  Stream* s = AsStream(stream);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *id = s->id;
  return CUDA_SUCCESS;
}

CUresult CopyHtoD(CUdeviceptr dst, const void* src, size_t size, CUstream stream) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (size == 0) return CUDA_SUCCESS;
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = DeviceOf(dst, size);
  if (device < 0) return CUDA_ERROR_INVALID_VALUE;
  dp::MemcpyHtoDArgs args{dst, size, 0};
  if (CUresult status = StreamId(stream, &args.stream); status != CUDA_SUCCESS) return status;
  return Runtime::Get().Post(device, dp::kOpMemcpyHtoD, &args, sizeof(args), src, size);
}

CUresult CopyDtoH(void* dst, CUdeviceptr src, size_t size, CUstream stream, bool async) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (size == 0) return CUDA_SUCCESS;
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = DeviceOf(src, size);
  if (device < 0) return CUDA_ERROR_INVALID_VALUE;
  dp::MemcpyDtoHArgs args{src, size, 0};
  if (CUresult status = StreamId(stream, &args.stream); status != CUDA_SUCCESS) return status;
  // Asynchronous only into page-locked memory; into pageable memory CUDA copies
  // synchronously too.
  if (async && Runtime::Get().FindHostRange(dst, nullptr)) {
    return Runtime::Get().Start(device, dp::kOpMemcpyDtoH, &args, sizeof(args), dst, size);
  }
  return Runtime::Get().Call(device, dp::kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0, dst, size);
}

CUresult CopyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (size == 0) return CUDA_SUCCESS;
  int device = DeviceOf(dst, size);
  int source_device = DeviceOf(src, size);
  if (device < 0 || source_device < 0) return CUDA_ERROR_INVALID_VALUE;
  if (device != source_device) {
    // Between two remote GPUs: through this host (there is no peer path).
    std::vector<char> staging(size);
    if (CUresult status = CopyDtoH(staging.data(), src, size, stream, false);
        status != CUDA_SUCCESS) {
      return status;
    }
    return CopyHtoD(dst, staging.data(), size, stream);
  }
  dp::MemcpyDtoDArgs args{dst, src, size, 0};
  if (CUresult status = StreamId(stream, &args.stream); status != CUDA_SUCCESS) return status;
  return Runtime::Get().Post(device, dp::kOpMemcpyDtoD, &args, sizeof(args));
}

CUresult CopyAny(CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream, bool async) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  bool dst_device = DeviceOf(dst, size) >= 0;
  bool src_device = DeviceOf(src, size) >= 0;
  if (dst_device && src_device) return CopyDtoD(dst, src, size, stream);
  if (dst_device) return CopyHtoD(dst, reinterpret_cast<const void*>(src), size, stream);
  if (src_device) return CopyDtoH(reinterpret_cast<void*>(dst), src, size, stream, async);
  if (size > 0 && (dst == 0 || src == 0)) return CUDA_ERROR_INVALID_VALUE;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), size);
  return CUDA_SUCCESS;
}

CUresult Memset(CUdeviceptr dst, uint32_t value, uint32_t element_size, size_t count,
                CUstream stream) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (count == 0) return CUDA_SUCCESS;
  int device = DeviceOf(dst, count * element_size);
  if (device < 0) return CUDA_ERROR_INVALID_VALUE;
  dp::MemsetArgs args{dst, count, value, element_size, 0};
  if (CUresult status = StreamId(stream, &args.stream); status != CUDA_SUCCESS) return status;
  return Runtime::Get().Post(device, dp::kOpMemset, &args, sizeof(args));
}

}  // namespace

// --- Device memory -----------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t size) {
  GPUPOOL_BODY({
    if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    dp::MemAllocArgs args{size};
    dp::MemAllocResult result{0};
    std::string out;
    CUresult status = Runtime::Get().Call(device, dp::kOpMemAlloc, &args, sizeof(args), nullptr, 0,
                                          nullptr, 0, &out);
    if (status != CUDA_SUCCESS) return status;
    if (out.size() != sizeof(result)) return CUDA_ERROR_UNKNOWN;
    std::memcpy(&result, out.data(), sizeof(result));
    Runtime::Get().AddAllocation(result.dptr, size, device);
    *dptr = result.dptr;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (dptr == 0) return CUDA_SUCCESS;
    int device = 0;
    if (!Runtime::Get().RemoveAllocation(dptr, &device)) return CUDA_ERROR_INVALID_VALUE;
    dp::MemFreeArgs args{dptr};
    return Runtime::Get().Call(device, dp::kOpMemFree, &args, sizeof(args));
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  GPUPOOL_BODY({
    if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
    std::string out;
    CUresult status = Runtime::Get().Call(device, dp::kOpMemGetInfo, nullptr, 0, nullptr, 0,
                                          nullptr, 0, &out);
    if (status != CUDA_SUCCESS) return status;
    dp::MemInfoResult result{};
    if (out.size() != sizeof(result)) return CUDA_ERROR_UNKNOWN;
    std::memcpy(&result, out.data(), sizeof(result));
    *free = result.free;
    *total = result.total;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size,
                                                          CUdeviceptr dptr) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    uint64_t start = 0;
    Allocation allocation{};
    if (!Runtime::Get().FindAllocation(dptr, 1, &start, &allocation)) return CUDA_ERROR_NOT_FOUND;
    if (base) *base = start;
    if (size) *size = allocation.size;
    return CUDA_SUCCESS;
  });
}

// --- Page-locked host memory ---------------------------------------------------------------
// Host memory stays in this process; "page-locked" only decides whether asynchronous
// device-to-host copies may complete later. mmap keeps the buffers page aligned.

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemHostAlloc(void** pointer, size_t size, unsigned int flags) {
  GPUPOOL_BODY({
    if (pointer == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (flags & CU_MEMHOSTALLOC_DEVICEMAP) {
      LogError("cuMemHostAlloc: mapped host memory (CU_MEMHOSTALLOC_DEVICEMAP) is not supported "
               "by remote GPUs");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    Runtime::Get().AddHostRange(memory, size, flags | kOwnedHostMemory);
    *pointer = memory;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAllocHost_v2(void** pointer, size_t size) {
  return cuMemHostAlloc(pointer, size, 0);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemFreeHost(void* pointer) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (pointer == nullptr) return CUDA_SUCCESS;
    unsigned flags = 0;
    uintptr_t start = 0;
    size_t size = 0;
    if (!Runtime::Get().FindHostRange(pointer, &flags, &start, &size) ||
        !(flags & kOwnedHostMemory) || start != reinterpret_cast<uintptr_t>(pointer)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    Runtime::Get().RemoveHostRange(pointer);
    munmap(pointer, size);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemHostGetFlags(unsigned int* flags, void* pointer) {
  GPUPOOL_BODY({
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    unsigned found = 0;
    if (!Runtime::Get().FindHostRange(pointer, &found)) return CUDA_ERROR_INVALID_VALUE;
    *flags = found & ~kOwnedHostMemory;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemHostRegister_v2(void* pointer, size_t size,
                                                       unsigned int flags) {
  GPUPOOL_BODY({
    if (pointer == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (flags & CU_MEMHOSTREGISTER_DEVICEMAP) {
      return static_cast<CUresult>(ReportUnsupported("cuMemHostRegister(CU_MEMHOSTREGISTER_DEVICEMAP)"));
    }
    if (Runtime::Get().FindHostRange(pointer, nullptr)) {
      return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    Runtime::Get().AddHostRange(pointer, size, flags);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemHostRegister(void* pointer, size_t size, unsigned int flags) {
  return cuMemHostRegister_v2(pointer, size, flags);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemHostUnregister(void* pointer) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    unsigned flags = 0;
    if (!Runtime::Get().FindHostRange(pointer, &flags) || (flags & kOwnedHostMemory)) {
      return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    Runtime::Get().RemoveHostRange(pointer);
    return CUDA_SUCCESS;
  });
}

// --- Copies --------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t size) {
  GPUPOOL_BODY({ return CopyHtoD(dst, src, size, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src,
                                                       size_t size, CUstream stream) {
  GPUPOOL_BODY({ return CopyHtoD(dst, src, size, stream); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t size) {
  GPUPOOL_BODY({ return CopyDtoH(dst, src, size, nullptr, false); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t size,
                                                       CUstream stream) {
  GPUPOOL_BODY({ return CopyDtoH(dst, src, size, stream, true); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t size) {
  GPUPOOL_BODY({ return CopyDtoD(dst, src, size, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src,
                                                       size_t size, CUstream stream) {
  GPUPOOL_BODY({ return CopyDtoD(dst, src, size, stream); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t size) {
  GPUPOOL_BODY({ return CopyAny(dst, src, size, nullptr, false); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t size,
                                                CUstream stream) {
  GPUPOOL_BODY({ return CopyAny(dst, src, size, stream, true); });
}

// --- Memset --------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  GPUPOOL_BODY({ return Memset(dst, value, 1, n, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dst, unsigned short value, size_t n) {
  GPUPOOL_BODY({ return Memset(dst, value, 2, n, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t n) {
  GPUPOOL_BODY({ return Memset(dst, value, 4, n, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n,
                                                  CUstream stream) {
  GPUPOOL_BODY({ return Memset(dst, value, 1, n, stream); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dst, unsigned short value,
                                                   size_t n, CUstream stream) {
  GPUPOOL_BODY({ return Memset(dst, value, 2, n, stream); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n,
                                                   CUstream stream) {
  GPUPOOL_BODY({ return Memset(dst, value, 4, n, stream); });
}

// --- Pointer attributes --------------------------------------------------------------------

namespace {

// Writes one attribute of `ptr`; CUDA_ERROR_INVALID_VALUE for pointers we do not know when
// the attribute needs a known pointer.
CUresult PointerAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr,
                          bool lenient) {
  uint64_t start = 0;
  Allocation allocation{};
  bool device = Runtime::Get().FindAllocation(ptr, 1, &start, &allocation);
  bool host = !device && Runtime::Get().FindHostRange(reinterpret_cast<void*>(ptr), nullptr);
  if (!device && !host && !lenient) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device ? Runtime::Get().device(allocation.device) : nullptr;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = d ? reinterpret_cast<CUcontext>(&d->primary) : nullptr;
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) =
          device ? CU_MEMORYTYPE_DEVICE : host ? CU_MEMORYTYPE_HOST : 0;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      if (!device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = ptr;
      break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!host) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned*>(data) = 0;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = device ? allocation.device : -2;
      break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = device ? start : 0;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      if (!device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = start;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      if (!device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<size_t*>(data) = allocation.size;
      break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<int*>(data) = device ? 1 : 0;
      break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      *static_cast<int*>(data) = 1;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                                        CUdeviceptr ptr) {
  GPUPOOL_BODY({
    if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    return PointerAttribute(data, attribute, ptr, false);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuPointerGetAttributes(unsigned int count,
                                                         CUpointer_attribute* attributes,
                                                         void** data, CUdeviceptr ptr) {
  GPUPOOL_BODY({
    if (attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    for (unsigned i = 0; i < count; ++i) {
      if (data[i] == nullptr) continue;
      // Unknown pointers are "unregistered host memory", not an error, in this call.
      if (PointerAttribute(data[i], attributes[i], ptr, true) != CUDA_SUCCESS) {
        std::memset(data[i], 0, sizeof(void*));
      }
    }
    return CUDA_SUCCESS;
  });
}

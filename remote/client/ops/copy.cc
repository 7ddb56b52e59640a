// Copies between host and device memory, linear and by rows (ops/memory.h).
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/client/ops/arrays.h"
#include "remote/client/ops/memory.h"

namespace gpupool::client::ops {

namespace dp = gpupool::dataplane;

int DeviceOf(CUdeviceptr ptr, size_t size) {
  Allocation allocation{};
  if (!Runtime::Get().FindAllocation(ptr, size == 0 ? 1 : size, nullptr, &allocation)) return -1;
  return allocation.device;
}

bool SpanPieces(CUdeviceptr ptr, size_t size, int* device, std::vector<std::pair<size_t, size_t>>* pieces) {
  pieces->clear();
  *device = -1;
  for (uint64_t at = ptr, end = ptr + size; at < end;) {
    uint64_t start = 0;
    Allocation allocation{};
    if (!Runtime::Get().FindAllocation(at, 1, &start, &allocation)) return false;
    if (*device >= 0 && allocation.device != *device) return false;
    *device = allocation.device;
    const uint64_t length = std::min<uint64_t>(end - at, start + allocation.size - at);
    pieces->emplace_back(at - ptr, length);
    at += length;
  }
  return pieces->size() > 1;
}

// DeviceOf, or the device of a run of adjacent allocations (SpanPieces).
int DeviceOfSpan(CUdeviceptr ptr, size_t size) {
  if (int device = DeviceOf(ptr, size); device >= 0) return device;
  int device = -1;
  std::vector<std::pair<size_t, size_t>> pieces;
  return SpanPieces(ptr, size, &device, &pieces) ? device : -1;
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

// Whether host pointer `ptr` lies in managed or mapped host memory (managed.cc), whose
// host pages are current only between synchronisations: a copy to or from it is a copy
// on the GPU (the device's copy may be newer, and would be read back over what a copy
// wrote into the pages).
bool InManagedMemory(const void* ptr, size_t size) {
  const auto address = reinterpret_cast<CUdeviceptr>(ptr);
  return Runtime::Get().IsManaged(address) && DeviceOf(address, size) >= 0;
}

// Whether [src, src+size) lies in one page-locked buffer this library allocated (not
// registered memory, which the program may free behind cuMemHostUnregister).
bool InOwnedPinnedMemory(const void* src, size_t size) {
  unsigned flags = 0;
  uintptr_t start = 0;
  size_t length = 0;
  if (!Runtime::Get().FindHostRange(src, &flags, &start, &length)) return false;
  const auto at = reinterpret_cast<uintptr_t>(src);
  return (flags & kOwnedHostMemory) != 0 && at >= start && size <= length - (at - start);
}

// `async`: a stream-ordered copy (cuMemcpyHtoDAsync, cuMemcpyAsync). From page-locked memory
// this library allocated, CUDA lets the program change the source only once the copy is
// known to be done, so the failover journal keeps a reference and copies the bytes by the
// next two-way request instead of at the call (failover.h).
CUresult CopyHtoD(CUdeviceptr dst, const void* src, size_t size, CUstream stream, bool async) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (size == 0) return CUDA_SUCCESS;
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (InManagedMemory(src, size)) {
    return CopyDtoD(dst, reinterpret_cast<CUdeviceptr>(src), size, stream);
  }
  int device = DeviceOf(dst, size);
  if (device < 0) {
    return ForEachPiece(dst, size, [&](size_t offset, size_t length) {
      return CopyHtoD(dst + offset, static_cast<const char*>(src) + offset, length, stream, async);
    });
  }
  dp::MemcpyHtoDArgs args{dst, size, 0};
  if (CUresult status = StreamId(stream, &args.stream); status != CUDA_SUCCESS) return status;
  return Runtime::Get().Post(device, dp::kOpMemcpyHtoD, &args, sizeof(args), src, size,
                             async && InOwnedPinnedMemory(src, size));
}

CUresult CopyDtoH(void* dst, CUdeviceptr src, size_t size, CUstream stream, bool async) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (size == 0) return CUDA_SUCCESS;
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (InManagedMemory(dst, size)) {
    const auto address = reinterpret_cast<CUdeviceptr>(dst);
    CUresult status = CopyDtoD(address, src, size, stream);
    if (status != CUDA_SUCCESS || async) return status;
    // A blocking copy: the host reads dst once it returns, so this is a synchronisation,
    // after which managed.cc reads the GPU's copies back into the host's pages.
    dp::StreamArgs args{0, 0, 0};
    return Runtime::Get().Call(DeviceOf(address, size), dp::kOpContextSynchronize, &args, sizeof(args));
  }
  int device = DeviceOf(src, size);
  if (device < 0) {
    return ForEachPiece(src, size, [&](size_t offset, size_t length) {
      return CopyDtoH(static_cast<char*>(dst) + offset, src + offset, length, stream, async);
    });
  }
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
  // A side over adjacent allocations: piece by piece, each then within one on that side.
  if (device < 0) {
    return ForEachPiece(
        dst, size, [&](size_t offset, size_t length) { return CopyDtoD(dst + offset, src + offset, length, stream); });
  }
  if (source_device < 0) {
    return ForEachPiece(
        src, size, [&](size_t offset, size_t length) { return CopyDtoD(dst + offset, src + offset, length, stream); });
  }
  if (device != source_device) {
    // Between two remote GPUs: through this host (there is no peer path).
    std::vector<char> staging(size);
    if (CUresult status = CopyDtoH(staging.data(), src, size, stream, false); status != CUDA_SUCCESS) {
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
  bool dst_device = DeviceOfSpan(dst, size) >= 0;
  bool src_device = DeviceOfSpan(src, size) >= 0;
  if (dst_device && src_device) return CopyDtoD(dst, src, size, stream);
  if (dst_device) return CopyHtoD(dst, reinterpret_cast<const void*>(src), size, stream, async);
  if (src_device) return CopyDtoH(reinterpret_cast<void*>(dst), src, size, stream, async);
  if (size > 0 && (dst == 0 || src == 0)) return CUDA_ERROR_INVALID_VALUE;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), size);
  return CUDA_SUCCESS;
}

// --- 2D and 3D copies ------------------------------------------------------------------------
// Done here, as copies of rows: each row is an ordinary linear copy (one-way for rows that
// go to the device), and a device-to-host copy reads the rows' whole span in one round
// trip when it is dense enough, then places the rows here.

namespace {

// One side of a 2D/3D copy, after memory-type resolution.
struct CopySide {
  bool device = false;
  uintptr_t base = 0;  // host address or device pointer
  size_t x = 0, y = 0, z = 0, pitch = 0, height = 0;

  uintptr_t Row(size_t row, size_t slice) const { return base + (z + slice) * pitch * height + (y + row) * pitch + x; }
};

CUresult ResolveSide(CUmemorytype type, const void* host, CUdeviceptr device_ptr, CUarray array, size_t x, size_t y,
                     size_t z, size_t pitch, size_t height, CopySide* side) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      side->device = false;
      side->base = reinterpret_cast<uintptr_t>(host);
      break;
    case CU_MEMORYTYPE_DEVICE:
      side->device = true;
      side->base = device_ptr;
      break;
    case CU_MEMORYTYPE_UNIFIED:
      // Unified addressing: the pointer itself says where it lives.
      side->device = DeviceOf(device_ptr, 1) >= 0;
      side->base = device_ptr;
      break;
    case CU_MEMORYTYPE_ARRAY: {  // an array is device memory of rows (ops/arrays.h)
      if (CUresult status = ArrayBacking(array, &side->base, &pitch, &height); status != CUDA_SUCCESS) {
        return status;
      }
      side->device = true;
      break;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (side->base == 0) return CUDA_ERROR_INVALID_VALUE;
  side->x = x;
  side->y = y;
  side->z = z;
  side->pitch = pitch;
  side->height = height;
  return CUDA_SUCCESS;
}

CUresult CopyRows(const CopySide& src, const CopySide& dst, size_t width, size_t height, size_t depth,
                  CUstream stream) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (width == 0 || height == 0 || depth == 0) return CUDA_SUCCESS;
  if ((height > 1 || depth > 1) && (src.pitch < width || dst.pitch < width)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (depth > 1 && (src.height < height || dst.height < height)) return CUDA_ERROR_INVALID_VALUE;
  const size_t rows = height * depth;
  // Both dense and in one piece: one linear copy.
  auto dense = [&](const CopySide& side) {
    return rows == 1 || (side.pitch == width && (depth == 1 || side.height == height));
  };
  if (dense(src) && dense(dst)) {
    return CopyAny(dst.Row(0, 0), src.Row(0, 0), width * rows, stream, false);
  }
  if (src.device && !dst.device) {
    // The whole span in one read when it is not mostly gaps.
    const uintptr_t first = src.Row(0, 0);
    const uintptr_t last = src.Row(height - 1, depth - 1) + width;
    const size_t span = last - first;
    if (span <= 4 * width * rows && DeviceOf(first, span) >= 0) {
      std::vector<char> staging(span);
      if (CUresult status = CopyDtoH(staging.data(), first, span, stream, false); status != CUDA_SUCCESS) {
        return status;
      }
      for (size_t slice = 0; slice < depth; ++slice) {
        for (size_t row = 0; row < height; ++row) {
          std::memcpy(reinterpret_cast<void*>(dst.Row(row, slice)), staging.data() + (src.Row(row, slice) - first),
                      width);
        }
      }
      return CUDA_SUCCESS;
    }
  }
  for (size_t slice = 0; slice < depth; ++slice) {
    for (size_t row = 0; row < height; ++row) {
      CUresult status;
      if (src.device && dst.device) {
        status = CopyDtoD(dst.Row(row, slice), src.Row(row, slice), width, stream);
      } else if (dst.device) {
        status = CopyHtoD(dst.Row(row, slice), reinterpret_cast<const void*>(src.Row(row, slice)), width, stream);
      } else if (src.device) {
        status = CopyDtoH(reinterpret_cast<void*>(dst.Row(row, slice)), src.Row(row, slice), width, stream, false);
      } else {
        std::memmove(reinterpret_cast<void*>(dst.Row(row, slice)), reinterpret_cast<const void*>(src.Row(row, slice)),
                     width);
        status = CUDA_SUCCESS;
      }
      if (status != CUDA_SUCCESS) return status;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult Copy2D(const CUDA_MEMCPY2D* copy, CUstream stream) {
  if (copy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (CUresult status :  // arrays: the region inside (ops/arrays.h)
       {CheckArrayRegion(copy->srcMemoryType, copy->srcArray, copy->srcXInBytes, copy->srcY, 0, copy->WidthInBytes,
                         copy->Height, 1),
        CheckArrayRegion(copy->dstMemoryType, copy->dstArray, copy->dstXInBytes, copy->dstY, 0, copy->WidthInBytes,
                         copy->Height, 1)}) {
    if (status != CUDA_SUCCESS) return status;
  }
  // An array of a GPU host's GPU: its agent copies (ops/arrays.h).
  CUDA_MEMCPY3D as3d{};
  as3d.srcXInBytes = copy->srcXInBytes;
  as3d.srcY = copy->srcY;
  as3d.srcMemoryType = copy->srcMemoryType;
  as3d.srcHost = copy->srcHost;
  as3d.srcDevice = copy->srcDevice;
  as3d.srcArray = copy->srcArray;
  as3d.srcPitch = copy->srcPitch;
  as3d.dstXInBytes = copy->dstXInBytes;
  as3d.dstY = copy->dstY;
  as3d.dstMemoryType = copy->dstMemoryType;
  as3d.dstHost = copy->dstHost;
  as3d.dstDevice = copy->dstDevice;
  as3d.dstArray = copy->dstArray;
  as3d.dstPitch = copy->dstPitch;
  as3d.WidthInBytes = copy->WidthInBytes;
  as3d.Height = copy->Height;
  as3d.Depth = 1;
  bool forwarded = false;
  if (CUresult status = CopyForwardedArray(as3d, stream, &forwarded); forwarded || status != CUDA_SUCCESS) {
    return status;
  }
  CopySide src, dst;
  if (CUresult status = ResolveSide(copy->srcMemoryType, copy->srcHost, copy->srcDevice, copy->srcArray,
                                    copy->srcXInBytes, copy->srcY, 0, copy->srcPitch, 0, &src);
      status != CUDA_SUCCESS) {
    return status;
  }
  if (CUresult status = ResolveSide(copy->dstMemoryType, copy->dstHost, copy->dstDevice, copy->dstArray,
                                    copy->dstXInBytes, copy->dstY, 0, copy->dstPitch, 0, &dst);
      status != CUDA_SUCCESS) {
    return status;
  }
  return CopyRows(src, dst, copy->WidthInBytes, copy->Height, 1, stream);
}

CUresult Copy3D(const CUDA_MEMCPY3D* copy, CUstream stream) {
  if (copy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (copy->srcLOD != 0 || copy->dstLOD != 0 || copy->reserved0 != nullptr || copy->reserved1 != nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (CUresult status :  // arrays: the region inside (ops/arrays.h)
       {CheckArrayRegion(copy->srcMemoryType, copy->srcArray, copy->srcXInBytes, copy->srcY, copy->srcZ,
                         copy->WidthInBytes, copy->Height, copy->Depth),
        CheckArrayRegion(copy->dstMemoryType, copy->dstArray, copy->dstXInBytes, copy->dstY, copy->dstZ,
                         copy->WidthInBytes, copy->Height, copy->Depth)}) {
    if (status != CUDA_SUCCESS) return status;
  }
  // An array of a GPU host's GPU: its agent copies (ops/arrays.h).
  bool forwarded = false;
  if (CUresult status = CopyForwardedArray(*copy, stream, &forwarded); forwarded || status != CUDA_SUCCESS) {
    return status;
  }
  CopySide src, dst;
  if (CUresult status = ResolveSide(copy->srcMemoryType, copy->srcHost, copy->srcDevice, copy->srcArray,
                                    copy->srcXInBytes, copy->srcY, copy->srcZ, copy->srcPitch, copy->srcHeight, &src);
      status != CUDA_SUCCESS) {
    return status;
  }
  if (CUresult status = ResolveSide(copy->dstMemoryType, copy->dstHost, copy->dstDevice, copy->dstArray,
                                    copy->dstXInBytes, copy->dstY, copy->dstZ, copy->dstPitch, copy->dstHeight, &dst);
      status != CUDA_SUCCESS) {
    return status;
  }
  return CopyRows(src, dst, copy->WidthInBytes, copy->Height, copy->Depth, stream);
}

}  // namespace gpupool::client::ops

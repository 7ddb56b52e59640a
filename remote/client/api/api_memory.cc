// Driver API: device memory, page-locked host memory, copies, memset, pointer queries.
//
// Each stream-ordered entry point validates its arguments, records itself when its stream
// captures (GPUPOOL_CAPTURE), then calls the one implementation in ops/memory.h, which says
// how copies are checked and when they complete.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/client/graph/graph_model.h"
#include "remote/client/graph/graphs.h"
#include "remote/client/ops/mem_pools.h"
#include "remote/client/ops/memory.h"

using namespace gpupool::client;       // NOLINT
using namespace gpupool::client::ops;  // NOLINT

#undef cuMemcpyBatchAsync

namespace {

namespace dp = gpupool::dataplane;

// Why host memory other than page-locked memory cannot be mapped.
constexpr const char* kZeroCopyWhy =
    "a remote GPU's kernels reach only page-locked host memory this library allocated "
    "(cuMemHostAlloc, cuMemAllocHost, cudaHostAlloc, cudaMallocHost) or the program "
    "registered (cuMemHostRegister, cudaHostRegister), which is kept coherent at CUDA calls; "
    "register it or copy instead";

}  // namespace

// --- Device memory -----------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t size) {
  GPUPOOL_BODY({ return AllocDeviceMemory(dptr, size); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (dptr == 0) return CUDA_SUCCESS;
    // Graph memory: marked free; the GPU memory stays for its allocation node.
    if (CUresult status = CUDA_SUCCESS; graph::FreeGraphMemory(dptr, &status)) return status;
    return FreeDeviceMemory(dptr);
  });
}

// --- Managed memory (managed.cc) ------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t size, unsigned int flags) {
  GPUPOOL_BODY({
    if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
    return Runtime::Get().AllocManaged(device, size, CurrentContext(), dptr);
  });
}

namespace {

// Stream attachment is a hint: the coherence of managed memory does not depend on it
// (managed.cc). It is checked like CUDA checks it.
CUresult CheckManagedRange(CUdeviceptr ptr, size_t count) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (count == 0 || !Runtime::Get().IsManaged(ptr) || !Runtime::Get().IsManaged(ptr + count - 1)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace

namespace {

// A location as the advice records keep it: a device ordinal, CU_DEVICE_CPU for the host;
// CU_DEVICE_INVALID when it names neither.
int LocationOf(CUmemLocation location) {
  switch (location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return Runtime::Get().device(location.id) != nullptr ? location.id : CU_DEVICE_INVALID;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return CU_DEVICE_CPU;
    default:
      return CU_DEVICE_INVALID;
  }
}

CUmemLocation LocationOfDevice(CUdevice device) {
  return device == CU_DEVICE_CPU ? CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0}
                                 : CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device};
}

uint64_t AccessBit(int location) { return location == CU_DEVICE_CPU ? uint64_t{1} << 63 : uint64_t{1} << location; }

// Prefetches and advice are recorded for cuMemRangeGetAttribute; the coherence of managed
// memory does not depend on them (managed.cc).
CUresult Prefetch(CUdeviceptr ptr, size_t count, CUmemLocation location) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  const int where = LocationOf(location);
  if (where == CU_DEVICE_INVALID) return CUDA_ERROR_INVALID_DEVICE;
  return Runtime::Get().AdviseManaged(ptr, count, [where](ManagedPageAdvice* page) { page->last_prefetch = where; });
}

CUresult Advise(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUmemLocation location) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  const int where = LocationOf(location);
  const bool needs_location = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION ||
                              advice == CU_MEM_ADVISE_SET_ACCESSED_BY || advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
  if (needs_location && where == CU_DEVICE_INVALID) return CUDA_ERROR_INVALID_DEVICE;
  std::function<void(ManagedPageAdvice*)> change;
  switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
      change = [](auto* page) { page->read_mostly = true; };
      break;
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
      change = [](auto* page) { page->read_mostly = false; };
      break;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
      change = [where](auto* page) { page->preferred = where; };
      break;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
      change = [](auto* page) { page->preferred = CU_DEVICE_INVALID; };
      break;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
      change = [where](auto* page) { page->accessed_by |= AccessBit(where); };
      break;
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
      change = [where](auto* page) { page->accessed_by &= ~AccessBit(where); };
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return Runtime::Get().AdviseManaged(ptr, count, change);
}

// One attribute of [ptr, ptr + count), as cuMemRangeGetAttribute answers it: a setting
// holds for the range when it holds for every page of it.
CUresult RangeAttribute(void* data, size_t size, CUmem_range_attribute attribute, CUdeviceptr ptr, size_t count) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<ManagedPageAdvice> pages;
  if (CUresult status = Runtime::Get().ManagedAdviceOf(ptr, count, &pages); status != CUDA_SUCCESS) {
    return status;
  }
  // The one value every page has, else `otherwise`.
  auto common = [&](auto field, int otherwise) {
    int value = field(pages.front());
    for (const auto& page : pages) {
      if (field(page) != value) return otherwise;
    }
    return value;
  };
  auto preferred = [&] { return common([](const auto& p) { return p.preferred; }, CU_DEVICE_INVALID); };
  auto prefetched = [&] { return common([](const auto& p) { return p.last_prefetch; }, CU_DEVICE_INVALID); };
  auto type_of = [](int location) {
    return location == CU_DEVICE_CPU       ? CU_MEM_LOCATION_TYPE_HOST
           : location == CU_DEVICE_INVALID ? CU_MEM_LOCATION_TYPE_INVALID
                                           : CU_MEM_LOCATION_TYPE_DEVICE;
  };
  auto id_of = [](int location) { return location >= 0 ? location : 0; };
  int value = 0;
  switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
      value = common([](const auto& p) { return p.read_mostly ? 1 : 0; }, 0);
      break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
      value = preferred();
      break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
      value = prefetched();
      break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
      value = type_of(preferred());
      break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
      value = id_of(preferred());
      break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
      value = type_of(prefetched());
      break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
      value = id_of(prefetched());
      break;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
      // The devices (and CU_DEVICE_CPU) with ACCESSED_BY set on every page, then
      // CU_DEVICE_INVALID in the rest of the array.
      if (size == 0 || size % sizeof(int) != 0) return CUDA_ERROR_INVALID_VALUE;
      uint64_t all = ~uint64_t{0};
      for (const auto& page : pages) all &= page.accessed_by;
      std::vector<int> devices(size / sizeof(int), CU_DEVICE_INVALID);
      size_t next = 0;
      for (int bit = 0; bit < 64 && next < devices.size(); ++bit) {
        if (all & (uint64_t{1} << bit)) devices[next++] = bit == 63 ? CU_DEVICE_CPU : bit;
      }
      std::memcpy(data, devices.data(), size);
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (size != sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(data, &value, sizeof(value));
  return CUDA_SUCCESS;
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr ptr, size_t count, CUmemLocation location,
                                                        unsigned int, CUstream) {
  GPUPOOL_BODY({ return Prefetch(ptr, count, location); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr ptr, size_t count, CUdevice device, CUstream) {
  GPUPOOL_BODY({ return Prefetch(ptr, count, LocationOfDevice(device)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr ptr, size_t count, CUmem_advise advice,
                                                 CUmemLocation location) {
  GPUPOOL_BODY({ return Advise(ptr, count, advice, location); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAdvise(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUdevice device) {
  GPUPOOL_BODY({ return Advise(ptr, count, advice, LocationOfDevice(device)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemRangeGetAttribute(void* data, size_t size, CUmem_range_attribute attribute,
                                                         CUdeviceptr ptr, size_t count) {
  GPUPOOL_BODY({ return RangeAttribute(data, size, attribute, ptr, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemRangeGetAttributes(void** data, size_t* sizes, CUmem_range_attribute* attributes,
                                                          size_t count_of_attributes, CUdeviceptr ptr, size_t count) {
  GPUPOOL_BODY({
    if (data == nullptr || sizes == nullptr || attributes == nullptr || count_of_attributes == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count_of_attributes; ++i) {
      CUresult status = RangeAttribute(data[i], sizes[i], attributes[i], ptr, count);
      if (status != CUDA_SUCCESS) return status;
    }
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamAttachMemAsync(CUstream, CUdeviceptr ptr, size_t length, unsigned int) {
  GPUPOOL_BODY({
    // length 0: the whole allocation.
    return CheckManagedRange(ptr, length == 0 ? 1 : length);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  GPUPOOL_BODY({
    if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
    std::string out;
    CUresult status = Runtime::Get().Call(device, dp::kOpMemGetInfo, nullptr, 0, nullptr, 0, nullptr, 0, &out);
    if (status != CUDA_SUCCESS) return status;
    dp::MemInfoResult result{};
    if (out.size() != sizeof(result)) return CUDA_ERROR_UNKNOWN;
    std::memcpy(&result, out.data(), sizeof(result));
    *free = result.free;
    *total = result.total;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
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
    if (flags &
        ~static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_WRITECOMBINED | CU_MEMHOSTALLOC_DEVICEMAP)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (flags & CU_MEMHOSTALLOC_DEVICEMAP) {
      // Mapped host memory: a managed range (managed.cc) whose host pages are the buffer,
      // at the address that is also its device address.
      int device = 0;
      if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
      CUdeviceptr address = 0;
      if (CUresult status = Runtime::Get().AllocManaged(device, size, CurrentContext(), &address,
                                                        "cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP)");
          status != CUDA_SUCCESS) {
        return status;
      }
      Runtime::Get().AddHostRange(reinterpret_cast<void*>(address), size, flags | kOwnedHostMemory);
      *pointer = reinterpret_cast<void*>(address);
      return CUDA_SUCCESS;
    }
    // In the page-locked window: mapped on a device if a kernel is handed it (UVA).
    void* memory = Runtime::Get().AllocPinned(size);
    if (memory == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
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
    if (!Runtime::Get().FindHostRange(pointer, &flags, &start, &size) || !(flags & kOwnedHostMemory) ||
        start != reinterpret_cast<uintptr_t>(pointer)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (flags & (CU_MEMHOSTALLOC_DEVICEMAP | kHostMappedOnUse)) {
      // Freed on the GPU first; its host pages and range go with it (ForgetManaged).
      return cuMemFree_v2(reinterpret_cast<CUdeviceptr>(pointer));
    }
    // The failover journal may still hold uploads from it by reference.
    Runtime::Get().CaptureHeldUploads();
    Runtime::Get().RemoveHostRange(pointer);
    Runtime::Get().FreePinned(pointer, size);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemHostGetFlags(unsigned int* flags, void* pointer) {
  GPUPOOL_BODY({
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    unsigned found = 0;
    if (!Runtime::Get().FindHostRange(pointer, &found)) return CUDA_ERROR_INVALID_VALUE;
    // With unified addressing a driver reports page-locked memory allocated without
    // CU_MEMHOSTALLOC_DEVICEMAP as mapped, and nothing else (driver 580 on an H100: default
    // and portable memory both say CU_MEMHOSTALLOC_DEVICEMAP; mapped memory says what it
    // asked for). Here allocated memory is mapped where the GPU maps host memory (the sim);
    // registered memory, and memory elsewhere, says what it asked for.
    int device = 0;
    int can_map = 0;
    if ((found & kOwnedHostMemory) != 0 && CurrentDevice(&device) == CUDA_SUCCESS &&
        cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device) == CUDA_SUCCESS &&
        can_map != 0 && (found & CU_MEMHOSTALLOC_DEVICEMAP) == 0) {
      *flags = CU_MEMHOSTALLOC_DEVICEMAP;
    } else {
      *flags = found & ~(kOwnedHostMemory | kHostMappedOnUse | kRegisteredHostMemory);
    }
    return CUDA_SUCCESS;
  });
}

// Registers the program's memory. DEVICEMAP maps it for the current device at once
// (Runtime::MapRegistered: coherent at call boundaries, as mapped memory from
// cuMemHostAlloc is); without it, under unified addressing, the registration is mapped
// when its device pointer is first asked for (cuMemHostGetDevicePointer).
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemHostRegister_v2(void* pointer, size_t size, unsigned int flags) {
  GPUPOOL_BODY({
    if (pointer == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (reinterpret_cast<uintptr_t>(pointer) > UINTPTR_MAX - size) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (flags & ~static_cast<unsigned>(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                       CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (flags & CU_MEMHOSTREGISTER_IOMEMORY) {
      // What the driver answers where it cannot map I/O memory.
      return static_cast<CUresult>(ReportUnsupported(
          "cuMemHostRegister(CU_MEMHOSTREGISTER_IOMEMORY)",
          "the I/O memory of a device in this computer cannot be reached by a GPU across the network"));
    }
    int device = 0;
    if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
    if (flags & CU_MEMHOSTREGISTER_READ_ONLY) {
      // As the driver documents: NOT_SUPPORTED on a device without the attribute.
      int read_only = 0;
      if (CUresult status =
              cuDeviceGetAttribute(&read_only, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, device);
          status != CUDA_SUCCESS) {
        return status;
      }
      if (read_only == 0) return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (Runtime::Get().OverlapsHostRange(pointer, size)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    const auto start = reinterpret_cast<uintptr_t>(pointer);
    if (flags & CU_MEMHOSTREGISTER_DEVICEMAP) {
      CUresult status = Runtime::Get().MapRegistered(device, CurrentContext(), start, size,
                                                     (flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0);
      // Device memory is placed over whole pages: one that another mapped registration
      // holds is registered already.
      if (status == CUDA_ERROR_INVALID_VALUE) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
      if (status != CUDA_SUCCESS) return status;
    }
    Runtime::Get().AddHostRange(pointer, size, flags | kRegisteredHostMemory);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemHostRegister(void* pointer, size_t size, unsigned int flags) {
  return cuMemHostRegister_v2(pointer, size, flags);
}

// `pointer` must be where a registration starts; a mapped one is read back (what kernels
// wrote) and its device memory freed.
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemHostUnregister(void* pointer) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    unsigned flags = 0;
    uintptr_t start = 0;
    if (!Runtime::Get().FindHostRange(pointer, &flags, &start) || !(flags & kRegisteredHostMemory) ||
        start != reinterpret_cast<uintptr_t>(pointer)) {
      return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    if (flags & (CU_MEMHOSTREGISTER_DEVICEMAP | kHostMappedOnUse)) {
      if (CUresult status = Runtime::Get().UnmapRegistered(start); status != CUDA_SUCCESS) return status;
    }
    Runtime::Get().RemoveHostRange(pointer);
    return CUDA_SUCCESS;
  });
}

// --- Copies --------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t size) {
  GPUPOOL_BODY({ return CopyHtoD(dst, src, size, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t size, CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMCPY, stream, [=](CUstream s) { return CopyHtoD(dst, src, size, s, true); });
    return CopyHtoD(dst, src, size, stream, true);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t size) {
  GPUPOOL_BODY({ return CopyDtoH(dst, src, size, nullptr, false); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t size, CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMCPY, stream, [=](CUstream s) { return CopyDtoH(dst, src, size, s, true); });
    return CopyDtoH(dst, src, size, stream, true);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t size) {
  GPUPOOL_BODY({ return CopyDtoD(dst, src, size, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMCPY, stream, [=](CUstream s) { return CopyDtoD(dst, src, size, s); });
    return CopyDtoD(dst, src, size, stream);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t size) {
  GPUPOOL_BODY({ return CopyAny(dst, src, size, nullptr, false); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMCPY, stream, [=](CUstream s) { return CopyAny(dst, src, size, s, true); });
    return CopyAny(dst, src, size, stream, true);
  });
}

// cuMemcpyBatchAsync (CUDA 12.8): `count` copies between any pointers, in stream order as a
// whole, each with attributes (attrs[k] applies from copy attrs_idxs[k] on). The copies are
// issued one after another on the stream; a host source is read during the call, which
// meets every source access order. *fail_idx (the first version only): the copy that
// failed, or SIZE_MAX when the error concerns the batch.
namespace {
CUresult CopyBatch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
                   size_t* attrs_idxs, size_t num_attrs, size_t* fail_idx, CUstream stream) {
  if (fail_idx != nullptr) *fail_idx = SIZE_MAX;
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr || attrs == nullptr ||
      attrs_idxs == nullptr || num_attrs == 0 || num_attrs > count) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (stream == nullptr || stream == CU_STREAM_LEGACY) {
    LogError("cuMemcpyBatchAsync: the legacy default stream cannot take a batch of copies");
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t k = 0; k < num_attrs; ++k) {
    const bool ordered = k == 0 ? attrs_idxs[0] == 0 : attrs_idxs[k] > attrs_idxs[k - 1];
    const CUmemcpySrcAccessOrder order = attrs[k].srcAccessOrder;
    if (!ordered || attrs_idxs[k] >= count ||
        (order != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM && order != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
         order != CU_MEMCPY_SRC_ACCESS_ORDER_ANY) ||
        (attrs[k].flags & ~static_cast<unsigned>(CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE))) {
      LogError(
          "cuMemcpyBatchAsync: attribute %zu (first copy %zu) is not valid: the first must "
          "apply from copy 0, each from a later copy than the one before, and each needs a "
          "source access order",
          k, attrs_idxs[k]);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (CUresult status = cuMemcpyAsync(dsts[i], srcs[i], sizes[i], stream); status != CUDA_SUCCESS) {
      if (fail_idx != nullptr) *fail_idx = i;
      return status;
    }
  }
  return CUDA_SUCCESS;
}
}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                                        size_t count, CUmemcpyAttributes* attrs, size_t* attrs_idxs,
                                                        size_t num_attrs, CUstream stream) {
  GPUPOOL_BODY({ return CopyBatch(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, nullptr, stream); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                                             size_t count, CUmemcpyAttributes* attrs,
                                                             size_t* attrs_idxs, size_t num_attrs, CUstream stream) {
  return cuMemcpyBatchAsync_v2(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs,
                               stream == nullptr ? CU_STREAM_PER_THREAD : stream);
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                                     CUmemcpyAttributes* attrs, size_t* attrs_idxs, size_t num_attrs,
                                                     size_t* fail_idx, CUstream stream) {
  GPUPOOL_BODY({ return CopyBatch(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx, stream); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                                          size_t count, CUmemcpyAttributes* attrs, size_t* attrs_idxs,
                                                          size_t num_attrs, size_t* fail_idx, CUstream stream) {
  return cuMemcpyBatchAsync(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx,
                            stream == nullptr ? CU_STREAM_PER_THREAD : stream);
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
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMSET, stream, [=](CUstream s) { return Memset(dst, value, 1, n, s); });
    return Memset(dst, value, 1, n, stream);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t n, CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMSET, stream, [=](CUstream s) { return Memset(dst, value, 2, n, s); });
    return Memset(dst, value, 2, n, stream);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMSET, stream, [=](CUstream s) { return Memset(dst, value, 4, n, s); });
    return Memset(dst, value, 4, n, stream);
  });
}

// --- Pointer attributes --------------------------------------------------------------------

namespace {

// Writes one attribute of `ptr`; CUDA_ERROR_INVALID_VALUE for pointers we do not know when
// the attribute needs a known pointer.
CUresult PointerAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr, bool lenient) {
  uint64_t start = 0;
  Allocation allocation{};
  bool device = Runtime::Get().FindAllocation(ptr, 1, &start, &allocation);
  unsigned host_flags = 0;
  bool host_range = Runtime::Get().FindHostRange(reinterpret_cast<void*>(ptr), &host_flags);
  // Mapped host memory (allocated or registered) is host memory with a device pointer
  // (its own address).
  bool mapped = device && host_range && (host_flags & (CU_MEMHOSTALLOC_DEVICEMAP | kHostMappedOnUse));
  bool host = (!device && host_range) || mapped;
  if (!device && !host && !lenient) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device ? Runtime::Get().device(allocation.device) : nullptr;
  Context* owner = allocation.context != nullptr ? allocation.context : d ? &d->primary : nullptr;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(owner);
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = host ? CU_MEMORYTYPE_HOST : device ? CU_MEMORYTYPE_DEVICE : 0;
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
      *static_cast<unsigned*>(data) = device && !mapped && Runtime::Get().IsManaged(ptr) ? 1 : 0;
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
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      *static_cast<int*>(data) = 0;  // no IPC, RDMA or decompression across the network
      break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      *static_cast<unsigned long long*>(data) = 0;
      break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      *static_cast<unsigned*>(data) =
          device ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
      break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *static_cast<CUmemoryPool*>(data) = device ? PoolOf(start) : nullptr;
      break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      if (!device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<size_t*>(data) = allocation.size;
      break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      if (!device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(start);
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      *static_cast<unsigned long long*>(data) = device ? start : 0;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  GPUPOOL_BODY({
    if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    return PointerAttribute(data, attribute, ptr, false);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes,
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

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* pointer, unsigned int flags) {
  GPUPOOL_BODY({
    if (dptr == nullptr || pointer == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    unsigned host_flags = 0;
    uintptr_t start = 0;
    if (Runtime::Get().FindHostRange(pointer, &host_flags, &start) && (host_flags & kOwnedHostMemory)) {
      if (!(host_flags & (CU_MEMHOSTALLOC_DEVICEMAP | kHostMappedOnUse)) && Runtime::InPinnedWindow(start)) {
        // Page-locked memory is device-accessible under UVA: mapped now on the current
        // device, since its device pointer may reach kernels inside structures.
        int device = 0;
        if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
        if (CUresult status = Runtime::Get().MapPinned(device, CurrentContext(), reinterpret_cast<uint64_t>(pointer));
            status != CUDA_SUCCESS) {
          return status;
        }
        Runtime::Get().FindHostRange(pointer, &host_flags);
      }
      if (host_flags & (CU_MEMHOSTALLOC_DEVICEMAP | kHostMappedOnUse)) {
        *dptr = reinterpret_cast<CUdeviceptr>(pointer);  // one address for both, as under UVA
        return CUDA_SUCCESS;
      }
    }
    if (Runtime::Get().FindHostRange(pointer, &host_flags) && (host_flags & kRegisteredHostMemory)) {
      // Registered memory: mapped already (DEVICEMAP), or now, as every registration is
      // mapped under unified addressing.
      int device = 0;
      if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
      if (CUresult status =
              Runtime::Get().MapRegisteredOnUse(device, CurrentContext(), reinterpret_cast<uint64_t>(pointer));
          status != CUDA_SUCCESS) {
        return status;
      }
      *dptr = reinterpret_cast<CUdeviceptr>(pointer);
      return CUDA_SUCCESS;
    }
    return static_cast<CUresult>(ReportUnsupported("cuMemHostGetDevicePointer", kZeroCopyWhy));
  });
}

// --- Pitched allocations, 2D and 3D copies (ops/copy.cc) -------------------------------------

namespace {

// Rows of a pitched allocation start at multiples of this (what GPUs since Kepler use).
constexpr size_t kPitchAlignment = 512;

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                                     unsigned int element_size) {
  GPUPOOL_BODY({
    if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (element_size != 4 && element_size != 8 && element_size != 16) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const size_t row = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
    if (CUresult status = cuMemAlloc_v2(dptr, row * height); status != CUDA_SUCCESS) return status;
    *pitch = row;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D* copy) {
  GPUPOOL_BODY({ return Copy2D(copy, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* copy) { return cuMemcpy2D_v2(copy); }
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* copy) {
  GPUPOOL_BODY({ return Copy2D(copy, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* copy) {
  return cuMemcpy2DUnaligned_v2(copy);
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* copy, CUstream stream) {
  GPUPOOL_BODY({
    if (copy != nullptr) {
      GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMCPY, stream, [kept = *copy](CUstream s) { return Copy2D(&kept, s); });
    }
    return Copy2D(copy, stream);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* copy, CUstream stream) {
  return cuMemcpy2DAsync_v2(copy, stream);
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D* copy) {
  GPUPOOL_BODY({ return Copy3D(copy, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* copy) { return cuMemcpy3D_v2(copy); }
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* copy, CUstream stream) {
  GPUPOOL_BODY({
    if (copy != nullptr) {
      GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMCPY, stream, [kept = *copy](CUstream s) { return Copy3D(&kept, s); });
    }
    return Copy3D(copy, stream);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* copy, CUstream stream) {
  return cuMemcpy3DAsync_v2(copy, stream);
}

// --- 2D memset (ops/memset.cc) ----------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD2D8_v2(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                                                  size_t height) {
  GPUPOOL_BODY({ return Memset2D(dst, pitch, value, 1, width, height, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD2D16_v2(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width,
                                                   size_t height) {
  GPUPOOL_BODY({ return Memset2D(dst, pitch, value, 2, width, height, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD2D32_v2(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width,
                                                   size_t height) {
  GPUPOOL_BODY({ return Memset2D(dst, pitch, value, 4, width, height, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                                                    size_t height, CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMSET, stream,
                    [=](CUstream s) { return Memset2D(dst, pitch, value, 1, width, height, s); });
    return Memset2D(dst, pitch, value, 1, width, height, stream);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width,
                                                     size_t height, CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMSET, stream,
                    [=](CUstream s) { return Memset2D(dst, pitch, value, 2, width, height, s); });
    return Memset2D(dst, pitch, value, 2, width, height, stream);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width,
                                                     size_t height, CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMSET, stream,
                    [=](CUstream s) { return Memset2D(dst, pitch, value, 4, width, height, s); });
    return Memset2D(dst, pitch, value, 4, width, height, stream);
  });
}

// --- Peer copies and stream-ordered allocation -------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t size) {
  // The pointers say which device each side is on (unified addressing); between two remote
  // GPUs the bytes go through this host.
  GPUPOOL_BODY({ return CopyDtoD(dst, src, size, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
                                                    CUcontext src_context, size_t size) {
  return cuMemcpyPeer(dst, dst_context, src, src_context, size);
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t size,
                                                    CUstream stream) {
  GPUPOOL_BODY({
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_MEMCPY, stream, [=](CUstream s) { return CopyDtoD(dst, src, size, s); });
    return CopyDtoD(dst, src, size, stream);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
                                                         CUcontext src_context, size_t size, CUstream stream) {
  return cuMemcpyPeerAsync(dst, dst_context, src, src_context, size, stream);
}

// Stream-ordered allocation (pools: mem_pools.cc): the memory is allocated at the call,
// which is before the stream reaches it, and freed once the stream's earlier work is done,
// which is when CUDA would free it.
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream stream) {
  GPUPOOL_BODY({
    if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    if (CUresult status = ResolveDevice(stream, &device, nullptr); status != CUDA_SUCCESS) {
      return status;
    }
    // On a capturing stream: a memory allocation node, whose graph memory this is.
    CUresult captured = CUDA_SUCCESS;
    if (AnyCapture() && CaptureGraphAlloc(stream, device, size, dptr, &captured)) return captured;
    // From the device's current pool (mem_pools.cc), in the stream's context, which owns it.
    Stream* s = AsStream(stream);
    return AllocateFromCurrentPool(device, s != nullptr ? s->context : nullptr, size, dptr);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream stream) {
  return cuMemAllocAsync(dptr, size, stream);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  GPUPOOL_BODY({
    int device = 0;
    uint64_t stream_id = 0;
    if (CUresult status = ResolveDevice(stream, &device, &stream_id); status != CUDA_SUCCESS) {
      return status;
    }
    if (dptr == 0) return CUDA_SUCCESS;
    if (DeviceOf(dptr, 1) < 0) return CUDA_ERROR_INVALID_VALUE;
    // On a capturing stream: a free node. Graph memory outside a capture: marked free
    // (its memory stays on the GPU for its allocation node, graph_memory.cc).
    CUresult captured = CUDA_SUCCESS;
    if (CaptureGraphFree(stream, dptr, &captured)) return captured;
    if (graph::FreeGraphMemory(dptr, &captured)) return captured;
    dp::StreamArgs args{stream_id, 0, 0};
    if (CUresult status = Runtime::Get().Call(device, dp::kOpStreamSynchronize, &args, sizeof(args));
        status != CUDA_SUCCESS) {
      return status;
    }
    return cuMemFree_v2(dptr);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return cuMemFreeAsync(dptr, stream);
}

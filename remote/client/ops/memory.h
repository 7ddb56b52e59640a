// Memory operations: copies, memsets, device allocation and free. The one implementation
// of each: the exported functions (api/api_memory.cc) validate, record the call when its
// stream captures, then call these; graphs (graph/) call them when a launch reaches a
// memcpy or memset node, and graph memory and pools (ops/mem_pools.cc) allocate and free
// through them. None of them looks at stream capture: that is the caller's business.
//
// Copies are checked here against the allocations this process made, so a bad pointer is
// reported at once (CUDA_ERROR_INVALID_VALUE) even for copies that travel one-way:
// host-to-device, device-to-device and memset return when the data has left this process
// (the host buffer is reusable), like CUDA's staging of pageable memory; their device-side
// errors arrive at the next synchronising call. Device-to-host waits for the data, except
// asynchronous copies into page-locked memory, which complete by the next synchronisation.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "remote/client/core/runtime.h"

namespace gpupool::client::ops {

// Marks host ranges we allocated (munmap on cuMemFreeHost) as opposed to registered ones.
constexpr unsigned kOwnedHostMemory = 0x80000000u;

// The device owning [ptr, ptr+size), or -1 when it is not device memory we allocated.
int DeviceOf(CUdeviceptr ptr, size_t size);

// [ptr, ptr+size) cut where it runs from one allocation into the next, when it runs over
// allocations that follow each other with no gap, on one device: adjacent mappings of the
// virtual memory API (api/vmm.cc), each an allocation of its own on the agent. Pieces are
// (offset, length); false when the range is not such a run of two or more.
bool SpanPieces(CUdeviceptr ptr, size_t size, int* device, std::vector<std::pair<size_t, size_t>>* pieces);

// Runs `piece(offset, length)` for each piece of a run of adjacent allocations, in order;
// CUDA_ERROR_INVALID_VALUE when [ptr, ptr+size) is not one.
template <typename Piece>
CUresult ForEachPiece(CUdeviceptr ptr, size_t size, Piece&& piece) {
  int device = -1;
  std::vector<std::pair<size_t, size_t>> pieces;
  if (!SpanPieces(ptr, size, &device, &pieces)) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [offset, length] : pieces) {
    if (CUresult status = piece(offset, length); status != CUDA_SUCCESS) return status;
  }
  return CUDA_SUCCESS;
}

// The agent's id of `stream` (0: a default stream); CUDA_ERROR_INVALID_HANDLE if not ours.
CUresult StreamId(CUstream stream, uint64_t* id);

// Linear copies (ops/copy.cc). `async`: a stream-ordered copy (cuMemcpyHtoDAsync,
// cuMemcpyAsync); from page-locked memory this library allocated, the failover journal then
// keeps a reference and copies the bytes by the next two-way request instead of at the call
// (failover/failover.h); into page-locked memory, a device-to-host copy completes by the next
// synchronisation instead of at once.
CUresult CopyHtoD(CUdeviceptr dst, const void* src, size_t size, CUstream stream, bool async = false);
CUresult CopyDtoH(void* dst, CUdeviceptr src, size_t size, CUstream stream, bool async);
CUresult CopyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream);
// Between any two pointers, each side device or host memory as unified addressing says.
CUresult CopyAny(CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream, bool async);
// 2D and 3D copies, as copies of rows (ops/copy.cc).
CUresult Copy2D(const CUDA_MEMCPY2D* copy, CUstream stream);
CUresult Copy3D(const CUDA_MEMCPY3D* copy, CUstream stream);

// `count` elements of `element_size` bytes (1, 2 or 4) set to `value` (ops/memset.cc), and
// the same for `height` rows `pitch` bytes apart.
CUresult Memset(CUdeviceptr dst, uint32_t value, uint32_t element_size, size_t count, CUstream stream);
CUresult Memset2D(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t element_size, size_t width, size_t height,
                  CUstream stream);

// cuMemAlloc in the current context, at an address this process chooses (ops/memory.cc).
CUresult AllocDeviceMemory(CUdeviceptr* dptr, size_t size);
// cuMemFree of device memory that is not graph memory (the caller looks at that first).
CUresult FreeDeviceMemory(CUdeviceptr dptr);

}  // namespace gpupool::client::ops

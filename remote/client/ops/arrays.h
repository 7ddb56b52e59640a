// CUDA arrays and texture and surface objects as the replacement libcuda.so.1 keeps them:
// the tables of live ones. An array is one device allocation, laid out as
// remote/protocol/sim_texture.h says, so that 2D/3D copies to and from an array are the row
// copies of ops/copy.cc over that allocation; a texture or surface object is a descriptor
// written into an allocation of its own, whose address is its handle. The exported
// cuArray*, cuTexObject* and cuSurfObject* functions (api/api_array.cc) check their
// arguments and call these. Thread-safe: one lock for both tables.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "remote/protocol/sim_texture.h"

namespace gpupool::client::ops {

// An array as made: its descriptor and where its bytes lie.
struct ArrayInfo {
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  CUdeviceptr base = 0;  // 0 for a forwarded array
  size_t row_bytes = 0;  // Width * element bytes
  size_t rows = 1;       // rows of a slice (Height, at least 1)
  size_t slices = 1;     // Depth: 3D depth, layers, or cubemap faces (at least 1)
  // A GPU host's GPU whose driver holds the array (NewForwardedArray): its device, and the
  // id its agent knows it by; -1: device memory of the library's layout (NewArray).
  int forwarded_device = -1;
  uint64_t remote = 0;
  // A level of a mipmapped array (NewMipmappedArray): its bytes are the mipmapped array's,
  // which cuArrayDestroy does not free.
  bool mipmap_level = false;
};

// Allocates `bytes` (row_bytes * rows * slices, checked by the caller) of device memory
// for an array described by `info` (its base is filled in) and lists it: *handle.
CUresult NewArray(const ArrayInfo& info, size_t bytes, CUarray* handle);
// The same on a GPU host's GPU (`device`): the agent's driver makes the array
// (kOpArrayCreate), and the process is no longer protected by failover (another GPU's
// driver would not hold it).
CUresult NewForwardedArray(const ArrayInfo& info, int device, CUarray* handle);
// A mipmapped array: `levels` arrays (level l is `levels[l]`, its extent halved l times from
// level 0's, at least 1; layers and cubemap faces stay) in one device allocation of
// `bytes` (the levels' sizes together, checked by the caller), each listed as an array
// (cuMipmappedArrayGetLevel). `offsets[l]`: level l's first byte in the allocation.
CUresult NewMipmappedArray(const std::vector<ArrayInfo>& levels, const std::vector<size_t>& offsets, size_t bytes,
                           CUmipmappedArray* handle);
// The same on a GPU host's GPU (`device`): its agent's driver makes the mipmapped array and
// its levels (kOpMipmappedArrayCreate, the levels' ids consecutive), level 0 described by
// `descriptor`; `levels` as above, their bases 0. The process is no longer protected by
// failover, as with NewForwardedArray.
CUresult NewForwardedMipmappedArray(const CUDA_ARRAY3D_DESCRIPTOR& descriptor, const std::vector<ArrayInfo>& levels,
                                    int device, CUmipmappedArray* handle);
// The device whose agent holds the live `mipmapped` array, and the id it knows it by (-1 and
// 0 for one of the library's layout); CUDA_ERROR_INVALID_HANDLE for a handle that is none.
CUresult FindMipmappedArray(CUmipmappedArray mipmapped, int* forwarded_device, uint64_t* remote);
// Level `level` of the live `mipmapped` array (*array), and how many it has (*count, when
// not null); CUDA_ERROR_INVALID_HANDLE for a handle that is none, CUDA_ERROR_INVALID_VALUE
// for a level past its last.
CUresult MipmappedArrayLevel(CUmipmappedArray mipmapped, unsigned level, CUarray* array, unsigned* count = nullptr);
// Unlists the mipmapped array and its levels and frees its memory (or has its agent destroy
// a forwarded one).
CUresult DestroyMipmappedArray(CUmipmappedArray mipmapped);

// A copy of the live `array`'s record; CUDA_ERROR_INVALID_HANDLE for a handle that is none.
CUresult FindArray(CUarray array, ArrayInfo* info);
// Unlists `array` and frees its memory (or has its agent destroy a forwarded one);
// CUDA_ERROR_INVALID_HANDLE for a handle that is none.
CUresult DestroyArray(CUarray array);

// [offset, offset + bytes) of `array`'s bytes as a device address (*at);
// CUDA_ERROR_INVALID_VALUE when the range leaves the array.
CUresult ArrayBytes(CUarray array, size_t offset, size_t bytes, CUdeviceptr* at);

// The device memory behind `array`: its first texel's address, the bytes of a row, and the
// rows of a slice. CUDA_ERROR_INVALID_HANDLE for a handle that is no live array.
CUresult ArrayBacking(CUarray array, uintptr_t* base, size_t* row_bytes, size_t* rows);

// A 2D/3D copy (the 2D one as 3D, one slice deep) either side of which is a forwarded
// array: one kOpArrayCopy to its agent, the host side's rows packed here. *handled false
// (and nothing done) when neither side is one. Copies between a forwarded array and
// memory of another GPU, or a sim array, answer CUDA_ERROR_NOT_SUPPORTED.
CUresult CopyForwardedArray(const CUDA_MEMCPY3D& copy, CUstream stream, bool* handled);

// For a side of a 2D/3D copy of `type` (nothing to check unless CU_MEMORYTYPE_ARRAY): the
// region (x bytes, y rows, z slices; width bytes, height rows, depth slices) must lie in
// the array, else CUDA_ERROR_INVALID_VALUE.
CUresult CheckArrayRegion(CUmemorytype type, CUarray array, size_t x, size_t y, size_t z, size_t width, size_t height,
                          size_t depth);

// What a texture or surface object was made from, for cu*GetResourceDesc/GetTextureDesc.
struct ObjectRecord {
  bool surface = false;
  CUDA_RESOURCE_DESC resource{};
  CUDA_TEXTURE_DESC texture{};
  // The device whose agent's driver made it (ListForwardedObject); -1: a descriptor of the
  // library's in device memory (PublishObject).
  int forwarded_device = -1;
};

// Writes `descriptor` into a new allocation, whose address is the object's handle, and
// `trailer` (a mipmapped texture's header and levels) right after it.
CUresult PublishObject(const dataplane::SimTextureDescriptor& descriptor, const ObjectRecord& record, uint64_t* handle,
                       const std::vector<uint8_t>& trailer = {});
// Lists a texture object that `device`'s agent made with its GPU's driver
// (kOpTexObjectCreate) under the driver's handle. CUDA_ERROR_NOT_SUPPORTED when a live
// object of another GPU has the same handle (each driver numbers its own): a kernel could
// not tell them apart.
CUresult ListForwardedObject(uint64_t handle, int device, const ObjectRecord& record);
// The live object `handle` of its kind (`surface`), or CUDA_ERROR_INVALID_VALUE.
CUresult FindObject(uint64_t handle, bool surface, ObjectRecord* record);
// Unlists the object and frees its descriptor, or has its agent destroy a forwarded one;
// CUDA_ERROR_INVALID_VALUE when none.
CUresult DestroyObject(uint64_t handle, bool surface);

}  // namespace gpupool::client::ops

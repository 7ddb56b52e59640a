// CUDA arrays as the replacement libcuda.so.1 keeps them: one device allocation each, laid
// out as remote/protocol/sim_texture.h says, so that 2D/3D copies to and from an array are
// the row copies of ops/copy.cc over that allocation. What ops/ asks of an array; the
// table of arrays is defined beside the cuArray* entry points (api/api_array.cc) for now:
// moving it into ops/ is a next step of the client's layering (docs/architecture.md).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace gpupool::client {

// The device memory behind `array`: its first texel's address, the bytes of a row, and the
// rows of a slice. CUDA_ERROR_INVALID_HANDLE for a handle that is no live array.
CUresult ArrayBacking(CUarray array, uintptr_t* base, size_t* row_bytes, size_t* rows);

// For a side of a 2D/3D copy of `type` (nothing to check unless CU_MEMORYTYPE_ARRAY): the
// region (x bytes, y rows, z slices; width bytes, height rows, depth slices) must lie in
// the array, else CUDA_ERROR_INVALID_VALUE.
CUresult CheckArrayRegion(CUmemorytype type, CUarray array, size_t x, size_t y, size_t z, size_t width, size_t height,
                          size_t depth);

}  // namespace gpupool::client

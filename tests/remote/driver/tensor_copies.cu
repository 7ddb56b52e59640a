// Tensor copies (TMA, compute capability 9.0) as the CUDA programming guide writes them: a
// tensor map made on the host by cuTensorMapEncodeTiled (reached through
// cudaGetDriverEntryPointByVersion, and linked directly: -lcuda) and passed to kernels as a
// __grid_constant__ parameter; each block loads a tile into shared memory with
// cuda::device::experimental::cp_async_bulk_tensor_2d_global_to_shared and a cuda::barrier,
// works on it there, and stores it with cp_async_bulk_tensor_2d_shared_to_global. The
// matrix is no multiple of the tile, so the edge tiles read zeros outside it and write only
// inside it. Then a 128-byte swizzled box, read back through the swizzle as CUTLASS's
// kernels do, a map in global memory, and the driver's checks of bad arguments. On an older
// GPU (the sim's A100) the sm_90 code has nothing to run on: an error, none runs wrong.
// Exits 0 only if every result matches a CPU reference.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdio>
#include <vector>

#include "../programs/check.h"
#include "../programs/tensor_tiles.cuh"

namespace {

constexpr int kTile = 32;  // tiles of kTile x kTile floats

// Each block: its tile of `in` (zeros outside the matrix), times 2 plus 1 where the
// matrix holds the element's row and column, stored into `out`'s tile (inside only).
__global__ void ScaleTiles(const __grid_constant__ CUtensorMap in, const __grid_constant__ CUtensorMap out) {
  __shared__ alignas(128) float tile[kTile][kTile];
  __shared__ TileBarrier barrier;
  const int x = blockIdx.x * kTile, y = blockIdx.y * kTile;
  LoadTile(&tile, &in, x, y, barrier);
  for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
    float& v = tile[i / kTile][i % kTile];
    v = v * 2 + 1;
  }
  StoreTile(&out, x, y, &tile);
}

// One box of 32 x 8 floats under the 128-byte swizzle, read element by element through the
// swizzle (the 16-byte chunk c of row r lies at chunk c ^ (r % 8)), written out unswizzled.
__global__ void ReadSwizzled(const __grid_constant__ CUtensorMap in, int x, int y, float* out) {
  __shared__ alignas(1024) float box[8][32];
  __shared__ TileBarrier barrier;
  LoadTile(&box, &in, x, y, barrier);
  for (int i = threadIdx.x; i < 8 * 32; i += blockDim.x) {
    const int row = i / 32, column = i % 32;
    const int chunk = (column / 4) ^ (row % 8);
    out[i] = box[row][chunk * 4 + column % 4];
  }
}

// The map in global memory (as a library passes an array of them), one tile.
__global__ void LoadThroughPointer(const CUtensorMap* map, float* out) {
  __shared__ alignas(128) float tile[kTile][kTile];
  __shared__ TileBarrier barrier;
  LoadTile(&tile, map, kTile, 0, barrier);
  for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) out[i] = tile[i / kTile][i % kTile];
}

PFN_cuTensorMapEncodeTiled_v12000 EncodeFunction() {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &found));
  EXPECT(found == cudaDriverEntryPointSuccess && function != nullptr);
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
}

// A 2D map of floats over a rows x columns matrix `pitch` bytes a row.
CUresult Encode(PFN_cuTensorMapEncodeTiled_v12000 encode, CUtensorMap* map, void* base, uint64_t columns, uint64_t rows,
                uint64_t pitch, uint32_t box_x, uint32_t box_y,
                CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
  const cuuint64_t dims[2] = {columns, rows};
  const cuuint64_t strides[1] = {pitch};
  const cuuint32_t box[2] = {box_x, box_y};
  const cuuint32_t steps[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

}  // namespace

int main() {
  const cudaDeviceProp properties = DescribeDeviceExpectingModel();
  const int rows = 200, columns = 150;  // no multiple of 32
  const size_t pitch = 160 * sizeof(float);
  std::vector<float> host(rows * pitch / sizeof(float));
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 1013) * 0.5f;
  float* in = nullptr;
  float* out = nullptr;
  CHECK(cudaMalloc(&in, host.size() * sizeof(float)));
  CHECK(cudaMalloc(&out, host.size() * sizeof(float)));
  CHECK(cudaMemcpy(in, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  const float sentinel = -7.0f;
  std::vector<float> sentinels(host.size(), sentinel);
  CHECK(cudaMemcpy(out, sentinels.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));

  const PFN_cuTensorMapEncodeTiled_v12000 encode = EncodeFunction();
  alignas(64) CUtensorMap in_map, out_map, linked;
  EXPECT(Encode(encode, &in_map, in, columns, rows, pitch, kTile, kTile) == CUDA_SUCCESS);
  EXPECT(Encode(encode, &out_map, out, columns, rows, pitch, kTile, kTile) == CUDA_SUCCESS);
  // Linked directly, the same function: the same map.
  EXPECT(Encode(cuTensorMapEncodeTiled, &linked, in, columns, rows, pitch, kTile, kTile) == CUDA_SUCCESS);
  EXPECT(std::memcmp(&linked, &in_map, sizeof(linked)) == 0);

  // The driver's checks: a misaligned address, a stride no multiple of 16, a box row no
  // multiple of 16 bytes, a 6th dimension, a box row wider than its swizzle.
  alignas(64) CUtensorMap bad;
  EXPECT(Encode(encode, &bad, reinterpret_cast<char*>(in) + 4, columns, rows, pitch, kTile, kTile) ==
         CUDA_ERROR_INVALID_VALUE);
  EXPECT(Encode(encode, &bad, in, columns, rows, pitch + 4, kTile, kTile) == CUDA_ERROR_INVALID_VALUE);
  EXPECT(Encode(encode, &bad, in, columns, rows, pitch, 3, kTile) == CUDA_ERROR_INVALID_VALUE);
  EXPECT(Encode(encode, &bad, in, columns, rows, pitch, kTile, kTile, CU_TENSOR_MAP_SWIZZLE_64B) ==
         CUDA_ERROR_INVALID_VALUE);
  {
    const cuuint64_t dims[6] = {8, 8, 8, 8, 8, 8};
    const cuuint64_t strides[5] = {32, 256, 2048, 16384, 131072};
    const cuuint32_t box[6] = {8, 1, 1, 1, 1, 1};
    const cuuint32_t steps[6] = {1, 1, 1, 1, 1, 1};
    EXPECT(encode(&bad, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 6, in, dims, strides, box, steps,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_ERROR_INVALID_VALUE);
  }

  const dim3 grid((columns + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
  if (properties.major < 9) {
    ScaleTiles<<<grid, 128>>>(in_map, out_map);
    ExpectNoCodeForAnOlderGpu(properties, cudaGetLastError());
    return 0;
  }

  ScaleTiles<<<grid, 128>>>(in_map, out_map);
  CHECK(cudaGetLastError());
  std::vector<float> got(host.size());
  CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int r = 0; r < rows; ++r) {
    for (size_t c = 0; c < pitch / sizeof(float); ++c) {
      const size_t i = r * pitch / sizeof(float) + c;
      const float want = static_cast<int>(c) < columns ? host[i] * 2 + 1 : sentinel;  // padding left alone
      wrong += got[i] != want;
    }
  }
  std::printf("tiles loaded, scaled and stored by tensor copies (%dx%d of %dx%d): %d wrong\n", grid.x, grid.y, kTile,
              kTile, wrong);
  EXPECT(wrong == 0);

  alignas(64) CUtensorMap swizzled;
  EXPECT(Encode(encode, &swizzled, in, columns, rows, pitch, 32, 8, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_SUCCESS);
  float* box = nullptr;
  CHECK(cudaMalloc(&box, 8 * 32 * sizeof(float)));
  ReadSwizzled<<<1, 64>>>(swizzled, 64, 40, box);
  CHECK(cudaGetLastError());
  std::vector<float> box_host(8 * 32);
  CHECK(cudaMemcpy(box_host.data(), box, box_host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 32; ++c) wrong += box_host[r * 32 + c] != host[(40 + r) * pitch / sizeof(float) + 64 + c];
  }
  std::printf("a 128-byte swizzled box read through the swizzle: %d wrong\n", wrong);
  EXPECT(wrong == 0);

  // The map in device memory, with its address replaced to name `out` (the scaled matrix).
  alignas(64) CUtensorMap moved = in_map;
  EXPECT(cuTensorMapReplaceAddress(&moved, out) == CUDA_SUCCESS);
  CUtensorMap* device_map = nullptr;
  CHECK(cudaMalloc(&device_map, sizeof(CUtensorMap)));
  CHECK(cudaMemcpy(device_map, &moved, sizeof(moved), cudaMemcpyHostToDevice));
  float* tile = nullptr;
  CHECK(cudaMalloc(&tile, kTile * kTile * sizeof(float)));
  LoadThroughPointer<<<1, 128>>>(device_map, tile);
  CHECK(cudaGetLastError());
  std::vector<float> tile_host(kTile * kTile);
  CHECK(cudaMemcpy(tile_host.data(), tile, tile_host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int r = 0; r < kTile; ++r) {
    for (int c = 0; c < kTile; ++c) {
      wrong += tile_host[r * kTile + c] != host[r * pitch / sizeof(float) + kTile + c] * 2 + 1;
    }
  }
  std::printf("a map in device memory, its address replaced: %d wrong\n", wrong);
  EXPECT(wrong == 0);
  CHECK_FREE(in, out, box, device_map, tile);
  return FinishProgram("tensor_copies", true);
}

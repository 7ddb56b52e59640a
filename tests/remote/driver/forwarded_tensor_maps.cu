// Tensor maps for a GPU host's GPU, through the test server's cuda backend on the stand-in
// driver (tests/remote/fake_cuda_driver.cc, whose maps read "FAKETMAP", the address, the
// rank, the type, the swizzle and the dimensions): cuTensorMapEncodeTiled and
// cuTensorMapReplaceAddress reach the GPU's driver with their arguments, in both ways a
// program reaches them (linked, and the runtime's driver entry points); a map over memory
// that is not the session's is refused by the agent (CUDA_ERROR_INVALID_VALUE) before the
// driver sees it, and the driver's own refusals come back as they are.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "../programs/check.h"

namespace {

struct FakeMap {
  char magic[8];
  uint64_t address;
  uint32_t rank, type, swizzle, unused;
  uint64_t dims[5];
};

CUresult Encode(PFN_cuTensorMapEncodeTiled_v12000 encode, CUtensorMap* map, void* base, uint64_t columns, uint64_t rows,
                CUtensorMapSwizzle swizzle) {
  const cuuint64_t dims[2] = {columns, rows};
  const cuuint64_t strides[1] = {columns * 4};
  const cuuint32_t box[2] = {32, 8};
  const cuuint32_t steps[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

}  // namespace

int main() {
  DescribeDeviceExpectingModel();
  float* a = nullptr;
  float* b = nullptr;
  CHECK(cudaMalloc(&a, 64 * 1024));
  CHECK(cudaMalloc(&b, 64 * 1024));
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &found));
  EXPECT(found == cudaDriverEntryPointSuccess);
  const auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);

  alignas(64) CUtensorMap map, linked;
  EXPECT(Encode(encode, &map, a, 128, 64, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_SUCCESS);
  FakeMap fake;
  std::memcpy(&fake, &map, sizeof(fake));
  std::printf("map: %.8s address %s rank %u type %u swizzle %u dims %llu x %llu\n", fake.magic,
              fake.address == reinterpret_cast<uintptr_t>(a) ? "a" : "?", fake.rank, fake.type, fake.swizzle,
              static_cast<unsigned long long>(fake.dims[0]), static_cast<unsigned long long>(fake.dims[1]));
  EXPECT(std::memcmp(fake.magic, "FAKETMAP", 8) == 0);
  EXPECT(fake.address == reinterpret_cast<uintptr_t>(a));
  EXPECT(fake.rank == 2 && fake.type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 && fake.swizzle == CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT(fake.dims[0] == 128 && fake.dims[1] == 64);
  EXPECT(Encode(cuTensorMapEncodeTiled, &linked, a, 128, 64, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_SUCCESS);
  EXPECT(std::memcmp(&linked, &map, sizeof(map)) == 0);

  // The driver's map, its address replaced by the driver.
  EXPECT(cuTensorMapReplaceAddress(&map, b) == CUDA_SUCCESS);
  std::memcpy(&fake, &map, sizeof(fake));
  EXPECT(fake.address == reinterpret_cast<uintptr_t>(b));
  std::printf("replaced: address %s\n", fake.address == reinterpret_cast<uintptr_t>(b) ? "b" : "?");

  // Memory that is not this session's (host memory; a freed allocation): refused by the
  // agent, the map left as it was.
  alignas(64) static float host[1024];
  alignas(64) CUtensorMap refused;
  std::memset(&refused, 0x5a, sizeof(refused));
  EXPECT(Encode(encode, &refused, host, 128, 64, CU_TENSOR_MAP_SWIZZLE_NONE) == CUDA_ERROR_INVALID_VALUE);
  EXPECT(reinterpret_cast<const unsigned char*>(&refused)[0] == 0x5a);
  CHECK(cudaFree(b));
  EXPECT(cuTensorMapReplaceAddress(&map, b) == CUDA_ERROR_INVALID_VALUE);
  // The driver's own refusal: an address that is no multiple of 16.
  EXPECT(Encode(encode, &refused, reinterpret_cast<char*>(a) + 8, 128, 64, CU_TENSOR_MAP_SWIZZLE_NONE) ==
         CUDA_ERROR_INVALID_VALUE);
  CHECK(cudaFree(a));
  return FinishProgram("forwarded_tensor_maps", true);
}

// Occupancy calculators, function attributes, pointer attributes, memory info, limits and
// cuLaunchKernelEx's attributes, through the CUDA runtime.
//
// Occupancy answers are checked against a calculation made here from the device's
// properties and the kernel's attributes, by the rules of NVIDIA's occupancy calculator.
#include <cuda.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "../programs/check.h"
#include "../programs/kernels.cuh"

namespace {

// Resident blocks per SM, by the calculator's rules.
int ReferenceBlocks(const cudaDeviceProp& prop, const cudaFuncAttributes& attributes, int block,
                    size_t dynamic_shared) {
  if (block <= 0 || block > attributes.maxThreadsPerBlock) return 0;
  int warps = (block + prop.warpSize - 1) / prop.warpSize;
  int limit = std::min(prop.maxBlocksPerMultiProcessor, prop.maxThreadsPerMultiProcessor / prop.warpSize / warps);
  if (attributes.numRegs > 0) {
    int per_warp = (attributes.numRegs * prop.warpSize + 255) / 256 * 256;
    if (per_warp * warps > prop.regsPerBlock) return 0;
    limit = std::min(limit, prop.regsPerMultiprocessor / per_warp / warps);
  }
  size_t shared = dynamic_shared + attributes.sharedSizeBytes;
  if (shared > prop.sharedMemPerBlockOptin) return 0;
  size_t per_block = (shared + prop.reservedSharedMemPerBlock + 127) / 128 * 128;
  if (per_block > 0) {
    limit = std::min(limit, static_cast<int>(prop.sharedMemPerMultiprocessor / per_block));
  }
  return limit;
}

size_t SharedForBlock(int block) { return static_cast<size_t>(block) * 8; }

__constant__ float kWeights[64];

// A kernel bound to 128 threads with a 4224-byte tile of its own.
__global__ void __launch_bounds__(128) TileTranspose(const float* in, float* out, int n) {
  __shared__ float tile[32][33];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += blockDim.y) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * 32 + threadIdx.x;
  y = blockIdx.x * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += blockDim.y) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}

// Another shared array (2048 bytes), constant memory, and an array indexed by data, which
// lives in local memory.
__global__ void WeightedSum(const float* in, float* out, const int* picks, int n) {
  __shared__ double partial[256];
  int scratch[16];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int k = 0; k < 16; ++k) scratch[k] = picks[4 + k];
  double sum = 0;
  for (int k = 0; k < 4; ++k) sum += kWeights[scratch[picks[k] & 15] & 63] * (i < n ? in[i] : 0.0f);
  partial[threadIdx.x] = sum;
  __syncthreads();
  if (i < n) out[i] = static_cast<float>(partial[threadIdx.x] + partial[(threadIdx.x + 1) % blockDim.x]);
}

// What the compiled kernels declare, as a GPU's driver reports it: each kernel's own shared
// memory, its thread bound, constant and local memory; launches past them fail.
void CheckCompiledKernelAttributes(const cudaDeviceProp& prop) {
  cudaFuncAttributes tile{}, weighted{}, plain{};
  CHECK(cudaFuncGetAttributes(&tile, TileTranspose));
  CHECK(cudaFuncGetAttributes(&weighted, WeightedSum));
  CHECK(cudaFuncGetAttributes(&plain, vecAdd));
  EXPECT(tile.sharedSizeBytes == 32 * 33 * sizeof(float));
  EXPECT(tile.maxThreadsPerBlock == 128);
  EXPECT(weighted.sharedSizeBytes == 256 * sizeof(double));
  EXPECT(weighted.maxThreadsPerBlock >= 256);
  EXPECT(weighted.constSizeBytes >= sizeof(kWeights));
  // The sim's figure is the PTX's local array; a GPU's compiler may keep it in registers.
  if (OnTheSim()) EXPECT(weighted.localSizeBytes >= 16 * sizeof(int));
  EXPECT(plain.sharedSizeBytes == 0 && plain.localSizeBytes == 0);
  EXPECT(tile.maxDynamicSharedSizeBytes == static_cast<int>(prop.sharedMemPerBlock - tile.sharedSizeBytes));

  // The calculator counts the tile; a block past the bound has no occupancy.
  int blocks = -1;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, TileTranspose, 128, 0));
  EXPECT(blocks == ReferenceBlocks(prop, tile, 128, 0));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, TileTranspose, 256, 0));
  EXPECT(blocks == 0);
  int min_grid = 0, best_block = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &best_block, TileTranspose, 0, 0));
  EXPECT(best_block > 0 && best_block <= 128);

  const int n = 64;
  std::vector<float> host(n * n), back(n * n);
  for (int i = 0; i < n * n; ++i) host[i] = static_cast<float>(i);
  float *in = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&in, n * n * sizeof(float)));
  CHECK(cudaMalloc(&out, n * n * sizeof(float)));
  CHECK(cudaMemcpy(in, host.data(), n * n * sizeof(float), cudaMemcpyHostToDevice));
  // 256 threads: more than the kernel was compiled for.
  TileTranspose<<<dim3(n / 32, n / 32), dim3(32, 8)>>>(in, out, n);
  EXPECT(cudaGetLastError() == cudaErrorLaunchOutOfResources);
  // Dynamic shared memory beyond what the tile leaves of the 48 KiB.
  TileTranspose<<<dim3(n / 32, n / 32), dim3(32, 4), prop.sharedMemPerBlock - tile.sharedSizeBytes + 1>>>(in, out, n);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
  TileTranspose<<<dim3(n / 32, n / 32), dim3(32, 4), prop.sharedMemPerBlock - tile.sharedSizeBytes>>>(in, out, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(back.data(), out, n * n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) EXPECT(back[c * n + r] == host[r * n + c]);
  }

  float weights[64];
  for (int k = 0; k < 64; ++k) weights[k] = 0.5f * k;
  CHECK(cudaMemcpyToSymbol(kWeights, weights, sizeof(weights)));
  int picks[20];
  for (int k = 0; k < 20; ++k) picks[k] = (k * 7 + 3) % 61;
  int* device_picks = nullptr;
  CHECK(cudaMalloc(&device_picks, sizeof(picks)));
  CHECK(cudaMemcpy(device_picks, picks, sizeof(picks), cudaMemcpyHostToDevice));
  WeightedSum<<<n * n / 256, 256>>>(in, out, device_picks, n * n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(back.data(), out, n * n * sizeof(float), cudaMemcpyDeviceToHost));
  double factor = 0;
  for (int k = 0; k < 4; ++k) factor += weights[picks[4 + (picks[k] & 15)] & 63];
  for (int i = 0; i < n * n; ++i) {
    int neighbour = i / 256 * 256 + (i % 256 + 1) % 256;
    EXPECT(back[i] == static_cast<float>(factor * host[i] + factor * host[neighbour]));
  }
  CHECK_FREE(device_picks, in, out);
}

}  // namespace

int main() {
  int device = 0;
  CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  EXPECT(prop.maxThreadsPerMultiProcessor >= 1024);
  EXPECT(prop.sharedMemPerMultiprocessor >= prop.sharedMemPerBlock);
  EXPECT(prop.sharedMemPerBlockOptin >= prop.sharedMemPerBlock);
  EXPECT(prop.regsPerMultiprocessor > 0 && prop.l2CacheSize > 0);

  cudaFuncAttributes attributes{};
  CHECK(cudaFuncGetAttributes(&attributes, vecAdd));
  EXPECT(attributes.maxThreadsPerBlock > 0 && attributes.maxThreadsPerBlock <= 1024);
  EXPECT(attributes.binaryVersion > 0);
  EXPECT(attributes.maxDynamicSharedSizeBytes > 0);

  // Active blocks per SM, for every block size in whole warps and a few shared sizes.
  for (size_t shared : {size_t{0}, size_t{4096}, size_t{40000}}) {
    for (int block = 32; block <= attributes.maxThreadsPerBlock; block += 32) {
      int blocks = -1;
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, vecAdd, block, shared));
      if (blocks != ReferenceBlocks(prop, attributes, block, shared)) {
        std::fprintf(stderr, "block %d shared %zu: %d blocks, expected %d\n", block, shared, blocks,
                     ReferenceBlocks(prop, attributes, block, shared));
        return 1;
      }
    }
  }
  int with_flags = -1;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&with_flags, vecAdd, 128, 0, cudaOccupancyDefault));
  EXPECT(with_flags == ReferenceBlocks(prop, attributes, 128, 0));

  // The block size of highest occupancy: no other block size does better.
  int min_grid = 0, best_block = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &best_block, vecAdd, 0, 0));
  EXPECT(best_block > 0 && best_block % 32 == 0);
  int best = ReferenceBlocks(prop, attributes, best_block, 0) * best_block;
  for (int block = 32; block <= attributes.maxThreadsPerBlock; block += 32) {
    EXPECT(ReferenceBlocks(prop, attributes, block, 0) * block <= best);
  }
  EXPECT(min_grid == ReferenceBlocks(prop, attributes, best_block, 0) * prop.multiProcessorCount);
  // With shared memory that grows with the block.
  CHECK(cudaOccupancyMaxPotentialBlockSizeVariableSMem(&min_grid, &best_block, vecAdd, SharedForBlock));
  best = ReferenceBlocks(prop, attributes, best_block, SharedForBlock(best_block)) * best_block;
  for (int block = 32; block <= attributes.maxThreadsPerBlock; block += 32) {
    EXPECT(ReferenceBlocks(prop, attributes, block, SharedForBlock(block)) * block <= best);
  }

  // Dynamic shared memory available to each of 2 resident blocks of 256 threads: that much
  // still lets 2 reside, 128 bytes more does not (unless the per-block maximum is the cap).
  size_t available = 0;
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&available, vecAdd, 2, 256));
  EXPECT(available > 0);
  EXPECT(ReferenceBlocks(prop, attributes, 256, available) >= 2);
  EXPECT(ReferenceBlocks(prop, attributes, 256, available + 128) < 2 ||
         available + attributes.sharedSizeBytes == prop.sharedMemPerBlockOptin);

  // A launch may use 48 KiB of dynamic shared memory unless the kernel was allowed more.
  float* scratch = nullptr;
  CHECK(cudaMalloc(&scratch, 256 * sizeof(float)));
  scale<<<1, 256, prop.sharedMemPerBlock - attributes.sharedSizeBytes>>>(scratch, 1.0f, 256);
  CHECK(cudaGetLastError());
  scale<<<1, 256, prop.sharedMemPerBlock - attributes.sharedSizeBytes + 1>>>(scratch, 1.0f, 256);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);

  // Function attributes that can be set read back; beyond the opt-in maximum is refused.
  int optin = static_cast<int>(prop.sharedMemPerBlockOptin - attributes.sharedSizeBytes);
  CHECK(cudaFuncSetAttribute(vecAdd, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  CHECK(cudaFuncGetAttributes(&attributes, vecAdd));
  EXPECT(attributes.maxDynamicSharedSizeBytes == optin);
  EXPECT(cudaFuncSetAttribute(vecAdd, cudaFuncAttributeMaxDynamicSharedMemorySize, optin + 1) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaFuncSetAttribute(scale, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  scale<<<1, 256, optin>>>(scratch, 1.0f, 256);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(scratch));
  CHECK(cudaFuncSetAttribute(vecAdd, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
  CHECK(cudaFuncGetAttributes(&attributes, vecAdd));
  EXPECT(attributes.preferredShmemCarveout == 50);
  CHECK(cudaFuncSetCacheConfig(vecAdd, cudaFuncCachePreferShared));

  // Memory info and pointer attributes.
  size_t free_before = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_before, &total));
  EXPECT(total == prop.totalGlobalMem && free_before <= total);
  const int n = 1 << 20;
  float* a = nullptr;
  CHECK(cudaMalloc(&a, n * sizeof(float)));
  size_t free_after = 0;
  CHECK(cudaMemGetInfo(&free_after, &total));
  EXPECT(free_after + n * sizeof(float) <= free_before);
  cudaPointerAttributes where{};
  CHECK(cudaPointerGetAttributes(&where, a + 100));
  EXPECT(where.type == cudaMemoryTypeDevice && where.device == device);
  EXPECT(where.devicePointer == a + 100);
  CUdeviceptr start = 0;
  size_t range = 0;
  int managed = -1;
  EXPECT(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, reinterpret_cast<CUdeviceptr>(a + 100)) ==
         CUDA_SUCCESS);
  EXPECT(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, reinterpret_cast<CUdeviceptr>(a + 100)) ==
         CUDA_SUCCESS);
  EXPECT(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, reinterpret_cast<CUdeviceptr>(a)) ==
         CUDA_SUCCESS);
  EXPECT(start == reinterpret_cast<CUdeviceptr>(a) && range == n * sizeof(float) && managed == 0);
  CUcontext owner = nullptr, current = nullptr;
  EXPECT(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, reinterpret_cast<CUdeviceptr>(a)) == CUDA_SUCCESS);
  EXPECT(cuCtxGetCurrent(&current) == CUDA_SUCCESS && owner == current);
  float* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, 4096));
  CHECK(cudaPointerGetAttributes(&where, pinned));
  EXPECT(where.type == cudaMemoryTypeHost);
  std::vector<float> pageable(16);
  CHECK(cudaPointerGetAttributes(&where, pageable.data()));
  EXPECT(where.type == cudaMemoryTypeUnregistered);
  // Registered host memory: a page-locked range until unregistered (mapped registration:
  // registered_memory.cu).
  std::vector<float> registered(4096);
  CHECK(cudaHostRegister(registered.data(), registered.size() * sizeof(float), cudaHostRegisterDefault));
  unsigned host_flags = 99;
  CHECK(cudaHostGetFlags(&host_flags, registered.data()));
  EXPECT(host_flags == cudaHostRegisterDefault);
  float* portable = nullptr;
  CHECK(cudaHostAlloc(&portable, 4096, cudaHostAllocPortable));
  CHECK(cudaHostGetFlags(&host_flags, portable));
  // Allocated page-locked memory is mapped where the GPU maps host memory, and then says
  // only that, as a driver does (cudaHostAllocMapped; driver 580 on an H100).
  int can_map = 0;
  CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, 0));
  EXPECT(host_flags == (can_map ? cudaHostAllocMapped : cudaHostAllocPortable));
  CHECK(cudaFreeHost(portable));
  CHECK(cudaPointerGetAttributes(&where, registered.data()));
  EXPECT(where.type == cudaMemoryTypeHost);
  CHECK(cudaHostUnregister(registered.data()));
  EXPECT(cudaHostUnregister(registered.data()) == cudaErrorHostMemoryNotRegistered);
  cudaGetLastError();

  // Limits read back as set.
  for (cudaLimit limit : {cudaLimitStackSize, cudaLimitPrintfFifoSize, cudaLimitMallocHeapSize}) {
    size_t value = 0;
    CHECK(cudaDeviceGetLimit(&value, limit));
    EXPECT(value > 0);
    CHECK(cudaDeviceSetLimit(limit, value * 2));
    size_t read_back = 0;
    CHECK(cudaDeviceGetLimit(&read_back, limit));
    EXPECT(read_back == value * 2);
  }

  // cuLaunchKernelEx: scheduling hints are accepted and the kernel runs; a cooperative
  // grid too large to be resident and cluster launches are refused clearly.
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  CHECK(cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3((n + 255) / 256);
  config.blockDim = dim3(256);
  cudaLaunchAttribute hints[1];
  hints[0].id = cudaLaunchAttributePriority;
  hints[0].val.priority = 0;
  config.attrs = hints;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, scale, a, 3.0f, n));
  CHECK(cudaMemcpy(host.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i += 4099) EXPECT(host[i] == 3.0f * i);
  cudaLaunchAttribute cooperative[1];
  cooperative[0].id = cudaLaunchAttributeCooperative;
  cooperative[0].val.cooperative = 1;
  config.attrs = cooperative;
  // More blocks than the SMs hold at once (cooperative_groups.cu runs grids that fit).
  EXPECT(config.gridDim.x > static_cast<unsigned>(8 * prop.multiProcessorCount));
  EXPECT(cudaLaunchKernelEx(&config, scale, a, 3.0f, n) == cudaErrorCooperativeLaunchTooLarge);
  cudaGetLastError();
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = 2;
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = 1;
  config.attrs = cluster;
  EXPECT(cudaLaunchKernelEx(&config, scale, a, 3.0f, n) == cudaErrorNotSupported);
  cudaGetLastError();

  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(a));
  CHECK(cudaDeviceSynchronize());
  CheckCompiledKernelAttributes(prop);
  std::printf("occupancy and attributes: ok (best block %d, %d SMs)\n", best_block, prop.multiProcessorCount);
  return 0;
}

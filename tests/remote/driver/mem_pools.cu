// Stream-ordered memory pools, as programs that check cudaDevAttrMemoryPoolsSupported use
// them: the device's default and current pools, cudaMallocAsync and cudaFreeAsync through
// them, pool attributes (release threshold, used and reserved bytes, watermarks), a pool of
// our own with a maximum size, cudaMallocFromPoolAsync (also in a capture), access, trimming
// and destruction; what a GPU refuses is refused.
#include <cuda.h>

#include <cstdint>
#include <cstdio>

#include "../programs/check.h"

namespace {

__global__ void Fill(float* x, float value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}

__global__ void Sum(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

uint64_t PoolFigure(cudaMemPool_t pool, cudaMemPoolAttr attribute) {
  uint64_t value = 0;
  CHECK(cudaMemPoolGetAttribute(pool, attribute, &value));
  return value;
}

cudaMemPool_t PoolOf(const void* pointer) {
  cudaMemPool_t pool = nullptr;
  cudaPointerAttributes attributes;
  CHECK(cudaPointerGetAttributes(&attributes, pointer));
  EXPECT(attributes.type == cudaMemoryTypeDevice);
  CUmemoryPool handle = nullptr;
  // The runtime has no pointer attribute for the pool; the driver's is read as CUDA
  // programs do it.
  EXPECT(cuPointerGetAttribute(&handle, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, reinterpret_cast<CUdeviceptr>(pointer)) ==
         CUDA_SUCCESS);
  pool = reinterpret_cast<cudaMemPool_t>(handle);
  return pool;
}

}  // namespace

int main() {
  int supported = 0, handle_types = -1;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  CHECK(cudaDeviceGetAttribute(&handle_types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
  EXPECT(supported == 1 && handle_types == 0);

  cudaMemPool_t default_pool = nullptr, current = nullptr;
  CHECK(cudaDeviceGetDefaultMemPool(&default_pool, 0));
  CHECK(cudaDeviceGetMemPool(&current, 0));
  EXPECT(default_pool != nullptr && current == default_pool);
  // CUDA 13's location forms of the driver calls name the same pools.
  CUmemLocation device_zero = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool driver_pool = nullptr;
  EXPECT(cuMemGetDefaultMemPool(&driver_pool, &device_zero, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_SUCCESS);
  EXPECT(reinterpret_cast<cudaMemPool_t>(driver_pool) == default_pool);
  EXPECT(cuMemGetMemPool(&driver_pool, &device_zero, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_SUCCESS);
  EXPECT(reinterpret_cast<cudaMemPool_t>(driver_pool) == default_pool);
  CUmemLocation device_nine = {CU_MEM_LOCATION_TYPE_DEVICE, 9};
  EXPECT(cuMemGetMemPool(&driver_pool, &device_nine, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_ERROR_INVALID_DEVICE);
  uint64_t threshold = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(default_pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  EXPECT(PoolFigure(default_pool, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX);
  int reuse = 0;
  CHECK(cudaMemPoolSetAttribute(default_pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
  reuse = 1;
  CHECK(cudaMemPoolGetAttribute(default_pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
  EXPECT(reuse == 0);

  size_t free_before = 0, free_now = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_before, &total));

  // cudaMallocAsync and cudaFreeAsync through the default pool.
  const int n = 1 << 16;
  const size_t bytes = n * sizeof(float);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK(cudaMallocAsync(&a, bytes, stream));
  CHECK(cudaMallocAsync(&b, bytes, stream));
  CHECK(cudaMallocAsync(&c, bytes, stream));
  EXPECT(PoolFigure(default_pool, cudaMemPoolAttrUsedMemCurrent) == 3 * bytes);
  EXPECT(PoolFigure(default_pool, cudaMemPoolAttrReservedMemCurrent) == 3 * bytes);
  EXPECT(PoolOf(a) == default_pool);
  Fill<<<n / 256, 256, 0, stream>>>(a, 1.5f, n);
  Fill<<<n / 256, 256, 0, stream>>>(b, 2.0f, n);
  Sum<<<n / 256, 256, 0, stream>>>(a, b, c, n);
  float* host = nullptr;
  CHECK(cudaMallocHost(&host, bytes));
  CHECK(cudaMemcpyAsync(host, c, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaFreeAsync(a, stream));
  CHECK(cudaFreeAsync(b, stream));
  CHECK(cudaFreeAsync(c, stream));
  CHECK(cudaStreamSynchronize(stream));
  for (int i = 0; i < n; ++i) EXPECT(host[i] == 3.5f);
  EXPECT(PoolFigure(default_pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  EXPECT(PoolFigure(default_pool, cudaMemPoolAttrUsedMemHigh) == 3 * bytes);
  CHECK(cudaMemGetInfo(&free_now, &total));
  EXPECT(free_now == free_before);  // nothing is kept: freed on the GPU
  uint64_t zero = 0, one = 1;
  CHECK(cudaMemPoolSetAttribute(default_pool, cudaMemPoolAttrUsedMemHigh, &zero));
  EXPECT(PoolFigure(default_pool, cudaMemPoolAttrUsedMemHigh) == 0);
  EXPECT(cudaMemPoolSetAttribute(default_pool, cudaMemPoolAttrUsedMemHigh, &one) == cudaErrorInvalidValue);
  EXPECT(cudaMemPoolSetAttribute(default_pool, cudaMemPoolAttrUsedMemCurrent, &zero) == cudaErrorInvalidValue);
  CHECK(cudaMemPoolTrimTo(default_pool, 0));

  // A pool of our own, of at most 1 MiB.
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  props.maxSize = 1 << 20;
  cudaMemPool_t pool = nullptr;
  CHECK(cudaMemPoolCreate(&pool, &props));
  EXPECT(pool != default_pool);
  void *small = nullptr, *large = nullptr;
  CHECK(cudaMallocFromPoolAsync(&small, 512 << 10, pool, stream));
  EXPECT(PoolOf(small) == pool);
  EXPECT(cudaMallocFromPoolAsync(&large, 768 << 10, pool, stream) == cudaErrorMemoryAllocation);
  cudaGetLastError();
  EXPECT(PoolFigure(pool, cudaMemPoolAttrUsedMemCurrent) == 512 << 10);
  EXPECT(PoolFigure(default_pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  // The device's current pool: cudaMallocAsync allocates from it.
  CHECK(cudaDeviceSetMemPool(0, pool));
  CHECK(cudaDeviceGetMemPool(&current, 0));
  EXPECT(current == pool);
  void* from_current = nullptr;
  CHECK(cudaMallocAsync(&from_current, 256 << 10, stream));
  EXPECT(PoolOf(from_current) == pool);
  EXPECT(PoolFigure(pool, cudaMemPoolAttrUsedMemCurrent) == 768 << 10);
  CHECK(cudaFreeAsync(from_current, stream));
  EXPECT(PoolFigure(pool, cudaMemPoolAttrUsedMemCurrent) == 512 << 10);
  // Access: the pool's own device reads and writes, and keeps doing so.
  cudaMemLocation location = {cudaMemLocationTypeDevice, 0};
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  CHECK(cudaMemPoolGetAccess(&flags, pool, &location));
  EXPECT(flags == cudaMemAccessFlagsProtReadWrite);
  cudaMemAccessDesc access = {location, cudaMemAccessFlagsProtReadWrite};
  CHECK(cudaMemPoolSetAccess(pool, &access, 1));
  access.flags = cudaMemAccessFlagsProtNone;
  EXPECT(cudaMemPoolSetAccess(pool, &access, 1) == cudaErrorInvalidValue);
  cudaGetLastError();
  // Destroyed: the device goes back to its default pool; the allocation lives on.
  CHECK(cudaMemPoolDestroy(pool));
  CHECK(cudaDeviceGetMemPool(&current, 0));
  EXPECT(current == default_pool);
  Fill<<<1, 256, 0, stream>>>(static_cast<float*>(small), 4.0f, 256);
  CHECK(cudaMemcpyAsync(host, small, 256 * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(host[0] == 4.0f && host[255] == 4.0f);
  CHECK(cudaFreeAsync(small, stream));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(cudaMemPoolDestroy(default_pool) == cudaErrorInvalidValue);  // a device's default
  cudaGetLastError();

  // What the devices do not offer: exportable pools.
  cudaMemPoolProps exportable = props;
  exportable.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  cudaMemPool_t refused = nullptr;
  EXPECT(cudaMemPoolCreate(&refused, &exportable) != cudaSuccess);
  cudaGetLastError();

  // From a pool in a capture: an allocation node, whose memory holds for every launch.
  float* scratch = nullptr;
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(cudaMallocFromPoolAsync(&scratch, bytes, default_pool, stream));
  Fill<<<n / 256, 256, 0, stream>>>(scratch, 7.0f, n);
  CHECK(cudaMemcpyAsync(host, scratch, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaFreeAsync(scratch, stream));
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 2; ++round) {
    host[0] = host[n - 1] = 0;
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    EXPECT(host[0] == 7.0f && host[n - 1] == 7.0f);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaMemGetInfo(&free_now, &total));
  EXPECT(free_now == free_before);

  CHECK(cudaFreeHost(host));
  CHECK(cudaStreamDestroy(stream));
  std::printf("mem_pools: ok\n");
  return 0;
}

// The rest of what device code asks the device runtime (CUDA 12's, -rdc=true -lcudadevrt),
// each answer checked against the host's:
//   - cudaGetDeviceCount, cudaDeviceGetCacheConfig (a preference the host set before the
//     first kernel ran), cudaDeviceGetSharedMemConfig and cudaRuntimeGetVersion say what
//     the host's say;
//   - cudaFuncGetAttributes of a kernel says what the host's says of it, field by field
//     (its static shared memory, its __launch_bounds__, registers, PTX and binary
//     versions...); of a device function it is cudaErrorInvalidDeviceFunction;
//   - the occupancy calculator (cudaOccupancyMaxActiveBlocksPerMultiprocessor and its
//     WithFlags form) says what the host's says for block sizes and dynamic shared memory
//     from one warp to past the kernel's bound; a block size of 0 and an unknown flag are
//     errors on both sides;
//   - cudaGetErrorString and cudaGetErrorName return text the kernel reads, the host's
//     text ("unrecognized error code" for a number that is no error);
//   - cudaMemset3DAsync sets a box of a cudaMalloc3D allocation and nothing else; a row
//     past its pitch is the runtime's error and sets nothing;
//   - a grid launched by a kernel is told the same.
// The errors are the sim's numbers; on a GPU only that they are errors is checked (not run
// on one yet).
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"

// cudaDeviceGetSharedMemConfig is deprecated, and asked here on both sides.
#pragma nv_diag_suppress 1215
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

// The kernel asked about: 200 bytes of static shared memory, at most 256 threads.
__global__ void __launch_bounds__(256) Target(int* out) {
  __shared__ int tile[50];
  tile[threadIdx.x % 50] = static_cast<int>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % 50];
}

__device__ __noinline__ int Helper(int x) { return x * 3; }

struct Queries {
  int status[8];
  int device_count, cache_config, bank_size, runtime_version;
  cudaFuncAttributes attributes;
  int helper_status;
};

__global__ void Ask(Queries* q) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  q->status[0] = static_cast<int>(cudaGetDeviceCount(&q->device_count));
  cudaFuncCache cache = cudaFuncCachePreferNone;
  q->status[1] = static_cast<int>(cudaDeviceGetCacheConfig(&cache));
  q->cache_config = static_cast<int>(cache);
  cudaSharedMemConfig banks = cudaSharedMemBankSizeDefault;
  q->status[2] = static_cast<int>(cudaDeviceGetSharedMemConfig(&banks));
  q->bank_size = static_cast<int>(banks);
  q->status[3] = static_cast<int>(cudaRuntimeGetVersion(&q->runtime_version));
  q->status[4] = static_cast<int>(cudaFuncGetAttributes(&q->attributes, reinterpret_cast<const void*>(Target)));
  cudaFuncAttributes ignored;
  q->helper_status = static_cast<int>(cudaFuncGetAttributes(&ignored, reinterpret_cast<const void*>(Helper)));
}

// The occupancy asked of Target for kCases (block size, dynamic shared memory) pairs, with
// and without flags; then a block size of 0 and an unknown flag.
constexpr int kCases = 6 * 3;
__host__ __device__ int BlockSizeOf(int i) {
  const int sizes[] = {32, 96, 128, 256, 257, 1024};
  return sizes[i / 3];
}
__host__ __device__ size_t SharedOf(int i) {
  const size_t shared[] = {0, 4096, 48 << 10};
  return shared[i % 3];
}
struct Occupancy {
  int blocks[kCases], with_flags[kCases], status[2 * kCases];
  int refused[2];
};

__global__ void AskOccupancy(Occupancy* o) {
  if (threadIdx.x != 0) return;
  const void* target = reinterpret_cast<const void*>(Target);
  for (int i = 0; i < kCases; ++i) {
    const int size = BlockSizeOf(i);
    const size_t shared = SharedOf(i);
    o->status[2 * i] =
        static_cast<int>(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o->blocks[i], target, size, shared));
    o->status[2 * i + 1] = static_cast<int>(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        &o->with_flags[i], target, size, shared, cudaOccupancyDisableCachingOverride));
  }
  int ignored = 0;
  o->refused[0] = static_cast<int>(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ignored, target, 0, 0));
  o->refused[1] = static_cast<int>(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&ignored, target, 128, 0, 6));
}

// The texts of these errors, as the kernel reads them.
constexpr int kErrorCount = 9;
__host__ __device__ int ErrorOf(int i) {
  const int errors[kErrorCount] = {0, 1, 2, 98, 200, 700, 801, 999, 12345};
  return errors[i];
}
constexpr int kTextBytes = 96;
struct ErrorTexts {
  char text[kErrorCount][kTextBytes];
  char name[kErrorCount][kTextBytes];
};

__device__ void CopyText(char* to, const char* from) {
  int i = 0;
  for (; i < kTextBytes - 1 && from != nullptr && from[i] != '\0'; ++i) to[i] = from[i];
  to[i] = '\0';
}

__global__ void AskErrorTexts(ErrorTexts* texts) {
  const int i = static_cast<int>(threadIdx.x);
  if (i >= kErrorCount) return;
  CopyText(texts->text[i], cudaGetErrorString(static_cast<cudaError_t>(ErrorOf(i))));
  CopyText(texts->name[i], cudaGetErrorName(static_cast<cudaError_t>(ErrorOf(i))));
}

// What a grid launched from device code is told.
__global__ void AskAsAChild(Queries* q) { Ask<<<1, 1>>>(q); }

constexpr size_t kWidth = 24, kHeight = 5, kDepth = 4;  // the allocation: bytes, rows, slices
constexpr size_t kBoxWidth = 11, kBoxHeight = 3, kBoxDepth = 2;

// Sets the box of kBoxWidth x kBoxHeight x kBoxDepth at (4, 1, 1) of `p` to 0x5c, then asks
// for a row past the pitch.
__global__ void SetBox(cudaPitchedPtr p, int* status) {
  if (threadIdx.x != 0) return;
  const size_t slice = p.pitch * p.ysize;
  cudaPitchedPtr at = p;
  at.ptr = static_cast<char*>(p.ptr) + slice + p.pitch + 4;
  status[0] = static_cast<int>(cudaMemset3DAsync(at, 0x5c, cudaExtent{kBoxWidth, kBoxHeight, kBoxDepth}, 0));
  status[1] = static_cast<int>(cudaMemset3DAsync(p, 0x77, cudaExtent{p.pitch + 1, 1, 1}, 0));
}

}  // namespace

int main() {
  DescribeDeviceExpectingModel();
  int device = -1;
  CHECK(cudaGetDevice(&device));
  // A preference set before the first kernel runs (the sim loads the module then).
  CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
  int host_count = 0, host_version = 0;
  cudaFuncCache host_cache = cudaFuncCachePreferNone;
  cudaSharedMemConfig host_banks = cudaSharedMemBankSizeDefault;
  CHECK(cudaGetDeviceCount(&host_count));
  CHECK(cudaDeviceGetCacheConfig(&host_cache));
  CHECK(cudaDeviceGetSharedMemConfig(&host_banks));
  CHECK(cudaRuntimeGetVersion(&host_version));
  cudaFuncAttributes host{};
  CHECK(cudaFuncGetAttributes(&host, Target));

  Queries* q = nullptr;
  CHECK(cudaMalloc(&q, sizeof(Queries)));
  auto ask = [&](bool as_child) {
    CHECK(cudaMemset(q, 0xff, sizeof(Queries)));
    if (as_child) {
      AskAsAChild<<<1, 1>>>(q);
    } else {
      Ask<<<1, 32>>>(q);
    }
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    Queries got{};
    CHECK(cudaMemcpy(&got, q, sizeof(got), cudaMemcpyDeviceToHost));
    return got;
  };
  for (bool as_child : {false, true}) {
    const Queries got = ask(as_child);
    const cudaFuncAttributes& a = got.attributes;
    std::printf("%s: %d device(s) (status %d), cache config %d (%d), banks %d (%d), runtime %d (%d)\n",
                as_child ? "a child grid" : "device code", got.device_count, got.status[0], got.cache_config,
                got.status[1], got.bank_size, got.status[2], got.runtime_version, got.status[3]);
    std::printf(
        "  Target: status %d, shared %zu, const %zu, local %zu, threads %d, registers %d, ptx %d, "
        "binary %d, dynamic shared %d, carveout %d; a device function: %d\n",
        got.status[4], a.sharedSizeBytes, a.constSizeBytes, a.localSizeBytes, a.maxThreadsPerBlock, a.numRegs,
        a.ptxVersion, a.binaryVersion, a.maxDynamicSharedSizeBytes, a.preferredShmemCarveout, got.helper_status);
    for (int i = 0; i < 5; ++i) EXPECT(got.status[i] == cudaSuccess);
    EXPECT(got.device_count == host_count);
    EXPECT(got.cache_config == static_cast<int>(host_cache));
    EXPECT(got.bank_size == static_cast<int>(host_banks));
    EXPECT(got.runtime_version == host_version);
    EXPECT(a.sharedSizeBytes == host.sharedSizeBytes && a.sharedSizeBytes == 200);
    EXPECT(a.constSizeBytes == host.constSizeBytes);
    EXPECT(a.localSizeBytes == host.localSizeBytes);
    EXPECT(a.maxThreadsPerBlock == host.maxThreadsPerBlock && a.maxThreadsPerBlock == 256);
    EXPECT(a.numRegs == host.numRegs);
    EXPECT(a.ptxVersion == host.ptxVersion);
    EXPECT(a.binaryVersion == host.binaryVersion);
    EXPECT(a.cacheModeCA == host.cacheModeCA);
    EXPECT(a.maxDynamicSharedSizeBytes == host.maxDynamicSharedSizeBytes);
    EXPECT(a.preferredShmemCarveout == host.preferredShmemCarveout);
    EXPECT(a.clusterDimMustBeSet == host.clusterDimMustBeSet);
    if (OnTheSim()) {
      EXPECT(got.helper_status == cudaErrorInvalidDeviceFunction);
    } else {
      EXPECT(got.helper_status != cudaSuccess);
    }
  }
  std::printf(
      "host: %d device(s), cache config %d, banks %d, runtime %d; Target: shared %zu, threads %d, "
      "registers %d, ptx %d, binary %d\n",
      host_count, static_cast<int>(host_cache), static_cast<int>(host_banks), host_version, host.sharedSizeBytes,
      host.maxThreadsPerBlock, host.numRegs, host.ptxVersion, host.binaryVersion);

  // The occupancy calculator.
  Occupancy* o = nullptr;
  CHECK(cudaMalloc(&o, sizeof(Occupancy)));
  CHECK(cudaMemset(o, 0xff, sizeof(Occupancy)));
  AskOccupancy<<<1, 32>>>(o);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  Occupancy occupancy{};
  CHECK(cudaMemcpy(&occupancy, o, sizeof(occupancy), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kCases; ++i) {
    const int size = BlockSizeOf(i);
    const size_t shared = SharedOf(i);
    int want = -1;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&want, Target, size, shared));
    if (occupancy.status[2 * i] != cudaSuccess || occupancy.status[2 * i + 1] != cudaSuccess ||
        occupancy.blocks[i] != want || occupancy.with_flags[i] != want) {
      std::printf("occupancy of %d threads, %zu bytes: device code %d and %d (statuses %d %d), host %d\n", size, shared,
                  occupancy.blocks[i], occupancy.with_flags[i], occupancy.status[2 * i], occupancy.status[2 * i + 1],
                  want);
    }
    EXPECT(occupancy.status[2 * i] == cudaSuccess && occupancy.status[2 * i + 1] == cudaSuccess);
    EXPECT(occupancy.blocks[i] == want && occupancy.with_flags[i] == want);
  }
  int ignored = 0;
  const cudaError_t host_refused[2] = {
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ignored, Target, 0, 0),
      cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&ignored, Target, 128, 0, 6)};
  std::printf("occupancy: %d blocks of 128 threads, %d of 256 with 48 KiB, %d of 1024; refused %d %d (host %d %d)\n",
              occupancy.blocks[6], occupancy.blocks[11], occupancy.blocks[15], occupancy.refused[0],
              occupancy.refused[1], static_cast<int>(host_refused[0]), static_cast<int>(host_refused[1]));
  EXPECT(occupancy.blocks[6] > 0 && occupancy.blocks[15] == 0);  // 1024 threads: past __launch_bounds__
  EXPECT(occupancy.refused[0] != cudaSuccess && occupancy.refused[1] != cudaSuccess);
  if (OnTheSim()) {
    EXPECT(occupancy.refused[0] == static_cast<int>(host_refused[0]));
    EXPECT(occupancy.refused[1] == static_cast<int>(host_refused[1]));
  }
  (void)cudaGetLastError();  // the host's refused asks

  // Error texts.
  ErrorTexts* texts = nullptr;
  CHECK(cudaMalloc(&texts, sizeof(ErrorTexts)));
  CHECK(cudaMemset(texts, 0, sizeof(ErrorTexts)));
  AskErrorTexts<<<1, 32>>>(texts);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  ErrorTexts read{};
  CHECK(cudaMemcpy(&read, texts, sizeof(read), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kErrorCount; ++i) {
    const char* text = cudaGetErrorString(static_cast<cudaError_t>(ErrorOf(i)));
    const char* name = cudaGetErrorName(static_cast<cudaError_t>(ErrorOf(i)));
    if (std::strcmp(read.text[i], text) != 0 || std::strcmp(read.name[i], name) != 0) {
      std::printf("error %d: device code \"%s\" (%s), host \"%s\" (%s)\n", ErrorOf(i), read.text[i], read.name[i], text,
                  name);
    }
    EXPECT(std::strcmp(read.text[i], text) == 0);
    EXPECT(std::strcmp(read.name[i], name) == 0);
  }
  std::printf("error texts: %d as the host says them (%s: \"%s\"; %d: \"%s\")\n", kErrorCount, read.name[3],
              read.text[3], ErrorOf(kErrorCount - 1), read.text[kErrorCount - 1]);
  EXPECT(std::strcmp(read.text[kErrorCount - 1], "unrecognized error code") == 0);

  // cudaMemset3DAsync.
  cudaPitchedPtr p{};
  CHECK(cudaMalloc3D(&p, make_cudaExtent(kWidth, kHeight, kDepth)));
  const size_t bytes = p.pitch * kHeight * kDepth;
  CHECK(cudaMemset(p.ptr, 0x11, bytes));
  int* status = nullptr;
  CHECK(cudaMalloc(&status, 2 * sizeof(int)));
  CHECK(cudaMemset(status, 0xff, 2 * sizeof(int)));
  SetBox<<<1, 32>>>(p, status);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> set(bytes);
  int statuses[2] = {-1, -1};
  CHECK(cudaMemcpy(set.data(), p.ptr, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(statuses, status, sizeof(statuses), cudaMemcpyDeviceToHost));
  size_t in_box = 0;
  for (size_t z = 0; z < kDepth; ++z) {
    for (size_t y = 0; y < kHeight; ++y) {
      for (size_t x = 0; x < p.pitch; ++x) {
        const bool box = x >= 4 && x < 4 + kBoxWidth && y >= 1 && y < 1 + kBoxHeight && z >= 1 && z < 1 + kBoxDepth;
        in_box += box;
        EXPECT(set[(z * kHeight + y) * p.pitch + x] == (box ? 0x5c : 0x11));
      }
    }
  }
  std::printf("3D memset: a box of %zux%zux%zu (%zu bytes, pitch %zu) set (status %d); a row past its pitch: %d\n",
              kBoxWidth, kBoxHeight, kBoxDepth, in_box, p.pitch, statuses[0], statuses[1]);
  EXPECT(statuses[0] == cudaSuccess);
  if (OnTheSim()) {
    EXPECT(statuses[1] == cudaErrorInvalidPitchValue);
  } else {
    EXPECT(statuses[1] != cudaSuccess);
  }

  CHECK_FREE(q, o, texts, p.ptr, status);
  return FinishProgram("cdp_runtime_queries", true);
}

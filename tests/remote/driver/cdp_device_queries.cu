// What device code asks the device runtime of its device, and 3D copies in device code
// (CUDA 12's device runtime, -rdc=true -lcudadevrt), each result checked against the host's:
//   - cudaDeviceGetAttribute in device code says what the host's says, attribute by
//     attribute; an attribute that is none, or another device, is the runtime's error;
//   - cudaDeviceGetLimit in device code says the limits the host set before the first
//     kernel ran (stack, printf FIFO, malloc heap, pending launches...); a limit that is
//     none is cudaErrorUnsupportedLimit;
//   - cudaMemcpy3DAsync in device code, its parameters on the thread's stack, copies a box
//     between two cudaMalloc3D allocations at the positions given, and from one into linear
//     memory, touching nothing else; a row past its pitch, and a copy from the host, are
//     the runtime's errors and copy nothing (on the sim, a CUDA array too);
//   - a grid launched by a kernel asks the same and is answered the same.
// The errors are the sim's numbers; on a GPU only that they are errors is checked (not run
// on one yet).
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"

namespace {

// The attributes asked on both sides.
constexpr cudaDeviceAttr kAttributes[] = {
    cudaDevAttrMaxThreadsPerBlock,
    cudaDevAttrMaxBlockDimX,
    cudaDevAttrMaxGridDimY,
    cudaDevAttrMaxSharedMemoryPerBlock,
    cudaDevAttrWarpSize,
    cudaDevAttrMultiProcessorCount,
    cudaDevAttrComputeCapabilityMajor,
    cudaDevAttrComputeCapabilityMinor,
    cudaDevAttrL2CacheSize,
    cudaDevAttrMaxThreadsPerMultiProcessor,
    cudaDevAttrMaxSharedMemoryPerBlockOptin,
    cudaDevAttrMaxRegistersPerBlock,
    cudaDevAttrPciBusId,
    cudaDevAttrCooperativeLaunch,
    cudaDevAttrMaxBlocksPerMultiprocessor,
    cudaDevAttrReservedSharedMemoryPerBlock,
};
constexpr int kAttributeCount = sizeof(kAttributes) / sizeof(kAttributes[0]);
constexpr int kLimitCount = 7;  // cudaLimitStackSize .. cudaLimitPersistingL2CacheSize
struct AttributeList {
  cudaDeviceAttr attributes[kAttributeCount];
};

__global__ void Ask(AttributeList list, int device, int* values, int* status, size_t* limits) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  for (int i = 0; i < kAttributeCount; ++i) {
    status[i] = static_cast<int>(cudaDeviceGetAttribute(&values[i], list.attributes[i], device));
  }
  int ignored = 0;
  status[kAttributeCount] = static_cast<int>(cudaDeviceGetAttribute(&ignored, static_cast<cudaDeviceAttr>(0), device));
  status[kAttributeCount + 1] =
      static_cast<int>(cudaDeviceGetAttribute(&ignored, cudaDevAttrMultiProcessorCount, device + 1));
  for (int i = 0; i < kLimitCount; ++i) {
    status[kAttributeCount + 2 + i] = static_cast<int>(cudaDeviceGetLimit(&limits[i], static_cast<cudaLimit>(i)));
  }
  size_t none = 0;
  status[kAttributeCount + 2 + kLimitCount] = static_cast<int>(cudaDeviceGetLimit(&none, static_cast<cudaLimit>(99)));
}

// What a grid launched from device code is told.
struct ChildAnswers {
  int status[2];
  int multiprocessors;
  size_t stack;
};

__global__ void AskAsAChild(int device, ChildAnswers* answers) {
  answers->status[0] =
      static_cast<int>(cudaDeviceGetAttribute(&answers->multiprocessors, cudaDevAttrMultiProcessorCount, device));
  answers->status[1] = static_cast<int>(cudaDeviceGetLimit(&answers->stack, cudaLimitStackSize));
}

__global__ void Parent(int device, ChildAnswers* answers, int* status) {
  if (threadIdx.x != 0) return;
  AskAsAChild<<<1, 1>>>(device, answers);
  status[0] = static_cast<int>(cudaGetLastError());
}

constexpr size_t kWidth = 20, kHeight = 6, kDepth = 4;  // the allocations: bytes, rows, slices
constexpr size_t kBoxWidth = 9, kBoxHeight = 3, kBoxDepth = 2;

// Copies the box at (3, 2, 1) of `from` to (5, 1, 2) of `to`, and the box at (0, 0, 0) of
// `from` into `packed` (linear memory, rows of kBoxWidth bytes, slices of kBoxHeight
// rows), with cudaMemcpy3DParms of the thread's own.
__device__ cudaPos Pos(size_t x, size_t y, size_t z) { return cudaPos{x, y, z}; }
__device__ cudaExtent Extent(size_t width, size_t height, size_t depth) { return cudaExtent{width, height, depth}; }

__global__ void Boxes(cudaPitchedPtr from, cudaPitchedPtr to, unsigned char* packed, int* status) {
  if (threadIdx.x != 0) return;
  cudaMemcpy3DParms p = {};
  p.srcPtr = from;
  p.srcPos = Pos(3, 2, 1);
  p.dstPtr = to;
  p.dstPos = Pos(5, 1, 2);
  p.extent = Extent(kBoxWidth, kBoxHeight, kBoxDepth);
  p.kind = cudaMemcpyDeviceToDevice;
  status[0] = static_cast<int>(cudaMemcpy3DAsync(&p, 0));
  cudaMemcpy3DParms q = {};
  q.srcPtr = from;
  q.dstPtr = cudaPitchedPtr{packed, kBoxWidth, kBoxWidth, kBoxHeight};
  q.extent = Extent(kBoxWidth, kBoxHeight, kBoxDepth);
  q.kind = cudaMemcpyDefault;
  status[1] = static_cast<int>(cudaMemcpy3DAsync(&q, cudaStreamFireAndForget));
}

__global__ void RefusedBoxes(cudaPitchedPtr from, cudaPitchedPtr to, bool with_array, int* status) {
  if (threadIdx.x != 0) return;
  cudaMemcpy3DParms p = {};
  p.srcPtr = from;
  p.dstPtr = to;
  p.dstPos = Pos(to.pitch - kBoxWidth + 1, 0, 0);  // its rows past the pitch
  p.extent = Extent(kBoxWidth, kBoxHeight, kBoxDepth);
  p.kind = cudaMemcpyDeviceToDevice;
  status[0] = static_cast<int>(cudaMemcpy3DAsync(&p, 0));
  p.dstPos = Pos(0, 0, 0);
  p.kind = cudaMemcpyHostToDevice;
  status[1] = static_cast<int>(cudaMemcpy3DAsync(&p, 0));
  if (with_array) {
    p.kind = cudaMemcpyDeviceToDevice;
    p.srcArray = reinterpret_cast<cudaArray_t>(from.ptr);  // the device runtime has no arrays
    status[2] = static_cast<int>(cudaMemcpy3DAsync(&p, 0));
  }
}

}  // namespace

int main() {
  DescribeDeviceExpectingModel();
  int device = -1;
  CHECK(cudaGetDevice(&device));
  // Limits set before the first kernel runs (a GPU sizes its heap then, the sim loads the
  // module then): what device code must say.
  CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 2048));
  CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, size_t{16} << 20));
  CHECK(cudaDeviceSetLimit(cudaLimitDevRuntimePendingLaunchCount, 4096));
  CHECK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, size_t{2} << 20));
  size_t host_limits[kLimitCount];
  for (int i = 0; i < kLimitCount; ++i) CHECK(cudaDeviceGetLimit(&host_limits[i], static_cast<cudaLimit>(i)));
  int host_values[kAttributeCount];
  for (int i = 0; i < kAttributeCount; ++i) CHECK(cudaDeviceGetAttribute(&host_values[i], kAttributes[i], device));

  int *values = nullptr, *status = nullptr;
  size_t* limits = nullptr;
  constexpr int kStatuses = kAttributeCount + 3 + kLimitCount;
  CHECK(cudaMalloc(&values, kAttributeCount * sizeof(int)));
  CHECK(cudaMalloc(&status, 64 * sizeof(int)));
  CHECK(cudaMalloc(&limits, kLimitCount * sizeof(size_t)));
  CHECK(cudaMemset(values, 0xff, kAttributeCount * sizeof(int)));
  CHECK(cudaMemset(status, 0xff, 64 * sizeof(int)));
  AttributeList list;
  std::memcpy(list.attributes, kAttributes, sizeof(kAttributes));
  Ask<<<1, 32>>>(list, device, values, status, limits);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int device_values[kAttributeCount], statuses[64];
  size_t device_limits[kLimitCount];
  CHECK(cudaMemcpy(device_values, values, sizeof(device_values), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(statuses, status, sizeof(statuses), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(device_limits, limits, sizeof(device_limits), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kAttributeCount; ++i) {
    if (statuses[i] != cudaSuccess || device_values[i] != host_values[i]) {
      std::printf("attribute %d: device code %d (status %d), host %d\n", static_cast<int>(kAttributes[i]),
                  device_values[i], statuses[i], host_values[i]);
    }
    EXPECT(statuses[i] == cudaSuccess);
    EXPECT(device_values[i] == host_values[i]);
  }
  std::printf("%d attributes as the host says them (%d SMs, compute capability %d.%d)\n", kAttributeCount,
              host_values[5], host_values[6], host_values[7]);
  std::printf("no attribute: %d, device %d: %d\n", statuses[kAttributeCount], device + 1,
              statuses[kAttributeCount + 1]);
  EXPECT(statuses[kAttributeCount] == cudaErrorInvalidValue);
  if (OnTheSim()) EXPECT(statuses[kAttributeCount + 1] == cudaErrorInvalidDevice);  // a GPU may have a second
  // Every limit on the sim; on a GPU those the device runtime documents.
  for (int i = 0; i < (OnTheSim() ? kLimitCount : 5); ++i) {
    if (statuses[kAttributeCount + 2 + i] != cudaSuccess || device_limits[i] != host_limits[i]) {
      std::printf("limit %d: device code %zu (status %d), host %zu\n", i, device_limits[i],
                  statuses[kAttributeCount + 2 + i], host_limits[i]);
    }
    EXPECT(statuses[kAttributeCount + 2 + i] == cudaSuccess);
    EXPECT(device_limits[i] == host_limits[i]);
  }
  std::printf("limits as the host set them: stack %zu, heap %zu, pending launches %zu; no limit: %d\n",
              device_limits[cudaLimitStackSize], device_limits[cudaLimitMallocHeapSize],
              device_limits[cudaLimitDevRuntimePendingLaunchCount], statuses[kAttributeCount + 2 + kLimitCount]);
  EXPECT(device_limits[cudaLimitMallocHeapSize] == size_t{16} << 20);
  EXPECT(device_limits[cudaLimitDevRuntimePendingLaunchCount] == 4096);
  EXPECT(statuses[kAttributeCount + 2 + kLimitCount] == cudaErrorUnsupportedLimit);
  static_assert(kStatuses <= 64);

  ChildAnswers* answers = nullptr;
  CHECK(cudaMalloc(&answers, sizeof(ChildAnswers)));
  CHECK(cudaMemset(answers, 0xff, sizeof(ChildAnswers)));
  CHECK(cudaMemset(status, 0xff, 64 * sizeof(int)));
  Parent<<<1, 32>>>(device, answers, status);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  ChildAnswers child{};
  CHECK(cudaMemcpy(&child, answers, sizeof(child), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(statuses, status, sizeof(statuses), cudaMemcpyDeviceToHost));
  std::printf("a child grid: %d SMs, stack %zu (statuses %d %d, launch %d)\n", child.multiprocessors, child.stack,
              child.status[0], child.status[1], statuses[0]);
  EXPECT(statuses[0] == cudaSuccess && child.status[0] == cudaSuccess && child.status[1] == cudaSuccess);
  EXPECT(child.multiprocessors == host_values[5]);
  EXPECT(child.stack == host_limits[cudaLimitStackSize]);

  // 3D copies between pitched allocations, and into linear memory.
  const cudaExtent extent = make_cudaExtent(kWidth, kHeight, kDepth);
  cudaPitchedPtr from{}, to{};
  CHECK(cudaMalloc3D(&from, extent));
  CHECK(cudaMalloc3D(&to, extent));
  const size_t bytes = from.pitch * kHeight * kDepth;
  std::vector<unsigned char> source(bytes);
  for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<unsigned char>(i * 13 + 5);
  CHECK(cudaMemcpy(from.ptr, source.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(to.ptr, 0x11, to.pitch * kHeight * kDepth));
  unsigned char* packed = nullptr;
  constexpr size_t kPacked = kBoxWidth * kBoxHeight * kBoxDepth;
  CHECK(cudaMalloc(&packed, kPacked + 16));
  CHECK(cudaMemset(packed, 0x22, kPacked + 16));
  CHECK(cudaMemset(status, 0xff, 64 * sizeof(int)));
  Boxes<<<1, 32>>>(from, to, packed, status);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> copied(to.pitch * kHeight * kDepth), linear(kPacked + 16);
  CHECK(cudaMemcpy(copied.data(), to.ptr, copied.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(linear.data(), packed, linear.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(statuses, status, sizeof(statuses), cudaMemcpyDeviceToHost));
  EXPECT(statuses[0] == cudaSuccess && statuses[1] == cudaSuccess);
  auto at = [](const cudaPitchedPtr& p, size_t x, size_t y, size_t z) { return (z * kHeight + y) * p.pitch + x; };
  for (size_t z = 0; z < kDepth; ++z) {
    for (size_t y = 0; y < kHeight; ++y) {
      for (size_t x = 0; x < to.pitch; ++x) {
        const bool in_box = x >= 5 && x < 5 + kBoxWidth && y >= 1 && y < 1 + kBoxHeight && z >= 2 && z < 2 + kBoxDepth;
        const unsigned char want = in_box ? source[at(from, x - 5 + 3, y - 1 + 2, z - 2 + 1)] : 0x11;
        EXPECT(copied[at(to, x, y, z)] == want);
      }
    }
  }
  for (size_t i = 0; i < kPacked + 16; ++i) {
    const size_t x = i % kBoxWidth, y = i / kBoxWidth % kBoxHeight, z = i / (kBoxWidth * kBoxHeight);
    EXPECT(linear[i] == (i < kPacked ? source[at(from, x, y, z)] : 0x22));
  }
  std::printf("3D copies: a box of %zux%zux%zu between pitched allocations (pitch %zu) and into linear memory\n",
              kBoxWidth, kBoxHeight, kBoxDepth, to.pitch);

  CHECK(cudaMemset(status, 0xff, 64 * sizeof(int)));
  CHECK(cudaMemset(to.ptr, 0x33, to.pitch * kHeight * kDepth));
  RefusedBoxes<<<1, 32>>>(from, to, OnTheSim(), status);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(statuses, status, sizeof(statuses), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(copied.data(), to.ptr, copied.size(), cudaMemcpyDeviceToHost));
  std::printf("refused: row past its pitch %d, from the host %d, an array %d\n", statuses[0], statuses[1], statuses[2]);
  if (OnTheSim()) {
    EXPECT(statuses[0] == cudaErrorInvalidPitchValue);
    EXPECT(statuses[1] == cudaErrorInvalidMemcpyDirection);
    EXPECT(statuses[2] == cudaErrorInvalidValue);
  } else {
    EXPECT(statuses[0] != cudaSuccess && statuses[1] != cudaSuccess);
  }
  for (unsigned char byte : copied) EXPECT(byte == 0x33);  // nothing was queued

  CHECK_FREE(values, status, limits, answers, from.ptr, to.ptr, packed);
  return FinishProgram("cdp_device_queries", true);
}

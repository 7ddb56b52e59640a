// Compute capability 9.0 launch features through the sim GPU (an H100 model) and, where the
// model is older, their refusal: programmatic dependent launch (a consumer launched with
// cudaLaunchAttributeProgrammaticStreamSerialization waits in cudaGridDependencySynchronize
// for the producer, which calls cudaTriggerProgrammaticLaunchCompletion: griddepcontrol),
// and cooperative groups' invoke_one and invoke_one_broadcast (elect.sync), in a warp and
// in a tiled partition. Exits 0 only if every result matches a CPU reference.
#include <cooperative_groups.h>

#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace cg = cooperative_groups;

namespace {

constexpr int kN = 1 << 16;

__global__ void Producer(float* data) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kN) data[i] = 0.5f * static_cast<float>(i);
  cudaTriggerProgrammaticLaunchCompletion();
}

__global__ void Consumer(const float* data, float* out) {
  cudaGridDependencySynchronize();  // the producer's writes are visible from here
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kN) out[i] = data[i] * 4.0f + 1.0f;
}

// One lane per warp (and per tile of 8) counts its group's threads into *counts; every lane
// writes the value its tile's elected lane broadcast.
__global__ void Elected(unsigned* counts, unsigned* broadcast) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  cg::invoke_one(warp, [&] { atomicAdd(&counts[0], warp.num_threads()); });
  cg::thread_block_tile<8> tile = cg::tiled_partition<8>(block);
  const unsigned value = cg::invoke_one_broadcast(tile, [&] { return 1000u * (threadIdx.x / 8) + threadIdx.x; });
  broadcast[threadIdx.x] = value;
  if (threadIdx.x % 3 == 0) {
    // Only the lanes that run it: a coalesced group of every third lane.
    cg::coalesced_group active = cg::coalesced_threads();
    cg::invoke_one(active, [&] { atomicAdd(&counts[1], 1u); });
  }
}

}  // namespace

int main() {
  const cudaDeviceProp properties = DescribeDeviceExpectingModel();
  float *data = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&data, kN * sizeof(float)));
  CHECK(cudaMalloc(&out, kN * sizeof(float)));
  unsigned *counts = nullptr, *broadcast = nullptr;
  CHECK(cudaMalloc(&counts, 2 * sizeof(unsigned)));
  CHECK(cudaMalloc(&broadcast, 128 * sizeof(unsigned)));
  if (properties.major < 9) {
    // The sm_90 code has nothing to run on: an error, nothing sticky.
    Producer<<<kN / 256, 256>>>(data);
    const cudaError_t refused = cudaGetLastError();
    std::printf("sm_90 code on %d.%d: %s\n", properties.major, properties.minor, cudaGetErrorName(refused));
    EXPECT(refused != cudaSuccess);
    CHECK(cudaDeviceSynchronize());
    std::printf("PASS\n");
    return 0;
  }

  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  for (int round = 0; round < 3; ++round) {
    CHECK(cudaMemsetAsync(out, 0, kN * sizeof(float), stream));
    Producer<<<kN / 256, 256, 0, stream>>>(data);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(kN / 256);
    config.blockDim = dim3(256);
    config.stream = stream;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&config, Consumer, static_cast<const float*>(data), out));
    std::vector<float> got(kN);
    CHECK(cudaMemcpyAsync(got.data(), out, kN * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    int wrong = 0;
    for (int i = 0; i < kN; ++i) wrong += got[i] != 0.5f * static_cast<float>(i) * 4.0f + 1.0f;
    EXPECT(wrong == 0);
    if (round == 0) std::printf("dependent launch: %d of %d wrong, out[1000] = %g\n", wrong, kN, got[1000]);
  }

  CHECK(cudaMemset(counts, 0, 2 * sizeof(unsigned)));
  Elected<<<1, 128>>>(counts, broadcast);
  CHECK(cudaGetLastError());
  unsigned got_counts[2];
  std::vector<unsigned> got_broadcast(128);
  CHECK(cudaMemcpy(got_counts, counts, sizeof(got_counts), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_broadcast.data(), broadcast, 128 * sizeof(unsigned), cudaMemcpyDeviceToHost));
  std::printf("invoke_one: %u threads counted by the warps' leaders, %u coalesced groups; tile 3 got %u\n",
              got_counts[0], got_counts[1], got_broadcast[24]);
  EXPECT(got_counts[0] == 128);  // 4 warps, each counted once by one lane
  EXPECT(got_counts[1] == 4);    // one coalesced group per warp
  for (unsigned t = 0; t < 128; ++t) EXPECT(got_broadcast[t] == 1000u * (t / 8) + t / 8 * 8);
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(data));
  CHECK(cudaFree(out));
  CHECK(cudaFree(counts));
  CHECK(cudaFree(broadcast));
  std::printf("PASS\n");
  return 0;
}

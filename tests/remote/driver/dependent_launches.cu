// Compute capability 9.0 launch features through the sim GPU (an H100 model) and, where the
// model is older, their refusal: programmatic dependent launch (a consumer launched with
// cudaLaunchAttributeProgrammaticStreamSerialization waits in cudaGridDependencySynchronize
// for the producer, which calls cudaTriggerProgrammaticLaunchCompletion: griddepcontrol),
// cooperative groups' invoke_one and invoke_one_broadcast (elect.sync), in a warp and in a
// tiled partition, and stmatrix (plain and transposed) read back by ldmatrix and checked
// element by element. Exits 0 only if every result matches a CPU reference.
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

// Each lane's four registers stored as four 8x8 matrices of 16-bit elements (stmatrix .x4,
// then .x4.trans into a second tile), the tiles copied out, and read back with ldmatrix.
__global__ void StoreMatrices(uint16_t* tiles, uint32_t* back) {
  __shared__ alignas(16) uint16_t plain[4 * 64];
  __shared__ alignas(16) uint16_t transposed[4 * 64];
  const unsigned lane = threadIdx.x;
  uint32_t r[4];
  for (int j = 0; j < 4; ++j) r[j] = (lane * 4 + j) * 0x00020002u + 0x00010000u;  // halves 2k and 2k+1
  // Lane 8j + i gives row i of matrix j.
  const uint32_t row_plain = static_cast<uint32_t>(__cvta_generic_to_shared(plain + lane * 8));
  const uint32_t row_transposed = static_cast<uint32_t>(__cvta_generic_to_shared(transposed + lane * 8));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row_plain), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3]));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row_transposed),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
  __syncwarp();
  for (int i = lane; i < 4 * 64; i += 32) {
    tiles[i] = plain[i];
    tiles[4 * 64 + i] = transposed[i];
  }
  uint32_t again[4];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(again[0]), "=r"(again[1]), "=r"(again[2]), "=r"(again[3])
               : "r"(row_plain));
  for (int j = 0; j < 4; ++j) back[lane * 4 + j] = again[j] == r[j];
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
    Producer<<<kN / 256, 256>>>(data);
    ExpectNoCodeForAnOlderGpu(properties, cudaGetLastError());
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
  // stmatrix: lane l's register j holds elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1)
  // of matrix j (of its transpose with .trans), as ldmatrix gives them.
  uint16_t* tiles = nullptr;
  uint32_t* back = nullptr;
  CHECK(cudaMalloc(&tiles, 2 * 4 * 64 * sizeof(uint16_t)));
  CHECK(cudaMalloc(&back, 128 * sizeof(uint32_t)));
  StoreMatrices<<<1, 32>>>(tiles, back);
  CHECK(cudaGetLastError());
  std::vector<uint16_t> got_tiles(2 * 4 * 64);
  std::vector<uint32_t> got_back(128);
  CHECK(cudaMemcpy(got_tiles.data(), tiles, got_tiles.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_back.data(), back, got_back.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (unsigned j = 0; j < 4; ++j) {
    for (unsigned row = 0; row < 8; ++row) {
      for (unsigned col = 0; col < 8; ++col) {
        const unsigned lane = row * 4 + col / 2;
        const uint32_t word = (lane * 4 + j) * 0x00020002u + 0x00010000u;
        const uint16_t want = static_cast<uint16_t>(word >> (16 * (col % 2)));
        wrong += got_tiles[j * 64 + row * 8 + col] != want;
        wrong += got_tiles[4 * 64 + j * 64 + col * 8 + row] != want;  // .trans: the transpose
      }
    }
  }
  for (unsigned i = 0; i < 128; ++i) wrong += got_back[i] != 1;
  std::printf("stmatrix .x4 and .x4.trans, read back by ldmatrix: %d wrong\n", wrong);
  EXPECT(wrong == 0);
  CHECK(cudaFree(tiles));
  CHECK(cudaFree(back));

  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(data));
  CHECK(cudaFree(out));
  CHECK(cudaFree(counts));
  CHECK(cudaFree(broadcast));
  std::printf("PASS\n");
  return 0;
}

// __managed__ variables as programs use them: one variable, read and written by name from
// host code and from kernels, with no copies. The host changes them between launches, a
// kernel accumulates into them, the host reads them after a synchronisation; again and
// again. A __device__ variable beside them (in the same page of the module's globals)
// keeps what kernels wrote while the host changes its managed neighbours; the managed
// variables take cudaMemcpyToSymbol and report themselves managed.
#include <cstdio>

#include "../programs/check.h"

struct Stats {
  int count;
  double sum;
  float last[4];
};

__managed__ int counter = 5;
__managed__ float table[64];
__managed__ Stats stats = {0, 0.0, {0, 0, 0, 0}};
__device__ int device_only = 0;

__global__ void Accumulate(int round) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 64) table[i] = table[i] * 2.0f + static_cast<float>(round);
  if (i == 0) {
    atomicAdd(&counter, round);
    stats.count += 1;
    stats.sum += counter;
    stats.last[round % 4] = table[1];
    device_only += 10;
  }
}

int main() {
  // The first touch from the host: cudart makes the variables managed here.
  EXPECT(counter == 5);
  for (int i = 0; i < 64; ++i) table[i] = static_cast<float>(i);
  float expected[64];
  for (int i = 0; i < 64; ++i) expected[i] = static_cast<float>(i);
  int expected_counter = 5;
  Stats want = {0, 0.0, {0, 0, 0, 0}};
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  for (int round = 1; round <= 20; ++round) {
    // Host changes between launches reach the kernel.
    counter += 100;
    expected_counter += 100;
    table[round % 64] += 1.0f;
    expected[round % 64] += 1.0f;
    if (round % 2) {
      Accumulate<<<2, 32>>>(round);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
    } else {
      Accumulate<<<2, 32, 0, stream>>>(round);
      CHECK(cudaGetLastError());
      CHECK(cudaStreamSynchronize(stream));
    }
    for (int i = 0; i < 64; ++i) expected[i] = expected[i] * 2.0f + static_cast<float>(round);
    expected_counter += round;
    want.count += 1;
    want.sum += expected_counter;
    want.last[round % 4] = expected[1];
    EXPECT(counter == expected_counter);
    for (int i = 0; i < 64; ++i) EXPECT(table[i] == expected[i]);
    EXPECT(stats.count == want.count && stats.sum == want.sum);
    for (int k = 0; k < 4; ++k) EXPECT(stats.last[k] == want.last[k]);
  }
  int device_value = 0;
  CHECK(cudaMemcpyFromSymbol(&device_value, device_only, sizeof(device_value)));
  EXPECT(device_value == 200);

  // Copies by symbol reach the same bytes the host sees.
  const int fresh = 4242;
  CHECK(cudaMemcpyToSymbol(counter, &fresh, sizeof(fresh)));
  CHECK(cudaDeviceSynchronize());
  EXPECT(counter == fresh);
  void* address = nullptr;
  CHECK(cudaGetSymbolAddress(&address, counter));
  EXPECT(address == static_cast<void*>(&counter));
  cudaPointerAttributes attributes{};
  CHECK(cudaPointerGetAttributes(&attributes, &counter));
  EXPECT(attributes.type == cudaMemoryTypeManaged);
  CHECK(cudaMemPrefetchAsync(table, sizeof(table), cudaMemLocation{cudaMemLocationTypeDevice, 0}, 0, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaStreamDestroy(stream));
  std::printf("managed_variables: OK (counter %d, table[1] %g, %d rounds)\n", counter, table[1], stats.count);
  return 0;
}

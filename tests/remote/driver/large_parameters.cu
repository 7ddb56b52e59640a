// Kernel parameters of up to 32,764 bytes (CUDA 12.1 on, as the CUDA samples'
// LargeKernelParameter passes them): a 32,000-byte struct by value (__grid_constant__)
// beside a pointer, and a 4,000-byte one, the old limit's side. The compiler describes a
// kernel of more than 4 KiB of parameters with another record than smaller ones
// (EIATTR_KPARAM_INFO_V2); the library read only the old one and launched the large
// kernel with no parameters, which failed on the agent.
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace {

constexpr int kLargeInts = 8000;  // 32,000 bytes
struct Large {
  int values[kLargeInts];
};
constexpr int kSmallInts = 1000;  // 4,000 bytes
struct Small {
  int values[kSmallInts];
};

__global__ void SumLarge(__grid_constant__ const Large large, long long* sum, int* last) {
  long long total = 0;
  for (int i = 0; i < kLargeInts; ++i) total += large.values[i];
  *sum = total;
  *last = large.values[kLargeInts - 1];
}

__global__ void PickSmall(Small small, int* out) { out[threadIdx.x] = small.values[(threadIdx.x * 7) % kSmallInts]; }

}  // namespace

int main() {
  auto* large = new Large;
  long long want = 0;
  for (int i = 0; i < kLargeInts; ++i) {
    large->values[i] = (i * 31) % 997 - 400;
    want += large->values[i];
  }
  long long* sum;
  int* last;
  CHECK(cudaMalloc(&sum, sizeof(long long)));
  CHECK(cudaMalloc(&last, sizeof(int)));
  SumLarge<<<1, 1>>>(*large, sum, last);
  CHECK(cudaGetLastError());
  long long got = 0;
  int got_last = 0;
  CHECK(cudaMemcpy(&got, sum, sizeof(got), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&got_last, last, sizeof(got_last), cudaMemcpyDeviceToHost));
  std::printf("32,000-byte parameter: sum %lld (want %lld), last %d\n", got, want, got_last);
  EXPECT(got == want);
  EXPECT(got_last == large->values[kLargeInts - 1]);

  Small small;
  for (int i = 0; i < kSmallInts; ++i) small.values[i] = i * 3 + 1;
  int* out;
  CHECK(cudaMalloc(&out, 128 * sizeof(int)));
  PickSmall<<<1, 128>>>(small, out);
  CHECK(cudaGetLastError());
  std::vector<int> picked(128);
  CHECK(cudaMemcpy(picked.data(), out, 128 * sizeof(int), cudaMemcpyDeviceToHost));
  for (int t = 0; t < 128; ++t) EXPECT(picked[t] == small.values[(t * 7) % kSmallInts]);
  delete large;
  std::printf("PASS\n");
  return 0;
}

// Dynamic parallelism (CUDA 12's device runtime, built with -rdc=true -lcudadevrt): kernels
// that launch kernels, as the CUDA samples' cdp* programs do. Each child writes what its
// parent handed it; a recursive launch tree counts its nodes per level; a tail launch
// finds every sibling launched before it complete; children go into a stream the parent
// created and into the fire-and-forget stream; device-side cudaMalloc and cudaFree; a
// launch with a bad block shape returns its error to the launching thread. Every result
// is checked against what the host computes.
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace {

constexpr int kParents = 8;
constexpr int kChildThreads = 16;
constexpr int kMaxLevel = 5;
constexpr int kSiblings = 4;

__global__ void Child(int* out, int base, int scale) {
  out[base + threadIdx.x] = scale * (base + static_cast<int>(threadIdx.x));
}

__global__ void Parent(int* out, int* errors) {
  if (threadIdx.x != 0) return;
  Child<<<1, kChildThreads>>>(out, blockIdx.x * kChildThreads, 3);
  errors[blockIdx.x] = static_cast<int>(cudaGetLastError());
}

// Each node counts itself at its level and launches two children, until kMaxLevel.
__global__ void Node(int* per_level, int level) {
  atomicAdd(&per_level[level], 1);
  if (threadIdx.x == 0 && level < kMaxLevel) Node<<<2, 1>>>(per_level, level + 1);
}

__global__ void Sibling(int* slots, int which) {
  if (threadIdx.x == 0) slots[which] = 100 + which;
}

// Runs after the grid that launched it and every sibling launched before it.
__global__ void SumSlots(const int* slots, int* sum) {
  int total = 0;
  for (int i = 0; i < kSiblings; ++i) total += slots[i];
  *sum = total;
}

__global__ void Fan(int* slots, int* sum, int* status) {
  cudaStream_t stream;
  status[0] = static_cast<int>(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Sibling<<<1, 32, 0, stream>>>(slots, 0);
  Sibling<<<1, 32>>>(slots, 1);
  Sibling<<<1, 32, 0, cudaStreamFireAndForget>>>(slots, 2);
  Sibling<<<1, 32, 0, stream>>>(slots, 3);
  SumSlots<<<1, 1, 0, cudaStreamTailLaunch>>>(slots, sum);
  status[1] = static_cast<int>(cudaStreamDestroy(stream));
  // A block of 2048 threads: the launch fails, and says so to this thread.
  Sibling<<<1, 2048>>>(slots, 0);
  status[2] = static_cast<int>(cudaGetLastError());
  int* scratch = nullptr;
  status[3] = static_cast<int>(cudaMalloc(&scratch, 64 * sizeof(int)));
  if (scratch != nullptr) {
    for (int i = 0; i < 64; ++i) scratch[i] = i;
    int total = 0;
    for (int i = 0; i < 64; ++i) total += scratch[i];
    status[4] = total;
    status[5] = static_cast<int>(cudaFree(scratch));
  }
}

}  // namespace

int main() {
  int *out = nullptr, *errors = nullptr;
  CHECK(cudaMalloc(&out, kParents * kChildThreads * sizeof(int)));
  CHECK(cudaMalloc(&errors, kParents * sizeof(int)));
  CHECK(cudaMemset(out, 0, kParents * kChildThreads * sizeof(int)));
  CHECK(cudaMemset(errors, 0xff, kParents * sizeof(int)));
  Parent<<<kParents, 32>>>(out, errors);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<int> values(kParents * kChildThreads), launch_errors(kParents);
  CHECK(cudaMemcpy(values.data(), out, values.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(launch_errors.data(), errors, kParents * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kParents * kChildThreads; ++i) EXPECT(values[i] == 3 * i);
  for (int e : launch_errors) EXPECT(e == cudaSuccess);

  int* per_level = nullptr;
  CHECK(cudaMalloc(&per_level, (kMaxLevel + 1) * sizeof(int)));
  CHECK(cudaMemset(per_level, 0, (kMaxLevel + 1) * sizeof(int)));
  Node<<<1, 1>>>(per_level, 0);
  CHECK(cudaDeviceSynchronize());
  std::vector<int> levels(kMaxLevel + 1);
  CHECK(cudaMemcpy(levels.data(), per_level, levels.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int level = 0; level <= kMaxLevel; ++level) EXPECT(levels[level] == (1 << level));

  int *slots = nullptr, *sum = nullptr, *status = nullptr;
  CHECK(cudaMalloc(&slots, kSiblings * sizeof(int)));
  CHECK(cudaMalloc(&sum, sizeof(int)));
  CHECK(cudaMalloc(&status, 6 * sizeof(int)));
  CHECK(cudaMemset(slots, 0, kSiblings * sizeof(int)));
  CHECK(cudaMemset(status, 0xff, 6 * sizeof(int)));
  Fan<<<1, 1>>>(slots, sum, status);
  CHECK(cudaDeviceSynchronize());
  int total = 0, statuses[6];
  CHECK(cudaMemcpy(&total, sum, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(statuses, status, sizeof(statuses), cudaMemcpyDeviceToHost));
  EXPECT(total == 4 * 100 + 0 + 1 + 2 + 3);
  EXPECT(statuses[0] == cudaSuccess && statuses[1] == cudaSuccess);
  std::printf("bad device-side launch: %s\n", cudaGetErrorName(static_cast<cudaError_t>(statuses[2])));
  EXPECT(statuses[2] == cudaErrorInvalidConfiguration);
  EXPECT(statuses[3] == cudaSuccess && statuses[4] == 64 * 63 / 2 && statuses[5] == cudaSuccess);

  CHECK_FREE(out, errors, per_level, slots, sum, status);
  std::printf("dynamic parallelism: PASS\n");
  return 0;
}

// Dynamic parallelism's named streams (CUDA 12's device runtime, -rdc=true -lcudadevrt),
// as the CUDA programming guide defines them, each result checked against the host's:
//   - a chain of 40 grids, each tail-launched by the one before it into
//     cudaStreamTailLaunch, each reading what the one before wrote (a tail launch runs
//     after the grid that launched it completes, and takes its place: a chain of tail
//     launches is not nested, so it may be longer than the nesting limit of 24);
//   - a tail launch made by one block of a grid of 8 sees every block's writes, and every
//     grid its parent sent into cudaStreamFireAndForget or into a stream of its own;
//   - tail launches run in the order made, and one made by a tail-launched grid runs
//     before the next tail launch of the grid above (a grid is complete when its tail is);
//   - fire-and-forget grids finish before their parent's grid is complete to the host;
//   - a grid in one device-side stream waits for one in another through an event
//     (cudaEventCreateWithFlags, cudaEventRecord, cudaStreamWaitEvent, cudaEventDestroy);
//   - ordinary nesting stops at the driver's limit with cudaErrorLaunchMaxDepthExceeded,
//     said to the launching thread, and the host's synchronisation still succeeds.
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace {

constexpr int kChainLength = 40;
constexpr int kChainThreads = 64;
constexpr int kBlocks = 8;
constexpr int kForgotten = 6;
constexpr int kMaxDepth = 24;  // cudaErrorLaunchMaxDepthExceeded beyond (CUDA's limit)

// Step `step` of the chain: out[step] = 3 * out[step - 1] + step, per thread; then the
// next step, tail-launched.
__global__ void ChainStep(unsigned* out, int step, int* launch_errors) {
  const int t = threadIdx.x;
  out[step * kChainThreads + t] = 3u * out[(step - 1) * kChainThreads + t] + static_cast<unsigned>(step);
  if (t == 0 && step + 1 < kChainLength) {
    ChainStep<<<1, kChainThreads, 0, cudaStreamTailLaunch>>>(out, step + 1, launch_errors);
    launch_errors[step] = static_cast<int>(cudaGetLastError());
  }
}

__global__ void WriteSlot(int* slots, int which, int value) {
  if (threadIdx.x == 0) slots[which] = value;
}

// Sums what every block of its parent and every grid its parent launched wrote.
__global__ void SumAll(const int* slots, int count, int* sum) {
  int total = 0;
  for (int i = 0; i < count; ++i) total += slots[i];
  *sum = total;
}

// Each block writes its slot after a delay that makes block 0 (which launches the tail)
// finish first; block 0 also sends grids into the fire-and-forget stream and a stream of
// its own.
__global__ void Gather(int* slots, int* sum, int* status) {
  if (threadIdx.x != 0) return;
  volatile int spin = 0;
  for (int i = 0; i < 200 * static_cast<int>(blockIdx.x); ++i) spin = spin + 1;
  slots[blockIdx.x] = 1000 + static_cast<int>(blockIdx.x);
  if (blockIdx.x != 0) return;
  for (int i = 0; i < kForgotten; ++i) {
    WriteSlot<<<1, 32, 0, cudaStreamFireAndForget>>>(slots, kBlocks + i, 10 * (i + 1));
  }
  cudaStream_t own;
  status[0] = static_cast<int>(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  WriteSlot<<<1, 32, 0, own>>>(slots, kBlocks + kForgotten, 7);
  status[1] = static_cast<int>(cudaStreamDestroy(own));
  SumAll<<<1, 1, 0, cudaStreamTailLaunch>>>(slots, kBlocks + kForgotten + 1, sum);
  status[2] = static_cast<int>(cudaGetLastError());
}

__device__ void Note(int* log, int value) { log[1 + atomicAdd(log, 1)] = value; }

__global__ void Noted(int* log, int value, bool tail_again) {
  Note(log, value);
  if (tail_again) Noted<<<1, 1, 0, cudaStreamTailLaunch>>>(log, value * 10 + 1, false);
}

// The tail launches' order: 1, then 1's own tail (11), then 2 and 3; the fire-and-forget
// grid (5) and the ordinary child (4) run before any of them.
__global__ void Ordered(int* log) {
  Note(log, 0);
  Noted<<<1, 1, 0, cudaStreamTailLaunch>>>(log, 1, true);
  Noted<<<1, 1, 0, cudaStreamTailLaunch>>>(log, 2, false);
  Noted<<<1, 1>>>(log, 4, false);
  Noted<<<1, 1, 0, cudaStreamTailLaunch>>>(log, 3, false);
  Noted<<<1, 1, 0, cudaStreamFireAndForget>>>(log, 5, false);
}

__global__ void CopySlot(const int* from, int* to) { *to = *from; }

// A grid in one stream waits, through an event, for a grid in another.
__global__ void Handoff(int* cell, int* copy, int* status) {
  cudaStream_t first, second;
  cudaEvent_t written;
  status[0] = static_cast<int>(cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking));
  status[1] = static_cast<int>(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking));
  status[2] = static_cast<int>(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
  WriteSlot<<<1, 32, 0, first>>>(cell, 0, 77);
  status[3] = static_cast<int>(cudaEventRecord(written, first));
  status[4] = static_cast<int>(cudaStreamWaitEvent(second, written, 0));
  CopySlot<<<1, 1, 0, second>>>(cell, copy);
  status[5] = static_cast<int>(cudaEventDestroy(written));
  cudaStreamDestroy(first);
  cudaStreamDestroy(second);
}

// Nests ordinary launches until the device runtime refuses one; records where and why.
__global__ void Nest(int depth, int* deepest, int* refused_at, int* refusal) {
  atomicMax(deepest, depth);
  Nest<<<1, 1>>>(depth + 1, deepest, refused_at, refusal);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    *refused_at = depth;
    *refusal = static_cast<int>(error);
  }
}

}  // namespace

int main() {
  // The chain.
  unsigned* chain = nullptr;
  int* chain_errors = nullptr;
  CHECK(cudaMalloc(&chain, kChainLength * kChainThreads * sizeof(unsigned)));
  CHECK(cudaMalloc(&chain_errors, kChainLength * sizeof(int)));
  CHECK(cudaMemset(chain_errors, 0xff, kChainLength * sizeof(int)));
  std::vector<unsigned> first(kChainThreads);
  for (int t = 0; t < kChainThreads; ++t) first[t] = static_cast<unsigned>(t * 7 + 1);
  CHECK(cudaMemcpy(chain, first.data(), first.size() * sizeof(unsigned), cudaMemcpyHostToDevice));
  ChainStep<<<1, kChainThreads>>>(chain, 1, chain_errors);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned> steps(kChainLength * kChainThreads);
  std::vector<int> step_errors(kChainLength);
  CHECK(cudaMemcpy(steps.data(), chain, steps.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(step_errors.data(), chain_errors, step_errors.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int t = 0; t < kChainThreads; ++t) {
    unsigned expected = first[t];
    for (int step = 1; step < kChainLength; ++step) {
      expected = 3u * expected + static_cast<unsigned>(step);
      EXPECT(steps[step * kChainThreads + t] == expected);
    }
  }
  for (int step = 1; step + 1 < kChainLength; ++step) EXPECT(step_errors[step] == cudaSuccess);
  std::printf("tail-launch chain of %d grids: checked\n", kChainLength);

  // The gather.
  int *slots = nullptr, *sum = nullptr, *status = nullptr;
  const int slot_count = kBlocks + kForgotten + 1;
  CHECK(cudaMalloc(&slots, slot_count * sizeof(int)));
  CHECK(cudaMalloc(&sum, sizeof(int)));
  CHECK(cudaMalloc(&status, 3 * sizeof(int)));
  CHECK(cudaMemset(slots, 0, slot_count * sizeof(int)));
  CHECK(cudaMemset(status, 0xff, 3 * sizeof(int)));
  Gather<<<kBlocks, 32>>>(slots, sum, status);
  CHECK(cudaDeviceSynchronize());
  int total = 0, statuses[3];
  std::vector<int> slot_values(slot_count);
  CHECK(cudaMemcpy(&total, sum, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(statuses, status, sizeof(statuses), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(slot_values.data(), slots, slot_count * sizeof(int), cudaMemcpyDeviceToHost));
  int expected_total = 7;
  for (int b = 0; b < kBlocks; ++b) expected_total += 1000 + b;
  for (int i = 0; i < kForgotten; ++i) {
    expected_total += 10 * (i + 1);
    EXPECT(slot_values[kBlocks + i] == 10 * (i + 1));  // complete when the parent is
  }
  std::printf("tail launch after a grid of %d blocks: sum %d (expected %d)\n", kBlocks, total, expected_total);
  EXPECT(total == expected_total);
  EXPECT(statuses[0] == cudaSuccess && statuses[1] == cudaSuccess && statuses[2] == cudaSuccess);

  // The order.
  int* log = nullptr;
  CHECK(cudaMalloc(&log, 16 * sizeof(int)));
  CHECK(cudaMemset(log, 0, 16 * sizeof(int)));
  Ordered<<<1, 1>>>(log);
  CHECK(cudaDeviceSynchronize());
  int order[16];
  CHECK(cudaMemcpy(order, log, sizeof(order), cudaMemcpyDeviceToHost));
  std::printf("order:");
  for (int i = 0; i < order[0] && i < 15; ++i) std::printf(" %d", order[1 + i]);
  std::printf("\n");
  EXPECT(order[0] == 7);
  EXPECT(order[1] == 0);
  // The ordinary child and the fire-and-forget grid in either order, then the tails.
  EXPECT((order[2] == 4 && order[3] == 5) || (order[2] == 5 && order[3] == 4));
  EXPECT(order[4] == 1 && order[5] == 11 && order[6] == 2 && order[7] == 3);

  // Events between device-side streams.
  int *cell = nullptr, *copy = nullptr, *handoff = nullptr;
  CHECK(cudaMalloc(&cell, sizeof(int)));
  CHECK(cudaMalloc(&copy, sizeof(int)));
  CHECK(cudaMalloc(&handoff, 6 * sizeof(int)));
  CHECK(cudaMemset(cell, 0, sizeof(int)));
  CHECK(cudaMemset(copy, 0, sizeof(int)));
  CHECK(cudaMemset(handoff, 0xff, 6 * sizeof(int)));
  Handoff<<<1, 1>>>(cell, copy, handoff);
  CHECK(cudaDeviceSynchronize());
  int copied = 0, handoff_status[6];
  CHECK(cudaMemcpy(&copied, copy, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(handoff_status, handoff, sizeof(handoff_status), cudaMemcpyDeviceToHost));
  EXPECT(copied == 77);
  for (int status_value : handoff_status) EXPECT(status_value == cudaSuccess);

  // The nesting limit.
  int *deepest = nullptr, *refused_at = nullptr, *refusal = nullptr;
  CHECK(cudaMalloc(&deepest, sizeof(int)));
  CHECK(cudaMalloc(&refused_at, sizeof(int)));
  CHECK(cudaMalloc(&refusal, sizeof(int)));
  CHECK(cudaMemset(deepest, 0, sizeof(int)));
  CHECK(cudaMemset(refused_at, 0xff, sizeof(int)));
  CHECK(cudaMemset(refusal, 0, sizeof(int)));
  Nest<<<1, 1>>>(0, deepest, refused_at, refusal);
  CHECK(cudaDeviceSynchronize());
  int deepest_value = 0, refused_value = 0, refusal_value = 0;
  CHECK(cudaMemcpy(&deepest_value, deepest, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&refused_value, refused_at, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&refusal_value, refusal, sizeof(int), cudaMemcpyDeviceToHost));
  std::printf("nesting: deepest grid %d, launch refused at depth %d with %s\n", deepest_value, refused_value,
              cudaGetErrorName(static_cast<cudaError_t>(refusal_value)));
  EXPECT(refusal_value == cudaErrorLaunchMaxDepthExceeded);
  EXPECT(deepest_value == refused_value);
  if (OnTheSim()) EXPECT(deepest_value == kMaxDepth - 1);

  CHECK_FREE(chain, chain_errors, slots, sum, status, log, deepest, refused_at, refusal, cell, copy, handoff);
  std::printf("tail launch: PASS\n");
  return 0;
}

// The device runtime's pending-launch limit (cudaLimitDevRuntimePendingLaunchCount,
// -rdc=true -lcudadevrt): its default is 2048; set lower before the first kernel runs, a
// thread that launches more grids than that gets cudaErrorLaunchPendingCountExceeded from
// the launches beyond it (on the sim exactly those past the limit, since a grid's children
// run after it; on a GPU children may start sooner and free their places), every launch
// that succeeded runs, and the host's synchronisation still succeeds: the kernel, not the
// GPU, was refused.
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace {

constexpr size_t kLimit = 100;
constexpr int kLaunches = 400;

__global__ void Tick(int* ran) { atomicAdd(ran, 1); }

__global__ void Flood(int launches, int* errors, int* ran) {
  for (int i = 0; i < launches; ++i) {
    Tick<<<1, 1>>>(ran);
    errors[i] = static_cast<int>(cudaGetLastError());
  }
}

}  // namespace

int main() {
  DescribeDeviceExpectingModel();
  size_t pending = 0;
  CHECK(cudaDeviceGetLimit(&pending, cudaLimitDevRuntimePendingLaunchCount));
  std::printf("default pending launch count: %zu\n", pending);
  EXPECT(pending == 2048);
  CHECK(cudaDeviceSetLimit(cudaLimitDevRuntimePendingLaunchCount, kLimit));
  CHECK(cudaDeviceGetLimit(&pending, cudaLimitDevRuntimePendingLaunchCount));
  EXPECT(pending == kLimit);

  int *errors = nullptr, *ran = nullptr;
  CHECK(cudaMalloc(&errors, kLaunches * sizeof(int)));
  CHECK(cudaMalloc(&ran, sizeof(int)));
  CHECK(cudaMemset(errors, 0xff, kLaunches * sizeof(int)));
  CHECK(cudaMemset(ran, 0, sizeof(int)));
  Flood<<<1, 1>>>(kLaunches, errors, ran);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<int> got(kLaunches);
  int ran_count = -1;
  CHECK(cudaMemcpy(got.data(), errors, got.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&ran_count, ran, sizeof(int), cudaMemcpyDeviceToHost));
  int succeeded = 0, exceeded = 0, first_exceeded = -1;
  for (int i = 0; i < kLaunches; ++i) {
    if (got[i] == cudaSuccess) ++succeeded;
    if (got[i] == cudaErrorLaunchPendingCountExceeded) {
      ++exceeded;
      if (first_exceeded < 0) first_exceeded = i;
    }
  }
  std::printf("%d launches: %d succeeded, %d cudaErrorLaunchPendingCountExceeded (first at %d); %d ran\n", kLaunches,
              succeeded, exceeded, first_exceeded, ran_count);
  EXPECT(succeeded + exceeded == kLaunches);
  EXPECT(succeeded >= static_cast<int>(kLimit));
  EXPECT(ran_count == succeeded);
  if (OnTheSim()) {
    EXPECT(first_exceeded == static_cast<int>(kLimit));
    EXPECT(exceeded == kLaunches - static_cast<int>(kLimit));
  }
  CHECK_FREE(errors, ran);
  return FinishProgram("cdp_pending_launches", true);
}

// A kernel that never ends: it waits for a flag nobody sets. Prints "spinning" once the
// launch is queued, then synchronizes for ever (the job is cancelled under it).
#include <cstdio>

#include "../programs/check.h"

__global__ void spin(volatile int* flag) {
  while (*flag == 0) {
  }
}

int main() {
  int* flag = nullptr;
  CHECK(cudaMalloc(&flag, sizeof(int)));
  CHECK(cudaMemset(flag, 0, sizeof(int)));
  spin<<<1, 1>>>(flag);
  CHECK(cudaGetLastError());
  std::printf("endless_kernel: spinning\n");
  std::fflush(stdout);
  cudaError_t status = cudaDeviceSynchronize();
  std::printf("endless_kernel: the synchronize returned %d\n", static_cast<int>(status));
  return 1;
}

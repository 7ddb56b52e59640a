// For failover_together.sh --mode exit: the process exits while one of its GPUs still
// recovers in the background. Two devices get state; then only device 0 is driven (a
// memset and a byte read back each iteration), and the program exits without calling
// device 1 again. The tests kill the agent of both and name a replacement for device 0
// only, so device 1's recovery (started by device 0's) is still waiting for one at exit:
// the exit must neither hang nor crash.
//
//   exit_while_recovering [ITERATIONS [MS_BETWEEN]]   (defaults 100 20)
//
// Prints "exit_while_recovering: running" once some iterations are done, then
// "exit_while_recovering: PASS" as it exits.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "check.h"

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 100;
  const int pause_ms = argc > 2 ? std::atoi(argv[2]) : 20;
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  if (count < 2) {
    std::printf("exit_while_recovering: FAIL: %d device(s), needs 2\n", count);
    return 1;
  }
  constexpr size_t kBytes = 1 << 20;
  unsigned char* data[2] = {nullptr, nullptr};
  for (int d = 0; d < 2; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMalloc(&data[d], kBytes));
    CHECK(cudaMemset(data[d], d + 1, kBytes));
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaSetDevice(0));
  for (int it = 1; it <= iterations; ++it) {
    CHECK(cudaMemset(data[0], it & 0xff, kBytes));
    unsigned char back = 0;
    CHECK(cudaMemcpy(&back, data[0] + (it * 4099) % kBytes, 1, cudaMemcpyDeviceToHost));
    if (back != (it & 0xff)) {
      std::printf("exit_while_recovering: FAIL at iteration %d: %u, expected %u\n", it, back, it & 0xff);
      return 1;
    }
    if (it == 10) std::printf("exit_while_recovering: running\n");
    std::fflush(stdout);
    if (pause_ms > 0) usleep(pause_ms * 1000);
  }
  std::printf("exit_while_recovering: PASS\n");
  return 0;
}

// Allocates 1 GiB, touches it, prints "ready" and waits to be killed (kill -9 test).
#include <unistd.h>

#include "check.h"

int main() {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, size_t{1} << 30));
  CHECK(cudaMemset(p, 1, size_t{1} << 30));
  CHECK(cudaDeviceSynchronize());
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}

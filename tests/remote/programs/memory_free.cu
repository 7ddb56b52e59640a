// Exits 0 when all of device 0's memory is free (nobody holds any), 1 otherwise.
#include "check.h"

int main() {
  size_t free = 0, total = 0;
  CHECK(cudaMemGetInfo(&free, &total));
  std::printf("memory_free: %zu of %zu bytes free\n", free, total);
  return free == total ? 0 : 1;
}

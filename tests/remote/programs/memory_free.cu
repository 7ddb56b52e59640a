// memory_free [MIN_FREE]: exits 0 when device 0 has at least MIN_FREE bytes free (default:
// all of its memory, as on the sim, where nobody else holds any), 1 otherwise. Prints the
// figures either way.
#include <cstdlib>

#include "check.h"

int main(int argc, char** argv) {
  size_t free = 0, total = 0;
  CHECK(cudaMemGetInfo(&free, &total));
  std::printf("memory_free: %zu of %zu bytes free\n", free, total);
  const size_t wanted = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : total;
  return free >= wanted ? 0 : 1;
}

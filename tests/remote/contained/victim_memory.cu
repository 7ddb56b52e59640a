// Another tenant's memory: 64 MiB of zeros on its GPU. Prints "ready", waits until the
// file argv[1] exists (the attacker has run), then reads the memory back and prints how
// many bytes changed.
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "../programs/check.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: victim_memory DONE_FILE\n");
    return 2;
  }
  constexpr size_t kBytes = size_t{64} << 20;
  unsigned char* device = nullptr;
  CHECK(cudaMalloc(&device, kBytes));
  CHECK(cudaMemset(device, 0, kBytes));
  CHECK(cudaDeviceSynchronize());
  std::printf("victim_memory: ready\n");
  std::fflush(stdout);
  for (int waited = 0; access(argv[1], F_OK) != 0; ++waited) {
    if (waited > 6000) {
      std::printf("victim_memory: the attacker never finished\n");
      return 1;
    }
    usleep(50000);
  }
  std::vector<unsigned char> host(kBytes, 0xff);
  CHECK(cudaMemcpy(host.data(), device, kBytes, cudaMemcpyDeviceToHost));
  size_t changed = 0;
  for (unsigned char byte : host) changed += byte != 0;
  std::printf("victim_memory: %zu bytes changed\n", changed);
  return changed == 0 ? 0 : 1;
}

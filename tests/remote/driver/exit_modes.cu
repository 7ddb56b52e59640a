// Ends in the way its argument names, with device work still queued, so that a test can
// check the agent's log for a clean close of the connection in each case:
//   return      returns from main (after synchronising)
//   exit        calls exit(0) without synchronising or cudaDeviceReset
//   _exit       calls _exit(0): no exit handlers run at all
//   unsynced    returns from main with work queued and never synchronised
#include <unistd.h>

#include <cstring>

#include "../programs/check.h"
#include "../programs/kernels.cuh"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: exit_modes return|exit|_exit|unsynced\n");
    return 2;
  }
  const char* mode = argv[1];
  const int n = 1 << 16;
  float* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  CHECK(cudaMemset(d, 0, n * sizeof(float)));
  scale<<<(n + 255) / 256, 256>>>(d, 2.0f, n);
  CHECK(cudaGetLastError());
  if (std::strcmp(mode, "return") == 0) {
    CHECK(cudaDeviceSynchronize());
    return 0;
  }
  if (std::strcmp(mode, "exit") == 0) std::exit(0);
  if (std::strcmp(mode, "_exit") == 0) _exit(0);
  if (std::strcmp(mode, "unsynced") == 0) return 0;
  std::fprintf(stderr, "unknown mode '%s'\n", mode);
  return 2;
}

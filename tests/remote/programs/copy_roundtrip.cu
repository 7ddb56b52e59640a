// 1 GiB round trip with a checksum: pageable H2D, device-to-device, D2H into pinned memory,
// plus a device-side fill and memset checked on the host.
#include <cstdint>
#include <cstring>
#include <vector>

#include "check.h"
#include "kernels.cuh"

static uint64_t Checksum(const uint32_t* p, size_t n) {
  uint64_t sum = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) sum = (sum ^ p[i]) * 1099511628211ull;
  return sum;
}

int main() {
  const size_t bytes = size_t{1} << 30;
  const size_t words = bytes / sizeof(uint32_t);
  std::vector<uint32_t> source(words);
  for (size_t i = 0; i < words; ++i) source[i] = static_cast<uint32_t>(i * 2246822519u + 7);
  uint64_t expected = Checksum(source.data(), words);

  uint32_t *d1, *d2, *pinned;
  CHECK(cudaMalloc(&d1, bytes));
  CHECK(cudaMalloc(&d2, bytes));
  CHECK(cudaMallocHost(&pinned, bytes));
  CHECK(cudaMemcpy(d1, source.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d2, d1, bytes, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(pinned, d2, bytes, cudaMemcpyDeviceToHost));
  uint64_t got = Checksum(pinned, words);
  std::printf("copy_roundtrip: %zu bytes, checksum %016llx expected %016llx\n", bytes,
              static_cast<unsigned long long>(got), static_cast<unsigned long long>(expected));
  EXPECT(got == expected);

  // Device-side writes: fill a 1 MiB region by kernel, memset the next 4 KiB.
  const size_t fill = (1 << 20) / sizeof(uint32_t);
  fillPattern<<<64, 256>>>(d1, 0xfeedu, fill);
  CHECK(cudaGetLastError());
  CHECK(cudaMemset(d1 + fill, 0xab, 4096));
  std::vector<uint32_t> back(fill + 1024);
  CHECK(cudaMemcpy(back.data(), d1, back.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < fill; ++i) EXPECT(back[i] == (0xfeedu ^ static_cast<uint32_t>(i * 2654435761u)));
  for (size_t i = fill; i < fill + 1024; ++i) EXPECT(back[i] == 0xabababab);

  CHECK(cudaFreeHost(pinned));
  CHECK_FREE(d1, d2);
  return 0;
}

// Thrust and CUB, as they ship with the CUDA toolkit: library kernels of other people's
// making (radix sort, scans, reductions, with their tuning chosen at run time from the
// kernel's PTX version), each result checked against the C++ standard library.
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include <algorithm>
#include <cstdio>
#include <cub/cub.cuh>
#include <numeric>
#include <random>
#include <vector>

#include "../programs/check.h"

int main() {
  // CUB selects its tuning by the PTX version the driver reports for its kernels and
  // refuses one it was not compiled for (cudaErrorInvalidDeviceFunction).
  int ptx_version = 0;
  CHECK(cub::PtxVersion(ptx_version));
  EXPECT(ptx_version == __CUDA_ARCH_LIST__);  // nvcc's default: one architecture, e.g. 750

  const int n = 50000;
  std::mt19937 random(7);
  std::vector<int> host(n);
  for (int& value : host) value = static_cast<int>(random() % 1000000) - 500000;
  thrust::device_vector<int> data(host.begin(), host.end());

  long long sum = thrust::reduce(data.begin(), data.end(), 0LL);
  EXPECT(sum == std::accumulate(host.begin(), host.end(), 0LL));
  EXPECT(thrust::reduce(data.begin(), data.end(), -1000000, thrust::maximum<int>()) ==
         *std::max_element(host.begin(), host.end()));

  thrust::device_vector<int> scanned(n);
  thrust::inclusive_scan(data.begin(), data.end(), scanned.begin());
  std::vector<int> expect_scan(n);
  std::partial_sum(host.begin(), host.end(), expect_scan.begin());
  thrust::host_vector<int> got = scanned;
  EXPECT(std::equal(expect_scan.begin(), expect_scan.end(), got.begin()));
  thrust::exclusive_scan(data.begin(), data.end(), scanned.begin());
  got = scanned;
  EXPECT(got[0] == 0 && got[n - 1] == expect_scan[n - 2]);

  thrust::transform(data.begin(), data.end(), data.begin(), thrust::negate<int>());
  thrust::sort(data.begin(), data.end());
  std::vector<int> expect_sorted(n);
  std::transform(host.begin(), host.end(), expect_sorted.begin(), [](int v) { return -v; });
  std::sort(expect_sorted.begin(), expect_sorted.end());
  got = data;
  EXPECT(std::equal(expect_sorted.begin(), expect_sorted.end(), got.begin()));

  // Keys with values, by key (a stable radix sort of pairs).
  thrust::device_vector<unsigned> keys(n);
  thrust::device_vector<int> values(n);
  std::vector<unsigned> host_keys(n);
  for (unsigned& key : host_keys) key = static_cast<unsigned>(random() % 1000);
  thrust::copy(host_keys.begin(), host_keys.end(), keys.begin());
  thrust::sequence(values.begin(), values.end());
  thrust::sort_by_key(keys.begin(), keys.end(), values.begin());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return host_keys[a] < host_keys[b]; });
  thrust::host_vector<int> got_values = values;
  EXPECT(std::equal(order.begin(), order.end(), got_values.begin()));

  // CUB directly: a device-wide reduction with its two-phase temporary storage.
  int* device_in = nullptr;
  int* device_out = nullptr;
  CHECK(cudaMalloc(&device_in, n * sizeof(int)));
  CHECK(cudaMalloc(&device_out, sizeof(int)));
  CHECK(cudaMemcpy(device_in, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  size_t temp_bytes = 0;
  CHECK(cub::DeviceReduce::Sum(nullptr, temp_bytes, device_in, device_out, n));
  void* temp = nullptr;
  CHECK(cudaMalloc(&temp, temp_bytes));
  CHECK(cub::DeviceReduce::Sum(temp, temp_bytes, device_in, device_out, n));
  int cub_sum = 0;
  CHECK(cudaMemcpy(&cub_sum, device_out, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT(cub_sum == static_cast<int>(std::accumulate(host.begin(), host.end(), 0LL)));
  CHECK_FREE(temp, device_in, device_out);
  std::printf("thrust and cub: PASS\n");
  return 0;
}

// Managed memory (cudaMallocManaged) as ordinary programs use it: the host writes, a
// kernel reads and writes, the host reads after a synchronisation; again and again, with
// host changes between; copies and memsets on managed pointers; prefetches and advice,
// read back by range (cudaMemRangeGetAttribute);
// kernels on a stream synchronised by stream and by event; the attributes programs ask.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"

__global__ void Add(int n, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[i] = x[i] + y[i];
  }
}

__global__ void Scale(int n, float factor, float* data) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

// A linked list in managed memory: pointers stored in it are valid on both sides.
struct Node {
  int value;
  Node* next;
};

__global__ void SumList(const Node* head, int* sum) {
  int total = 0;
  for (const Node* node = head; node != nullptr; node = node->next) total += node->value;
  *sum = total;
}

int main() {
  int device = 0;
  CHECK(cudaGetDevice(&device));
  int managed = 0, concurrent = 1;
  CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, device));
  CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device));
  EXPECT(managed == 1);
  EXPECT(concurrent == 0);  // coherent at synchronisation, not concurrently

  // The well-known first program: x and y in managed memory, one kernel, host checks.
  const int n = 1 << 20;
  float* x = nullptr;
  float* y = nullptr;
  CHECK(cudaMallocManaged(&x, n * sizeof(float)));
  CHECK(cudaMallocManaged(&y, n * sizeof(float)));
  for (int i = 0; i < n; ++i) {
    x[i] = 1.0f;
    y[i] = 2.0f;
  }
  Add<<<(n + 255) / 256, 256>>>(n, x, y);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  float max_error = 0.0f;
  for (int i = 0; i < n; ++i) max_error = std::fmax(max_error, std::fabs(y[i] - 3.0f));
  EXPECT(max_error == 0.0f);

  // Iterations: the host changes the data between kernels; two kernels without a
  // synchronisation between them see each other's results.
  for (int iteration = 1; iteration <= 5; ++iteration) {
    for (int i = 0; i < n; i += 997) x[i] = static_cast<float>(iteration);
    Add<<<64, 256>>>(n, x, y);
    Scale<<<(n + 255) / 256, 256>>>(n, 0.5f, y);
    CHECK(cudaDeviceSynchronize());
  }
  {
    std::vector<float> expect_x(n, 1.0f), expect_y(n, 3.0f);
    for (int iteration = 1; iteration <= 5; ++iteration) {
      for (int i = 0; i < n; i += 997) expect_x[i] = static_cast<float>(iteration);
      for (int i = 0; i < n; ++i) expect_y[i] = (expect_x[i] + expect_y[i]) * 0.5f;
    }
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += y[i] != expect_y[i] || x[i] != expect_x[i];
    EXPECT(wrong == 0);
  }

  // Copies and memsets with managed pointers, in every direction cudaMemcpyDefault takes.
  float* device_buffer = nullptr;
  CHECK(cudaMalloc(&device_buffer, n * sizeof(float)));
  CHECK(cudaMemcpy(device_buffer, y, n * sizeof(float), cudaMemcpyDefault));
  CHECK(cudaMemset(y, 0, n * sizeof(float)));
  CHECK(cudaDeviceSynchronize());
  EXPECT(y[0] == 0.0f && y[n - 1] == 0.0f);
  std::vector<float> host(n);
  CHECK(cudaMemcpy(y, device_buffer, n * sizeof(float), cudaMemcpyDefault));
  CHECK(cudaMemcpy(host.data(), y, n * sizeof(float), cudaMemcpyDefault));
  EXPECT(host[0] == y[0] && host[n - 1] == y[n - 1] && y[1] != 0.0f);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 100);
  CHECK(cudaMemcpy(host.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(host[99] == 99.0f && host[100] == 0.0f);

  // Explicit kinds that call managed memory host memory: the copy sees the GPU's newer
  // data, and what it writes is not lost when the GPU's copy is read back.
  std::vector<float> saved(n);
  CHECK(cudaMemcpy(saved.data(), device_buffer, n * sizeof(float), cudaMemcpyDeviceToHost));
  Scale<<<(n + 255) / 256, 256>>>(n, 2.0f, x);  // x on the GPU is newer than the host's
  CHECK(cudaMemcpy(device_buffer, x, n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(y, device_buffer, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(host.data(), device_buffer, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(host[99] == 198.0f && host[100] == 0.0f);
  EXPECT(y[99] == 198.0f && y[101] == 2.0f && x[99] == 198.0f);
  CHECK(cudaMemcpy(device_buffer, saved.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 100);

  // Hints are taken; pointer attributes say managed.
  CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), cudaMemLocation{cudaMemLocationTypeDevice, device}, 0, 0));
  CHECK(cudaMemAdvise(x, n * sizeof(float), cudaMemAdviseSetReadMostly,
                      cudaMemLocation{cudaMemLocationTypeDevice, device}));
  cudaPointerAttributes attributes{};
  CHECK(cudaPointerGetAttributes(&attributes, x + 10));
  EXPECT(attributes.type == cudaMemoryTypeManaged);
  CHECK(cudaPointerGetAttributes(&attributes, device_buffer));
  EXPECT(attributes.type == cudaMemoryTypeDevice);
  EXPECT(cudaMemAdvise(device_buffer, 16, cudaMemAdviseSetReadMostly,
                       cudaMemLocation{cudaMemLocationTypeDevice, device}) == cudaErrorInvalidValue);

  // What advice and prefetches said reads back, per range: a setting holds for a range
  // when it holds for all of it.
  const size_t bytes = n * sizeof(float), half = bytes / 2;
  int value = -7;
  CHECK(cudaMemRangeGetAttribute(&value, sizeof(value), cudaMemRangeAttributeReadMostly, x, bytes));
  EXPECT(value == 1);
  CHECK(
      cudaMemAdvise(x + n / 2, half, cudaMemAdviseUnsetReadMostly, cudaMemLocation{cudaMemLocationTypeDevice, device}));
  CHECK(cudaMemRangeGetAttribute(&value, sizeof(value), cudaMemRangeAttributeReadMostly, x, bytes));
  EXPECT(value == 0);
  CHECK(cudaMemRangeGetAttribute(&value, sizeof(value), cudaMemRangeAttributeReadMostly, x, half));
  EXPECT(value == 1);
  CHECK(cudaMemRangeGetAttribute(&value, sizeof(value), cudaMemRangeAttributeLastPrefetchLocation, x, bytes));
  EXPECT(value == device);
  CHECK(cudaMemPrefetchAsync(x, 4096, cudaMemLocation{cudaMemLocationTypeHost, 0}, 0, 0));
  CHECK(cudaMemRangeGetAttribute(&value, sizeof(value), cudaMemRangeAttributeLastPrefetchLocation, x, bytes));
  EXPECT(value == cudaInvalidDeviceId);  // the first page went to the host
  CHECK(cudaMemRangeGetAttribute(&value, sizeof(value), cudaMemRangeAttributeLastPrefetchLocation, x, 4096));
  EXPECT(value == cudaCpuDeviceId);
  CHECK(cudaMemRangeGetAttribute(&value, sizeof(value), cudaMemRangeAttributePreferredLocation, y, bytes));
  EXPECT(value == cudaInvalidDeviceId);  // never set
  CHECK(cudaMemAdvise(y, bytes, cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0}));
  CHECK(cudaMemAdvise(y, bytes, cudaMemAdviseSetAccessedBy, cudaMemLocation{cudaMemLocationTypeDevice, device}));
  int accessed[3] = {9, 9, 9};
  void* data[] = {&value, accessed};
  size_t sizes[] = {sizeof(value), sizeof(accessed)};
  cudaMemRangeAttribute asked[] = {cudaMemRangeAttributePreferredLocation, cudaMemRangeAttributeAccessedBy};
  CHECK(cudaMemRangeGetAttributes(data, sizes, asked, 2, y, bytes));
  EXPECT(value == cudaCpuDeviceId);
  EXPECT(accessed[0] == device && accessed[1] == cudaInvalidDeviceId && accessed[2] == cudaInvalidDeviceId);
  CHECK(cudaMemRangeGetAttribute(&value, sizeof(value), cudaMemRangeAttributePreferredLocationType, y, bytes));
  EXPECT(value == cudaMemLocationTypeHost);
  EXPECT(cudaMemRangeGetAttribute(&value, sizeof(value), cudaMemRangeAttributeReadMostly, device_buffer, 16) ==
         cudaErrorInvalidValue);
  EXPECT(cudaMemRangeGetAttribute(&value, 2, cudaMemRangeAttributeReadMostly, x, 16) == cudaErrorInvalidValue);
  EXPECT(cudaMemAdvise(x, 16, static_cast<cudaMemoryAdvise>(99), cudaMemLocation{cudaMemLocationTypeDevice, device}) ==
         cudaErrorInvalidValue);
  EXPECT(cudaMemAdvise(x, 16, cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeDevice, 57}) ==
         cudaErrorInvalidDevice);
  cudaGetLastError();

  // A stream, synchronised by the stream and by an event.
  cudaStream_t stream;
  cudaEvent_t done;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK(cudaEventCreate(&done));
  CHECK(cudaStreamAttachMemAsync(stream, x, 0, cudaMemAttachSingle));
  Scale<<<(n + 255) / 256, 256, 0, stream>>>(n, 2.0f, x);
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(x[99] == 198.0f && x[100] == 0.0f);
  Scale<<<(n + 255) / 256, 256, 0, stream>>>(n, 0.5f, x);
  CHECK(cudaEventRecord(done, stream));
  CHECK(cudaEventSynchronize(done));
  EXPECT(x[99] == 99.0f && x[7] == 7.0f);

  // Pointers inside managed memory: a list built on the host, walked by a kernel.
  Node* nodes = nullptr;
  int* sum = nullptr;
  CHECK(cudaMallocManaged(&nodes, 100 * sizeof(Node)));
  CHECK(cudaMallocManaged(&sum, sizeof(int)));
  for (int i = 0; i < 100; ++i) nodes[i] = Node{i + 1, i + 1 < 100 ? &nodes[i + 1] : nullptr};
  SumList<<<1, 1>>>(nodes, sum);
  CHECK(cudaDeviceSynchronize());
  EXPECT(*sum == 5050);

  // Freed and allocated again.
  CHECK_FREE(nodes, sum);
  CHECK(cudaMallocManaged(&sum, sizeof(int), cudaMemAttachHost));
  *sum = 0;
  SumList<<<1, 1>>>(nullptr, sum);
  CHECK(cudaDeviceSynchronize());
  EXPECT(*sum == 0);
  int* refused = nullptr;
  EXPECT(cudaMallocManaged(&refused, 16, 7) == cudaErrorInvalidValue);  // no such flags

  CHECK_FREE(sum, x, y, device_buffer);
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaEventDestroy(done));
  std::printf("managed memory: PASS\n");
  return 0;
}

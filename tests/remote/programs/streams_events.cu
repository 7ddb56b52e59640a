// Several streams with events: async copies into/out of pinned memory, a kernel per
// stream, a cross-stream wait, event synchronisation, queries and elapsed time.
#include <vector>

#include "check.h"
#include "kernels.cuh"

int main() {
  const int kStreams = 4;
  const int n = 1 << 16;
  cudaStream_t streams[kStreams];
  cudaEvent_t done[kStreams];
  float* host[kStreams];
  float* device[kStreams];
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start, 0));
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&done[s], cudaEventDefault));
    CHECK(cudaMallocHost(&host[s], n * sizeof(float)));
    CHECK(cudaMalloc(&device[s], n * sizeof(float)));
    for (int i = 0; i < n; ++i) host[s][i] = static_cast<float>(i + s);
  }
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaMemcpyAsync(device[s], host[s], n * sizeof(float), cudaMemcpyHostToDevice, streams[s]));
    scale<<<(n + 255) / 256, 256, 0, streams[s]>>>(device[s], static_cast<float>(s + 2), n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(done[s], streams[s]));
  }
  // Stream 0 also scales stream 1's data by 10, after stream 1's work is done.
  CHECK(cudaStreamWaitEvent(streams[0], done[1], 0));
  scale<<<(n + 255) / 256, 256, 0, streams[0]>>>(device[1], 10.0f, n);
  CHECK(cudaGetLastError());
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaMemcpyAsync(host[s], device[s], n * sizeof(float), cudaMemcpyDeviceToHost,
                          s == 1 ? streams[0] : streams[s]));
  }
  CHECK(cudaEventRecord(stop, 0));
  for (int s = 0; s < kStreams; ++s) CHECK(cudaStreamSynchronize(streams[s]));
  CHECK(cudaEventSynchronize(stop));
  for (int s = 0; s < kStreams; ++s) {
    EXPECT(cudaEventQuery(done[s]) == cudaSuccess);
    EXPECT(cudaStreamQuery(streams[s]) == cudaSuccess);
  }
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  EXPECT(ms >= 0);
  int wrong = 0;
  for (int s = 0; s < kStreams; ++s) {
    float factor = static_cast<float>(s + 2) * (s == 1 ? 10.0f : 1.0f);
    for (int i = 0; i < n; ++i) wrong += host[s][i] != static_cast<float>(i + s) * factor;
  }
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaStreamDestroy(streams[s]));
    CHECK(cudaEventDestroy(done[s]));
    CHECK(cudaFreeHost(host[s]));
    CHECK(cudaFree(device[s]));
  }
  std::printf("streams_events: %d streams, %.3f ms, %d wrong\n", kStreams, ms, wrong);
  return wrong == 0 ? 0 : 1;
}

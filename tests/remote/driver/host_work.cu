// Host functions and callbacks in stream order, stream and event queries (NOT_READY while
// work is pending, then SUCCESS), and event timing.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../programs/check.h"
#include "../programs/kernels.cuh"

namespace {

std::mutex order_mu;
std::vector<int> order;

struct Step {
  int id;
  const float* host = nullptr;  // data an earlier copy on the stream must have delivered
  float expected = 0;
  bool saw_data = false;
};

void CUDART_CB RecordStep(void* data) {
  auto* step = static_cast<Step*>(data);
  if (step->host) step->saw_data = step->host[0] == step->expected;
  std::lock_guard<std::mutex> lock(order_mu);
  order.push_back(step->id);
}

void CUDART_CB Callback(cudaStream_t, cudaError_t status, void* data) {
  if (status == cudaSuccess) RecordStep(data);
}

std::atomic<bool> release{false};
void CUDART_CB WaitForRelease(void*) {
  while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

int main() {
  CHECK(cudaSetDevice(0));
  const int n = 1 << 20;
  float* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  float* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, n * sizeof(float)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Order: host functions and callbacks run in stream order with the copies around them,
  // and each sees what the copies before it delivered.
  for (int i = 0; i < n; ++i) pinned[i] = 1.0f;
  CHECK(cudaMemcpyAsync(d, pinned, n * sizeof(float), cudaMemcpyHostToDevice, stream));
  scale<<<(n + 255) / 256, 256, 0, stream>>>(d, 5.0f, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(pinned, d, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  Step first{1, pinned, 5.0f};
  CHECK(cudaLaunchHostFunc(stream, RecordStep, &first));
  scale<<<(n + 255) / 256, 256, 0, stream>>>(d, 2.0f, n);
  CHECK(cudaMemcpyAsync(pinned, d, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  Step second{2, pinned, 10.0f};
  CHECK(cudaStreamAddCallback(stream, Callback, &second, 0));
  Step third{3};
  CHECK(cudaLaunchHostFunc(stream, RecordStep, &third));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT((order == std::vector<int>{1, 2, 3}));
  EXPECT(first.saw_data && second.saw_data);

  // Queries: while a host function holds the stream, the stream and an event recorded
  // behind it are not ready; after it, both are.
  cudaEvent_t behind;
  CHECK(cudaEventCreate(&behind));
  CHECK(cudaLaunchHostFunc(stream, WaitForRelease, nullptr));
  CHECK(cudaMemsetAsync(d, 0, n * sizeof(float), stream));
  CHECK(cudaEventRecord(behind, stream));
  EXPECT(cudaStreamQuery(stream) == cudaErrorNotReady);
  EXPECT(cudaEventQuery(behind) == cudaErrorNotReady);
  release = true;
  CHECK(cudaEventSynchronize(behind));
  EXPECT(cudaEventQuery(behind) == cudaSuccess);
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(cudaStreamQuery(stream) == cudaSuccess);
  CHECK(cudaMemcpy(pinned, d, sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(pinned[0] == 0.0f);  // the memset queued behind the host function ran

  // A stream waiting for an event recorded behind a host function on another stream
  // waits for that host function too.
  release = false;
  cudaStream_t waiter;
  CHECK(cudaStreamCreateWithFlags(&waiter, cudaStreamNonBlocking));
  CHECK(cudaLaunchHostFunc(stream, WaitForRelease, nullptr));
  CHECK(cudaEventRecord(behind, stream));
  CHECK(cudaStreamWaitEvent(waiter, behind, 0));
  CHECK(cudaMemsetAsync(d, 0x7f, sizeof(float), waiter));
  EXPECT(cudaStreamQuery(waiter) == cudaErrorNotReady);
  release = true;
  CHECK(cudaStreamSynchronize(waiter));
  EXPECT(cudaEventQuery(behind) == cudaSuccess);
  CHECK(cudaStreamDestroy(waiter));

  // Kernel arguments are taken at the launch, also for a launch queued behind a host
  // function, and also when they lie in registered host memory: here the whole heap is
  // registered (a program may register memory it did not allocate), where the library
  // packs arguments. Two launches wait behind the host function; each keeps its own.
  {
    void* heap = nullptr;
    size_t heap_bytes = 0;
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
      if (line.find("[heap]") == std::string::npos) continue;
      unsigned long begin = 0, end = 0;
      if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) == 2) {
        heap = reinterpret_cast<void*>(begin);
        heap_bytes = end - begin;
      }
    }
    EXPECT(heap != nullptr);
    float* values = nullptr;
    CHECK(cudaMalloc(&values, 2 * sizeof(float)));
    const float ones[2] = {1.0f, 1.0f};
    CHECK(cudaMemcpy(values, ones, sizeof(ones), cudaMemcpyHostToDevice));
    if (heap != nullptr) CHECK(cudaHostRegister(heap, heap_bytes, cudaHostRegisterDefault));
    release = false;
    CHECK(cudaLaunchHostFunc(stream, WaitForRelease, nullptr));
    scale<<<1, 1, 0, stream>>>(values, 3.0f, 1);
    scale<<<1, 1, 0, stream>>>(values + 1, 7.0f, 1);
    CHECK(cudaGetLastError());
    release = true;
    CHECK(cudaStreamSynchronize(stream));
    if (heap != nullptr) CHECK(cudaHostUnregister(heap));
    float scaled[2] = {0, 0};
    CHECK(cudaMemcpy(scaled, values, sizeof(scaled), cudaMemcpyDeviceToHost));
    EXPECT(scaled[0] == 3.0f && scaled[1] == 7.0f);
    CHECK(cudaFree(values));
  }

  // Event timing: real elapsed times, positive, and additive over consecutive intervals.
  cudaEvent_t marks[3];
  for (auto& mark : marks) CHECK(cudaEventCreate(&mark));
  CHECK(cudaEventRecord(marks[0], stream));
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaMemcpyAsync(d, pinned, n * sizeof(float), cudaMemcpyHostToDevice, stream));
  }
  CHECK(cudaEventRecord(marks[1], stream));
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaMemcpyAsync(pinned, d, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  }
  CHECK(cudaEventRecord(marks[2], stream));
  CHECK(cudaEventSynchronize(marks[2]));
  float first_ms = 0, second_ms = 0, whole_ms = 0;
  CHECK(cudaEventElapsedTime(&first_ms, marks[0], marks[1]));
  CHECK(cudaEventElapsedTime(&second_ms, marks[1], marks[2]));
  CHECK(cudaEventElapsedTime(&whole_ms, marks[0], marks[2]));
  EXPECT(first_ms > 0 && second_ms > 0);
  EXPECT(whole_ms >= first_ms && whole_ms >= second_ms);
  EXPECT(whole_ms - (first_ms + second_ms) < 0.01f && (first_ms + second_ms) - whole_ms < 0.01f);
  // A timing-disabled event has no elapsed time.
  cudaEvent_t untimed;
  CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  CHECK(cudaEventRecord(untimed, stream));
  CHECK(cudaEventSynchronize(untimed));
  float none = 0;
  EXPECT(cudaEventElapsedTime(&none, marks[0], untimed) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();

  // This stream is not capturing, and hints are accepted.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusActive;
  CHECK(cudaStreamIsCapturing(stream, &capture));
  EXPECT(capture == cudaStreamCaptureStatusNone);
  cudaStreamAttrValue policy{};
  policy.accessPolicyWindow.base_ptr = d;
  policy.accessPolicyWindow.num_bytes = 4096;
  policy.accessPolicyWindow.hitRatio = 0.5f;
  policy.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  policy.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &policy));
  // Read back as set (the stream's own), copied to another stream, and checked as a GPU
  // checks them: a window over the device's limit or a hit ratio above 1 is refused.
  cudaStreamAttrValue read{};
  CHECK(cudaStreamGetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &read));
  EXPECT(read.accessPolicyWindow.base_ptr == d && read.accessPolicyWindow.num_bytes == 4096 &&
         read.accessPolicyWindow.hitRatio == 0.5f && read.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting &&
         read.accessPolicyWindow.missProp == cudaAccessPropertyStreaming);
  cudaStream_t copy;
  CHECK(cudaStreamCreate(&copy));
  CHECK(cudaStreamGetAttribute(copy, cudaStreamAttributeAccessPolicyWindow, &read));
  EXPECT(read.accessPolicyWindow.num_bytes == 0);
  CHECK(cudaStreamCopyAttributes(copy, stream));
  CHECK(cudaStreamGetAttribute(copy, cudaStreamAttributeAccessPolicyWindow, &read));
  EXPECT(read.accessPolicyWindow.num_bytes == 4096 && read.accessPolicyWindow.base_ptr == d);
  CHECK(cudaStreamDestroy(copy));
  int max_window = 0;
  CHECK(cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, 0));
  cudaStreamAttrValue too_much = policy;
  too_much.accessPolicyWindow.num_bytes = static_cast<size_t>(max_window) + 1;
  EXPECT(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &too_much) == cudaErrorInvalidValue);
  too_much = policy;
  too_much.accessPolicyWindow.hitRatio = 1.5f;
  EXPECT(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &too_much) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaStreamGetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &read));
  EXPECT(read.accessPolicyWindow.num_bytes == 4096);  // unchanged by the refusals
  // The device's L1/shared preference, read back as set.
  CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferL1));
  cudaFuncCache cache = cudaFuncCachePreferNone;
  CHECK(cudaDeviceGetCacheConfig(&cache));
  EXPECT(cache == cudaFuncCachePreferL1);
  CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferNone));

  // Stream priorities: clamped into the device's range, and read back.
  int least = 0, greatest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT(greatest <= least);
  cudaStream_t urgent;
  CHECK(cudaStreamCreateWithPriority(&urgent, cudaStreamNonBlocking, greatest - 100));
  int priority = 0;
  CHECK(cudaStreamGetPriority(urgent, &priority));
  EXPECT(priority == greatest);
  unsigned flags = 0;
  CHECK(cudaStreamGetFlags(urgent, &flags));
  EXPECT(flags == cudaStreamNonBlocking);
  CHECK(cudaStreamDestroy(urgent));

  for (auto& mark : marks) CHECK(cudaEventDestroy(mark));
  CHECK(cudaEventDestroy(untimed));
  CHECK(cudaEventDestroy(behind));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(d));
  std::printf("host work: ok (%.3f ms + %.3f ms = %.3f ms)\n", first_ms, second_ms, whole_ms);
  return 0;
}

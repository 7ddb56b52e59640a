// Mapped ("zero-copy") host memory as the CUDA samples' simpleZeroCopy uses it:
// cudaHostAlloc with cudaHostAllocMapped, cudaHostGetDevicePointer, a kernel that reads and
// writes the host's buffers, the host reading the result after a synchronisation; again
// with host changes between and on a stream; copies to and from mapped buffers; the flags
// and pointer attributes programs ask; page-locked memory allocated without the mapped flag
// handed to kernels, as UVA allows.
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"

__global__ void VectorAdd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
  cudaDeviceProp properties{};
  CHECK(cudaGetDeviceProperties(&properties, 0));
  EXPECT(properties.canMapHostMemory == 1);

  const int n = 1 << 20;
  const size_t bytes = n * sizeof(float);
  float *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK(cudaHostAlloc(&a, bytes, cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&b, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  CHECK(cudaHostAlloc(&c, bytes, cudaHostAllocMapped | cudaHostAllocWriteCombined));
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = static_cast<float>(2 * (i % 1000));
    c[i] = -1.0f;
  }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  CHECK(cudaHostGetDevicePointer(&da, a, 0));
  CHECK(cudaHostGetDevicePointer(&db, b, 0));
  CHECK(cudaHostGetDevicePointer(&dc, c, 0));
  float* inside = nullptr;
  CHECK(cudaHostGetDevicePointer(&inside, a + 100, 0));
  EXPECT(inside == da + 100);

  VectorAdd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += c[i] != a[i] + b[i];
  EXPECT(wrong == 0);

  // The host changes the inputs; the kernel runs on a stream and sees them.
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int round = 1; round <= 3; ++round) {
    for (int i = 0; i < n; i += 101) a[i] = static_cast<float>(-round);
    VectorAdd<<<(n + 255) / 256, 256, 0, stream>>>(da, db, dc, n);
    CHECK(cudaStreamSynchronize(stream));
    wrong = 0;
    for (int i = 0; i < n; ++i) wrong += c[i] != a[i] + b[i];
    EXPECT(wrong == 0);
    EXPECT(c[101] == static_cast<float>(-round) + b[101]);
  }

  // Copies from and to mapped buffers, both as host memory and as device pointers.
  float* device_buffer = nullptr;
  CHECK(cudaMalloc(&device_buffer, bytes));
  CHECK(cudaMemcpy(device_buffer, c, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dc, 0, bytes));
  CHECK(cudaDeviceSynchronize());
  EXPECT(c[0] == 0.0f && c[n - 1] == 0.0f);
  CHECK(cudaMemcpy(c, device_buffer, bytes, cudaMemcpyDeviceToHost));
  EXPECT(c[101] == a[101] + b[101] && c[n - 1] == a[n - 1] + b[n - 1]);
  CHECK(cudaMemcpy(dc, device_buffer, bytes, cudaMemcpyDefault));
  CHECK(cudaDeviceSynchronize());
  EXPECT(c[7] == a[7] + b[7]);

  // What programs ask of it.
  unsigned flags = 0;
  CHECK(cudaHostGetFlags(&flags, b));
  EXPECT((flags & cudaHostAllocMapped) && (flags & cudaHostAllocPortable));
  cudaPointerAttributes attributes{};
  CHECK(cudaPointerGetAttributes(&attributes, a + 5));
  EXPECT(attributes.type == cudaMemoryTypeHost);
  EXPECT(attributes.hostPointer == a + 5 && attributes.devicePointer == a + 5);

  // Freed, and allocated again: the new buffer works as the first did.
  CHECK(cudaFreeHost(c));
  CHECK(cudaHostAlloc(&c, bytes, cudaHostAllocMapped));
  std::memset(c, 0, bytes);
  CHECK(cudaHostGetDevicePointer(&dc, c, 0));
  VectorAdd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK(cudaDeviceSynchronize());
  EXPECT(c[n - 1] == a[n - 1] + b[n - 1]);

  // Page-locked memory allocated without the mapped flag is device-accessible too under
  // UVA: a kernel may be handed it directly. One buffer filled by an asynchronous copy
  // just before the kernel reads it, one the kernel writes, one through its device pointer.
  const int m = 50000;
  float *staged = nullptr, *written = nullptr, *through = nullptr;
  CHECK(cudaMallocHost(&staged, m * sizeof(float)));
  CHECK(cudaHostAlloc(&written, m * sizeof(float), cudaHostAllocDefault));
  CHECK(cudaMallocHost(&through, m * sizeof(float)));
  unsigned pinned_flags = 99;
  CHECK(cudaHostGetFlags(&pinned_flags, written));
  // With unified addressing, page-locked memory is mapped whatever it asked for: a driver
  // says so (cudaHostAllocMapped alone; driver 580 on an H100).
  EXPECT(pinned_flags == cudaHostAllocMapped);
  for (int i = 0; i < m; ++i) {
    staged[i] = -1.0f;
    written[i] = -2.0f;
    through[i] = static_cast<float>(3 * i);
  }
  float* source = nullptr;
  CHECK(cudaMalloc(&source, m * sizeof(float)));
  std::vector<float> values(m);
  for (int i = 0; i < m; ++i) values[i] = static_cast<float>(i % 977);
  CHECK(cudaMemcpy(source, values.data(), m * sizeof(float), cudaMemcpyHostToDevice));
  float* through_device = nullptr;
  CHECK(cudaHostGetDevicePointer(&through_device, through, 0));
  EXPECT(through_device == through);
  CHECK(cudaMemcpyAsync(staged, source, m * sizeof(float), cudaMemcpyDeviceToHost, stream));
  VectorAdd<<<(m + 255) / 256, 256, 0, stream>>>(staged, through_device, written, m);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(stream));
  for (int i = 0; i < m; ++i) {
    if (written[i] != values[i] + 3.0f * i || staged[i] != values[i]) {
      std::printf("page-locked element %d: %f + ... = %f\n", i, staged[i], written[i]);
      return 1;
    }
  }
  // Host changes between kernels are seen; the buffers stay host memory.
  for (int i = 0; i < m; ++i) through[i] = 1.0f;
  VectorAdd<<<(m + 255) / 256, 256>>>(staged, through, written, m);
  CHECK(cudaDeviceSynchronize());
  EXPECT(written[m - 1] == values[m - 1] + 1.0f && written[0] == values[0] + 1.0f);
  cudaPointerAttributes pinned_attributes{};
  CHECK(cudaPointerGetAttributes(&pinned_attributes, written));
  EXPECT(pinned_attributes.type == cudaMemoryTypeHost);
  EXPECT(pinned_attributes.hostPointer == written && pinned_attributes.devicePointer == written);
  CHECK(cudaHostGetFlags(&pinned_flags, written));
  EXPECT(pinned_flags == cudaHostAllocMapped);
  // Copies into and out of them after their kernels.
  std::vector<float> back(m);
  CHECK(cudaMemcpy(back.data(), written, m * sizeof(float), cudaMemcpyHostToHost));
  EXPECT(back[77] == values[77] + 1.0f);
  CHECK(cudaMemcpy(written, source, m * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(written[77] == values[77]);
  CHECK(cudaFree(source));
  CHECK_FREE_HOST(staged, written, through);

  CHECK_FREE_HOST(a, b, c);
  CHECK(cudaFree(device_buffer));
  CHECK(cudaStreamDestroy(stream));
  std::printf("mapped memory: PASS\n");
  return 0;
}

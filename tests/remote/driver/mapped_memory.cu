// Mapped ("zero-copy") host memory as the CUDA samples' simpleZeroCopy uses it:
// cudaHostAlloc with cudaHostAllocMapped, cudaHostGetDevicePointer, a kernel that reads and
// writes the host's buffers, the host reading the result after a synchronisation; again
// with host changes between and on a stream; copies to and from mapped buffers; the flags
// and pointer attributes programs ask; pinned memory that was not allocated mapped is
// refused by name, not silently mis-run.
#include <cstdio>
#include <cstring>

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

  // Pinned memory not allocated mapped cannot be reached from a remote GPU: refused.
  float* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, 4096));
  float* refused = nullptr;
  EXPECT(cudaHostGetDevicePointer(&refused, pinned, 0) == cudaErrorNotSupported);
  cudaGetLastError();  // clear the error the refusal left
  CHECK(cudaFreeHost(pinned));

  CHECK(cudaFreeHost(a));
  CHECK(cudaFreeHost(b));
  CHECK(cudaFreeHost(c));
  CHECK(cudaFree(device_buffer));
  CHECK(cudaStreamDestroy(stream));
  std::printf("mapped memory: PASS\n");
  return 0;
}

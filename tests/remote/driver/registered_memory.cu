// Registered host memory mapped for the GPU (cudaHostRegister with cudaHostRegisterMapped,
// as zero-copy programs use it): the program's own buffer, reached by kernels through the
// device pointer cudaHostGetDevicePointer gives, its writes seen by the host after a
// synchronisation and the host's writes seen by the next kernel; copies into and out of
// it; an unaligned registration whose page neighbours stay the program's alone; a
// registration without the flag mapped when its device pointer is asked for or a kernel
// is handed it (unified addressing); a read-only one; and the driver's errors:
// overlapping, zero-size and null registrations, unregistering where no registration
// starts, I/O memory.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../programs/check.h"

namespace {

constexpr int kCount = 16384;  // 64 KiB of floats

__global__ void Affine(float* values, int count, float scale, float offset) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) values[i] = values[i] * scale + offset;
}

__global__ void Fill(unsigned char* bytes, int count, unsigned char value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) bytes[i] = static_cast<unsigned char>(value + i);
}

__global__ void Sum(const float* values, int count, float* total) {
  float sum = 0.f;
  for (int i = 0; i < count; ++i) sum += values[i];
  *total = sum;
}

void* PageAligned(size_t bytes) {
  void* memory = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (memory == nullptr) {
    std::fprintf(stderr, "out of host memory\n");
    std::exit(1);
  }
  return memory;
}

}  // namespace

int main() {
  int can_map = 0;
  CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, 0));
  EXPECT(can_map == 1);

  // Mapped at registration.
  auto* host = static_cast<float*>(PageAligned(kCount * sizeof(float)));
  for (int i = 0; i < kCount; ++i) host[i] = static_cast<float>(i);
  CHECK(cudaHostRegister(host, kCount * sizeof(float), cudaHostRegisterMapped));
  unsigned flags = 0;
  CHECK(cudaHostGetFlags(&flags, host));
  EXPECT((flags & cudaHostRegisterMapped) != 0);
  float* device = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), host, 0));
  EXPECT(device != nullptr);
  int same_pointer = 0;
  CHECK(cudaDeviceGetAttribute(&same_pointer, cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
  if (same_pointer) EXPECT(device == host);
  cudaPointerAttributes where{};
  CHECK(cudaPointerGetAttributes(&where, host));
  EXPECT(where.type == cudaMemoryTypeHost && where.devicePointer == device && where.hostPointer == host);

  Affine<<<kCount / 256, 256>>>(device, kCount, 2.f, 1.f);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < kCount; ++i) EXPECT(host[i] == 2.f * i + 1.f);
  // The host's writes reach the next kernel.
  for (int i = 0; i < kCount; ++i) host[i] = static_cast<float>(kCount - i);
  Affine<<<kCount / 256, 256>>>(device, kCount, 3.f, 0.f);
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < kCount; ++i) EXPECT(host[i] == 3.f * (kCount - i));
  // Copies into it from device memory, seen by the next kernel; and out of it.
  float* plain = nullptr;
  CHECK(cudaMalloc(&plain, kCount * sizeof(float)));
  std::vector<float> ones(kCount, 1.f);
  CHECK(cudaMemcpy(plain, ones.data(), kCount * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(host, plain, kCount * sizeof(float), cudaMemcpyDeviceToHost));
  Affine<<<kCount / 256, 256>>>(device, kCount, 5.f, 2.f);
  CHECK(cudaMemcpy(plain, host, kCount * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<float> back(kCount);
  CHECK(cudaMemcpy(back.data(), plain, kCount * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kCount; ++i) EXPECT(back[i] == 7.f && host[i] == 7.f);
  // Unregistered, it is the program's plain memory again, with what the kernel wrote.
  Affine<<<kCount / 256, 256>>>(device, kCount, 1.f, 1.f);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaHostUnregister(host));
  for (int i = 0; i < kCount; ++i) EXPECT(host[i] == 8.f);
  EXPECT(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), host, 0) != cudaSuccess);
  cudaGetLastError();
  std::printf("mapped registration: checked\n");

  // Unaligned: 1000 bytes from byte 100 of a page. The bytes around it, on the same
  // pages, are the program's: written while the kernel runs, they keep what it wrote.
  auto* page = static_cast<unsigned char*>(PageAligned(8192));
  std::memset(page, 0x5a, 8192);
  unsigned char* inner = page + 100;
  CHECK(cudaHostRegister(inner, 1000, cudaHostRegisterMapped));
  unsigned char* inner_device = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&inner_device), inner, 0));
  Fill<<<4, 256>>>(inner_device, 1000, 7);
  page[50] = 0x11;
  page[1500] = 0x22;
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < 1000; ++i) EXPECT(inner[i] == static_cast<unsigned char>(7 + i));
  EXPECT(page[50] == 0x11 && page[1500] == 0x22 && page[99] == 0x5a && page[1100] == 0x5a);
  // The driver's errors.
  EXPECT(cudaHostRegister(inner + 500, 1000, cudaHostRegisterMapped) == cudaErrorHostMemoryAlreadyRegistered);
  cudaGetLastError();
  EXPECT(cudaHostRegister(page + 20, 100, cudaHostRegisterDefault) == cudaErrorHostMemoryAlreadyRegistered);
  cudaGetLastError();
  EXPECT(cudaHostRegister(page + 4096, 0, cudaHostRegisterMapped) == cudaErrorInvalidValue);
  cudaGetLastError();
  EXPECT(cudaHostRegister(nullptr, 4096, cudaHostRegisterMapped) == cudaErrorInvalidValue);
  cudaGetLastError();
  EXPECT(cudaHostRegister(page + 4096, 4096, 0x40) == cudaErrorInvalidValue);
  cudaGetLastError();
  EXPECT(cudaHostUnregister(inner + 8) == cudaErrorHostMemoryNotRegistered);
  cudaGetLastError();
  EXPECT(cudaHostRegister(page + 4096, 4096, cudaHostRegisterIoMemory) != cudaSuccess);
  cudaGetLastError();
  CHECK(cudaHostUnregister(inner));
  EXPECT(cudaHostUnregister(inner) == cudaErrorHostMemoryNotRegistered);
  cudaGetLastError();
  std::printf("unaligned registration and errors: checked\n");

  // Registered without the flag: mapped when the device pointer is asked for.
  auto* later = static_cast<float*>(PageAligned(4096 * sizeof(float)));
  for (int i = 0; i < 4096; ++i) later[i] = 1.f;
  CHECK(cudaHostRegister(later, 4096 * sizeof(float), cudaHostRegisterDefault));
  float* later_device = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&later_device), later, 0));
  Affine<<<16, 256>>>(later_device, 4096, 4.f, 0.5f);
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < 4096; ++i) EXPECT(later[i] == 4.5f);
  CHECK(cudaHostUnregister(later));
  if (same_pointer) {
    // Handed to a kernel as it is, as unified addressing allows.
    for (int i = 0; i < 4096; ++i) later[i] = 2.f;
    CHECK(cudaHostRegister(later, 4096 * sizeof(float), cudaHostRegisterDefault));
    Affine<<<16, 256>>>(later, 4096, 3.f, 0.f);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 4096; ++i) EXPECT(later[i] == 6.f);
    CHECK(cudaHostUnregister(later));
    for (int i = 0; i < 4096; ++i) later[i] = 4.5f;
  }

  // Read-only, where the device supports it: kernels read it.
  int read_only = 0;
  CHECK(cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, 0));
  cudaError_t registered =
      cudaHostRegister(later, 4096 * sizeof(float), cudaHostRegisterMapped | cudaHostRegisterReadOnly);
  if (read_only) {
    CHECK(registered);
    float *total = nullptr, *readable = nullptr;
    CHECK(cudaMalloc(&total, sizeof(float)));
    CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&readable), later, 0));
    Sum<<<1, 1>>>(readable, 4096, total);
    float sum = 0.f;
    CHECK(cudaMemcpy(&sum, total, sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(sum == 4.5f * 4096);
    CHECK(cudaFree(total));
    CHECK(cudaHostUnregister(later));
  } else {
    EXPECT(registered == cudaErrorNotSupported);
    cudaGetLastError();
  }

  CHECK(cudaFree(plain));
  std::free(host);
  std::free(page);
  std::free(later);
  std::printf("registered memory: PASS\n");
  return 0;
}

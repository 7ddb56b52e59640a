// The virtual memory management API as programs use it (the CUDA samples' vectorAddMMAP,
// growable buffers): granularity, reserving address ranges (at the address asked for when
// it is free), physical allocations mapped, made accessible, used by kernels and copies,
// released while mapped, unmapped and mapped again at another address with their contents,
// retained handles and their properties, and what a GPU refuses.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"
#include "driver_check.h"

namespace {

__global__ void VectorAdd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void Scale(float* x, float factor, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= factor;
}

CUmemAllocationProp DeviceProp(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUmemAccessDesc ReadWrite(int device) {
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

}  // namespace

int main() {
  CHECK(cudaFree(nullptr));  // the primary context, as the runtime makes it
  int device = 0;
  CHECK(cudaGetDevice(&device));
  CUdevice cu_device = 0;
  CU_CHECK(cuDeviceGet(&cu_device, device));
  int supported = 0;
  CU_CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cu_device));
  EXPECT(supported == 1);

  CUmemAllocationProp prop = DeviceProp(device);
  size_t granularity = 0, recommended = 0;
  CU_CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CU_CHECK(cuMemGetAllocationGranularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  EXPECT(granularity > 0 && (granularity & (granularity - 1)) == 0);
  EXPECT(recommended % granularity == 0);

  // vectorAddMMAP's way: reserve, create, map, release at once (the mapping keeps the
  // memory), make accessible, use.
  const int n = 1000000;
  const size_t bytes = n * sizeof(float);
  const size_t size = (bytes + granularity - 1) / granularity * granularity;
  CUdeviceptr vectors[3];
  for (CUdeviceptr& vector : vectors) {
    CU_CHECK(cuMemAddressReserve(&vector, size, 0, 0, 0));
    EXPECT(vector % granularity == 0);
    CUmemGenericAllocationHandle handle;
    CU_CHECK(cuMemCreate(&handle, size, &prop, 0));
    CU_CHECK(cuMemMap(vector, size, 0, handle, 0));
    CU_CHECK(cuMemRelease(handle));
    CUmemAccessDesc access = ReadWrite(device);
    CU_CHECK(cuMemSetAccess(vector, size, &access, 1));
  }
  EXPECT(vectors[0] != vectors[1] && vectors[1] != vectors[2]);
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.5f;
    b[i] = static_cast<float>(i % 77) - 3.0f;
  }
  CHECK(cudaMemcpy(reinterpret_cast<void*>(vectors[0]), a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(reinterpret_cast<void*>(vectors[1]), b.data(), bytes, cudaMemcpyHostToDevice));
  VectorAdd<<<(n + 255) / 256, 256>>>(reinterpret_cast<float*>(vectors[0]), reinterpret_cast<float*>(vectors[1]),
                                      reinterpret_cast<float*>(vectors[2]), n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), reinterpret_cast<void*>(vectors[2]), bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(c[i] == a[i] + b[i]);

  // A mapped pointer is device memory of this device.
  cudaPointerAttributes attributes;
  CHECK(cudaPointerGetAttributes(&attributes, reinterpret_cast<void*>(vectors[2] + 4096)));
  EXPECT(attributes.type == cudaMemoryTypeDevice && attributes.device == device);
  unsigned long long flags = 0;
  CUmemLocation location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  CU_CHECK(cuMemGetAccess(&flags, &location, vectors[2] + 8));
  EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

  // A retained handle names the mapping's physical allocation; its properties are the ones
  // it was created with. Releasing the retained reference leaves the mapping working.
  CUmemGenericAllocationHandle retained;
  CU_CHECK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(vectors[1] + 100)));
  CUmemAllocationProp retained_prop = {};
  CU_CHECK(cuMemGetAllocationPropertiesFromHandle(&retained_prop, retained));
  EXPECT(retained_prop.type == CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT(retained_prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE && retained_prop.location.id == device);
  CU_CHECK(cuMemRelease(retained));
  std::vector<float> check(n);
  CHECK(cudaMemcpy(check.data(), reinterpret_cast<void*>(vectors[1]), bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(check[i] == b[i]);
  for (CUdeviceptr vector : vectors) {
    CU_CHECK(cuMemUnmap(vector, size));
    CU_CHECK(cuMemAddressFree(vector, size));
  }
  // Unmapped and released: no longer device memory.
  EXPECT(cudaMemcpy(c.data(), reinterpret_cast<void*>(vectors[2]), 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);

  // A growing buffer: reserve more address space right after the first range (granted at
  // that address when it is free), map a second physical allocation there; each piece holds
  // its own data.
  const size_t piece = 2 * granularity;
  const size_t piece_floats = piece / sizeof(float);
  CUdeviceptr buffer = 0, extension = 0;
  CU_CHECK(cuMemAddressReserve(&buffer, piece, 0, 0, 0));
  CU_CHECK(cuMemAddressReserve(&extension, piece, 0, buffer + piece, 0));
  EXPECT(extension == buffer + piece);
  CUmemGenericAllocationHandle pieces[2];
  for (int i = 0; i < 2; ++i) {
    CU_CHECK(cuMemCreate(&pieces[i], piece, &prop, 0));
    CU_CHECK(cuMemMap(buffer + i * piece, piece, 0, pieces[i], 0));
  }
  CUmemAccessDesc access = ReadWrite(device);
  CU_CHECK(cuMemSetAccess(buffer, 2 * piece, &access, 1));  // both mappings at once
  std::vector<float> first(piece_floats), second(piece_floats);
  for (size_t i = 0; i < piece_floats; ++i) {
    first[i] = static_cast<float>(i % 4093);
    second[i] = -static_cast<float>(i % 811);
  }
  // Copies and memsets may run over both mappings, as over one range on a GPU.
  std::vector<float> both(first);
  both.insert(both.end(), second.begin(), second.end());
  CHECK(cudaMemset(reinterpret_cast<void*>(buffer + piece - 8), 0x7f, 16));
  std::vector<float> seam(4);
  CHECK(cudaMemcpy(seam.data(), reinterpret_cast<void*>(buffer + piece - 8), 16, cudaMemcpyDeviceToHost));
  for (float value : seam) EXPECT(std::memcmp(&value, "\x7f\x7f\x7f\x7f", 4) == 0);
  CHECK(cudaMemcpy(reinterpret_cast<void*>(buffer), both.data(), 2 * piece, cudaMemcpyHostToDevice));
  Scale<<<(2 * piece_floats + 255) / 256, 256>>>(reinterpret_cast<float*>(buffer), 2.0f,
                                                 2 * piece_floats);  // across both pieces
  CHECK(cudaDeviceSynchronize());
  std::vector<float> doubled(2 * piece_floats);
  CHECK(cudaMemcpy(doubled.data(), reinterpret_cast<void*>(buffer), 2 * piece, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < 2 * piece_floats; ++i) EXPECT(doubled[i] == 2.0f * both[i]);
  // Device to device, each side over the seam: 3 MiB from 2 MiB into the buffer to an
  // ordinary allocation, and back to 1 MiB further on.
  const size_t mib = size_t{1} << 20, from = piece - 2 * mib, to = piece - mib;
  void* plain = nullptr;
  CHECK(cudaMalloc(&plain, 3 * mib));
  CHECK(cudaMemcpy(plain, reinterpret_cast<void*>(buffer + from), 3 * mib, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(reinterpret_cast<void*>(buffer + to), plain, 3 * mib, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(doubled.data(), reinterpret_cast<void*>(buffer), 2 * piece, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < 2 * piece_floats; ++i) {
    const size_t byte = i * sizeof(float);
    const bool moved = byte >= to && byte < to + 3 * mib;
    const size_t source = moved ? i - (to - from) / sizeof(float) : i;
    EXPECT(doubled[i] == 2.0f * both[source]);
  }
  CHECK(cudaFree(plain));
  // Put the scaled contents back for the move below.
  for (size_t i = 0; i < 2 * piece_floats; ++i) doubled[i] = 2.0f * both[i];
  CHECK(cudaMemcpy(reinterpret_cast<void*>(buffer), doubled.data(), 2 * piece, cudaMemcpyHostToDevice));

  // Moving to a larger reservation elsewhere: unmap, map the same physical allocations at
  // the new addresses; the contents come along.
  CUdeviceptr larger = 0;
  CU_CHECK(cuMemAddressReserve(&larger, 4 * piece, 0, 0, 0));
  CU_CHECK(cuMemUnmap(buffer, 2 * piece));
  for (int i = 0; i < 2; ++i) CU_CHECK(cuMemMap(larger + i * piece, piece, 0, pieces[i], 0));
  CU_CHECK(cuMemSetAccess(larger, 2 * piece, &access, 1));
  CU_CHECK(cuMemAddressFree(buffer, piece));
  CU_CHECK(cuMemAddressFree(extension, piece));
  std::vector<float> back(piece_floats);
  CHECK(cudaMemcpy(back.data(), reinterpret_cast<void*>(larger), piece, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < piece_floats; ++i) EXPECT(back[i] == 2.0f * first[i]);
  CHECK(cudaMemcpy(back.data(), reinterpret_cast<void*>(larger + piece), piece, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < piece_floats; ++i) EXPECT(back[i] == 2.0f * second[i]);

  // Unmapped while the reservation is freed, then mapped again: still the same contents.
  CU_CHECK(cuMemUnmap(larger + piece, piece));
  CU_CHECK(cuMemUnmap(larger, piece));
  CU_CHECK(cuMemAddressFree(larger, 4 * piece));
  CUdeviceptr again = 0;
  CU_CHECK(cuMemAddressReserve(&again, piece, 0, 0, 0));
  CU_CHECK(cuMemMap(again, piece, 0, pieces[1], 0));
  CU_CHECK(cuMemSetAccess(again, piece, &access, 1));
  CHECK(cudaMemcpy(back.data(), reinterpret_cast<void*>(again), piece, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < piece_floats; ++i) EXPECT(back[i] == 2.0f * second[i]);

  // What a GPU refuses.
  CUmemGenericAllocationHandle odd;
  EXPECT(cuMemCreate(&odd, granularity + 1, &prop, 0) == CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemMap(again, piece, 0, pieces[0], 0) == CUDA_ERROR_INVALID_VALUE);               // overlaps
  EXPECT(cuMemMap(again + 64 * piece, piece, 0, pieces[0], 0) == CUDA_ERROR_INVALID_VALUE);  // not reserved
  EXPECT(cuMemAddressFree(again, 2 * piece) == CUDA_ERROR_INVALID_VALUE);                    // not its size
  CUmemAllocationProp elsewhere = DeviceProp(99);
  EXPECT(cuMemCreate(&odd, granularity, &elsewhere, 0) == CUDA_ERROR_INVALID_DEVICE);
  EXPECT(cuMemRelease(0x1234) == CUDA_ERROR_INVALID_VALUE);
  // Memory mapped but not yet made accessible is not device memory.
  CUdeviceptr closed = 0;
  CU_CHECK(cuMemAddressReserve(&closed, piece, 0, 0, 0));
  CU_CHECK(cuMemMap(closed, piece, 0, pieces[0], 0));
  EXPECT(cuMemsetD8(closed, 1, 16) == CUDA_ERROR_INVALID_VALUE);
  CU_CHECK(cuMemGetAccess(&flags, &location, closed));
  EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);
  CU_CHECK(cuMemUnmap(closed, piece));
  CU_CHECK(cuMemAddressFree(closed, piece));

  CU_CHECK(cuMemUnmap(again, piece));
  CU_CHECK(cuMemAddressFree(again, piece));
  for (CUmemGenericAllocationHandle handle : pieces) CU_CHECK(cuMemRelease(handle));
  EXPECT(cuMemRelease(pieces[0]) == CUDA_ERROR_INVALID_VALUE);  // released already
  std::printf("PASS\n");
  return 0;
}

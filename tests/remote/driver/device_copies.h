// For the runtime-API programs of this folder: a host vector copied to new device memory,
// and device memory copied back into a host vector (check.h's CHECK on every call).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "../programs/check.h"

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  T* device = nullptr;
  CHECK(cudaMalloc(&device, host.size() * sizeof(T)));
  CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

template <typename T>
std::vector<T> ToHost(const T* device, size_t count) {
  std::vector<T> host(count);
  CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

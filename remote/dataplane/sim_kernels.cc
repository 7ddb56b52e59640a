#include "remote/dataplane/sim_kernels.h"

#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "remote/dataplane/protocol.h"

namespace gpupool::dataplane {
namespace {

template <typename T>
T Param(const SimLaunch& launch, size_t offset) {
  T value;
  std::memcpy(&value, launch.params + offset, sizeof(T));
  return value;
}

uint64_t TotalThreadsX(const SimLaunch& launch) {
  return static_cast<uint64_t>(launch.config->grid[0]) * launch.config->block[0];
}

// Device array of `count` elements of T at `dptr`, or nullptr when it is not valid device
// memory (a GPU would fault: CUDA_ERROR_ILLEGAL_ADDRESS) or not aligned to T (a GPU faults
// too, with CUDA_ERROR_MISALIGNED_ADDRESS; the sim reports both as illegal addresses).
template <typename T>
T* DeviceArray(const SimLaunch& launch, uint64_t dptr, uint64_t count) {
  if (count == 0 || count > UINT64_MAX / sizeof(T)) return nullptr;
  if (dptr % alignof(T) != 0) return nullptr;
  return reinterpret_cast<T*>(launch.memory->Translate(dptr, count * sizeof(T), launch.owner));
}

// __global__ void vecAdd(const float* a, const float* b, float* c, int n)
//   c[i] = a[i] + b[i] for i < n (one thread per element).
int32_t VecAdd(const SimLaunch& launch) {
  int n = Param<int>(launch, 24);
  uint64_t count = std::min<uint64_t>(n < 0 ? 0 : n, TotalThreadsX(launch));
  if (count == 0) return kCuSuccess;
  auto* a = DeviceArray<const float>(launch, Param<uint64_t>(launch, 0), count);
  auto* b = DeviceArray<const float>(launch, Param<uint64_t>(launch, 8), count);
  auto* c = DeviceArray<float>(launch, Param<uint64_t>(launch, 16), count);
  if (!a || !b || !c) return kCuIllegalAddress;
  for (uint64_t i = 0; i < count; ++i) c[i] = a[i] + b[i];
  return kCuSuccess;
}

// __global__ void scale(float* x, float factor, int n)   x[i] *= factor for i < n.
int32_t Scale(const SimLaunch& launch) {
  int n = Param<int>(launch, 12);
  uint64_t count = std::min<uint64_t>(n < 0 ? 0 : n, TotalThreadsX(launch));
  if (count == 0) return kCuSuccess;
  auto* x = DeviceArray<float>(launch, Param<uint64_t>(launch, 0), count);
  if (!x) return kCuIllegalAddress;
  float factor = Param<float>(launch, 8);
  for (uint64_t i = 0; i < count; ++i) x[i] *= factor;
  return kCuSuccess;
}

// __global__ void fillPattern(unsigned* p, unsigned seed, unsigned long n)
//   grid-stride loop: p[i] = seed ^ (i * 2654435761u) for i < n.
int32_t FillPattern(const SimLaunch& launch) {
  uint64_t n = Param<uint64_t>(launch, 16);
  if (n == 0) return kCuSuccess;
  auto* p = DeviceArray<uint32_t>(launch, Param<uint64_t>(launch, 0), n);
  if (!p) return kCuIllegalAddress;
  uint32_t seed = Param<uint32_t>(launch, 8);
  for (uint64_t i = 0; i < n; ++i) p[i] = seed ^ static_cast<uint32_t>(i * 2654435761u);
  return kCuSuccess;
}

// __global__ void noop()
int32_t Noop(const SimLaunch&) { return kCuSuccess; }

// __global__ void spin(unsigned long long* out, long long nanoseconds)
//   busy-waits about `nanoseconds` (a stand-in for a long kernel), then *out = nanoseconds.
int32_t Spin(const SimLaunch& launch) {
  int64_t ns = Param<int64_t>(launch, 8);
  auto* out = DeviceArray<uint64_t>(launch, Param<uint64_t>(launch, 0), 1);
  if (!out) return kCuIllegalAddress;
  if (ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
  *out = static_cast<uint64_t>(ns);
  return kCuSuccess;
}

const std::map<std::string, SimKernelSpec>& Registry() {
  static const auto* registry = new std::map<std::string, SimKernelSpec>{
      {"_Z6vecAddPKfS0_Pfi", {&VecAdd, 28}},
      {"_Z5scalePffi", {&Scale, 16}},
      {"_Z11fillPatternPjjm", {&FillPattern, 24}},
      {"_Z4noopv", {&Noop, 0}},
      {"_Z4spinPyx", {&Spin, 16}},
  };
  return *registry;
}

}  // namespace

const SimKernelSpec* FindSimKernel(const std::string& mangled_name) {
  auto found = Registry().find(mangled_name);
  return found == Registry().end() ? nullptr : &found->second;
}

}  // namespace gpupool::dataplane

// A stand-in for the GPU host's libcuda.so.1, for testing the cuda executor on machines
// without a GPU: one device (UUID bytes 00..0f), device memory in host RAM. It implements
// only the entry points the executor resolves, with plain C types (same ABI as cuda.h's).
// Every memory operation that reaches it is counted (fake_cuda_memory_calls), so a test
// can tell whether the executor let a request through to the driver at all.
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace {

using CUresult = int;
constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kIllegalAddress = 700;

std::mutex mu;
std::map<uint64_t, std::vector<unsigned char>> blocks;  // device address -> bytes
uint64_t next_address = 0x7000000000ull;
uint64_t memory_calls = 0;
int stream_or_event = 0;

// The bytes of [address, address+size) if inside one block, else null. REQUIRES: mu.
unsigned char* Find(uint64_t address, uint64_t size) {
  auto after = blocks.upper_bound(address);
  if (after == blocks.begin()) return nullptr;
  auto& [start, bytes] = *std::prev(after);
  uint64_t offset = address - start;
  if (offset > bytes.size() || size > bytes.size() - offset) return nullptr;
  return bytes.data() + offset;
}

template <typename T>
CUresult Fill(uint64_t address, T value, size_t count) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  unsigned char* p = Find(address, count * sizeof(T));
  if (p == nullptr) return kIllegalAddress;
  for (size_t i = 0; i < count; ++i) std::memcpy(p + i * sizeof(T), &value, sizeof(T));
  return kSuccess;
}

}  // namespace

extern "C" {

uint64_t fake_cuda_memory_calls() {
  std::lock_guard<std::mutex> lock(mu);
  return memory_calls;
}
uint64_t fake_cuda_live_allocations() {
  std::lock_guard<std::mutex> lock(mu);
  return blocks.size();
}

CUresult cuInit(unsigned) { return kSuccess; }
CUresult cuDeviceGetCount(int* count) { *count = 1; return kSuccess; }
CUresult cuDeviceGet(int* device, int ordinal) { *device = ordinal; return ordinal == 0 ? kSuccess : kInvalidValue; }
CUresult cuDeviceGetUuid(unsigned char* uuid, int) {
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<unsigned char>(i);
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(void** context, int) { *context = &stream_or_event; return kSuccess; }
CUresult cuDevicePrimaryCtxRelease_v2(int) { return kSuccess; }
CUresult cuCtxSetCurrent(void*) { return kSuccess; }
CUresult cuCtxSynchronize() { return kSuccess; }

CUresult cuMemAlloc_v2(uint64_t* dptr, size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  if (size == 0) return kInvalidValue;
  *dptr = next_address;
  blocks[next_address].resize(size);
  next_address += (size + 4095) / 4096 * 4096 + 4096;
  return kSuccess;
}
CUresult cuMemFree_v2(uint64_t dptr) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  return blocks.erase(dptr) ? kSuccess : kInvalidValue;
}
CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  *free = *total = size_t{1} << 30;
  return kSuccess;
}
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void* src, size_t size, void*) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  unsigned char* p = Find(dst, size);
  if (p == nullptr) return kIllegalAddress;
  std::memcpy(p, src, size);
  return kSuccess;
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, uint64_t src, size_t size, void*) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  unsigned char* p = Find(src, size);
  if (p == nullptr) return kIllegalAddress;
  std::memcpy(dst, p, size);
  return kSuccess;
}
CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t size, void*) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  unsigned char* to = Find(dst, size);
  unsigned char* from = Find(src, size);
  if (to == nullptr || from == nullptr) return kIllegalAddress;
  std::memmove(to, from, size);
  return kSuccess;
}
CUresult cuMemsetD8Async(uint64_t dst, unsigned char value, size_t count, void*) { return Fill(dst, value, count); }
CUresult cuMemsetD16Async(uint64_t dst, unsigned short value, size_t count, void*) { return Fill(dst, value, count); }
CUresult cuMemsetD32Async(uint64_t dst, unsigned value, size_t count, void*) { return Fill(dst, value, count); }

CUresult cuModuleLoadData(void** module, const void*) { *module = &stream_or_event; return kSuccess; }
CUresult cuModuleUnload(void*) { return kSuccess; }
CUresult cuModuleGetFunction(void** function, void*, const char*) { *function = &stream_or_event; return kSuccess; }
CUresult cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                        void**, void**) {
  return kSuccess;
}
CUresult cuStreamCreateWithPriority(void** stream, unsigned, int) { *stream = &stream_or_event; return kSuccess; }
CUresult cuStreamDestroy_v2(void*) { return kSuccess; }
CUresult cuStreamSynchronize(void*) { return kSuccess; }
CUresult cuStreamQuery(void*) { return kSuccess; }
CUresult cuStreamWaitEvent(void*, void*, unsigned) { return kSuccess; }
CUresult cuEventCreate(void** event, unsigned) { *event = &stream_or_event; return kSuccess; }
CUresult cuEventDestroy_v2(void*) { return kSuccess; }
CUresult cuEventRecord(void*, void*) { return kSuccess; }
CUresult cuEventSynchronize(void*) { return kSuccess; }
CUresult cuEventQuery(void*) { return kSuccess; }
CUresult cuEventElapsedTime(float* ms, void*, void*) { *ms = 0; return kSuccess; }

}  // extern "C"

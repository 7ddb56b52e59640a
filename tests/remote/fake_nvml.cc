// A stand-in for the GPU host's libnvidia-ml.so.1 beside the stand-in driver
// (fake_cuda_driver.cc), so that gpupool-dataplane-testd --backend cuda serves the fake GPU
// on a machine without one: one device, the driver's UUID (bytes 00..0f), compute
// capability 7.5 as the driver says (or GPUPOOL_FAKE_CUDA_CC), no Xid events. Only what the cuda backend resolves,
// with plain C types (same ABI as nvml.h's).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kTimeout = 10;
int the_device = 0;  // its address is the handle
int the_event_set = 0;

struct Memory {
  unsigned long long total, free, used;
};
struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

}  // namespace

extern "C" {

int nvmlInit_v2() { return kSuccess; }
int nvmlShutdown() { return kSuccess; }
const char* nvmlErrorString(int) { return "fake NVML error"; }
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = 1;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index != 0) return kInvalidArgument;
  *device = &the_device;
  return kSuccess;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned size) {
  if (device != &the_device || size < 41) return kInvalidArgument;
  std::snprintf(uuid, size, "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
  return kSuccess;
}
int nvmlDeviceGetName(void* device, char* name, unsigned size) {
  if (device != &the_device) return kInvalidArgument;
  std::snprintf(name, size, "Tesla T4");
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  if (device != &the_device) return kInvalidArgument;
  memory->total = 16ull << 30;
  memory->used = 0;
  memory->free = memory->total;
  return kSuccess;
}
int nvmlDeviceGetPciInfo_v3(void* device, PciInfo* pci) {
  if (device != &the_device) return kInvalidArgument;
  std::memset(pci, 0, sizeof(*pci));
  pci->bus = 0x17;
  std::snprintf(pci->bus_id, sizeof(pci->bus_id), "00000000:17:00.0");
  return kSuccess;
}
int nvmlDeviceGetCudaComputeCapability(void* device, int* major, int* minor) {
  if (device != &the_device) return kInvalidArgument;
  *major = 7;
  *minor = 5;
  // As the stand-in driver: GPUPOOL_FAKE_CUDA_CC ("9.0") where a test asks for another.
  if (const char* given = std::getenv("GPUPOOL_FAKE_CUDA_CC")) std::sscanf(given, "%d.%d", major, minor);
  return kSuccess;
}
int nvmlEventSetCreate(void** set) {
  *set = &the_event_set;
  return kSuccess;
}
int nvmlDeviceRegisterEvents(void*, unsigned long long, void*) { return kSuccess; }
int nvmlEventSetWait_v2(void*, void*, unsigned timeout_ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  return kTimeout;
}
int nvmlEventSetFree(void*) { return kSuccess; }

}  // extern "C"

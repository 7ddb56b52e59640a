// Device queries: every leased GPU appears, with properties that agree with each other
// and with the attribute and memory queries; each device can be used.
#include <cstring>

#include "check.h"

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT(count >= 1);
  int driver = 0, runtime = 0;
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  EXPECT(driver >= runtime);
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, d));
    EXPECT(std::strlen(prop.name) > 0);
    EXPECT(prop.totalGlobalMem > 0);
    EXPECT(prop.major >= 5);
    EXPECT(prop.multiProcessorCount > 0);
    EXPECT(prop.maxThreadsPerBlock == 1024);
    EXPECT(prop.warpSize == 32);
    EXPECT(prop.unifiedAddressing == 1);
    int value = 0;
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, d));
    EXPECT(value == prop.multiProcessorCount);
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, d));
    EXPECT(value == prop.major);
    char bus[32];
    CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), d));
    int found = -1;
    CHECK(cudaDeviceGetByPCIBusId(&found, bus));
    EXPECT(found == d);
    bool uuid_set = false;
    for (char byte : prop.uuid.bytes) uuid_set |= byte != 0;
    EXPECT(uuid_set);
    for (int other = 0; other < d; ++other) {
      cudaDeviceProp earlier;
      CHECK(cudaGetDeviceProperties(&earlier, other));
      EXPECT(std::memcmp(earlier.uuid.bytes, prop.uuid.bytes, 16) != 0);
    }
    CHECK(cudaSetDevice(d));
    size_t free = 0, total = 0;
    CHECK(cudaMemGetInfo(&free, &total));
    EXPECT(total == prop.totalGlobalMem);
    EXPECT(free <= total);
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 1 << 20));
    CHECK(cudaMemset(p, 0, 1 << 20));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(p));
    std::printf("device %d: %s, cc %d.%d, %d SMs, %zu MiB, bus %s\n", d, prop.name, prop.major, prop.minor,
                prop.multiProcessorCount, prop.totalGlobalMem >> 20, bus);
  }
  return 0;
}

// The few NVML types and entry points the cuda backend uses, declared here because the
// machine that builds gpupool has no NVML headers. Layouts and values follow NVIDIA's
// public nvml.h (NVML API reference); only stable, versioned entry points are used.
// Nothing here is linked: the backend resolves every function with dlsym from
// libnvidia-ml.so.1 at run time.
#pragma once

namespace gpupool::devices::nvml {

using Return = int;  // nvmlReturn_t
constexpr Return kSuccess = 0;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorTimeout = 10;
constexpr Return kErrorGpuIsLost = 15;

struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t
struct EventSetSt;
using EventSet = EventSetSt*;  // nvmlEventSet_t

constexpr unsigned long long kEventTypeXidCriticalError = 0x0000000000000008ULL;

struct EventData {  // nvmlEventData_t
  Device device;
  unsigned long long eventType;
  unsigned long long eventData;  // the Xid for kEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct Memory {  // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct PciInfo {  // nvmlPciInfo_t (as filled by nvmlDeviceGetPciInfo_v3)
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

struct Utilization {    // nvmlUtilization_t
  unsigned int gpu;     // percent of the sample period a kernel ran
  unsigned int memory;  // percent of the sample period device memory was read or written
};

constexpr unsigned kTemperatureGpu = 0;                  // NVML_TEMPERATURE_GPU
constexpr unsigned kSystemDriverVersionBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

constexpr unsigned kUuidBufferSize = 96;
constexpr unsigned kNameBufferSize = 96;

extern "C" {
using InitFn = Return (*)();                                          // nvmlInit_v2
using ShutdownFn = Return (*)();                                      // nvmlShutdown
using ErrorStringFn = const char* (*)(Return);                        // nvmlErrorString
using DeviceGetCountFn = Return (*)(unsigned int*);                   // nvmlDeviceGetCount_v2
using DeviceGetHandleByIndexFn = Return (*)(unsigned int, Device*);   // ..._v2
using DeviceGetUuidFn = Return (*)(Device, char*, unsigned int);      // nvmlDeviceGetUUID
using DeviceGetNameFn = Return (*)(Device, char*, unsigned int);      // nvmlDeviceGetName
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);            // nvmlDeviceGetMemoryInfo
using DeviceGetPciInfoFn = Return (*)(Device, PciInfo*);              // nvmlDeviceGetPciInfo_v3
using DeviceGetComputeCapabilityFn = Return (*)(Device, int*, int*);  // ...GetCudaComputeCapability
using EventSetCreateFn = Return (*)(EventSet*);                       // nvmlEventSetCreate
using DeviceRegisterEventsFn = Return (*)(Device, unsigned long long, EventSet);
using EventSetWaitFn = Return (*)(EventSet, EventData*, unsigned int);           // nvmlEventSetWait_v2
using EventSetFreeFn = Return (*)(EventSet);                                     // nvmlEventSetFree
using DeviceGetHandleByUuidFn = Return (*)(const char*, Device*);                // nvmlDeviceGetHandleByUUID
using DeviceGetUtilizationRatesFn = Return (*)(Device, Utilization*);            // ...GetUtilizationRates
using DeviceGetTemperatureFn = Return (*)(Device, unsigned int, unsigned int*);  // ...GetTemperature
using DeviceGetPowerUsageFn = Return (*)(Device, unsigned int*);                 // nvmlDeviceGetPowerUsage (mW)
using SystemGetDriverVersionFn = Return (*)(char*, unsigned int);                // nvmlSystemGetDriverVersion
}

}  // namespace gpupool::devices::nvml

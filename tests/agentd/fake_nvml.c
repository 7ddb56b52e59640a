// A stand-in for a GPU host's libnvidia-ml.so.1 in tests of the cuda kind's NVML reader
// (remote/devices/cuda/nvml_activity.h): one GPU, fixed figures, power not measured (as
// on products without a power sensor). FAKE_NVML_INIT_FAILS=1 makes nvmlInit_v2 fail as
// on a host whose driver is not loaded. Only the entry points the reader binds.
#include <stdlib.h>
#include <string.h>

#define FAKE_UUID "GPU-11111111-2222-3333-4444-555555555555"

typedef struct {
  unsigned int gpu;
  unsigned int memory;
} Utilization;

static int fake_device;

int nvmlInit_v2(void) { return getenv("FAKE_NVML_INIT_FAILS") != NULL ? 9 : 0; }  // 9: DRIVER_NOT_LOADED
int nvmlShutdown(void) { return 0; }

const char* nvmlErrorString(int result) {
  switch (result) {
    case 0:
      return "Success";
    case 3:
      return "Not Supported";
    case 6:
      return "Not Found";
    case 9:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}

int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  if (strcmp(uuid, FAKE_UUID) != 0) return 6;
  *device = &fake_device;
  return 0;
}

int nvmlDeviceGetUtilizationRates(void* device, Utilization* utilization) {
  if (device != &fake_device) return 2;  // INVALID_ARGUMENT
  utilization->gpu = 37;
  utilization->memory = 12;
  return 0;
}

int nvmlDeviceGetTemperature(void* device, unsigned int sensor, unsigned int* celsius) {
  if (device != &fake_device || sensor != 0) return 2;
  *celsius = 61;
  return 0;
}

int nvmlDeviceGetPowerUsage(void* device, unsigned int* milliwatts) {
  (void)device;
  (void)milliwatts;
  return 3;
}

int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  const char* text = "580.95.05";
  if (length < strlen(text) + 1) return 7;  // INSUFFICIENT_SIZE
  strcpy(version, text);
  return 0;
}

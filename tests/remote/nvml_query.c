/* nvml_query: what a job's NVML says about its GPUs, checked against what its CUDA says.
 *
 * Loads libnvidia-ml.so.1 by its soname with dlopen and finds each entry point by name,
 * as pynvml does (and as nvidia-smi finds them through its link), and libcuda.so.1 the same
 * way; prints Key=Value lines (NVML's figures, CUDA's, and each check), and exits 0 only
 * when every check held:
 *   - count, names, UUIDs, PCI bus ids and total memory: NVML's agree with CUDA's, device by
 *     device (the same order);
 *   - memory used/free add up to total; figures the agents lack answer NOT_SUPPORTED;
 *   - a GPU outside the job cannot be reached: an index past the count, forged handles and
 *     every UUID given as an argument that is not one of the job's GPUs (with none given, a
 *     made-up one) are refused with INVALID_ARGUMENT or NOT_FOUND;
 *   - calls before nvmlInit and after the last nvmlShutdown answer UNINITIALIZED;
 *   - a child forked after nvmlInit gets GPU_IS_LOST from its parent's handles and
 *     NOT_SUPPORTED from its own nvmlInit; the parent goes on.
 * usage: nvml_query [GPU_UUID...]
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "remote/nvml/nvml_abi.h"

static void* nvml;
static int failures;

static void* Need(void* library, const char* name) {
  void* f = dlsym(library, name);
  if (f == NULL) {
    printf("Missing=%s\n", name);
    exit(1);
  }
  return f;
}
#define NVML(name) ((nvmlReturn_t(*)())Need(nvml, #name))

static void Check(const char* what, int ok) {
  printf("Check_%s=%s\n", what, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

static void CheckReturn(const char* what, nvmlReturn_t got, nvmlReturn_t want) {
  const char* (*error_string)(nvmlReturn_t) = (const char* (*)(nvmlReturn_t))Need(nvml, "nvmlErrorString");
  printf("Check_%s=%s (%s)\n", what, got == want ? "ok" : "FAILED", error_string(got));
  if (got != want) ++failures;
}

/* The CUDA side, through the driver API (no cuda.h needed for these few). */
typedef int (*CuInit)(unsigned);
typedef int (*CuDeviceGetCount)(int*);
typedef int (*CuDeviceGet)(int*, int);
typedef int (*CuDeviceGetName)(char*, int, int);
typedef int (*CuDeviceGetUuid)(unsigned char*, int);
typedef int (*CuDeviceTotalMem)(size_t*, int);
typedef int (*CuDeviceGetPCIBusId)(char*, int, int);

int main(int argc, char** argv) {
  const char* foreign = "GPU-00000000-0000-0000-0000-000000000000";
  static char own_uuids[64][NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == NULL) {
    printf("Error=%s\n", dlerror());
    return 1;
  }
  Dl_info where;
  if (dladdr(dlsym(nvml, "nvmlInit_v2"), &where) != 0) printf("Library=%s\n", where.dli_fname);

  unsigned count = 0;
  CheckReturn("CountBeforeInit", NVML(nvmlDeviceGetCount_v2)(&count), NVML_ERROR_UNINITIALIZED);
  nvmlReturn_t r = NVML(nvmlInit_v2)();
  if (r != NVML_SUCCESS) {
    printf("Init=%d\n", r);
    return 1;
  }
  r = NVML(nvmlDeviceGetCount_v2)(&count);
  printf("Count=%u\n", count);
  Check("Count", r == NVML_SUCCESS && count > 0);
  int cuda_version = 0;
  r = NVML(nvmlSystemGetCudaDriverVersion_v2)(&cuda_version);
  printf("CudaDriverVersion=%d\n", cuda_version);
  char text[128];
  CheckReturn("DriverVersionNotSupported", NVML(nvmlSystemGetDriverVersion)(text, (unsigned)sizeof text),
              NVML_ERROR_NOT_SUPPORTED);

  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == NULL) {
    printf("Error=%s\n", dlerror());
    return 1;
  }
  int cuda_count = 0, cuda_driver = 0;
  Check("CudaInit", ((CuInit)Need(cuda, "cuInit"))(0) == 0);
  ((CuDeviceGetCount)Need(cuda, "cuDeviceGetCount"))(&cuda_count);
  ((int (*)(int*))Need(cuda, "cuDriverGetVersion"))(&cuda_driver);
  printf("CUDA_Count=%d\nCUDA_DriverVersion=%d\n", cuda_count, cuda_driver);
  Check("CountMatchesCuda", (int)count == cuda_count);
  Check("CudaVersionMatchesCuda", cuda_version == cuda_driver);

  nvmlDevice_t first = NULL;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t device = NULL;
    r = NVML(nvmlDeviceGetHandleByIndex_v2)(i, &device);
    if (r != NVML_SUCCESS) {
      printf("GPU%u_Handle=%d\n", i, r);
      ++failures;
      continue;
    }
    if (i == 0) first = device;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    NVML(nvmlDeviceGetName)(device, name, (unsigned)sizeof name);
    NVML(nvmlDeviceGetUUID)(device, uuid, (unsigned)sizeof uuid);
    if (i < 64) memcpy(own_uuids[i], uuid, sizeof uuid);
    nvmlPciInfo_t pci;
    memset(&pci, 0, sizeof pci);
    NVML(nvmlDeviceGetPciInfo_v3)(device, &pci);
    nvmlMemory_t memory = {0, 0, 0};
    Check("MemoryInfo", NVML(nvmlDeviceGetMemoryInfo)(device, &memory) == NVML_SUCCESS);
    nvmlMemory_v2_t memory2;
    memset(&memory2, 0, sizeof memory2);
    memory2.version = nvmlMemory_v2;
    Check("MemoryInfoV2", NVML(nvmlDeviceGetMemoryInfo_v2)(device, &memory2) == NVML_SUCCESS);
    int major = 0, minor = 0;
    NVML(nvmlDeviceGetCudaComputeCapability)(device, &major, &minor);
    nvmlComputeMode_t mode = NVML_COMPUTEMODE_PROHIBITED;
    NVML(nvmlDeviceGetComputeMode)(device, &mode);
    unsigned mig = 9, mig_pending = 9, index = 99;
    NVML(nvmlDeviceGetMigMode)(device, &mig, &mig_pending);
    NVML(nvmlDeviceGetIndex)(device, &index);
    printf("GPU%u_Name=%s\nGPU%u_UUID=%s\nGPU%u_BusId=%s\nGPU%u_BusIdLegacy=%s\n", i, name, i, uuid, i, pci.busId, i,
           pci.busIdLegacy);
    printf("GPU%u_MemoryTotal=%llu\nGPU%u_MemoryUsed=%llu\nGPU%u_MemoryFree=%llu\n", i, memory.total, i, memory.used, i,
           memory.free);
    printf("GPU%u_ComputeCapability=%d.%d\nGPU%u_ComputeMode=%d\nGPU%u_MigMode=%u/%u\n", i, major, minor, i, (int)mode,
           i, mig, mig_pending);
    Check("MemoryAddsUp", memory.total > 0 && memory.used + memory.free == memory.total);
    Check("MemoryV2AgreesWithV1", memory2.total == memory.total);
    Check("Index", index == i);
    Check("ComputeModeDefault", mode == NVML_COMPUTEMODE_DEFAULT);
    Check("MigOff", mig == NVML_DEVICE_MIG_DISABLE && mig_pending == NVML_DEVICE_MIG_DISABLE);
    nvmlUtilization_t utilization;
    CheckReturn("UtilizationNotSupported", NVML(nvmlDeviceGetUtilizationRates)(device, &utilization),
                NVML_ERROR_NOT_SUPPORTED);
    unsigned value = 0;
    CheckReturn("TemperatureNotSupported", NVML(nvmlDeviceGetTemperature)(device, 0, &value), NVML_ERROR_NOT_SUPPORTED);
    CheckReturn("PowerNotSupported", NVML(nvmlDeviceGetPowerUsage)(device, &value), NVML_ERROR_NOT_SUPPORTED);
    unsigned processes = 0;
    CheckReturn("ProcessesNotSupported", NVML(nvmlDeviceGetComputeRunningProcesses_v3)(device, &processes, NULL),
                NVML_ERROR_NOT_SUPPORTED);
    nvmlDevice_t again = NULL;
    CheckReturn("HandleByUUID", NVML(nvmlDeviceGetHandleByUUID)(uuid, &again), NVML_SUCCESS);
    Check("HandleByUUIDSame", again == device);
    again = NULL;
    CheckReturn("HandleByPciBusId", NVML(nvmlDeviceGetHandleByPciBusId_v2)(pci.busId, &again), NVML_SUCCESS);
    Check("HandleByPciBusIdSame", again == device);
    char small[4];
    CheckReturn("NameTooSmall", NVML(nvmlDeviceGetName)(device, small, (unsigned)sizeof small),
                NVML_ERROR_INSUFFICIENT_SIZE);

    /* The same device through CUDA. */
    int cu_device = -1;
    char cu_name[256] = "", cu_bus[64] = "";
    unsigned char cu_uuid[16];
    size_t cu_total = 0;
    ((CuDeviceGet)Need(cuda, "cuDeviceGet"))(&cu_device, (int)i);
    ((CuDeviceGetName)Need(cuda, "cuDeviceGetName"))(cu_name, (int)sizeof cu_name, cu_device);
    ((CuDeviceGetUuid)Need(cuda, "cuDeviceGetUuid"))(cu_uuid, cu_device);
    ((CuDeviceTotalMem)Need(cuda, "cuDeviceTotalMem_v2"))(&cu_total, cu_device);
    ((CuDeviceGetPCIBusId)Need(cuda, "cuDeviceGetPCIBusId"))(cu_bus, (int)sizeof cu_bus, cu_device);
    char cu_uuid_text[64];
    snprintf(cu_uuid_text, sizeof cu_uuid_text,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", cu_uuid[0], cu_uuid[1],
             cu_uuid[2], cu_uuid[3], cu_uuid[4], cu_uuid[5], cu_uuid[6], cu_uuid[7], cu_uuid[8], cu_uuid[9],
             cu_uuid[10], cu_uuid[11], cu_uuid[12], cu_uuid[13], cu_uuid[14], cu_uuid[15]);
    printf("CUDA%u_Name=%s\nCUDA%u_UUID=%s\nCUDA%u_BusId=%s\nCUDA%u_MemoryTotal=%zu\n", i, cu_name, i, cu_uuid_text, i,
           cu_bus, i, cu_total);
    Check("NameMatchesCuda", strcmp(name, cu_name) == 0);
    Check("UUIDMatchesCuda", strcasecmp(uuid, cu_uuid_text) == 0);
    Check("BusIdMatchesCuda", strcasecmp(pci.busIdLegacy, cu_bus) == 0);
    Check("MemoryTotalMatchesCuda", memory.total == (unsigned long long)cu_total);
  }

  /* Memory the job's CUDA process holds shows as used (the agent's figure for the GPU). */
  if (count > 0) {
    int cu_device = -1;
    void* context = NULL;
    unsigned long long allocation = 0;
    const size_t kBytes = 256u << 20;
    ((CuDeviceGet)Need(cuda, "cuDeviceGet"))(&cu_device, 0);
    int ok = ((int (*)(void**, int))Need(cuda, "cuDevicePrimaryCtxRetain"))(&context, cu_device) == 0 &&
             ((int (*)(void*))Need(cuda, "cuCtxSetCurrent"))(context) == 0 &&
             ((int (*)(unsigned long long*, size_t))Need(cuda, "cuMemAlloc_v2"))(&allocation, kBytes) == 0;
    Check("CudaAllocated", ok);
    nvmlDevice_t device = NULL;
    nvmlMemory_t before = {0, 0, 0}, after = {0, 0, 0};
    NVML(nvmlDeviceGetHandleByIndex_v2)(0, &device);
    NVML(nvmlDeviceGetMemoryInfo)(device, &after);
    ((int (*)(unsigned long long))Need(cuda, "cuMemFree_v2"))(allocation);
    NVML(nvmlDeviceGetMemoryInfo)(device, &before);
    printf("GPU0_MemoryUsedWithAllocation=%llu\nGPU0_MemoryUsedAfterFree=%llu\n", after.used, before.used);
    Check("AllocationShowsAsUsed", after.used >= before.used + kBytes);
  }

  /* Outside the lease: nothing is reached. */
  nvmlDevice_t device = NULL;
  CheckReturn("IndexAtCount", NVML(nvmlDeviceGetHandleByIndex_v2)(count, &device), NVML_ERROR_INVALID_ARGUMENT);
  CheckReturn("IndexFarBeyond", NVML(nvmlDeviceGetHandleByIndex_v2)(0x7fffffffu, &device), NVML_ERROR_INVALID_ARGUMENT);
  /* Each UUID given that is not one of the job's own GPUs (or the made-up one). */
  for (int k = argc > 1 ? 1 : 0; k < (argc > 1 ? argc : 1); ++k) {
    const char* uuid = argc > 1 ? argv[k] : foreign;
    int own = 0;
    for (unsigned i = 0; i < count && i < 64; ++i) own |= strcmp(uuid, own_uuids[i]) == 0;
    if (own) continue;
    printf("Foreign=%s\n", uuid);
    CheckReturn("ForeignUUID", NVML(nvmlDeviceGetHandleByUUID)(uuid, &device), NVML_ERROR_NOT_FOUND);
  }
  char fake_device[256];
  memset(fake_device, 0x41, sizeof fake_device);
  char name[128];
  nvmlMemory_t memory;
  CheckReturn("ForgedHandleName", NVML(nvmlDeviceGetName)((nvmlDevice_t)fake_device, name, (unsigned)sizeof name),
              NVML_ERROR_INVALID_ARGUMENT);
  CheckReturn("ForgedHandleMemory", NVML(nvmlDeviceGetMemoryInfo)((nvmlDevice_t)0x1000, &memory),
              NVML_ERROR_INVALID_ARGUMENT);
  CheckReturn("ShiftedHandle", NVML(nvmlDeviceGetUUID)((nvmlDevice_t)((char*)first + 8), name, (unsigned)sizeof name),
              NVML_ERROR_INVALID_ARGUMENT);
  CheckReturn("NullHandle", NVML(nvmlDeviceGetName)(NULL, name, (unsigned)sizeof name), NVML_ERROR_INVALID_ARGUMENT);
  Check("UnknownEntryPointAbsent", dlsym(nvml, "nvmlDeviceGetGpupoolNoSuchThing") == NULL);

  /* A forked child: the parent's sessions are not its own, and it cannot open its own
     (the parent's UCX state is inherited), as a forked child's cuInit is refused; the
     parent goes on. */
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    nvmlMemory_t child_memory = {0, 0, 0};
    int lost = NVML(nvmlDeviceGetMemoryInfo)(first, &child_memory) == NVML_ERROR_GPU_IS_LOST;
    int refused = NVML(nvmlShutdown)() == NVML_SUCCESS && NVML(nvmlInit_v2)() == NVML_ERROR_NOT_SUPPORTED;
    _exit(lost && refused ? 0 : 1);
  }
  int child_status = -1;
  waitpid(child, &child_status, 0);
  Check("ForkedChild", WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0);
  nvmlMemory_t parent_memory = {0, 0, 0};
  CheckReturn("ParentAfterFork", NVML(nvmlDeviceGetMemoryInfo)(first, &parent_memory), NVML_SUCCESS);

  /* Counted init: a second init needs a second shutdown. */
  CheckReturn("SecondInit", NVML(nvmlInit)(), NVML_SUCCESS);
  CheckReturn("FirstShutdown", NVML(nvmlShutdown)(), NVML_SUCCESS);
  CheckReturn("CountBetweenShutdowns", NVML(nvmlDeviceGetCount_v2)(&count), NVML_SUCCESS);
  CheckReturn("LastShutdown", NVML(nvmlShutdown)(), NVML_SUCCESS);
  CheckReturn("HandleAfterShutdown", NVML(nvmlDeviceGetName)(first, name, (unsigned)sizeof name),
              NVML_ERROR_UNINITIALIZED);
  printf("Failures=%d\n", failures);
  return failures == 0 ? 0 : 1;
}

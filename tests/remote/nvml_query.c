/* nvml_query: what a job's NVML says about its GPUs, checked against what its CUDA says.
 *
 * Loads libnvidia-ml.so.1 by its soname with dlopen and finds each entry point by name,
 * as pynvml does (and as nvidia-smi finds them through its link), and libcuda.so.1 the same
 * way; prints Key=Value lines (NVML's figures, CUDA's, and each check), and exits 0 only
 * when every check held:
 *   - count, names, UUIDs, PCI bus ids and total memory: NVML's agree with CUDA's, device by
 *     device (the same order);
 *   - memory used/free add up to total; figures the agents lack answer NOT_SUPPORTED;
 *   - utilisation: about 0 after a second idle, over 20% right after a second of busy
 *     kernels (a PTX spin loop through libcuda.so.1); the driver version is answered;
 *   - processes (v1, v2, v3 layouts, NVML's sizing protocol): this process, with the
 *     device memory it holds, and no other pid (NVML's own sessions only watch);
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
#include <time.h>
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

/* NVML's list of the GPU's processes in each layout: this process alone (NVML's own
   sessions only watch; another job's processes are another lease's), holding at least
   `held` bytes. */
static void CheckProcesses(nvmlDevice_t device, unsigned long long held) {
  unsigned count = 0;
  CheckReturn("ProcessesSizing", NVML(nvmlDeviceGetComputeRunningProcesses_v3)(device, &count, NULL),
              NVML_ERROR_INSUFFICIENT_SIZE);
  printf("GPU0_ProcessCount=%u\n", count);
  Check("ProcessCountOne", count == 1);
  nvmlProcessInfo_t v3[8];
  nvmlProcessInfo_v2_t v2[8];
  nvmlProcessInfo_v1_t v1[8];
  unsigned n3 = 8, n2 = 8, n1 = 8;
  memset(v3, 0, sizeof v3);
  CheckReturn("ProcessesV3", NVML(nvmlDeviceGetComputeRunningProcesses_v3)(device, &n3, v3), NVML_SUCCESS);
  CheckReturn("ProcessesV2", NVML(nvmlDeviceGetComputeRunningProcesses_v2)(device, &n2, v2), NVML_SUCCESS);
  CheckReturn("ProcessesV1", NVML(nvmlDeviceGetComputeRunningProcesses)(device, &n1, v1), NVML_SUCCESS);
  int own = 0, others = 0;
  for (unsigned k = 0; k < n3 && k < 8; ++k) {
    printf("GPU0_Process=%u used=%llu gi=%u ci=%u\n", v3[k].pid, v3[k].usedGpuMemory, v3[k].gpuInstanceId,
           v3[k].computeInstanceId);
    if (v3[k].pid == (unsigned)getpid() && v3[k].usedGpuMemory >= held) ++own;
    if (v3[k].pid != (unsigned)getpid()) ++others;
  }
  Check("OwnProcessWithItsMemory", own == 1);
  Check("NoOtherProcess", others == 0);
  Check("ProcessLayoutsAgree", n1 == n3 && n2 == n3 && n3 >= 1 && v1[0].pid == v3[0].pid &&
                                   v1[0].usedGpuMemory == v3[0].usedGpuMemory && v2[0].pid == v3[0].pid &&
                                   v2[0].usedGpuMemory == v3[0].usedGpuMemory &&
                                   v3[0].gpuInstanceId == NVML_VALUE_NOT_AVAILABLE_UINT);
  CheckReturn("ProcessesNullCount", NVML(nvmlDeviceGetComputeRunningProcesses_v3)(device, NULL, v3),
              NVML_ERROR_INVALID_ARGUMENT);
}

/* A kernel that spins `n` times per thread (PTX: the sim runs it, a real GPU JIT-compiles). */
static const char kSpinPtx[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry spin(.param .u64 out, .param .u32 n)\n{\n"
    "  .reg .u32 %r<4>;\n  .reg .u64 %rd<3>;\n  .reg .pred %p;\n"
    "  ld.param.u64 %rd1, [out];\n  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, 0;\n  mov.u32 %r3, 0;\n"
    "LOOP:\n  add.u32 %r3, %r3, %r2;\n  add.u32 %r2, %r2, 1;\n"
    "  setp.lt.u32 %p, %r2, %r1;\n  @%p bra LOOP;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n  st.global.u32 [%rd2], %r3;\n  ret;\n}\n";

static double Seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* Utilisation after a second and a half idle, then right after a second of spin kernels
   (each at least ~20 ms long, so that kernels, not round trips, fill the time). */
static void UtilizationIdleThenBusy(void* cuda, nvmlDevice_t device) {
  nvmlUtilization_t idle = {99, 99}, busy = {0, 0};
  usleep(1500 * 1000);
  CheckReturn("UtilizationIdleAnswered", NVML(nvmlDeviceGetUtilizationRates)(device, &idle), NVML_SUCCESS);
  printf("GPU0_UtilizationIdle=%u%%\nGPU0_MemoryUtilizationIdle=%u%%\n", idle.gpu, idle.memory);
  Check("UtilizationIdle", idle.gpu <= 5);
  void* module = NULL;
  void* function = NULL;
  unsigned long long out = 0;
  int ok = ((int (*)(void**, const void*))Need(cuda, "cuModuleLoadData"))(&module, kSpinPtx) == 0 &&
           ((int (*)(void**, void*, const char*))Need(cuda, "cuModuleGetFunction"))(&function, module, "spin") == 0 &&
           ((int (*)(unsigned long long*, size_t))Need(cuda, "cuMemAlloc_v2"))(&out, 4) == 0;
  Check("SpinKernelLoaded", ok);
  if (!ok) return;
  typedef int (*Launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                        void**);
  Launch launch = (Launch)Need(cuda, "cuLaunchKernel");
  int (*sync)(void) = (int (*)(void))Need(cuda, "cuCtxSynchronize");
  unsigned n = 1000;
  void* params[] = {&out, &n};
  /* Longer kernels until one takes 20 ms. */
  for (;;) {
    double start = Seconds();
    if (launch(function, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL) != 0 || sync() != 0) {
      Check("SpinKernelRan", 0);
      return;
    }
    if (Seconds() - start >= 0.02 || n >= (1u << 30)) break;
    n *= 2;
  }
  printf("SpinIterations=%u\n", n);
  double until = Seconds() + 1.0;
  int launches = 0;
  while (Seconds() < until) {
    if (launch(function, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL) != 0 || sync() != 0) break;
    ++launches;
  }
  CheckReturn("UtilizationBusyAnswered", NVML(nvmlDeviceGetUtilizationRates)(device, &busy), NVML_SUCCESS);
  printf("SpinLaunches=%d\nGPU0_UtilizationBusy=%u%%\nGPU0_MemoryUtilizationBusy=%u%%\n", launches, busy.gpu,
         busy.memory);
  Check("UtilizationBusy", busy.gpu >= 20 && busy.gpu <= 100);
  ((int (*)(unsigned long long))Need(cuda, "cuMemFree_v2"))(out);
  ((int (*)(void*))Need(cuda, "cuModuleUnload"))(module);
}

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
  char text[128] = "";
  CheckReturn("DriverVersion", NVML(nvmlSystemGetDriverVersion)(text, (unsigned)sizeof text), NVML_SUCCESS);
  printf("DriverVersion=%s\n", text);
  Check("DriverVersionNamed", text[0] != '\0');
  CheckReturn("DriverVersionTooSmall", NVML(nvmlSystemGetDriverVersion)(text, 2), NVML_ERROR_INSUFFICIENT_SIZE);

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
    nvmlUtilization_t utilization = {0, 0};
    CheckReturn("Utilization", NVML(nvmlDeviceGetUtilizationRates)(device, &utilization), NVML_SUCCESS);
    /* Where the device reports no temperature or power (the sim), NOT_SUPPORTED. */
    unsigned value = 0;
    nvmlReturn_t temperature = NVML(nvmlDeviceGetTemperature)(device, 0, &value);
    printf("GPU%u_Temperature=%s%u\n", i, temperature == NVML_SUCCESS ? "" : "N/A ", value);
    Check("TemperatureAnsweredOrNotSupported", temperature == NVML_SUCCESS || temperature == NVML_ERROR_NOT_SUPPORTED);
    CheckReturn("TemperatureOtherSensor", NVML(nvmlDeviceGetTemperature)(device, 7, &value),
                NVML_ERROR_INVALID_ARGUMENT);
    nvmlReturn_t power = NVML(nvmlDeviceGetPowerUsage)(device, &value);
    Check("PowerAnsweredOrNotSupported", power == NVML_SUCCESS || power == NVML_ERROR_NOT_SUPPORTED);
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
    CheckProcesses(device, kBytes);
    UtilizationIdleThenBusy(cuda, device);
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

// The replacement libnvidia-ml.so.1: the NVML calls that tools (nvidia-smi, pynvml) and
// frameworks make, answered for the job's pool GPUs from what their agents say
// (pool_gpus.h). Every exported function is a C ABI boundary: nothing is thrown across
// it (NVML_BODY turns any exception into NVML_ERROR_UNKNOWN), handles the caller passes
// are looked up before they are used, and nothing is answered about a GPU the job's lease
// does not hold.
//
// NVML's lifetime rules: nvmlInit (any of its versions) counts, nvmlShutdown uncounts;
// the GPUs' sessions are opened at the first init and closed at the last shutdown. A call
// before init answers NVML_ERROR_UNINITIALIZED.
#include <cuda.h>  // CUDA_VERSION: the version libcuda.so.1's cuDriverGetVersion answers

#include <pthread.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "remote/nvml/nvml_abi.h"
#include "remote/nvml/pool_gpus.h"

#define NVML_API extern "C" __attribute__((visibility("default")))

namespace {

using gpupool::nvml::OpenError;
using gpupool::nvml::PoolGpu;
using gpupool::nvml::PoolGpus;

// Guards the table and the init count: calls take it shared, init and shutdown exclusive.
std::shared_mutex table_mu;
PoolGpus* table = new PoolGpus();  // never destroyed: exit order is unknowable
int init_count = 0;                // guarded by table_mu

void LogError(const std::string& message) { std::fprintf(stderr, "gpupool-nvml: %s\n", message.c_str()); }

template <typename Body>
nvmlReturn_t Guarded(Body body) noexcept {
  try {
    return body();
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}
#define NVML_BODY(...) return Guarded([&]() -> nvmlReturn_t __VA_ARGS__)

// Looks up a handle the caller passed (under a shared lock the caller holds).
nvmlReturn_t Lookup(nvmlDevice_t device, PoolGpu** gpu) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  *gpu = table->Find(device);
  if (*gpu == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if ((*gpu)->session == nullptr) return NVML_ERROR_GPU_IS_LOST;
  return NVML_SUCCESS;
}

nvmlReturn_t CopyOut(const char* text, char* buffer, unsigned int length) {
  if (buffer == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  size_t needed = std::strlen(text) + 1;
  if (length < needed) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buffer, text, needed);
  return NVML_SUCCESS;
}

// Set in a child forked from this process (registered when the library is loaded).
bool forked_child = false;
[[maybe_unused]] const bool fork_handler_registered = [] {
  pthread_atfork(nullptr, nullptr, [] {
    forked_child = true;
    table->AbandonAfterFork();
  });
  return true;
}();

// Once per process, at the first init: at exit, open sessions are closed while the
// transport module is still loaded (atexit handlers run before shared libraries'
// destructors), so an agent sees a clean close also from a program that never calls
// nvmlShutdown (as libcuda.so.1 does at exit).
void RegisterExitHandler() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    std::atexit([] {
      // Not while another thread is inside a call (it may wait on an agent): then the
      // sessions end with the process, as a killed one's do.
      std::unique_lock<std::shared_mutex> lock(table_mu, std::try_to_lock);
      if (!lock.owns_lock()) return;
      if (!forked_child) table->Close();
      init_count = 0;
    });
  });
}

nvmlReturn_t Init() {
  RegisterExitHandler();
  std::unique_lock<std::shared_mutex> lock(table_mu);
  if (init_count > 0) {
    ++init_count;
    return NVML_SUCCESS;
  }
  // A child of a process whose NVML or CUDA reached its GPUs: the parent's transport state
  // is not usable here (libcuda.so.1 answers such a child's cuInit the same way).
  if (forked_child && PoolGpus::TransportLoaded()) {
    LogError(
        "this process was forked from one whose NVML or CUDA had reached its pool "
        "GPUs; it cannot reach them itself (use NVML in the parent, or in a process "
        "started with exec)");
    return NVML_ERROR_NOT_SUPPORTED;
  }
  std::string why;
  switch (table->Open(&why)) {
    case OpenError::kNone:
      init_count = 1;
      for (size_t i = 0; i < table->count(); ++i) {
        if (!table->at(i)->why_lost.empty()) LogError(table->at(i)->why_lost);
      }
      return NVML_SUCCESS;
    case OpenError::kRefused:
      LogError(why);
      return NVML_ERROR_NO_PERMISSION;
    case OpenError::kTransport:
      LogError(why);
      return NVML_ERROR_LIBRARY_NOT_FOUND;
    case OpenError::kNoGpus:
    case OpenError::kBadEnvironment:
      LogError(why);
      return NVML_ERROR_DRIVER_NOT_LOADED;
  }
  return NVML_ERROR_UNKNOWN;
}

nvmlReturn_t Count(unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::shared_lock<std::shared_mutex> lock(table_mu);
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  *count = static_cast<unsigned int>(table->count());
  return NVML_SUCCESS;
}

nvmlReturn_t HandleByIndex(unsigned int index, nvmlDevice_t* device) {
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::shared_lock<std::shared_mutex> lock(table_mu);
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  PoolGpu* gpu = table->at(index);
  if (gpu == nullptr) return NVML_ERROR_INVALID_ARGUMENT;  // beyond the job's GPUs
  if (gpu->session == nullptr) return NVML_ERROR_GPU_IS_LOST;
  *device = reinterpret_cast<nvmlDevice_t>(gpu);
  return NVML_SUCCESS;
}

// The handle of the GPU whose field `matches`; NVML_ERROR_NOT_FOUND when none of the
// job's GPUs does (another job's GPU is not found either: it is not in the table).
template <typename Match>
nvmlReturn_t HandleWhere(const void* key, nvmlDevice_t* device, Match matches) {
  if (key == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::shared_lock<std::shared_mutex> lock(table_mu);
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  for (size_t i = 0; i < table->count(); ++i) {
    PoolGpu* gpu = table->at(i);
    if (gpu->session != nullptr && matches(*gpu)) {
      *device = reinterpret_cast<nvmlDevice_t>(gpu);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

// "00000000:07:00.0" as NVML writes busId; "0000:07:00.0" as busIdLegacy (and CUDA).
void BusIds(const PoolGpu& gpu, char* bus_id, size_t bus_id_size, char* legacy, size_t legacy_size) {
  std::snprintf(bus_id, bus_id_size, "%08X:%02X:%02X.0", gpu.pci_domain & 0xffffffffu, gpu.pci_bus & 0xffu,
                gpu.pci_device & 0xffu);
  std::snprintf(legacy, legacy_size, "%04X:%02X:%02X.0", gpu.pci_domain & 0xffffu, gpu.pci_bus & 0xffu,
                gpu.pci_device & 0xffu);
}

nvmlReturn_t PciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::shared_lock<std::shared_mutex> lock(table_mu);
  PoolGpu* gpu = nullptr;
  if (nvmlReturn_t r = Lookup(device, &gpu); r != NVML_SUCCESS) return r;
  std::memset(pci, 0, sizeof(*pci));
  BusIds(*gpu, pci->busId, sizeof(pci->busId), pci->busIdLegacy, sizeof(pci->busIdLegacy));
  pci->domain = gpu->pci_domain;
  pci->bus = gpu->pci_bus;
  pci->device = gpu->pci_device;
  // NVIDIA's vendor id; the device id is not in what the agents report (0).
  pci->pciDeviceId = 0x10de;
  return NVML_SUCCESS;
}

// total/free as the GPU's agent answers them (the same figures cuMemGetInfo gets).
nvmlReturn_t Memory(nvmlDevice_t device, unsigned long long* total, unsigned long long* free) {
  std::shared_lock<std::shared_mutex> lock(table_mu);
  PoolGpu* gpu = nullptr;
  if (nvmlReturn_t r = Lookup(device, &gpu); r != NVML_SUCCESS) return r;
  uint64_t free_bytes = 0, total_bytes = 0;
  std::string why;
  if (!PoolGpus::MemoryInfo(gpu, &free_bytes, &total_bytes, &why)) {
    LogError("GPU " + gpu->uuid + ": " + why);
    return NVML_ERROR_GPU_IS_LOST;
  }
  if (free_bytes > total_bytes) free_bytes = total_bytes;  // used = total - free stays >= 0
  *total = total_bytes;
  *free = free_bytes;
  return NVML_SUCCESS;
}

// The GPU's status from its agent (kOpGpuStatus), with up to `max_processes` processes.
nvmlReturn_t GpuStatus(nvmlDevice_t device, uint32_t max_processes, gpupool::dataplane::GpuStatusResult* result,
                       std::vector<gpupool::dataplane::GpuProcess>* processes) {
  std::shared_lock<std::shared_mutex> lock(table_mu);
  PoolGpu* gpu = nullptr;
  if (nvmlReturn_t r = Lookup(device, &gpu); r != NVML_SUCCESS) return r;
  std::string why;
  if (!PoolGpus::GpuStatus(gpu, max_processes, result, processes, &why)) {
    LogError("GPU " + gpu->uuid + ": " + why);
    return NVML_ERROR_GPU_IS_LOST;
  }
  return NVML_SUCCESS;
}

// nvmlDeviceGetComputeRunningProcesses in each of its layouts: the sessions of the job's
// own lease on the GPU, each with the pid its process had at hello (on its own host) and
// the device memory it holds. NVML's sizing protocol: *count is the room in `infos`; with
// too little, INSUFFICIENT_SIZE and *count the room needed; with none needed, SUCCESS.
template <typename Info>
nvmlReturn_t RunningProcesses(nvmlDevice_t device, unsigned int* count, Info* infos) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const uint32_t room = infos == nullptr ? 0 : *count;
  gpupool::dataplane::GpuStatusResult status;
  std::vector<gpupool::dataplane::GpuProcess> processes;
  if (nvmlReturn_t r = GpuStatus(device, room, &status, &processes); r != NVML_SUCCESS) return r;
  if (status.process_count > room || processes.size() < status.process_count) {
    *count = status.process_count;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < processes.size(); ++i) {
    Info info;
    std::memset(&info, 0, sizeof(info));
    info.pid = processes[i].pid;
    info.usedGpuMemory = processes[i].used_bytes;
    if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
      info.gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;  // no MIG
      info.computeInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
    }
    infos[i] = info;
  }
  *count = static_cast<unsigned int>(processes.size());
  return NVML_SUCCESS;
}

}  // namespace

// ---- Initialisation -------------------------------------------------------------------

NVML_API nvmlReturn_t nvmlInit_v2(void) {
  NVML_BODY({ return Init(); });
}
NVML_API nvmlReturn_t nvmlInit(void) {
  NVML_BODY({ return Init(); });
}
// Flags (NVML_INIT_FLAG_NO_GPUS, NO_ATTACH) change nothing here: a pool GPU is reached
// through its agent, never attached to.
NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int /*flags*/) {
  NVML_BODY({ return Init(); });
}

NVML_API nvmlReturn_t nvmlShutdown(void) {
  NVML_BODY({
    std::unique_lock<std::shared_mutex> lock(table_mu);
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (--init_count == 0) table->Close();
    return NVML_SUCCESS;
  });
}

NVML_API const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    case NVML_ERROR_NOT_READY:
      return "Not Ready";
    default:
      return "Unknown Error";
  }
}

// ---- System -----------------------------------------------------------------------------

// What libcuda.so.1's cuDriverGetVersion answers (the two libraries are built together).
NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  NVML_BODY({
    if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *version = CUDA_VERSION;
    return NVML_SUCCESS;
  });
}
NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return nvmlSystemGetCudaDriverVersion(version);
}

// ---- Devices: which ---------------------------------------------------------------------

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  NVML_BODY({ return Count(count); });
}
NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  NVML_BODY({ return Count(count); });
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  NVML_BODY({ return HandleByIndex(index, device); });
}
NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  NVML_BODY({ return HandleByIndex(index, device); });
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  NVML_BODY({ return HandleWhere(uuid, device, [&](const PoolGpu& gpu) { return gpu.uuid == uuid; }); });
}

// Matches NVML's forms: "00000000:07:00.0", "0000:07:00.0", "07:00.0"; any case.
nvmlReturn_t HandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  NVML_BODY({
    unsigned domain = 0, bus = 0, slot = 0, function = 0;
    if (bus_id != nullptr && std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4) {
      domain = 0;
      if (std::sscanf(bus_id, "%x:%x.%x", &bus, &slot, &function) != 3) {
        return NVML_ERROR_INVALID_ARGUMENT;
      }
    }
    return HandleWhere(bus_id, device, [&](const PoolGpu& gpu) {
      return gpu.pci_domain == domain && gpu.pci_bus == bus && gpu.pci_device == slot && function == 0;
    });
  });
}
NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
  return HandleByPciBusId(bus_id, device);
}
NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  return HandleByPciBusId(bus_id, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  NVML_BODY({
    if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::shared_lock<std::shared_mutex> lock(table_mu);
    PoolGpu* gpu = nullptr;
    if (nvmlReturn_t r = Lookup(device, &gpu); r != NVML_SUCCESS) return r;
    *index = static_cast<unsigned int>(gpu->index);
    return NVML_SUCCESS;
  });
}

// ---- Devices: what ----------------------------------------------------------------------

// The name cuDeviceGetName answers ("NVIDIA A100-SXM4-80GB").
NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  NVML_BODY({
    std::shared_lock<std::shared_mutex> lock(table_mu);
    PoolGpu* gpu = nullptr;
    if (nvmlReturn_t r = Lookup(device, &gpu); r != NVML_SUCCESS) return r;
    return CopyOut(gpu->description.name, name, length);
  });
}

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx": the UUID gpupoold and GPUPOOL_GPUS name,
// whose 16 bytes cuDeviceGetUuid answers.
NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  NVML_BODY({
    std::shared_lock<std::shared_mutex> lock(table_mu);
    PoolGpu* gpu = nullptr;
    if (nvmlReturn_t r = Lookup(device, &gpu); r != NVML_SUCCESS) return r;
    return CopyOut(gpu->description.uuid, uuid, length);
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  NVML_BODY({ return PciInfo(device, pci); });
}
NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  NVML_BODY({ return PciInfo(device, pci); });
}
NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  NVML_BODY({ return PciInfo(device, pci); });
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  NVML_BODY({
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total = 0, free = 0;
    if (nvmlReturn_t r = Memory(device, &total, &free); r != NVML_SUCCESS) return r;
    memory->total = total;
    memory->free = free;
    memory->used = total - free;
    return NVML_SUCCESS;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  NVML_BODY({
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total = 0, free = 0;
    if (nvmlReturn_t r = Memory(device, &total, &free); r != NVML_SUCCESS) return r;
    memory->total = total;
    memory->reserved = 0;  // the agents report no memory set aside for the system
    memory->free = free;
    memory->used = total - free;
    return NVML_SUCCESS;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  NVML_BODY({
    if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::shared_lock<std::shared_mutex> lock(table_mu);
    PoolGpu* gpu = nullptr;
    if (nvmlReturn_t r = Lookup(device, &gpu); r != NVML_SUCCESS) return r;
    *major = gpu->description.cc_major;
    *minor = gpu->description.cc_minor;
    return NVML_SUCCESS;
  });
}

// Every process of the job may use every GPU of its lease: the default mode.
NVML_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  NVML_BODY({
    if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::shared_lock<std::shared_mutex> lock(table_mu);
    PoolGpu* gpu = nullptr;
    if (nvmlReturn_t r = Lookup(device, &gpu); r != NVML_SUCCESS) return r;
    *mode = NVML_COMPUTEMODE_DEFAULT;
    return NVML_SUCCESS;
  });
}

// A pool GPU is leased whole: MIG is off, now and after a reset.
NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current, unsigned int* pending) {
  NVML_BODY({
    if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::shared_lock<std::shared_mutex> lock(table_mu);
    PoolGpu* gpu = nullptr;
    if (nvmlReturn_t r = Lookup(device, &gpu); r != NVML_SUCCESS) return r;
    *current = NVML_DEVICE_MIG_DISABLE;
    *pending = NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
  });
}

NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* is_mig) {
  NVML_BODY({
    if (is_mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::shared_lock<std::shared_mutex> lock(table_mu);
    PoolGpu* gpu = nullptr;
    if (nvmlReturn_t r = Lookup(device, &gpu); r != NVML_SUCCESS) return r;
    *is_mig = 0;
    return NVML_SUCCESS;
  });
}

// ---- Devices: activity (the agent's kOpGpuStatus) -----------------------------------------

// The fraction of the agent's last sample period (about a second) that the GPU ran
// kernels (gpu) and read or wrote device memory (memory), as its device measures them.
NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  NVML_BODY({
    if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    gpupool::dataplane::GpuStatusResult status;
    std::vector<gpupool::dataplane::GpuProcess> none;
    if (nvmlReturn_t r = GpuStatus(device, 0, &status, &none); r != NVML_SUCCESS) return r;
    if ((status.reported & gpupool::dataplane::kGpuStatusUtilization) == 0) {
      return NVML_ERROR_NOT_SUPPORTED;
    }
    utilization->gpu = status.gpu_percent;
    utilization->memory = status.memory_percent;
    return NVML_SUCCESS;
  });
}

// Only where the GPU's device reports it (a real GPU's agent; never the sim).
NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                               unsigned int* temperature) {
  NVML_BODY({
    if (temperature == nullptr || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    gpupool::dataplane::GpuStatusResult status;
    std::vector<gpupool::dataplane::GpuProcess> none;
    if (nvmlReturn_t r = GpuStatus(device, 0, &status, &none); r != NVML_SUCCESS) return r;
    if ((status.reported & gpupool::dataplane::kGpuStatusTemperature) == 0) {
      return NVML_ERROR_NOT_SUPPORTED;
    }
    *temperature = status.temperature_c;
    return NVML_SUCCESS;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* milliwatts) {
  NVML_BODY({
    if (milliwatts == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    gpupool::dataplane::GpuStatusResult status;
    std::vector<gpupool::dataplane::GpuProcess> none;
    if (nvmlReturn_t r = GpuStatus(device, 0, &status, &none); r != NVML_SUCCESS) return r;
    if ((status.reported & gpupool::dataplane::kGpuStatusPower) == 0) return NVML_ERROR_NOT_SUPPORTED;
    *milliwatts = status.power_mw;
    return NVML_SUCCESS;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                              nvmlProcessInfo_t* infos) {
  NVML_BODY({ return RunningProcesses(device, count, infos); });
}
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                              nvmlProcessInfo_v2_t* infos) {
  NVML_BODY({ return RunningProcesses(device, count, infos); });
}
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                           nvmlProcessInfo_v1_t* infos) {
  NVML_BODY({ return RunningProcesses(device, count, infos); });
}

// The driver's version as the first GPU whose agent reports one says it: NVIDIA's driver
// on that GPU's host ("580.65.06"), or "gpupool-sim VERSION" for a simulated GPU. The job's
// GPUs may sit in hosts with different drivers; NVML has one answer, so it is device 0's
// where it can be.
NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  NVML_BODY({
    if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    size_t count = 0;
    {
      std::shared_lock<std::shared_mutex> lock(table_mu);
      if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
      count = table->count();
    }
    for (size_t i = 0; i < count; ++i) {
      nvmlDevice_t device = nullptr;
      if (HandleByIndex(static_cast<unsigned int>(i), &device) != NVML_SUCCESS) continue;
      gpupool::dataplane::GpuStatusResult status;
      std::vector<gpupool::dataplane::GpuProcess> none;
      if (GpuStatus(device, 0, &status, &none) != NVML_SUCCESS) continue;
      if ((status.reported & gpupool::dataplane::kGpuStatusDriverVersion) == 0) continue;
      return CopyOut(status.driver_version, version, length);
    }
    return NVML_ERROR_NOT_SUPPORTED;
  });
}

// ---- Refused entry points (nvml_unsupported.inc) ----------------------------------------

#define GPUPOOL_NVML_UNSUPPORTED(name) \
  NVML_API nvmlReturn_t name(void) { return NVML_ERROR_NOT_SUPPORTED; }
#include "remote/nvml/nvml_unsupported.inc"
#undef GPUPOOL_NVML_UNSUPPORTED

// The layouts a caller compiled against NVIDIA's nvml.h passes (nvml_abi.h).
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlMemory_v2_t) == 40 && offsetof(nvmlMemory_v2_t, total) == 8 &&
              offsetof(nvmlMemory_v2_t, used) == 32);
static_assert(nvmlMemory_v2 == (40u | (2u << 24)));
static_assert(sizeof(nvmlPciInfo_t) == 68 && offsetof(nvmlPciInfo_t, domain) == 16 &&
              offsetof(nvmlPciInfo_t, pciSubSystemId) == 32 && offsetof(nvmlPciInfo_t, busId) == 36);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16 && sizeof(nvmlProcessInfo_t) == 24 &&
              offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8 && offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16 &&
              offsetof(nvmlProcessInfo_t, computeInstanceId) == 20);
static_assert(sizeof(nvmlProcessInfo_v2_t) == sizeof(nvmlProcessInfo_t) &&
              offsetof(nvmlProcessInfo_v2_t, computeInstanceId) == 20);

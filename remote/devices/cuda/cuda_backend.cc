#include "remote/devices/cuda/cuda_backend.h"

#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "remote/device/topology.h"
#include "remote/devices/cuda/nvml_api.h"
#include "remote/devices/cuda/xid.h"

namespace gpupool::devices {
namespace {

constexpr unsigned kEventWaitMs = 500;  // also bounds how long Stop() waits for the thread

// Resolved NVML entry points.
struct NvmlApi {
  void* lib = nullptr;
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::DeviceGetCountFn get_count = nullptr;
  nvml::DeviceGetHandleByIndexFn get_handle = nullptr;
  nvml::DeviceGetUuidFn get_uuid = nullptr;
  nvml::DeviceGetNameFn get_name = nullptr;
  nvml::DeviceGetMemoryInfoFn get_memory = nullptr;
  nvml::DeviceGetPciInfoFn get_pci = nullptr;
  nvml::DeviceGetComputeCapabilityFn get_cc = nullptr;
  nvml::EventSetCreateFn event_set_create = nullptr;
  nvml::DeviceRegisterEventsFn register_events = nullptr;
  nvml::EventSetWaitFn event_set_wait = nullptr;
  nvml::EventSetFreeFn event_set_free = nullptr;

  std::string Error(nvml::Return r) const {
    const char* s = error_string != nullptr ? error_string(r) : nullptr;
    return s != nullptr ? std::string(s) : "NVML error " + std::to_string(r);
  }
};

// Resolved CUDA driver entry points (only what discovery needs).
struct CudaApi {
  void* lib = nullptr;
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGetByPCIBusId) get_by_pci = nullptr;
  decltype(&::cuDeviceGetAttribute) get_attribute = nullptr;
};

template <typename Fn>
Status Resolve(void* lib, const char* lib_name, const char* symbol, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (*out == nullptr) {
    return Status::Internal(std::string(lib_name) + " lacks " + symbol + " (driver too old?)");
  }
  return Status::OK();
}

Status LoadNvml(NvmlApi* api) {
  constexpr const char* kLib = "libnvidia-ml.so.1";
  api->lib = dlopen(kLib, RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) {
    const char* err = dlerror();
    return Status::Unavailable(std::string("cannot load ") + kLib + ": " + (err ? err : "unknown error"));
  }
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlInit_v2", &api->init));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlShutdown", &api->shutdown));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlErrorString", &api->error_string));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlDeviceGetCount_v2", &api->get_count));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlDeviceGetHandleByIndex_v2", &api->get_handle));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlDeviceGetUUID", &api->get_uuid));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlDeviceGetName", &api->get_name));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlDeviceGetMemoryInfo", &api->get_memory));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlDeviceGetPciInfo_v3", &api->get_pci));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlDeviceGetCudaComputeCapability", &api->get_cc));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlEventSetCreate", &api->event_set_create));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlDeviceRegisterEvents", &api->register_events));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlEventSetWait_v2", &api->event_set_wait));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "nvmlEventSetFree", &api->event_set_free));
  return Status::OK();
}

Status LoadCuda(CudaApi* api) {
  constexpr const char* kLib = "libcuda.so.1";
  api->lib = dlopen(kLib, RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) {
    const char* err = dlerror();
    return Status::Unavailable(std::string("cannot load ") + kLib + ": " + (err ? err : "unknown error"));
  }
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "cuInit", &api->init));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "cuDeviceGetByPCIBusId", &api->get_by_pci));
  GPUPOOL_RETURN_IF_ERROR(Resolve(api->lib, kLib, "cuDeviceGetAttribute", &api->get_attribute));
  return Status::OK();
}

class CudaBackend : public device::GpuBackend {
 public:
  CudaBackend(NvmlApi nvml, CudaApi cuda) : nvml_(nvml), cuda_(cuda) {}
  ~CudaBackend() override {
    Stop();
    if (event_set_ != nullptr) nvml_.event_set_free(event_set_);
    nvml_.shutdown();
  }

  Status Init() {
    nvml::Return r = nvml_.init();
    if (r != nvml::kSuccess) return Status::Unavailable("nvmlInit failed: " + nvml_.Error(r));
    if (CUresult cr = cuda_.init(0); cr != CUDA_SUCCESS) {
      return Status::Unavailable("cuInit failed: CUDA error " + std::to_string(cr));
    }
    unsigned count = 0;
    if ((r = nvml_.get_count(&count)) != nvml::kSuccess) {
      return Status::Unavailable("nvmlDeviceGetCount failed: " + nvml_.Error(r));
    }
    auto topology = device::Topology::Load(/*with_pci=*/true);
    for (unsigned i = 0; i < count; ++i) {
      Gpu g;
      GPUPOOL_RETURN_IF_ERROR(Describe(i, *topology, &g));
      gpus_.push_back(std::move(g));
    }
    if (gpus_.empty()) return Status::Unavailable("NVML found no GPU on this host");
    if ((r = nvml_.event_set_create(&event_set_)) != nvml::kSuccess) {
      return Status::Unavailable("nvmlEventSetCreate failed: " + nvml_.Error(r));
    }
    for (Gpu& g : gpus_) {
      r = nvml_.register_events(g.handle, nvml::kEventTypeXidCriticalError, event_set_);
      if (r != nvml::kSuccess) {
        // Without Xid events the poll below still sees a GPU that is lost.
        log::Warning("GPU " + std::to_string(g.info.index) + ": no Xid events (" + nvml_.Error(r) +
                     "); watching it by polling only");
      }
    }
    watcher_ = std::thread([this] { WatchHealth(); });
    return Status::OK();
  }

  std::string name() const override { return "cuda"; }

  std::vector<device::GpuInfo> Discover() override {
    std::vector<device::GpuInfo> out;
    for (const Gpu& g : gpus_) out.push_back(g.info);
    return out;
  }

  device::HealthState Health(int index) override {
    if (!Valid(index)) return device::HealthState{device::Health::kFailed, "no such GPU"};
    std::lock_guard<std::mutex> l(mu_);
    return gpus_[index].health;
  }

  Status BeforeOperation(int index) override {
    if (!Valid(index)) return Status::NotFound("no GPU with index " + std::to_string(index));
    gpus_[index].operations.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> l(mu_);
    const device::HealthState& h = gpus_[index].health;
    if (h.health == device::Health::kFailed) {
      return Status::Unavailable("GPU " + std::to_string(index) + " (" + gpus_[index].info.uuid +
                                 ") has failed: " + h.reason);
    }
    return Status::OK();
  }

  void ReportFailure(int index, const std::string& reason) override {
    if (Valid(index)) MarkFailed(index, reason.empty() ? "reported by the data path" : reason);
  }

  void SetHealthListener(std::function<void(int index)> listener) override {
    std::lock_guard<std::mutex> l(mu_);
    listener_ = std::move(listener);
  }

  uint64_t OperationCount(int index) override {
    return Valid(index) ? gpus_[index].operations.load(std::memory_order_relaxed) : 0;
  }

  void Stop() override {
    stop_.store(true);
    if (watcher_.joinable()) watcher_.join();
  }

 private:
  struct Gpu {
    device::GpuInfo info;
    nvml::Device handle = nullptr;
    device::HealthState health;  // guarded by mu_
    std::atomic<uint64_t> operations{0};
    Gpu() = default;
    Gpu(Gpu&& o) noexcept
        : info(std::move(o.info)), handle(o.handle), health(std::move(o.health)), operations(o.operations.load()) {}
  };

  bool Valid(int index) const { return index >= 0 && static_cast<size_t>(index) < gpus_.size(); }

  Status Describe(unsigned i, const device::Topology& topology, Gpu* g) {
    auto fail = [&](const char* what, nvml::Return r) {
      return Status::Unavailable("GPU " + std::to_string(i) + ": " + what + " failed: " + nvml_.Error(r));
    };
    nvml::Return r;
    if ((r = nvml_.get_handle(i, &g->handle)) != nvml::kSuccess) return fail("nvmlDeviceGetHandleByIndex", r);
    char buf[nvml::kUuidBufferSize] = {};
    if ((r = nvml_.get_uuid(g->handle, buf, sizeof(buf))) != nvml::kSuccess) return fail("nvmlDeviceGetUUID", r);
    g->info.uuid = buf;
    char name[nvml::kNameBufferSize] = {};
    if ((r = nvml_.get_name(g->handle, name, sizeof(name))) != nvml::kSuccess) return fail("nvmlDeviceGetName", r);
    g->info.model = name;
    nvml::Memory mem{};
    if ((r = nvml_.get_memory(g->handle, &mem)) != nvml::kSuccess) return fail("nvmlDeviceGetMemoryInfo", r);
    g->info.memory_bytes = mem.total;
    nvml::PciInfo pci{};
    if ((r = nvml_.get_pci(g->handle, &pci)) != nvml::kSuccess) return fail("nvmlDeviceGetPciInfo", r);
    char bus_id[32];
    std::snprintf(bus_id, sizeof(bus_id), "%04x:%02x:%02x.0", pci.domain & 0xffff, pci.bus & 0xff, pci.device & 0x1f);
    g->info.pci_bus_id = bus_id;
    g->info.index = static_cast<int>(i);
    if (nvml_.get_cc(g->handle, &g->info.cc_major, &g->info.cc_minor) != nvml::kSuccess) {
      g->info.cc_major = g->info.cc_minor = 0;
    }
    g->info.numa_node = topology.NumaNodeOfPci(g->info.pci_bus_id);
    // NVML and CUDA number devices differently: match them by PCI bus id.
    CUdevice dev;
    int sms = 0;
    if (cuda_.get_by_pci(&dev, bus_id) == CUDA_SUCCESS &&
        cuda_.get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS) {
      g->info.multiprocessor_count = sms;
    }
    return Status::OK();
  }

  void MarkFailed(int index, const std::string& reason) {
    std::function<void(int)> listener;
    {
      std::lock_guard<std::mutex> l(mu_);
      device::HealthState& h = gpus_[index].health;
      if (h.health == device::Health::kFailed) return;
      h = device::HealthState{device::Health::kFailed, reason};
      listener = listener_;
    }
    log::Error("GPU " + std::to_string(index) + " (" + gpus_[index].info.uuid + ") failed: " + reason);
    if (listener) listener(index);
  }

  int IndexOf(nvml::Device handle) const {
    for (const Gpu& g : gpus_) {
      if (g.handle == handle) return g.info.index;
    }
    return -1;
  }

  // The health thread: Xid events, plus a poll that notices a GPU that fell off the bus
  // without an event reaching us.
  void WatchHealth() {
    while (!stop_.load()) {
      nvml::EventData data{};
      nvml::Return r = nvml_.event_set_wait(event_set_, &data, kEventWaitMs);
      if (r == nvml::kSuccess && (data.eventType & nvml::kEventTypeXidCriticalError) != 0) {
        int index = IndexOf(data.device);
        XidDecision d = ClassifyXid(data.eventData);
        if (index >= 0 && d.swap) {
          MarkFailed(index, DescribeXid(data.eventData));
        } else {
          log::Warning("GPU " + std::to_string(index) + ": " + DescribeXid(data.eventData) + " (not a reason to swap)");
        }
      } else if (r != nvml::kSuccess && r != nvml::kErrorTimeout) {
        // Includes GPU_IS_LOST from the wait itself; the poll below finds which GPU.
        std::this_thread::sleep_for(std::chrono::milliseconds(kEventWaitMs));
      }
      PollDevices();
    }
  }

  void PollDevices() {
    for (Gpu& g : gpus_) {
      nvml::Memory mem{};
      if (nvml_.get_memory(g.handle, &mem) == nvml::kErrorGpuIsLost) {
        MarkFailed(g.info.index, "NVML: GPU is lost (fallen off the bus)");
      }
    }
  }

  NvmlApi nvml_;
  CudaApi cuda_;
  nvml::EventSet event_set_ = nullptr;
  std::vector<Gpu> gpus_;  // fixed after Init(); health fields guarded by mu_
  std::mutex mu_;
  std::function<void(int)> listener_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

}  // namespace

Result<std::unique_ptr<device::GpuBackend>> OpenCudaBackend(const AgentConfig& config) {
  NvmlApi nvml;
  GPUPOOL_RETURN_IF_ERROR(LoadNvml(&nvml));
  CudaApi cuda;
  GPUPOOL_RETURN_IF_ERROR(LoadCuda(&cuda));
  auto backend = std::make_unique<CudaBackend>(nvml, cuda);
  GPUPOOL_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<device::GpuBackend>(std::move(backend));
}

}  // namespace gpupool::devices

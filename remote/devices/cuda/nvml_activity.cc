#include "remote/devices/cuda/nvml_activity.h"

#include <dlfcn.h>

#include <memory>

#include "remote/devices/cuda/nvml_api.h"

namespace gpupool::devices {

struct NvmlActivity::Api {
  void* lib = nullptr;
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::DeviceGetHandleByUuidFn get_handle = nullptr;
  // Optional: an entry point the library lacks leaves its figure unknown.
  nvml::DeviceGetUtilizationRatesFn get_utilization = nullptr;
  nvml::DeviceGetTemperatureFn get_temperature = nullptr;
  nvml::DeviceGetPowerUsageFn get_power = nullptr;
  nvml::SystemGetDriverVersionFn get_driver_version = nullptr;

  std::string Error(nvml::Return r) const {
    const char* text = error_string != nullptr ? error_string(r) : nullptr;
    return text != nullptr ? std::string(text) : "NVML error " + std::to_string(r);
  }
};

namespace {

template <typename Fn>
void Resolve(void* lib, const char* symbol, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, symbol));
}

void AddWhyNot(device::GpuActivity* activity, const std::string& why) {
  if (!activity->why_not.empty()) activity->why_not += "; ";
  activity->why_not += why;
}

}  // namespace

NvmlActivity::NvmlActivity(std::string library) : library_(std::move(library)) {}

NvmlActivity::~NvmlActivity() {
  if (api_ == nullptr) return;
  api_->shutdown();
  dlclose(api_->lib);
  delete api_;
}

bool NvmlActivity::LoadLocked() {
  if (tried_) return api_ != nullptr;
  tried_ = true;
  auto api = std::make_unique<Api>();
  api->lib = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) {
    const char* error = dlerror();
    load_error_ =
        "the GPU host's NVML (" + library_ + ") does not load: " + (error != nullptr ? error : "unknown error");
    return false;
  }
  Resolve(api->lib, "nvmlInit_v2", &api->init);
  Resolve(api->lib, "nvmlShutdown", &api->shutdown);
  Resolve(api->lib, "nvmlErrorString", &api->error_string);
  Resolve(api->lib, "nvmlDeviceGetHandleByUUID", &api->get_handle);
  Resolve(api->lib, "nvmlDeviceGetUtilizationRates", &api->get_utilization);
  Resolve(api->lib, "nvmlDeviceGetTemperature", &api->get_temperature);
  Resolve(api->lib, "nvmlDeviceGetPowerUsage", &api->get_power);
  Resolve(api->lib, "nvmlSystemGetDriverVersion", &api->get_driver_version);
  if (api->init == nullptr || api->shutdown == nullptr || api->get_handle == nullptr) {
    load_error_ = "the GPU host's NVML (" + library_ + ") lacks nvmlInit_v2, nvmlShutdown or nvmlDeviceGetHandleByUUID";
    dlclose(api->lib);
    return false;
  }
  if (nvml::Return r = api->init(); r != nvml::kSuccess) {
    load_error_ = "the GPU host's NVML does not initialise: " + api->Error(r);
    dlclose(api->lib);
    return false;
  }
  api_ = api.release();
  return true;
}

void NvmlActivity::Read(const std::string& uuid, device::GpuActivity* activity) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!LoadLocked()) {
    AddWhyNot(activity, load_error_);
    return;
  }
  if (api_->get_driver_version != nullptr) {
    char version[nvml::kSystemDriverVersionBufferSize] = {};
    if (nvml::Return r = api_->get_driver_version(version, sizeof(version)); r == nvml::kSuccess) {
      version[sizeof(version) - 1] = '\0';
      activity->driver_version = version;
    } else {
      AddWhyNot(activity, "nvmlSystemGetDriverVersion: " + api_->Error(r));
    }
  }
  auto cached = handles_.find(uuid);
  if (cached == handles_.end()) {
    nvml::Device handle = nullptr;
    if (nvml::Return r = api_->get_handle(uuid.c_str(), &handle); r != nvml::kSuccess) {
      AddWhyNot(activity, "the GPU host's NVML does not know " + uuid + ": " + api_->Error(r));
      return;
    }
    cached = handles_.emplace(uuid, handle).first;
  }
  nvml::Device device = static_cast<nvml::Device>(cached->second);
  nvml::Utilization utilization{};
  if (nvml::Return r =
          api_->get_utilization != nullptr ? api_->get_utilization(device, &utilization) : nvml::kErrorNotSupported;
      r == nvml::kSuccess) {
    activity->has_utilization = true;
    activity->gpu_percent = utilization.gpu;
    activity->memory_percent = utilization.memory;
    // NVML's period is the product's (between 1/6 s and 1 s); it does not say which.
    activity->sample_period_ms = 0;
  } else {
    AddWhyNot(activity, "utilisation: " + api_->Error(r));
  }
  unsigned int celsius = 0;
  if (nvml::Return r = api_->get_temperature != nullptr ? api_->get_temperature(device, nvml::kTemperatureGpu, &celsius)
                                                        : nvml::kErrorNotSupported;
      r == nvml::kSuccess) {
    activity->has_temperature = true;
    activity->temperature_c = celsius;
  } else {
    AddWhyNot(activity, "temperature: " + api_->Error(r));
  }
  unsigned int milliwatts = 0;
  if (nvml::Return r = api_->get_power != nullptr ? api_->get_power(device, &milliwatts) : nvml::kErrorNotSupported;
      r == nvml::kSuccess) {
    activity->has_power = true;
    activity->power_mw = milliwatts;
  } else {
    AddWhyNot(activity, "power: " + api_->Error(r));
  }
}

}  // namespace gpupool::devices

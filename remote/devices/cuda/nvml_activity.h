// NvmlActivity: the cuda kind's figures for the job's NVML (protocol.h, kOpGpuStatus),
// read from the GPU host's own NVML: utilisation over NVML's last sample period,
// temperature, power draw and NVIDIA's driver version string. The driver API has none of
// them (it knows only the driver's CUDA version, which the executor reports itself).
//
// Each figure is NVML's answer for the GPU with that UUID, or unknown with the reason in
// GpuActivity::why_not (a library that does not load, a GPU NVML does not know, a figure
// the product does not measure): the job's NVML then answers NOT_SUPPORTED, as the real
// library would for a figure the GPU lacks. Nothing is estimated.
//
// The library is loaded and initialised at the first Read and kept (nvmlInit is costly:
// it opens every GPU's device node). Thread-safe (NVML is; the handles are cached under a
// mutex).
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "remote/device/activity.h"

namespace gpupool::devices {

class NvmlActivity {
 public:
  // `library`: libnvidia-ml.so.1 on a GPU host; tests name a stand-in.
  explicit NvmlActivity(std::string library = "libnvidia-ml.so.1");
  ~NvmlActivity();
  NvmlActivity(const NvmlActivity&) = delete;
  NvmlActivity& operator=(const NvmlActivity&) = delete;

  // Fills what NVML answers for the GPU `uuid` into `activity` (has_utilization,
  // has_temperature, has_power, driver_version) and appends to its why_not what it does
  // not answer, and why.
  void Read(const std::string& uuid, device::GpuActivity* activity);

 private:
  struct Api;
  bool LoadLocked();  // under mu_

  const std::string library_;
  std::mutex mu_;
  bool tried_ = false;
  std::string load_error_;                // why the library is not usable ("": it is)
  Api* api_ = nullptr;                    // resolved entry points, once loaded
  std::map<std::string, void*> handles_;  // nvmlDevice_t by UUID
};

}  // namespace gpupool::devices

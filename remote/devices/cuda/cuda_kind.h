// The "cuda" device kind: this host's real GPUs (cuda_backend.h: NVML discovery and Xid
// health) whose sessions run on a CudaExecutor (the driver API). Without cuda.h at build
// time the kind is still there, and says so when asked for a backend or an executor.
#pragma once

#include <memory>

#include "remote/device/device_kind.h"

namespace gpupool::devices {

std::unique_ptr<device::DeviceKind> MakeCudaKind();

}  // namespace gpupool::devices

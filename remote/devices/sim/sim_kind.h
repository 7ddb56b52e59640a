// The "sim" device kind: simulated GPUs (sim_backend.h) whose sessions run on a
// SimExecutor over the GPU's SimDeviceMemory, kernels on the PTX engine (remote/ptx).
#pragma once

#include <memory>

#include "remote/device/device_kind.h"

namespace gpupool::devices {

std::unique_ptr<device::DeviceKind> MakeSimKind();

}  // namespace gpupool::devices

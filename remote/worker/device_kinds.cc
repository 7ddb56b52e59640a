#include "remote/worker/device_kinds.h"

#include "remote/device/device_kind.h"
#include "remote/devices/cuda/cuda_kind.h"
#include "remote/devices/sim/sim_kind.h"

namespace gpupool::worker {

void RegisterDeviceKinds() {
  device::RegisterDeviceKind(devices::MakeSimKind());
  device::RegisterDeviceKind(devices::MakeCudaKind());
}

}  // namespace gpupool::worker

// What a remote device is: the properties of its GPU model, and the value of each
// CUdevice_attribute (see device_attributes.cc).
#pragma once

#include <cuda.h>

#include "common/gpu_models.h"
#include "remote/client/core/runtime.h"

namespace gpupool::client {

// The figures of a GPU model that programs read (cudaGetDeviceProperties) and that the
// occupancy calculator needs (common/gpu_models.h, shared with the sim backend).
using ModelProperties = GpuModel;

// The properties of `device`'s model. On the sim, everything comes from the model's
// table entry (the sim backend took its compute capability and SM count from the same
// entry, device::SimulateKnownModel); on a GPU host, compute capability
// and SM count come from the GPU itself and the rest from the entry for its model, or for
// its generation when the model is not in the table.
ModelProperties PropertiesOf(const Device& device);

// CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, as GPUs since sm_80 report it: the
// largest access policy window a stream or kernel may be given.
constexpr int kMaxAccessPolicyWindowBytes = 134213632;

// CUDA_ERROR_INVALID_VALUE for attributes outside the enum.
CUresult DeviceAttribute(const Device& device, int attribute, int* value);

}  // namespace gpupool::client

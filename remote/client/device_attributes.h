// The value of a CUdevice_attribute for a remote device (see device_attributes.cc).
#pragma once

#include <cuda.h>

#include "remote/client/runtime.h"

namespace gpupool::client {

// CUDA_ERROR_INVALID_VALUE for attributes outside the enum.
CUresult DeviceAttribute(const Device& device, int attribute, int* value);

}  // namespace gpupool::client

// The occupancy calculator (cuOccupancy*), shared with the sim's device runtime:
// common/occupancy.h.
#pragma once

#include "common/occupancy.h"
#include "remote/client/core/device_attributes.h"

namespace gpupool::client {

using gpupool::ActiveBlocksPerMultiprocessor;
using gpupool::AvailableDynamicSharedPerBlock;
using gpupool::KernelResources;
using gpupool::MaxPotentialBlockSize;

}  // namespace gpupool::client

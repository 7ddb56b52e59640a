// What of device_runtime.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/device_heap.h"

namespace gpupool::sim::interp {

void HDeviceRuntime(Warp& w, const Inst& in, uint32_t mask);

}  // namespace gpupool::sim::interp

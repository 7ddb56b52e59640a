// What of device_heap.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/memory.h"
#include "remote/ptx/device_heap.h"

namespace gpupool::sim::interp {

void HMalloc(Warp& w, const Inst& in, uint32_t mask);
void HSetConditional(Warp& w, const Inst& in, uint32_t mask);
void HFree(Warp& w, const Inst& in, uint32_t mask);

}  // namespace gpupool::sim::interp

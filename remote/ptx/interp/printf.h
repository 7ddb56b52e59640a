// What of printf.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/interp/internal.h"

namespace gpupool::sim::interp {

void HPrintf(Warp& w, const Inst& in, uint32_t mask);
void HAssert(Warp& w, const Inst& in, uint32_t mask);

}  // namespace gpupool::sim::interp

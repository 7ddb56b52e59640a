// What of conversions.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/interp/internal.h"

namespace gpupool::sim::interp {

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
Handler CvtHandler(const Inst& in);

}  // namespace gpupool::sim::interp

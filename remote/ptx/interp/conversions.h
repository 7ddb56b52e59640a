// What of conversions.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/half_float.h"
#include "remote/ptx/interp/internal.h"

namespace gpupool::sim::interp {

Handler CvtHandler(const Inst& in);

}  // namespace gpupool::sim::interp

// What of conversions.cc the other files of interp/ use (private to interp/), and
// RoundTo, which the JIT tier's cvt calls (jit/emit_arithmetic.cc).
#pragma once

#include "remote/ptx/interp/internal.h"

namespace gpupool::sim::interp {

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
Handler CvtHandler(const Inst& in);
// `v` rounded to an integer as cvt's integer rounding `rounding` (.rni ...) says.
double RoundTo(double v, CvtRounding rounding);

}  // namespace gpupool::sim::interp

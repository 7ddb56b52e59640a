// What of conversions.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/half_float.h"
#include "remote/ptx/interp/internal.h"

namespace gpupool::sim::interp {

Handler CvtHandler(const Inst& in);

// cvt of 8-bit floats (Inst::mode; mode2 a Fp8Format, flags kFlagRelu): two f32 (a into
// the upper byte, b the lower) or an f16x2 to a .b16 pair, or such a pair to an f16x2.
enum Fp8Conversion : uint8_t { kFp8FromFloats, kFp8FromHalves, kFp8ToHalves };
void HCvtFp8(Warp& w, const Inst& in, uint32_t mask);

}  // namespace gpupool::sim::interp

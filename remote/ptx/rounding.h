// Roundings shared by both tiers: cvt's integer roundings (.rni, .rzi, .rmi, .rpi) of a
// float, which the interpreter's cvt handler and compiled code (which calls it rather than
// emit LLVM's floor/ceil, whose signalling NaNs come back quieted) round with the same
// code; and float arithmetic and conversions in a directed rounding (.rz, .rm, .rp), which
// the interpreter runs with the host's rounding mode set around its handler
// (HDirectedRounding, HCvt) and compiled code runs by calling these, which do the same.
#pragma once

#include <cstdint>

#include "remote/ptx/ir/modes.h"

namespace gpupool::sim {

// `v` rounded to an integer as cvt's integer rounding `rounding` says: an integer rounding
// (.rni, ...) rounds as the float rounding four places before it (.rn, ...).
double RoundTo(double v, CvtRounding rounding);

// The float operations that take a directed rounding, as the interpreter computes each in
// round-to-nearest (interp/arithmetic.h): a + b, a - b, a * b, std::fma(a, b, c), a / b,
// std::sqrt(a) and 1 / a.
enum DirectedOp : uint8_t {
  kDirectedAdd,
  kDirectedSub,
  kDirectedMul,
  kDirectedFma,
  kDirectedDiv,
  kDirectedSqrt,
  kDirectedRcp
};

// `op` of a, b, c (those it takes) with the host's rounding mode set to `rounding`
// (kCvtRoundZero, kCvtRoundDown or kCvtRoundUp) and then set back, the operands read after
// and the result written before (so that the compiler moves no operation out of the mode).
float DirectedF32(DirectedOp op, CvtRounding rounding, float a, float b, float c);
double DirectedF64(DirectedOp op, CvtRounding rounding, double a, double b, double c);

// Conversions in a directed rounding, as the interpreter's HCvt makes them: a double (an
// f64, or an integer of up to 32 bits, which a double holds exactly) to float, and 64-bit
// integers to float and to double.
float DirectedToF32(double v, CvtRounding rounding);
float DirectedS64ToF32(int64_t v, CvtRounding rounding);
float DirectedU64ToF32(uint64_t v, CvtRounding rounding);
double DirectedS64ToF64(int64_t v, CvtRounding rounding);
double DirectedU64ToF64(uint64_t v, CvtRounding rounding);

}  // namespace gpupool::sim

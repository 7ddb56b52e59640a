// cvt's integer roundings (.rni, .rzi, .rmi, .rpi) of a float, shared by both tiers: the
// interpreter's cvt handler and compiled code (which calls it rather than emit LLVM's
// floor/ceil, whose signalling NaNs come back quieted) round with the same code.
#pragma once

#include "remote/ptx/ir/modes.h"

namespace gpupool::sim {

// `v` rounded to an integer as cvt's integer rounding `rounding` says: an integer rounding
// (.rni, ...) rounds as the float rounding four places before it (.rn, ...).
double RoundTo(double v, CvtRounding rounding);

}  // namespace gpupool::sim

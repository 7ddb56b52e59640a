#include "remote/ptx/rounding.h"

#include <cmath>

namespace gpupool::sim {

double RoundTo(double v, CvtRounding rounding) {
  switch (rounding & 3) {
    case kCvtRoundNearest:
      return std::nearbyint(v);  // round-half-even in the default mode
    case kCvtRoundZero:
      return std::trunc(v);
    case kCvtRoundDown:
      return std::floor(v);
    default:
      return std::ceil(v);
  }
}

}  // namespace gpupool::sim

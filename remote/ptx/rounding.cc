#include "remote/ptx/rounding.h"

#include <cfenv>
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

namespace {

// Runs `compute` with the host's rounding mode set to `rounding`'s. The compiler may move a
// computation on registers across the calls of fesetround (it assumes one rounding mode):
// `compute` reads its operands from volatile copies made after the first call and writes
// its result to a volatile one before the second, so that the operation falls in between.
template <typename T, typename F>
T InRounding(CvtRounding rounding, F compute) {
  const int saved = std::fegetround();
  std::fesetround(rounding == kCvtRoundZero ? FE_TOWARDZERO : rounding == kCvtRoundDown ? FE_DOWNWARD : FE_UPWARD);
  volatile T result = compute();
  std::fesetround(saved);
  return result;
}

template <typename T>
T Directed(DirectedOp op, CvtRounding rounding, T a, T b, T c) {
  return InRounding<T>(rounding, [&]() -> T {
    volatile T x = a, y = b, z = c;
    switch (op) {
      case kDirectedAdd:
        return x + y;
      case kDirectedSub:
        return x - y;
      case kDirectedMul:
        return x * y;
      case kDirectedFma:
        return std::fma(T(x), T(y), T(z));
      case kDirectedDiv:
        return x / y;
      case kDirectedSqrt:
        return std::sqrt(T(x));
      default:
        return T(1) / x;
    }
  });
}

template <typename To, typename From>
To Convert(From v, CvtRounding rounding) {
  return InRounding<To>(rounding, [&]() -> To {
    volatile From x = v;
    return static_cast<To>(x);
  });
}

}  // namespace

float DirectedF32(DirectedOp op, CvtRounding rounding, float a, float b, float c) {
  return Directed<float>(op, rounding, a, b, c);
}
double DirectedF64(DirectedOp op, CvtRounding rounding, double a, double b, double c) {
  return Directed<double>(op, rounding, a, b, c);
}
float DirectedToF32(double v, CvtRounding rounding) { return Convert<float>(v, rounding); }
float DirectedS64ToF32(int64_t v, CvtRounding rounding) { return Convert<float>(v, rounding); }
float DirectedU64ToF32(uint64_t v, CvtRounding rounding) { return Convert<float>(v, rounding); }
double DirectedS64ToF64(int64_t v, CvtRounding rounding) { return Convert<double>(v, rounding); }
double DirectedU64ToF64(uint64_t v, CvtRounding rounding) { return Convert<double>(v, rounding); }

}  // namespace gpupool::sim

// Float min and max as the PTX ISA defines them, shared by both tiers: the interpreter's
// handlers call these, and compiled code (jit/emit_arithmetic.cc) emits the same choice as
// selects. Not the C library's fmin/fmax, which may return either zero of (+0, -0): PTX
// orders -0 below +0.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace gpupool::sim {

// The NaN min and max give when both operands are NaN (min.f32 and max.f32 without .NaN),
// or either is (.NaN): the GPU's canonical one, all ones but the sign.
template <typename T>
T CanonicalNaN() {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<float>(uint32_t{0x7fffffff});
  } else {
    return std::bit_cast<double>(uint64_t{0x7fffffffffffffff});
  }
}

// min{.NaN}.f32/.f64 and max: a NaN operand gives the other (both NaN, or either with
// .NaN: the canonical NaN); otherwise the lesser (greater), -0 counting below +0.
template <typename T, bool kMax>
T PtxMinMax(T a, T b, bool nan_operand) {
  const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
  if ((a_nan && b_nan) || (nan_operand && (a_nan || b_nan))) return CanonicalNaN<T>();
  if (a_nan) return b;
  if (b_nan) return a;
  if (a == b) return std::signbit(a) == kMax ? b : a;  // equal, or +0 and -0
  return (a < b) != kMax ? a : b;
}

}  // namespace gpupool::sim

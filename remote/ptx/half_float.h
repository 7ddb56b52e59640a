// 16-bit floats (f16, bf16) and cvt's conversions of one value, shared by both tiers: the
// interpreter's handlers (interp/half.cc, interp/conversions.cc) compute each lane with
// these, and compiled code (jit/emit_arithmetic.cc) calls the same functions through their
// addresses, so that the two tiers agree bit for bit (NaN payloads, roundings, the sign
// of zero) without a second implementation to keep in step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "remote/ptx/ir/modes.h"

namespace gpupool::sim {

// A subnormal f32 flushed to a zero of its sign (.ftz).
inline float FlushF32(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }

// .sat of a float result: clamped to [0, 1] as std::min/max compare, NaN (and -0) to +0.
template <typename T>
inline T Saturate01(T v) {
  if (std::isnan(v)) return T(0);
  return std::min(T(1), std::max(T(0), v));
}

// f16 nearest to f, ties to even; a NaN is a quiet NaN of f's sign with no payload.
uint16_t FloatToHalf(float f);
// The f16's value, exactly (a NaN keeps its payload, signalling or not).
float HalfToFloat(uint16_t h);
// bf16 nearest to f, ties to even; a NaN stays a (quiet) NaN.
uint16_t FloatToBFloat16(float f);
// f to f16 or bf16 with .rz, .rm or .rp (CvtRounding).
uint16_t FloatToHalfDirected(float f, CvtRounding rounding, bool bf16);
float HalfBitsToFloat(uint16_t bits, bool bf16);
uint16_t FloatToHalfBits(float value, bool bf16);

// The 8-bit floats of cvt's .e4m3x2 and .e5m2x2 (sm_89 on): E4M3 (exponent bias 7, 3
// mantissa bits, no infinities: S.1111.111 is NaN, 448 the largest finite) and E5M2 (bias
// 15, 2 mantissa bits, IEEE's infinities and NaNs, 57344 the largest finite).
enum class Fp8Format : uint8_t { kE4M3, kE5M2 };
// One value of cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}: the nearest, ties to even; a value
// beyond the largest finite (an infinity too) that value of its sign (.satfinite); a NaN
// the canonical NaN, 0x7f; with .relu a negative value (-0 too) +0.
uint8_t FloatToFp8(float value, Fp8Format format, bool relu);
// One value of cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2}: exact (every such value is an f16); a
// NaN the canonical f16 NaN, 0x7fff; with .relu a negative value +0.
uint16_t Fp8ToHalf(uint8_t value, Fp8Format format, bool relu);

// One lane of f16/bf16 arithmetic (add ... max, tanh and ex2 .approx) as the interpreter's
// HHalf computes it: `op` a HalfOp, `flags` the instruction's (kFlagFtz, kFlagRelu,
// kFlagSat, kFlagNaNOperand), `halves` 1 or 2 (.x2), the operands' halves in their low 16 or 32 bits
// (b and c 0 where the operation takes none). Each half is computed in float and rounded
// to nearest; min and max order -0 below +0 as PTX (min_max.h), and give the canonical
// NaN (0x7fff) for two NaNs.
uint32_t HalfLane(uint8_t op, uint8_t flags, uint8_t halves, uint8_t bf16, uint32_t a, uint32_t b, uint32_t c);

// One thread's atom/red on a 16-bit value or a pair of them (atomicAdd of __half2) at host
// address `p`, aligned to `size` (2 or 4 bytes): `op` an AtomMode (add, min, max, exch,
// cas), `format` a HalfFormat (kHalfBits: cas and exch of b16), `v` the operand, `c` cas's
// new value. A compare-and-swap loop on the aligned 32-bit word that holds the value (CTAs
// run on two threads); min and max as PTX orders them (min_max.h). The old value. The
// interpreter's HAtom16 and compiled code (through its address) both run it.
uint32_t HalfAtomic(uint8_t* p, uint8_t op, uint8_t size, uint8_t format, uint32_t v, uint32_t c);

// One lane of cvt as the interpreter's HCvt converts it (not cvt.tf32): `to` and `from`
// CvtOperand encodings (kind and bytes), `rounding` a CvtRounding (a float to an integer
// with an integer rounding: .rzi where PTX gives none), `flags` kFlagFtz and kFlagSat; `raw`
// the source register's bits. The result's bits, a signed integer sign-extended to 64.
// A directed rounding (.rz, .rm, .rp) into a float expects the host's rounding mode set to
// it (HCvt sets it around its lanes): ConvertLaneInRounding sets it around one lane.
uint64_t ConvertLane(uint64_t raw, uint8_t to, uint8_t from, uint8_t rounding, uint8_t flags);
uint64_t ConvertLaneInRounding(uint64_t raw, uint8_t to, uint8_t from, uint8_t rounding, uint8_t flags);

// Whether a cvt of these operands and rounding is one ConvertLane must run with the host's
// rounding mode set: .rz, .rm or .rp into a float type.
constexpr bool ConvertIsDirected(uint8_t to, uint8_t rounding) {
  return (CvtKindOf(to) == kKindF || CvtKindOf(to) == kKindB) && rounding >= kCvtRoundZero && rounding <= kCvtRoundUp;
}

}  // namespace gpupool::sim

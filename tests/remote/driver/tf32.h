// For the tensor-core programs of this folder (tensor_cores, mma_sync): the value TF32
// keeps of a float, as the GPU reads a TF32 operand, for the host's reference results.
#pragma once

#include <cstring>

// 10 mantissa bits, rounded to nearest, ties away from zero.
inline float Tf32(float x) {
  unsigned bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x1000u) & ~0x1fffu;
  std::memcpy(&x, &bits, 4);
  return x;
}

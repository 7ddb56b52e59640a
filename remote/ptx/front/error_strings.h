// What cudaGetErrorName and cudaGetErrorString answer in device code: the error table of
// CUDA 13.0's runtime (its cudaGetErrorName and cudaGetErrorString, by cudaError_t), laid
// out as one module variable (kErrorStringsVariable, ptx_engine.h) that a module calling
// either gets, so that the answer is a pointer into device memory the kernel can read.
#pragma once

#include <cstdint>
#include <vector>

namespace gpupool::sim {

// The variable's bytes: "unrecognized error code" (what CUDA says of any other number)
// first, then each error's name and text, each ending with a NUL.
const std::vector<uint8_t>& ErrorStringsImage();

// Where `error`'s name (or text) starts in ErrorStringsImage(): 0 (the unrecognized
// error's) for a number CUDA does not define.
uint64_t ErrorStringOffset(uint32_t error, bool name);

}  // namespace gpupool::sim

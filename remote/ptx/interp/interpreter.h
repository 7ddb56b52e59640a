// The interpreter tier of the PTX engine, as launch.cc (RunKernel) calls it once the launch
// passed its limits and the JIT tier did not take it. Everything else of interp/ is private
// to it (internal.h and the family headers).
#pragma once

#include <cstdint>

#include "remote/ptx/ir/kernel.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim {

// Runs a launch of `kernel` on the interpreter, its CTAs split over `workers` threads
// (WorkersFor, launch.h); a cooperative launch runs all its CTAs at once instead. Returns the
// CUresult of the launch, as RunKernel does.
int32_t RunInterpreted(const DecodedKernel& kernel, const LaunchSpec& spec, uint32_t workers);

}  // namespace gpupool::sim

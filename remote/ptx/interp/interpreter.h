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

// The registers per thread an occupancy calculator must take `kernel` to need on a sim GPU
// of `sm_count` multiprocessors, so that every cooperative grid it admits (each block
// resident at once) fits the host memory RunInterpreted holds such a grid in; 0 where the
// calculator's own assumption (32) already keeps within it. See NeedsOf (ptx_engine.h).
uint32_t CooperativeRegisters(const DecodedKernel& kernel, uint32_t sm_count);

// The host bytes RunInterpreted holds for one CTA of a cooperative launch of `kernel` with
// `threads` threads and `shared_size` bytes of shared memory (its limit for the CTAs
// together: CooperativeBytesLimit). Products of 32-bit values and the decoder's bounded
// sizes: no wrap.
uint64_t CooperativeCtaBytes(const DecodedKernel& kernel, uint32_t threads, uint64_t shared_size);
uint64_t CooperativeBytesLimit();

}  // namespace gpupool::sim

// Where a kernel's parameters lie in the buffer a launch passes, by natural alignment: the
// one layout both tiers (and a device-side launch) read parameters by. Front end: includes
// neither tier (tests/remote/layering.sh).
#pragma once

#include <cstdint>
#include <vector>

#include "remote/ptx/front/program.h"

namespace gpupool::sim {

// Appends each parameter's offset, in declaration order, to *offsets (when not null);
// returns the parameters' bytes (what a launch of the kernel passes).
uint64_t LayOutParams(const RawFunction& entry, std::vector<uint64_t>* offsets);

}  // namespace gpupool::sim

// Helpers shared by the files that implement PoolEngine (pool_engine*.cc); not part of
// its interface.
#pragma once

#include "poold/inventory.h"

namespace gpupool::poold::engine_internal {

// A GPU in this state serves its lease (a draining GPU keeps its lease until released).
inline bool Usable(GpuState s) { return s == GpuState::kLeased || s == GpuState::kDraining; }

}  // namespace gpupool::poold::engine_internal

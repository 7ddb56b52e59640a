// What both tiers of the PTX engine (interp/ and jit/) share about a launch's memory: which
// allocation holds an address, and how a stray access is reported. The generic-address
// windows of the other state spaces are the engine's interface (ptx_engine.h, kSharedWindow
// and beside it), since the sim executor lays memory out by them too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim {

// Of a launch's allocations (LaunchSpec::memory: sorted by start, not overlapping), the one
// that starts last at or below `address`, the only one that may hold it; nullptr when all
// start above it. Each caller checks the access's extent against it as its tier requires.
inline const MemoryRange* AllocationAtOrBelow(const std::vector<MemoryRange>& ranges, uint64_t address) {
  auto after = std::upper_bound(ranges.begin(), ranges.end(), address,
                                [](uint64_t a, const MemoryRange& r) { return a < r.start; });
  if (after == ranges.begin()) return nullptr;
  return &*std::prev(after);
}

// The detail of a launch ended by a stray access (CUDA_ERROR_ILLEGAL_ADDRESS), the same from
// either tier: "<what> of <size> bytes at 0x<address> (block <block>, warp <warp>)".
std::string FaultText(const char* what, uint32_t size, uint64_t address, uint64_t block, uint32_t warp);

}  // namespace gpupool::sim

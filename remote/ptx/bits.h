// fns (__fns) of one lane, shared by both tiers: the interpreter's handler and compiled code
// (which calls it through its address rather than unroll the search) find the same bit.
#pragma once

#include <cstdint>

namespace gpupool::sim {

// fns.b32 d, mask, base, offset: the position of the |offset|-th set bit of `mask` counting
// from bit `base` up (offset > 0) or down (offset < 0); offset 0 asks whether bit base
// itself is set; 0xffffffff when there is none (the PTX ISA's semantics). A base above 31,
// undefined there, finds nothing here.
uint32_t FindNthSet(uint32_t mask, uint32_t base, int32_t offset);

}  // namespace gpupool::sim

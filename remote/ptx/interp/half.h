// What of half.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/arithmetic.h"
#include "remote/ptx/interp/memory.h"

namespace gpupool::sim::interp {

void HAtom16(Warp& w, const Inst& in, uint32_t mask);
void HHalf(Warp& w, const Inst& in, uint32_t mask);

// setp and set on f16/bf16 sources, one half or two (.x2). mode: the comparison; mode2:
// bit 0 bf16, bits 1-2 the BoolOp with predicate c (1 and, 2 or, 3 xor; kFlagSigned: !c);
// width: what a true result writes (HalfTrue). setp.x2 writes the lower half's result to
// p (d[0]) and the upper's to q (d[1]); scalar setp writes to q the negated comparison,
// combined with c the same way.
void HHalfCompare(Warp& w, const Inst& in, uint32_t mask);

}  // namespace gpupool::sim::interp

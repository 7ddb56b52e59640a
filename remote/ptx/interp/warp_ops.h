// What of warp_ops.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/interp/internal.h"

namespace gpupool::sim::interp {

void HShfl(Warp& w, const Inst& in, uint32_t mask);
void HVote(Warp& w, const Inst& in, uint32_t mask);
void HMatch(Warp& w, const Inst& in, uint32_t mask);
void HRedux(Warp& w, const Inst& in, uint32_t mask);
void HElect(Warp& w, const Inst& in, uint32_t mask);
void HActivemask(Warp& w, const Inst& in, uint32_t mask);
void HClock(Warp& w, const Inst& in, uint32_t mask);
void HNop(Warp&, const Inst&, uint32_t);
void HNanosleep(Warp& w, const Inst&, uint32_t);
void HFenceSc(Warp&, const Inst&, uint32_t);
void HZero(Warp& w, const Inst& in, uint32_t mask);

}  // namespace gpupool::sim::interp

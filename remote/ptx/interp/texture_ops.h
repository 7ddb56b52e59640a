// What of texture_ops.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/interp/internal.h"

namespace gpupool::sim::interp {

// tex, tld4, txq, suld.b, sust.b and suq. Inst: aux the packed texture::Op, a the handle,
// b, c, e and `offset` the coordinate slots (-1: none), d[] the destinations (sust: the
// values stored).
void HTexture(Warp& w, const Inst& in, uint32_t mask);

}  // namespace gpupool::sim::interp

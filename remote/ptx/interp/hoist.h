// What of hoist.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/handler_tables.h"

namespace gpupool::sim::interp {

void Hoist(DecodedKernel* k);

}  // namespace gpupool::sim::interp

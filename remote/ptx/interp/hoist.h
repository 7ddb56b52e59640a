#pragma once

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/handler_tables.h"

namespace gpupool::sim::interp {

void Hoist(DecodedKernel* k);

}  // namespace gpupool::sim::interp

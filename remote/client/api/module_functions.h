// What the export tables (api/export_tables.cc) need of modules (api/api_module.cc).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gpupool::client {

// Calls `visit(opaque, function, owner)` for each kernel of `module` (a CUfunction; owner:
// the module handle), outside the library's locks; returns how many it visited (0 for a
// handle that is no module). The module-iterator export table's entry (export_tables.cc);
// defined in api_module.cc.
uint64_t ForEachFunction(CUmodule module, void (*visit)(void* opaque, void* function, uint64_t owner), void* opaque);

}  // namespace gpupool::client

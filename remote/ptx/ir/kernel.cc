// PtxModule's constructor and destructor, where DecodedKernel is a complete type:
// ptx_engine.h and front/ know it only by name (ir/kernel.h says why).
#include "remote/ptx/ir/kernel.h"  // and, through front/program.h, ptx_engine.h

namespace gpupool::sim {

PtxModule::PtxModule() = default;
PtxModule::~PtxModule() = default;

}  // namespace gpupool::sim

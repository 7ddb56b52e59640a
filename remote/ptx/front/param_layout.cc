// A kernel's parameter layout (param_layout.h).
#include "remote/ptx/front/param_layout.h"

namespace gpupool::sim {

uint64_t LayOutParams(const RawFunction& entry, std::vector<uint64_t>* offsets) {
  uint64_t offset = 0;
  for (const RawParam& param : entry.params) {
    offset = (offset + param.align - 1) / param.align * param.align;
    if (offsets != nullptr) offsets->push_back(offset);
    offset += param.size;
  }
  return offset;
}

}  // namespace gpupool::sim

#include "remote/ptx/memory.h"

#include <cstdio>

namespace gpupool::sim {

std::string FaultText(const char* what, uint32_t size, uint64_t address, uint64_t block, uint32_t warp) {
  char text[160];
  std::snprintf(text, sizeof(text), "%s of %u bytes at 0x%llx (block %llu, warp %u)", what, size,
                static_cast<unsigned long long>(address), static_cast<unsigned long long>(block), warp);
  return text;
}

}  // namespace gpupool::sim

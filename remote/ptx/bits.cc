#include "remote/ptx/bits.h"

#include <bit>

namespace gpupool::sim {

uint32_t FindNthSet(uint32_t bits, uint32_t base, int32_t offset32) {
  const int64_t offset = offset32;
  uint32_t found = 0xffffffffu;
  if (base < 32 && offset == 0) {
    if ((bits >> base) & 1) found = base;
  } else if (base < 32 && offset > 0) {
    uint32_t from = bits & (~0u << base);  // the bits at or above base
    const int64_t skip = offset - 1;
    if (std::popcount(from) > skip) {
      for (int64_t i = 0; i < skip; ++i) from &= from - 1;
      found = static_cast<uint32_t>(std::countr_zero(from));
    }
  } else if (base < 32) {
    uint32_t from = bits & ((2u << base) - 1);  // the bits at or below base
    const int64_t skip = -offset - 1;
    if (std::popcount(from) > skip) {
      for (int64_t i = 0; i < skip; ++i) from &= ~(0x80000000u >> std::countl_zero(from));
      found = 31u - static_cast<uint32_t>(std::countl_zero(from));
    }
  }
  return found;
}

}  // namespace gpupool::sim

// Comparing secrets (lease tokens, handoff tickets) so that the time taken tells nothing of
// how much of a guess was right.
#pragma once

#include <string_view>

namespace gpupool {

// True when `a` and `b` are equal; the time depends only on their lengths.
inline bool EqualInConstantTime(std::string_view a, std::string_view b) {
  unsigned char differ = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    differ |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return differ == 0;
}

}  // namespace gpupool

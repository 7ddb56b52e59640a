#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <vector>

namespace gpupool {

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(buf.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    // n < 0 only with EINTR (or before the pool is initialised at boot): try again.
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out(2 * bytes, '0');
  for (size_t i = 0; i < bytes; ++i) {
    out[2 * i] = kHex[buf[i] >> 4];
    out[2 * i + 1] = kHex[buf[i] & 0xF];
  }
  return out;
}

}  // namespace gpupool

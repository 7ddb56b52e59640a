#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace gpupool {

namespace {
// EINTR can repeat under a storm of signals; anything else will not get better by retrying.
constexpr int kMaxInterrupts = 100;
}  // namespace

Result<std::string> RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  size_t got = 0;
  int interrupts = 0;
  while (got < bytes) {
    ssize_t n = getrandom(buf.data() + got, bytes - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    int err = n < 0 ? errno : EIO;
    if (err == EINTR && ++interrupts < kMaxInterrupts) continue;
    return Status::Internal(std::string("cannot read the system's random source (getrandom): ") + std::strerror(err));
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

#include "remote/devices/sim/gpu_identity.h"

#include <cctype>
#include <cstdint>
#include <cstdio>

namespace gpupool::devices {
namespace {

// 64-bit FNV-1a; two differently seeded passes make the 128 bits of a UUID. Not
// cryptographic, only stable across builds and platforms (std::hash is not).
uint64_t Fnv1a64(const std::string& data, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

std::string DeterministicGpuUuid(const std::string& host, int index) {
  const std::string key = host + '\0' + std::to_string(index);
  uint64_t hi = Fnv1a64(key, 0xcbf29ce484222325ULL);
  uint64_t lo = Fnv1a64(key, 0x84222325cbf29ce4ULL ^ hi);
  hi = (hi & ~0xf000ULL) | 0x4000ULL;                         // version 4
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // RFC 4122 variant
  char buf[64];
  std::snprintf(buf, sizeof(buf), "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xffff), static_cast<unsigned>(hi & 0xffff),
                static_cast<unsigned>(lo >> 48), static_cast<unsigned long long>(lo & 0xffffffffffffULL));
  return buf;
}

std::string SimPciBusId(int index) {
  // 0x07, 0x0f, 0x17, ... wraps within the 256 buses of domain (index / 32).
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:00.0", (index / 32) & 0xffff, (7 + 8 * index) & 0xff);
  return buf;
}

bool LooksLikeGpuUuid(const std::string& text) {
  static const char kPattern[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
  if (text.size() != sizeof(kPattern) - 1) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    char p = kPattern[i];
    if (p == 'x') {
      if (!std::isxdigit(static_cast<unsigned char>(text[i]))) return false;
    } else if (text[i] != p) {
      return false;
    }
  }
  return true;
}

}  // namespace gpupool::devices

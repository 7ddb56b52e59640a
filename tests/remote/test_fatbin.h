// Fatbins made by hand for the image and sim executor tests: entries of a given kind,
// architecture and flags, laid out as nvcc writes them (64-byte entry headers).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gpupool::fatbin_testing {

struct TestEntry {
  uint16_t kind;  // 1: PTX, 2: ELF
  uint32_t arch;
  uint64_t flags;  // 0x100000: arch-specific SASS; no compression flags
  std::vector<uint8_t> payload;
};

inline std::vector<uint8_t> FatbinOf(const std::vector<TestEntry>& entries) {
  std::vector<uint8_t> out(16);
  for (const TestEntry& entry : entries) {
    const uint32_t padded = static_cast<uint32_t>((entry.payload.size() + 7) & ~size_t{7});
    uint8_t header[64] = {};
    const uint32_t header_size = 64, payload_size = static_cast<uint32_t>(entry.payload.size());
    std::memcpy(header + 0, &entry.kind, 2);
    std::memcpy(header + 4, &header_size, 4);
    std::memcpy(header + 8, &padded, 4);
    std::memcpy(header + 16, &payload_size, 4);
    std::memcpy(header + 28, &entry.arch, 4);
    std::memcpy(header + 40, &entry.flags, 8);
    out.insert(out.end(), header, header + 64);
    out.insert(out.end(), entry.payload.begin(), entry.payload.end());
    out.resize(out.size() + (padded - entry.payload.size()), 0);
  }
  const uint32_t magic = 0xBA55ED50;
  const uint16_t version = 1, header_size = 16;
  const uint64_t files_size = out.size() - 16;
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &version, 2);
  std::memcpy(out.data() + 6, &header_size, 2);
  std::memcpy(out.data() + 8, &files_size, 8);
  return out;
}

// PTX text as a fatbin entry's payload, with its NUL.
inline std::vector<uint8_t> PtxBytes(const std::string& text) {
  return std::vector<uint8_t>(text.c_str(), text.c_str() + text.size() + 1);
}

}  // namespace gpupool::fatbin_testing

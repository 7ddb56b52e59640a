// MD2 (RFC 1319) and HMAC-MD2: what the CUDA runtime's driver integrity check is built on.
//
// The CUDA 13 runtime asks the driver, through an undocumented export table, for a keyed
// hash over values both sides know (driver version, pid, thread, table addresses, time and
// each device's UUID and PCI location) and refuses to run when the answer is wrong. That
// hash is HMAC over MD2 with a fixed key (see export_tables.cc). Written from the RFC.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace gpupool::client {

class Md2 {
 public:
  Md2();
  void Update(const void* data, size_t size);
  std::array<uint8_t, 16> Finish();

 private:
  void AddByte(uint8_t byte);
  void CompressBlock();

  uint8_t state_[48];               // X: hash state (16) | block (16) | state xor block (16)
  uint8_t checksum_[16];            // C
  uint8_t last_checksum_byte_ = 0;  // L
  size_t block_fill_ = 0;
};

// HMAC-MD2 with a 16-byte key (MD2's block size is 16, so the key is one block).
std::array<uint8_t, 16> HmacMd2(const uint8_t key[16], const void* message, size_t size);

}  // namespace gpupool::client

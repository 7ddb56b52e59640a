#include "remote/client/core/md2.h"

#include <cstring>

namespace gpupool::client {
namespace {

// RFC 1319's permutation of 0..255 "constructed from the digits of pi".
constexpr uint8_t kPiSubstitution[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,   243, 192, 199,
    115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212, 224, 22,  103, 66,  111, 24,
    138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160, 251, 245, 142, 187, 47,  238, 122, 169, 104,
    121, 145, 21,  178, 7,   63,  148, 194, 16,  137, 11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,
    53,  62,  204, 231, 191, 247, 151, 3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,
    170, 198, 79,  184, 56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,
    100, 113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246, 28,  70,
    97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249, 206, 186, 197, 234, 38,
    44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129, 77,  82,  106, 220, 55,  200, 108, 193,
    171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120, 136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254,
    59,  0,   29,  57,  242, 239, 183, 14,  102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,
    80,  180, 143, 237, 31,  26,  219, 153, 141, 51,  159, 17,  131, 20,
};

}  // namespace

Md2::Md2() {
  std::memset(state_, 0, sizeof(state_));
  std::memset(checksum_, 0, sizeof(checksum_));
}

void Md2::CompressBlock() {
  uint8_t t = 0;
  for (int round = 0; round < 18; ++round) {
    for (uint8_t& x : state_) {
      x ^= kPiSubstitution[t];
      t = x;
    }
    t = static_cast<uint8_t>(t + round);
  }
}

void Md2::AddByte(uint8_t byte) {
  state_[16 + block_fill_] = byte;
  state_[32 + block_fill_] = state_[block_fill_] ^ byte;
  checksum_[block_fill_] ^= kPiSubstitution[byte ^ last_checksum_byte_];
  last_checksum_byte_ = checksum_[block_fill_];
  if (++block_fill_ == 16) {
    block_fill_ = 0;
    CompressBlock();
  }
}

void Md2::Update(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) AddByte(bytes[i]);
}

std::array<uint8_t, 16> Md2::Finish() {
  uint8_t padding = static_cast<uint8_t>(16 - block_fill_);
  for (uint8_t i = 0; i < padding; ++i) AddByte(padding);
  uint8_t checksum[16];
  std::memcpy(checksum, checksum_, sizeof(checksum));
  for (uint8_t byte : checksum) AddByte(byte);
  std::array<uint8_t, 16> digest;
  std::memcpy(digest.data(), state_, 16);
  return digest;
}

std::array<uint8_t, 16> HmacMd2(const uint8_t key[16], const void* message, size_t size) {
  uint8_t inner_key[16], outer_key[16];
  for (int i = 0; i < 16; ++i) {
    inner_key[i] = key[i] ^ 0x36;
    outer_key[i] = key[i] ^ 0x5c;
  }
  Md2 inner;
  inner.Update(inner_key, 16);
  inner.Update(message, size);
  auto inner_digest = inner.Finish();
  Md2 outer;
  outer.Update(outer_key, 16);
  outer.Update(inner_digest.data(), inner_digest.size());
  return outer.Finish();
}

}  // namespace gpupool::client

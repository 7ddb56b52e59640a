#include "remote/client/core/md2.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace gpupool::client {
namespace {

std::string Hex(const std::array<uint8_t, 16>& digest) {
  std::string out;
  char byte[3];
  for (uint8_t b : digest) {
    std::snprintf(byte, sizeof(byte), "%02x", b);
    out += byte;
  }
  return out;
}

std::string Md2Hex(const std::string& text) {
  Md2 md2;
  md2.Update(text.data(), text.size());
  return Hex(md2.Finish());
}

// Test suite of RFC 1319, appendix A.5.
TEST(Md2, MatchesRfc1319TestSuite) {
  EXPECT_EQ(Md2Hex(""), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(Md2Hex("a"), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  EXPECT_EQ(Md2Hex("abc"), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(Md2Hex("message digest"), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(Md2Hex("abcdefghijklmnopqrstuvwxyz"), "4e8ddff3650292ab5a4108c3aa47940b");
  EXPECT_EQ(Md2Hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "d5976f79d83d3a0dc9806c3c66f3efd8");
}

TEST(Md2, IncrementalUpdatesEqualOneUpdate) {
  Md2 split;
  split.Update("message ", 8);
  split.Update("digest", 6);
  EXPECT_EQ(Hex(split.Finish()), Md2Hex("message digest"));
}

// HMAC with a one-block key: H((K^opad) || H((K^ipad) || m)).
TEST(HmacMd2, IsTheHmacConstruction) {
  uint8_t key[16];
  for (int i = 0; i < 16; ++i) key[i] = static_cast<uint8_t>(i * 17 + 3);
  const std::string message = "driver integrity";
  std::string inner_input, outer_input;
  for (int i = 0; i < 16; ++i) inner_input += static_cast<char>(key[i] ^ 0x36);
  inner_input += message;
  Md2 inner;
  inner.Update(inner_input.data(), inner_input.size());
  auto inner_digest = inner.Finish();
  for (int i = 0; i < 16; ++i) outer_input += static_cast<char>(key[i] ^ 0x5c);
  outer_input.append(reinterpret_cast<const char*>(inner_digest.data()), 16);
  EXPECT_EQ(Hex(HmacMd2(key, message.data(), message.size())), Md2Hex(outer_input));
  key[0] ^= 1;
  EXPECT_NE(Hex(HmacMd2(key, message.data(), message.size())), Md2Hex(outer_input));
}

}  // namespace
}  // namespace gpupool::client

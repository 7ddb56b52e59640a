// Wire format of gpupool's data-path RPC over UCX active messages.
//
// A request is one active message with id kRequestAmId: its AM header is a RequestHeader
// followed by `args_len` bytes of op-specific arguments (small, fixed-size structs); its AM
// payload is the optional bulk data (host-to-device copies, module images), which UCX sends
// eagerly or by rendezvous depending on size. A reply is one active message with id
// kReplyAmId: ReplyHeader + `out_len` bytes of small results as AM header, bulk results
// (device-to-host copies) as payload. Replies come back in request order on a connection.
//
// Both ends run on the same architecture family (x86-64 / aarch64 little endian); structs
// are sent as their in-memory bytes, so every field has a fixed width and explicit padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gpupool::transport {

inline constexpr unsigned kRequestAmId = 11;
inline constexpr unsigned kReplyAmId = 12;
inline constexpr uint32_t kWireMagic = 0x67707231;  // "gpr1"

// Request flags.
inline constexpr uint32_t kFlagOneWay = 1u << 0;  // the server sends no reply unless asked later

// Largest argument block and inline result block (they travel in the AM header).
inline constexpr uint32_t kMaxArgsLen = 1024;
inline constexpr uint32_t kMaxInlineOutLen = 1024;

struct RequestHeader {
  uint32_t magic = kWireMagic;
  uint32_t op = 0;
  uint64_t connection = 0;  // the random id the server gave this connection (bootstrap.h)
  uint64_t seq = 0;
  uint32_t flags = 0;
  uint32_t args_len = 0;
};
static_assert(sizeof(RequestHeader) == 32);

struct ReplyHeader {
  uint32_t magic = kWireMagic;
  int32_t status = 0;        // result of this request (a CUresult value)
  uint64_t seq = 0;          // the request's seq
  int32_t async_status = 0;  // first error of earlier one-way requests, reported once
  uint32_t out_len = 0;      // inline result bytes following this header
};
static_assert(sizeof(ReplyHeader) == 24);

// The checks each end makes on an active message's header before it believes any field:
// false means the message is dropped. A request header must be exactly RequestHeader plus
// its `args_len` (at most kMaxArgsLen) argument bytes; a reply header at least ReplyHeader
// plus its `out_len` result bytes. The magic must match. Pure: tests/fuzz/wire_client.cc
// feeds them arbitrary bytes.
inline bool DecodeRequestHeader(const void* am_header, size_t am_header_len, RequestHeader* out) {
  if (am_header == nullptr || am_header_len < sizeof(RequestHeader)) return false;
  std::memcpy(out, am_header, sizeof(RequestHeader));
  return out->magic == kWireMagic && out->args_len <= kMaxArgsLen &&
         am_header_len == sizeof(RequestHeader) + out->args_len;
}
inline bool DecodeReplyHeader(const void* am_header, size_t am_header_len, ReplyHeader* out) {
  if (am_header == nullptr || am_header_len < sizeof(ReplyHeader)) return false;
  std::memcpy(out, am_header, sizeof(ReplyHeader));
  return out->magic == kWireMagic && am_header_len - sizeof(ReplyHeader) >= out->out_len;
}

}  // namespace gpupool::transport

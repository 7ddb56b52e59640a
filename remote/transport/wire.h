// Wire format of gpupool's data-path RPC over UCX active messages.
//
// A request is one active message with id kRequestAmId: its AM header is a RequestHeader
// followed by `args_len` bytes of op-specific arguments (small, fixed-size structs); its AM
// payload is the optional bulk data (host-to-device copies, module images), which UCX sends
// eagerly or by rendezvous depending on size. A reply is one active message with id
// kReplyAmId: ReplyHeader + `out_len` bytes of small results as AM header, bulk results
// (device-to-host copies) as payload. Replies come back in request order on a connection.
//
// A batch carries several one-way requests in one active message, id kBatchAmId: its AM
// header is a BatchHeader, its AM data (always sent eagerly) `count` items of
//   RequestHeader + `args_len` argument bytes + uint32_t payload length + payload bytes,
// each a one-way request of the batch's connection. The server runs them in order, as if
// they had come one by one. A client batches a burst of small one-way requests (launches,
// small copies, memsets, event records): rpc_client.h says when.
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
inline constexpr unsigned kBatchAmId = 13;
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

struct BatchHeader {
  uint32_t magic = kWireMagic;
  uint32_t count = 0;       // items
  uint64_t connection = 0;  // as RequestHeader's; every item names it too
  uint32_t bytes = 0;       // of the AM data
  uint32_t reserved = 0;
};
static_assert(sizeof(BatchHeader) == 24);

// Flow control of one-way requests. A client sends at most kMaxUnansweredPosts one-way
// requests (or kMaxUnansweredPostBytes of their arguments and eager payloads) after its
// last answered request: the next one goes two-way, and the client waits for its answer
// (so a program that queues launches behind a long kernel waits, as CUDA's launch queue
// makes it wait). A server queues at most kMaxQueuedRequests requests or kMaxQueuedBytes
// per connection, room for a whole window and the batches in flight; a client past that
// does not speak this wire, and its connection is closed with that reason.
inline constexpr uint64_t kMaxUnansweredPosts = 16384;
inline constexpr uint64_t kMaxUnansweredPostBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMaxQueuedRequests = 4 * kMaxUnansweredPosts;
inline constexpr uint64_t kMaxQueuedBytes = 4 * kMaxUnansweredPostBytes;

// Limits of a batch (the client flushes well before them).
inline constexpr uint32_t kMaxBatchItems = 256;
inline constexpr uint32_t kMaxBatchBytes = 64 << 10;

// Over a connection whose endpoints detect peer failure (kDetectsPeerFailure: a network
// transport, since UCX refuses shared memory in that mode), payloads of requests and
// replies up to this size are sent eagerly. UCX sends 64 KiB over TCP by rendezvous, whose
// handshake costs a synchronous copy one more network round trip than the eager copies
// cost: on loopback TCP (2 cores) a 64 KiB cudaMemcpy took 30 us eagerly against 58 us
// host to device, 43 us against 62 us device to host (medians of 6 alternating runs).
// Never measured over InfiniBand, where the same rule applies. Over shared memory UCX
// keeps its choice: there, eager 64 KiB copies were twice as slow in about half of the
// runs (scripts/bench/remote).
inline constexpr size_t kEagerPayloadMax = 64 << 10;
// Whether a payload of `payload_len` goes eagerly on a connection that does (`network`)
// or does not detect peer failure: the one rule for requests and replies.
inline bool SendsEagerly(bool network, size_t payload_len) { return network && payload_len <= kEagerPayloadMax; }

// One request of a batch, pointing into the batch's data.
struct BatchItem {
  RequestHeader header;
  const char* args = nullptr;
  const char* payload = nullptr;
  uint32_t payload_len = 0;
};

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

// A batch's header: exactly a BatchHeader with the magic, 1 to kMaxBatchItems items and at
// most kMaxBatchBytes of data.
inline bool DecodeBatchHeader(const void* am_header, size_t am_header_len, BatchHeader* out) {
  if (am_header == nullptr || am_header_len != sizeof(BatchHeader)) return false;
  std::memcpy(out, am_header, sizeof(BatchHeader));
  return out->magic == kWireMagic && out->count >= 1 && out->count <= kMaxBatchItems && out->bytes <= kMaxBatchBytes;
}

// Splits a batch's data into its items: false, with *why, unless the data is exactly
// `header.bytes` long and holds exactly `header.count` well-formed items, each one-way and
// naming the batch's connection. Nothing is taken from a batch that fails. Pure:
// tests/fuzz/wire_client.cc feeds it arbitrary bytes.
inline bool DecodeBatch(const BatchHeader& header, const void* data, size_t length, BatchItem* items,
                        const char** why) {
  if (length != header.bytes || (length > 0 && data == nullptr)) {
    *why = "its data is not the length its header says";
    return false;
  }
  const char* p = static_cast<const char*>(data);
  size_t left = length;
  for (uint32_t i = 0; i < header.count; ++i) {
    BatchItem& item = items[i];
    if (left < sizeof(RequestHeader)) {
      *why = "an item is cut short";
      return false;
    }
    std::memcpy(&item.header, p, sizeof(RequestHeader));
    if (item.header.magic != kWireMagic || item.header.args_len > kMaxArgsLen) {
      *why = "an item's request header is malformed";
      return false;
    }
    if (item.header.connection != header.connection) {
      *why = "an item names another connection";
      return false;
    }
    if ((item.header.flags & kFlagOneWay) == 0) {
      *why = "an item is not a one-way request";
      return false;
    }
    p += sizeof(RequestHeader);
    left -= sizeof(RequestHeader);
    if (left < size_t{item.header.args_len} + sizeof(uint32_t)) {
      *why = "an item is cut short";
      return false;
    }
    item.args = p;
    p += item.header.args_len;
    std::memcpy(&item.payload_len, p, sizeof(uint32_t));
    p += sizeof(uint32_t);
    left -= item.header.args_len + sizeof(uint32_t);
    if (left < item.payload_len) {
      *why = "an item is cut short";
      return false;
    }
    item.payload = p;
    p += item.payload_len;
    left -= item.payload_len;
  }
  if (left != 0) {
    *why = "bytes follow its last item";
    return false;
  }
  return true;
}

}  // namespace gpupool::transport

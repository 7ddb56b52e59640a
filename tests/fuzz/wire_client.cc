// Both ends of the data path's bootstrap handshake (remote/transport/bootstrap.cc), with
// the functions RpcClient::Connect and RpcServer use: the client reads the server's hello
// (magic, connection id, flags, worker address as a length-prefixed blob of at most
// 64 KiB; a refusal: connection 0 and its reason); the agent reads the client's (magic,
// flags, worker address, lane key, and the credential: lease, token, ticket).
//
// Input: byte 0 picks the reader (its value mod 4): 0 the client's (ReceiveServerHello),
// 1 the agent's (ReceiveClientHello), 2 and 3 the header checks (below); the rest is the
// bytes the peer sends, then end of stream.
//
// The header checks of requests and replies (wire.h), which RpcServer and RpcClient make
// inside UCX's active-message callbacks, are fed too (byte 0 values 2 and 3, below), and
// so is the server's batch decoder (byte 0 values 6 mod 8: a BatchHeader, then the data).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "remote/transport/bootstrap.h"
#include "remote/transport/wire.h"

namespace tr = gpupool::transport;

// Byte 0 values 2 and 3 pick the active-message header checks instead (wire.h): the
// rest of the input is one request header (2, as RpcServer's OnRequestAm reads it) or one
// reply header (3, as RpcClient::OnReply does).
static void CheckAmHeaders(bool request, const uint8_t* data, size_t size) {
  if (request) {
    tr::RequestHeader header;
    if (tr::DecodeRequestHeader(data, size, &header) &&
        (header.magic != tr::kWireMagic || header.args_len > tr::kMaxArgsLen ||
         size != sizeof(header) + header.args_len)) {
      __builtin_trap();
    }
  } else {
    tr::ReplyHeader header;
    if (tr::DecodeReplyHeader(data, size, &header)) {
      if (header.magic != tr::kWireMagic || size < sizeof(header) + header.out_len) {
        __builtin_trap();
      }
      // What OnReply then copies: the inline result, inside the header it received.
      std::string out(reinterpret_cast<const char*>(data) + sizeof(header), header.out_len);
      if (out.size() != header.out_len) __builtin_trap();
    }
  }
}

// What RpcServer's OnBatchAm does with a batch: the header check, then the items, each
// of which must lie inside the data and satisfy what DecodeBatch promises.
static void CheckBatch(const uint8_t* data, size_t size) {
  if (size < sizeof(tr::BatchHeader)) return;
  tr::BatchHeader header;
  if (!tr::DecodeBatchHeader(data, sizeof(header), &header)) return;
  if (header.count < 1 || header.count > tr::kMaxBatchItems || header.bytes > tr::kMaxBatchBytes) {
    __builtin_trap();
  }
  // A copy of exactly the rest: ASan then sees any read past the data's end.
  std::vector<char> bytes(data + sizeof(header), data + size);
  std::vector<tr::BatchItem> items(tr::kMaxBatchItems);
  const char* why = nullptr;
  if (!tr::DecodeBatch(header, bytes.data(), bytes.size(), items.data(), &why)) {
    if (why == nullptr) __builtin_trap();
    return;
  }
  const char* begin = bytes.data();
  const char* end = begin + bytes.size();
  for (uint32_t i = 0; i < header.count; ++i) {
    const tr::BatchItem& item = items[i];
    if (item.header.connection != header.connection || !(item.header.flags & tr::kFlagOneWay) ||
        item.header.args_len > tr::kMaxArgsLen || item.args < begin || item.args + item.header.args_len > end ||
        item.payload < begin || item.payload + item.payload_len > end) {
      __builtin_trap();
    }
    std::string args(item.args, item.header.args_len);  // what the server copies
    std::string payload(item.payload, item.payload_len);
    if (args.size() != item.header.args_len || payload.size() != item.payload_len) __builtin_trap();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 7) == 6) {
    CheckBatch(data + 1, size - 1);
    return 0;
  }
  if ((data[0] & 3) >= 2) {
    // A copy of exactly the rest: ASan then sees any read past the header's end.
    std::vector<uint8_t> header(data + 1, data + size);
    CheckAmHeaders((data[0] & 3) == 2, header.data(), header.size());
    return 0;
  }
  bool client = (data[0] & 1) == 0;
  ++data;
  --size;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) __builtin_trap();
  // The whole input fits the socket buffer (libFuzzer's -max_len stays far below it).
  int buffer = 1 << 20;
  setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  if (size > 0 && !tr::SendAll(fds[1], data, size).ok()) __builtin_trap();
  shutdown(fds[1], SHUT_WR);
  tr::SetTimeouts(fds[0], 1000);

  if (client) {
    gpupool::Result<tr::ServerHello> hello = tr::ReceiveServerHello(fds[0]);
    if (hello.ok() && (hello->worker_address.empty() || hello->worker_address.size() > tr::kMaxWorkerAddress ||
                       hello->connection == 0 || (hello->flags & ~tr::kKnownHelloFlags) != 0)) {
      __builtin_trap();
    }
    if (!hello.ok() && hello.status().message().empty()) __builtin_trap();
  } else {
    gpupool::Result<tr::ClientHello> hello = tr::ReceiveClientHello(fds[0]);
    if (hello.ok() && (hello->worker_address.empty() || hello->worker_address.size() > tr::kMaxWorkerAddress ||
                       hello->lease_id.size() > tr::kMaxLeaseId || hello->token.size() > tr::kMaxLeaseToken ||
                       hello->ticket.size() > tr::kMaxHandoffTicket || (hello->flags & ~tr::kKnownHelloFlags) != 0)) {
      __builtin_trap();
    }
    if (!hello.ok() && hello.status().message().empty()) __builtin_trap();
  }
  close(fds[0]);
  close(fds[1]);
  return 0;
}

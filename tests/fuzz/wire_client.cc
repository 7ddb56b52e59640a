// The client's end of the data path, as far as it decodes what an agent sends without a
// UCX connection: the bootstrap handshake answer (remote/transport/bootstrap.cc), read
// exactly as RpcClient::Connect reads it -- magic, connection id, then the server's worker
// address as a length-prefixed blob of at most 64 KiB. The agent reads the client's half
// (magic, then a blob) with the same functions, so one input drives both orders.
//
// Input: the bytes the peer sends, then end of stream. Byte 0 picks the reader: even, the
// client's; odd, the agent's.
//
// Not covered here: the reply header checks in RpcClient::OnReply and the request header
// checks in RpcServer's OnRequestAm run inside UCX callbacks and are not callable on their
// own (see /work/notes/fuzz.md).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "remote/transport/bootstrap.h"

namespace tr = gpupool::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
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

  uint32_t magic = 0;
  gpupool::Status status = tr::ReceiveAll(fds[0], &magic, sizeof(magic));
  if (status.ok() && magic != tr::kBootstrapMagic) status = gpupool::Status::Unavailable("bad magic");
  if (status.ok() && client) {
    uint64_t connection = 0;
    status = tr::ReceiveAll(fds[0], &connection, sizeof(connection));
  }
  if (status.ok()) {
    gpupool::Result<std::string> blob = tr::ReceiveBlob(fds[0], 64 * 1024);
    if (blob.ok() && blob->size() > 64 * 1024) __builtin_trap();
    if (!blob.ok() && blob.status().message().empty()) __builtin_trap();
  }
  close(fds[0]);
  close(fds[1]);
  return 0;
}

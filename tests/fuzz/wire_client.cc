// Both ends of the data path's bootstrap handshake (remote/transport/bootstrap.cc), with
// the functions RpcClient::Connect and RpcServer use: the client reads the server's hello
// (magic, connection id, flags, worker address as a length-prefixed blob of at most
// 64 KiB); the agent reads the client's (magic, flags, worker address).
//
// Input: the bytes the peer sends, then end of stream. Byte 0 picks the reader: even, the
// client's (ReceiveServerHello); odd, the agent's (ReceiveClientHello).
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

  if (client) {
    gpupool::Result<tr::ServerHello> hello = tr::ReceiveServerHello(fds[0]);
    if (hello.ok() && (hello->worker_address.empty() ||
                       hello->worker_address.size() > tr::kMaxWorkerAddress ||
                       hello->connection == 0 || (hello->flags & ~tr::kKnownHelloFlags) != 0)) {
      __builtin_trap();
    }
    if (!hello.ok() && hello.status().message().empty()) __builtin_trap();
  } else {
    gpupool::Result<tr::ClientHello> hello = tr::ReceiveClientHello(fds[0]);
    if (hello.ok() && (hello->worker_address.empty() ||
                       hello->worker_address.size() > tr::kMaxWorkerAddress ||
                       (hello->flags & ~tr::kKnownHelloFlags) != 0)) {
      __builtin_trap();
    }
    if (!hello.ok() && hello.status().message().empty()) __builtin_trap();
  }
  close(fds[0]);
  close(fds[1]);
  return 0;
}

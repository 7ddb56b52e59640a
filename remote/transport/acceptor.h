// HandshakeAcceptor: takes data-path clients on a TCP port and reads their bootstrap
// handshakes (bootstrap.h), all at once and without blocking, so that a slow or silent
// client delays nobody. A client has kHandshakeTimeoutMs to send its whole handshake; at
// most kMaxHandshaking handshakes are read at once, and at most kMaxHandshakingPerSource
// from one source address, so that one host cannot take every slot. A client turned away
// for these limits is closed at once (the client library tries again with backoff,
// rpc_client.h). A complete handshake goes to the sink, which owns the socket from then on.
//
// Used by RpcServer (the handshake goes to a lane of the same process) and by the agent's
// session broker (remote/agentd), which authenticates the credential and hands the socket
// to the session's worker process.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "remote/transport/bootstrap.h"

namespace gpupool::transport {

// A client whose handshake has been read, on its way to the lane that will run it.
struct Handshaken {
  int fd = -1;
  std::string peer;  // "ADDRESS:PORT"
  ClientHello hello;
};

// Where the acceptor's log lines go: `key` names the kind of line (without what changes
// every time, such as a client's port), for a rate limiter.
using ServerLog = std::function<void(const std::string& key, const std::string& line)>;

inline constexpr int kHandshakeTimeoutMs = 2000;
inline constexpr size_t kMaxHandshaking = 256;
inline constexpr size_t kMaxHandshakingPerSource = 64;

class HandshakeAcceptor {
 public:
  using Sink = std::function<void(Handshaken client)>;
  // Listens on "HOST:PORT" (port 0: any free port) and starts the acceptor thread. `sink`
  // runs on that thread and must not block.
  static Result<std::unique_ptr<HandshakeAcceptor>> Start(const std::string& listen, Sink sink, ServerLog log);
  virtual ~HandshakeAcceptor() = default;  // stops the thread, closes unfinished handshakes
  virtual int port() const = 0;
};

// The host part of "HOST:PORT".
std::string HostOf(const std::string& peer);

}  // namespace gpupool::transport

// Bootstrap: the TCP connection that sets up (and then watches) a data-path connection.
//
// UCX 1.13's sockaddr connection manager only builds TCP lanes, so shared memory (and any
// transport reached by worker address) would be out of reach. Instead the client connects
// a plain TCP socket to the agent's HOST:PORT and both sides swap UCX worker addresses
// over it; the UCX endpoints are then created from those addresses, and UCX picks the best
// transport it has in common (posix/cma on one host, tcp, verbs, ...).
// The socket stays open for the life of the connection: when either process dies the
// kernel closes it, which tells the other side at once, whatever UCX transport is in use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::transport {

// Handshake messages: magic, then length-prefixed blobs. The magic changes with
// every incompatible change of the wire, so that mismatched ends fail at the
// handshake instead of waiting for replies that never come. 2: requests must
// carry their reply endpoint (UCP_AM_SEND_FLAG_REPLY), or the server drops
// them. 3: the two ends agree on peer failure detection (HelloFlags) before
// either creates its endpoint. 4: the client names a lane key (the GPU it
// wants), which picks the server thread its connection runs on. 5: the client presents
// its credential (a lease and its token, or a handoff ticket) at the handshake, so that
// the agent's supervisor can authenticate it and hand the connection to the session's
// worker process before any tenant byte is parsed; the server may refuse the handshake
// (ServerHello::refusal).
inline constexpr uint32_t kBootstrapMagic = 0x67706235;  // "gpb5"
inline constexpr size_t kMaxWorkerAddress = 64 * 1024;
inline constexpr size_t kMaxLaneKey = 256;
inline constexpr size_t kMaxLeaseId = 63;        // as HelloArgs::lease_id (protocol.h)
inline constexpr size_t kMaxLeaseToken = 159;    // as HelloArgs::token
inline constexpr size_t kMaxHandoffTicket = 64;  // hex digits (protocol.h)
inline constexpr size_t kMaxRefusal = 1024;

// HelloFlags bits. kDetectsPeerFailure: the client can create its endpoint with UCX peer
// failure detection (it has a transport that reports a dead peer; shared-memory-only
// UCX_TLS has none); the server answers with the mode both ends then use. The two ends
// must use the same mode: UCX pairs the endpoints of a connection (and so fills in the
// reply endpoint the server checks every request against) only when both were created
// alike, and a refused first attempt leaves them unpaired.
inline constexpr uint32_t kDetectsPeerFailure = 1u << 0;
inline constexpr uint32_t kKnownHelloFlags = kDetectsPeerFailure;

// The client's half of the handshake: magic, flags, its worker address, its
// lane key.
struct ClientHello {
  uint32_t flags = 0;
  std::string worker_address;
  // Which of the server's lanes (rpc_server.h) should run the connection: the
  // dataplane's are GPU uuids. Empty or unknown: the server's first lane. Only
  // a placement hint: the server still checks at hello that the connection's
  // lane serves the GPU it names.
  std::string lane_key;
  // The credential, checked by the agent before the connection reaches a session: a
  // lease and its token (a client of the lease), or a handoff ticket (another agent that
  // reads memory offered for a handoff). Empty: none (an agent refuses such a client).
  std::string lease_id;
  std::string token;
  std::string ticket;
};
// The server's answer: magic, the connection's id, the flags both ends use, its address.
// A refused handshake is answered with connection 0 and `refusal` in place of the address:
// why (e.g. the lease does not hold the GPU); ReceiveServerHello then fails with
// PermissionDenied and that text.
struct ServerHello {
  uint64_t connection = 0;
  uint32_t flags = 0;
  std::string worker_address;
  std::string refusal;
};
Status SendClientHello(int fd, const ClientHello& hello);
// Fails with InvalidArgument naming what is wrong (magic, flags, address or key
// size).
Result<ClientHello> ReceiveClientHello(int fd);
// The same checks on bytes received so far, for a reader that does not block: false while
// `bytes` holds only the beginning of a good hello, true once *hello is complete (then
// *used is its length), an error like ReceiveClientHello's as soon as one shows.
Result<bool> ParseClientHello(std::string_view bytes, ClientHello* hello, size_t* used);
Status SendServerHello(int fd, const ServerHello& hello);
// Sends a refusal (connection 0, the reason) with the socket's send timeout.
Status SendRefusal(int fd, const std::string& why);
Result<ServerHello> ReceiveServerHello(int fd);

// A listening socket on "HOST:PORT" (port 0: any); *port gets the bound port.
Result<int> ListenTcp(const std::string& host_port, int* port);
// A connected socket to "HOST:PORT", within `timeout_ms`.
Result<int> ConnectTcp(const std::string& host_port, int timeout_ms);

// Blocking, with the socket's timeouts (SetTimeouts).
Status SendAll(int fd, const void* data, size_t size);
Status ReceiveAll(int fd, void* data, size_t size);
Status SendBlob(int fd, const std::string& blob);
Result<std::string> ReceiveBlob(int fd, size_t max_size);
void SetTimeouts(int fd, int timeout_ms);

// "ADDRESS:PORT" of the socket's peer.
std::string PeerAddress(int fd);

// True when the peer closed the socket or it failed (never blocks).
bool PeerClosed(int fd);

}  // namespace gpupool::transport

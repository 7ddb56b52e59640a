// RpcServer: accepts data-path connections and runs their requests.
//
// Clients connect to a TCP socket and swap UCX worker addresses over it
// (bootstrap.h); the socket stays open to tell when a client goes.
//
// Threads. The server has one or more lanes (the dataplane makes one per GPU).
// Each lane is a thread with its own UCX worker, its own connections and its
// own RpcHandler: it receives its connections' requests (active messages, bulk
// data by rendezvous straight into the destination the handler names), calls
// its handler, and sends the replies. The lanes share nothing, so a lane whose
// handler is slow or stuck (a hung GPU) delays only its own connections. An
// acceptor thread takes new clients and reads all their handshakes at once without
// blocking (one not complete within 2 s is dropped); the client names a lane key
// there (a GPU uuid), which `pick_lane` maps to a lane, and the connection is then
// handed to that lane. A
// handler that must wait for something slow (the dataplane's lease check at
// hello) defers its reply (ServerReply::deferred) instead of blocking its lane,
// and delivers it later through OnWake after someone called RpcServer::Wake.
// Requests of one connection run strictly in order, one at a time: a request's
// bulk transfer completes before the next request of that connection starts,
// which is what CUDA stream order needs. When idle a lane sleeps on its
// worker's event fd (after a short spin that keeps latency low).
//
// Who may send what: a request counts only when it arrives on the UCX endpoint
// of the connection its header names. Connection ids come from the kernel's
// random source (getrandom(2)) and are told only to their own client, over its
// bootstrap socket; the server additionally checks the endpoint each request
// came on (clients send with UCP_AM_SEND_FLAG_REPLY), so a guessed id, or a
// real id sent from another endpoint, reaches nothing: such requests are
// dropped (and counted in one log line now and then).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "remote/transport/acceptor.h"
#include "remote/transport/wire.h"

namespace gpupool::transport {

using ConnectionId = uint64_t;

struct ServerReply {
  int32_t status = 0;
  int32_t async_status = 0;
  std::string out;             // small results, sent inline
  const void* bulk = nullptr;  // bulk result; must stay valid until the next request
  size_t bulk_len = 0;         //   of this connection starts (the server ensures that)
  bool close_after = false;    // close the connection once the reply is sent
  bool tick_soon = false;      // call OnTick right after this request (not a tick later)
  // The handler answers later, through OnWake (the request's reply fields here
  // are ignored). The connection runs nothing else until then; the handler must
  // answer every deferred request exactly once.
  bool deferred = false;
};

// Implemented by the dataplane, one per lane. All methods run on that lane's
// thread.
class RpcHandler {
 public:
  virtual ~RpcHandler() = default;
  virtual void OnConnect(ConnectionId id, const std::string& peer) = 0;
  // Where the `len` bulk bytes of this request should be received (e.g. straight into
  // device memory). nullptr: the server receives them into a temporary buffer.
  virtual void* BulkDestination(ConnectionId id, const RequestHeader& header, std::string_view args, size_t len) = 0;
  // Runs one request. For one-way requests (kFlagOneWay) the reply is not sent.
  virtual void OnRequest(ConnectionId id, const RequestHeader& header, std::string_view args, const void* payload,
                         size_t payload_len, ServerReply* reply) = 0;
  // The connection is gone (peer closed, died, or close_after); free its resources.
  virtual void OnDisconnect(ConnectionId id, const std::string& reason) = 0;
  // Called about every kTickIntervalMs, busy or idle. Each connection the handler lists in
  // *close is closed at once (requests it still has queued are dropped), with that reason.
  virtual void OnTick(std::vector<std::pair<ConnectionId, std::string>>* close) {}
  // Called soon after RpcServer::Wake(this lane): the handler appends the
  // replies of deferred requests that are ready now.
  virtual void OnWake(std::vector<std::pair<ConnectionId, ServerReply>>* replies) {}
};

// ServerLog (acceptor.h): where the server's log lines go. Default: common/log, as warnings.

// Maps the lane key a client named at its handshake to a lane (an index below
// the number of lanes; anything else means lane 0). Runs on the acceptor
// thread.
using LanePicker = std::function<size_t(const std::string& lane_key)>;

inline constexpr int kTickIntervalMs = 100;

// Lowers wire.h's per-connection queue caps (kMaxQueuedRequests, kMaxQueuedBytes) for
// every server of this process: tests only.
void SetQueueCapsForTesting(uint64_t requests, uint64_t bytes);

class RpcServer {
 public:
  // Listens on "HOST:PORT" (port 0: any free port, see port()). `handler` must outlive
  // the server.
  static Result<std::unique_ptr<RpcServer>> Start(const std::string& listen, RpcHandler* handler);
  // One lane per handler (at least one); `pick_lane` places each new
  // connection.
  static Result<std::unique_ptr<RpcServer>> Start(const std::string& listen, std::vector<RpcHandler*> lanes,
                                                  LanePicker pick_lane, ServerLog log = nullptr);
  // The same lanes without a listening socket: clients arrive through Adopt (the agent's
  // session worker, whose clients the supervisor accepted and passed over).
  static Result<std::unique_ptr<RpcServer>> StartWithoutListening(std::vector<RpcHandler*> lanes, LanePicker pick_lane,
                                                                  ServerLog log = nullptr);
  virtual ~RpcServer() = default;  // stops the threads and closes every connection
  virtual int port() const = 0;    // 0 without a listening socket
  // Any thread: runs a client whose handshake was read elsewhere on the lane its lane key
  // picks (the lane answers the handshake); the server owns client.fd from now on.
  virtual void Adopt(Handshaken client) = 0;
  // Any thread: lane `lane`'s handler gets OnWake soon (never blocks).
  virtual void Wake(size_t lane) = 0;
};

}  // namespace gpupool::transport

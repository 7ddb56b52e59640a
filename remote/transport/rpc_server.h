// RpcServer: accepts data-path connections and runs their requests.
//
// Clients connect to a TCP socket and swap UCX worker addresses over it (bootstrap.h); the
// socket stays open to tell when a client goes. One thread owns the UCX worker and the
// sockets: it accepts connections, receives requests (active
// messages, bulk data by rendezvous straight into the destination the handler names),
// calls the RpcHandler, and sends replies. Requests of one connection run strictly in
// order, one at a time: a request's bulk transfer completes before the next request of
// that connection starts, which is what CUDA stream order needs. When idle the thread
// sleeps on the worker's event fd (after a short spin that keeps latency low).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "remote/transport/wire.h"

namespace gpupool::transport {

using ConnectionId = uint64_t;

struct ServerReply {
  int32_t status = 0;
  int32_t async_status = 0;
  std::string out;              // small results, sent inline
  const void* bulk = nullptr;   // bulk result; must stay valid until the next request
  size_t bulk_len = 0;          //   of this connection starts (the server ensures that)
  bool close_after = false;     // close the connection once the reply is sent
};

// Implemented by the dataplane. All methods run on the server thread.
class RpcHandler {
 public:
  virtual ~RpcHandler() = default;
  virtual void OnConnect(ConnectionId id, const std::string& peer) = 0;
  // Where the `len` bulk bytes of this request should be received (e.g. straight into
  // device memory). nullptr: the server receives them into a temporary buffer.
  virtual void* BulkDestination(ConnectionId id, const RequestHeader& header,
                                std::string_view args, size_t len) = 0;
  // Runs one request. For one-way requests (kFlagOneWay) the reply is not sent.
  virtual void OnRequest(ConnectionId id, const RequestHeader& header, std::string_view args,
                         const void* payload, size_t payload_len, ServerReply* reply) = 0;
  // The connection is gone (peer closed, died, or close_after); free its resources.
  virtual void OnDisconnect(ConnectionId id, const std::string& reason) = 0;
};

class RpcServer {
 public:
  // Listens on "HOST:PORT" (port 0: any free port, see port()). `handler` must outlive
  // the server.
  static Result<std::unique_ptr<RpcServer>> Start(const std::string& listen,
                                                  RpcHandler* handler);
  virtual ~RpcServer() = default;  // stops the thread and closes every connection
  virtual int port() const = 0;
};

}  // namespace gpupool::transport

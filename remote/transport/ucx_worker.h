// UcxWorker: one UCX context with one worker, set up for gpupool's active-message RPC.
//
// Both ends of the data path use it: RpcClient (inside the replacement libcuda.so.1) and
// RpcServer (inside gpupool-agentd). The worker is single-threaded (UCS_THREAD_MODE_SINGLE):
// its owner must call every method from one thread at a time.
//
// Peer failure: endpoints are created with UCP_ERR_HANDLING_MODE_PEER where the transports
// allow it (not shared memory), and the keepalive interval is shortened (unless
// UCX_KEEPALIVE_INTERVAL is set) so a dead peer is noticed in seconds rather than UCX's
// default 20 s. Independently, the bootstrap socket (bootstrap.h) reports a dead peer at
// once, whatever the transport.
#pragma once

#include <sys/socket.h>

#include <memory>
#include <string>

#include <ucp/api/ucp.h>

#include "common/status.h"

namespace gpupool::transport {

// "HOST:PORT" (IPv4 address or resolvable name; "[v6]:port" for IPv6) to a socket address.
Result<sockaddr_storage> ParseEndpoint(const std::string& host_port);

class UcxWorker {
 public:
  // How the worker is used: by one thread only (an agent lane), or by several threads, one
  // at a time under the owner's lock (a client: the application's threads and the batch
  // flusher), which UCX must be told (UCS_THREAD_MODE_SERIALIZED).
  enum class Threads { kOne, kSerialized };
  // `name` shows up in UCX logs. Fails with Unavailable naming the UCX error.
  static Result<std::unique_ptr<UcxWorker>> Create(const std::string& name, Threads threads);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }

  Status SetAmHandler(unsigned id, ucp_am_recv_callback_t cb, void* arg);

  // This worker's address, for the peer to connect to (bootstrap.h).
  Result<std::string> Address();
  // Whether this process's transports (UCX_TLS) can report a dead peer: shared-memory-only
  // lists cannot. The two ends of a connection agree on it at the handshake (bootstrap.h).
  static bool CanDetectPeerFailure();
  // An endpoint to the worker at `address`. With `detect_peer_failure`, peer failure is
  // reported to `on_error`; if UCX refuses that (no transport to the peer can report it),
  // the endpoint is made without and *detecting is false. The peer must then be told, so
  // that it creates its own endpoint the same way (see kDetectsPeerFailure).
  Result<ucp_ep_h> Connect(const std::string& address, ucp_err_handler_cb_t on_error, void* arg,
                           bool detect_peer_failure, bool* detecting = nullptr);

  // Arms the worker's event fd; false when events are pending (progress first).
  bool Arm();
  int event_fd() const { return efd_; }

  // Progresses the worker until it reports no more events; returns the event count.
  unsigned ProgressAll();
  // Progresses the worker once; returns the event count. What a polling loop calls: it
  // looks at what came right after, where ProgressAll would first poll once more in vain.
  unsigned Progress() { return ucp_worker_progress(worker_); }

  // Blocks until the worker has an event or `timeout_ms` passed (after arming it); other
  // file descriptors may be woken by `extra_fd` (-1: none). Returns false on timeout.
  bool WaitForEvents(int timeout_ms, int extra_fd = -1);

 private:
  UcxWorker() = default;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;   // the worker's event fd
  int epfd_ = -1;  // epoll set holding efd_ (and an extra fd added on demand)
  int extra_in_epoll_ = -1;
};

// Returns a status message for a UCX status code.
std::string UcxError(ucs_status_t status);

}  // namespace gpupool::transport

// Server: the GPU-host end of the data path, run inside gpupool-agentd.
//
// Listens for connections from the replacement libcuda.so.1 (remote/client),
// checks each client's lease credential with `authorize` (the agent knows, from
// gpupoold's heartbeat answers, which lease holds which GPU), and runs the
// client's CUDA operations on the backend's GPU: the sim executor when the
// backend is "sim", the cuda executor when it is "cuda". Before every device
// operation it asks backend->BeforeOperation (fault injection and health), and
// reports in-band GPU failures with backend->ReportFailure. A client's
// allocations, modules, streams and events are freed when it disconnects (also
// when it was killed: its bootstrap socket closes with it).
//
// Threads: one per GPU (a transport lane, rpc_server.h), which runs every
// session of that GPU: sessions on different GPUs run in parallel, and a GPU
// that hangs or is slow holds only its own thread, so only its own clients
// wait. A client names its GPU at the transport handshake; its hello must name
// the same GPU. The hello's lease check
// (`authorize`, which may wait up to seconds for gpupoold) runs on a separate
// authorizer thread: the GPU thread defers that reply and goes on with other
// sessions' requests.
//
// Revocation: a credential is not checked only at hello. Whenever the
// authorization epoch moves (the agent's lease table changed), every session's
// lease is checked again with `still_authorized`, on the next request and by
// the server's tick (every 100 ms) even when the client is idle. A session
// whose lease no longer holds its GPU (released, expired, or moved to another
// GPU) is revoked: its requests answer CUDA_ERROR_NOT_PERMITTED, and its
// connection is closed, which frees its memory. When the GPU is healthy (the lease
// was moved off it: a drain, gpupoolctl migrate), the session and its memory are
// kept for `handoff_window` instead, so that the client can hand its memory to the
// lease's new GPU agent to agent (protocol.h, Handoff); then, or when the window
// ends, the connection is closed. A hello that attaches lease B
// to a GPU revokes, before B's session starts, every session of another lease
// on that GPU, and has them closed right after its reply, before B's next
// request runs (unless one is still sending a reply): two leases' sessions do
// not share a GPU, whose memory a kernel could otherwise reach.
//
// Restore streams: a recovering client may write its new session's memory over several
// connections at once (protocol.h, kOpRestoreOffer). Each GPU has `restore_streams` lanes
// of its own for them; a stream writes through the session's executor from its lane's
// thread while the session, which offered it, runs nothing: the session's next request
// (or its revocation or close) ends the offer and first waits for the copies under way.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "remote/device/backend.h"
#include "remote/transport/acceptor.h"

namespace gpupool::dataplane {

using Authorizer =
    std::function<bool(const std::string& lease_id, const std::string& token, const std::string& gpu_uuid)>;

// Told that a client recovered on `gpu_uuid` after losing GPU `from` (kOpRecovered).
using RecoveryListener =
    std::function<void(const std::string& gpu_uuid, const std::string& lease, const std::string& from,
                       uint64_t pause_ms, uint64_t restored_bytes, uint64_t replayed, uint64_t copied_bytes)>;

struct ServerOptions {
  std::string listen;  // "HOST:PORT" (port 0: any free port); empty: clients come by Adopt

  device::GpuBackend* backend = nullptr;
  // Checks a hello's credential; may block briefly to learn new leases. Runs on
  // the authorizer thread only (one hello at a time).
  Authorizer authorize;
  // Whether an attached session's credential still holds its GPU, from what is
  // known now (must not block, and must be thread-safe: it runs on the GPU
  // threads for every revalidation). Empty: use `authorize` (then it must be
  // thread-safe and should not block).
  Authorizer still_authorized;
  // A number that changes whenever still_authorized could answer differently (e.g. the
  // lease table's version); read often, so it must be cheap. Empty: sessions are checked
  // again on every request and every tick.
  std::function<uint64_t()> authorization_epoch;
  // The watchdog: a GPU whose operation makes no progress for this long (no block of a
  // kernel finishes, the operation does not return) is reported FAILED to the backend
  // (ReportFailure), which starts the clients' recovery. 0: off. Only executors that report
  // progress are watched (Executor::SetProgressCounter).
  std::chrono::milliseconds hang_timeout{0};
  // A session whose lease moved away from a healthy GPU keeps its memory this long for a
  // handoff to the lease's new GPU (protocol.h, kOpHandoffOffer); 0: no handoffs (the
  // session is closed at once, and its process recovers from its checkpoint).
  std::chrono::milliseconds handoff_window{30000};
  // Whether gpupoold holds GPU `uuid` FAILED (e.g. an admin's state=fail): its memory is
  // not handed off, as for a GPU the backend sees failed. Must not block; may be empty.
  std::function<bool(const std::string& uuid)> gpu_failed;
  // The one agent endpoint a handoff to GPU `uuid` may pull from: where gpupoold says the
  // lease holding it moved from ("" : none, and every pull is refused). Must not block.
  // Empty function: any endpoint the client names (test servers only).
  std::function<std::string(const std::string& uuid)> handoff_source;
  // A client reported that it recovered on `gpu_uuid` (kOpRecovered): its session's lease
  // and GPU, and its own figures. Runs on the GPU's thread: must not block. May be empty.
  RecoveryListener on_recovered;
  // A retained session offered its memory for a handoff with `ticket` (any thread; must
  // not block). The agent's session worker tells its supervisor, which routes the other
  // agent's attach, presenting that ticket at its handshake, to this worker. May be empty.
  std::function<void(const std::string& ticket)> on_ticket;
  // Where each GPU's watchdog figures go instead of the server's own (the session worker's
  // are in memory its supervisor reads): since when the current operation runs (ns of
  // steady_clock, 0: none) and the progress it made. Both or neither; one GPU only.
  std::atomic<int64_t>* busy_since_ns = nullptr;
  std::atomic<uint64_t>* progress = nullptr;
  // Restore streams per GPU (protocol.h, kOpRestoreOffer): lanes of their own, each a
  // thread that receives a recovery's memory beside the GPU's lane; at most
  // kMaxRestoreStreams. 0: none (a recovery restores over its session alone).
  uint32_t restore_streams = 2;
};

class Server {
 public:
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);
  virtual ~Server();

  // The port actually listened on (useful with port 0).
  virtual int port() const = 0;
  // Sessions attached to a GPU now (any thread): while there are some, the agent fetches
  // leases often enough to revoke a lost one within a second.
  virtual size_t attached_sessions() const = 0;
  // Runs a client whose handshake was read elsewhere (ServerOptions::listen empty: the
  // agent's supervisor accepted it and passed it to this worker). Any thread.
  virtual void Adopt(transport::Handshaken client) = 0;
  // Connections open now, attached or not (any thread).
  virtual size_t connections() const = 0;

 protected:
  Server() = default;
};

}  // namespace gpupool::dataplane

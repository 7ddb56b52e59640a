// RpcClient: one connection from a client process to a data-path server (wire.h).
//
// Used by the replacement libcuda.so.1: one RpcClient per leased GPU. Calls are ordered:
// the server executes requests of one connection in the order they were sent.
//   Call  - send a request and wait for its reply (synchronous CUDA calls);
//   Post  - send a one-way request; no reply (asynchronous calls: launches, async memset);
//   Start - send a request whose reply (and bulk result) is collected later, by the next
//           Call or Drain (asynchronous device-to-host copies).
// Bulk results land directly in the caller's buffer (rendezvous when large).
//
// Batching: a Post that finds a batch open, or follows the previous one (after a burst: the
// last batch's sending) within kBurstGap, joins a batch (wire.h) when it is small
// (kBatchItemBytes), instead of going out as a message of its own: a
// burst of launches then costs one message per kBatchItems of them. A batch goes out when
// it is full, before any other request (so the order on the wire is the order of the
// calls), and kBatchDelay after its first request (give or take the scheduler's timer
// slack), from a thread of the connection's own (started at the first batch), so that
// the last launches of a burst start without waiting for the process's next call. A
// lone Post goes out at once.
//
// Thread safety: every public method takes mu_; a process may call from any thread.
// Failures (server gone, transport error) come back as Status::Unavailable; afterwards the
// connection is broken and every later call fails the same way.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "remote/transport/ucx_worker.h"
#include "remote/transport/wire.h"

namespace gpupool::transport {

struct Reply {
  int32_t status = 0;
  int32_t async_status = 0;
  std::string out;           // inline results
  size_t bulk_received = 0;  // bytes written to the caller's bulk buffer
};

struct Request {
  uint32_t op = 0;
  const void* args = nullptr;
  size_t args_len = 0;
  const void* payload = nullptr;  // bulk data sent with the request
  size_t payload_len = 0;
  void* result_buffer = nullptr;  // where the reply's bulk data goes
  size_t result_capacity = 0;
  // Set by the client library only, for an asynchronous copy from page-locked memory it
  // allocated: CUDA lets the program change `payload`'s bytes only once the copy is known
  // to be done (its next synchronisation), so the failover journal may read them as late
  // as the process's next two-way request (failover.h). The transport ignores it.
  bool payload_held_until_sync = false;
};

// The interface the replacement libcuda.so.1 uses. It loads the UCX implementation with
// dlopen at cuInit (rpc_client_module.h), so that UCX is not even loaded before then.
class ClientConnection {
 public:
  virtual ~ClientConnection() = default;
  virtual Status Call(const Request& request, Reply* reply) = 0;
  // Call, with `while_waiting` run once after the request is sent and before its reply is
  // awaited (also when the send failed): the failover journal's copy of uploads the reply
  // may tell the program are done, made while the server works. The program sees the reply
  // only once it has run. This default runs it first, then Call.
  virtual Status CallOverlapped(const Request& request, Reply* reply, const std::function<void()>& while_waiting) {
    while_waiting();
    return Call(request, reply);
  }
  // Returns once `payload` may be reused (sent or copied by UCX).
  virtual Status Post(const Request& request) = 0;
  // Post, with work on the same payload bytes done while they are in flight (the failover
  // journal's copy of an upload): `step` does one slice of it and returns whether more is
  // left. It runs between progress of the send, and always to its end before this returns
  // (also when the send completed at once or failed), so the caller's bytes are read twice
  // in the time of about one transfer.
  virtual Status PostOverlapped(const Request& request, const std::function<bool()>& step) = 0;
  // `result_buffer` must stay valid until the next Call/Drain returns.
  virtual Status Start(const Request& request) = 0;
  // Waits for every started request; returns the first failure status among their replies
  // in *first_error (0 if none).
  virtual Status Drain(int32_t* first_error) = 0;
  // `check` is asked about every 200 ms while a call waits on a server that sends nothing
  // (a hung GPU); a non-empty answer gives the wait up: the connection is then broken with
  // that reason (the failover's way out of a GPU the lease has moved away from).
  virtual void SetAbandonCheck(std::function<std::string()> check) = 0;
  // The transport seq the next request will carry (the server knows which seqs it ran:
  // a handoff tells the client which of its requests the old GPU ran).
  virtual uint64_t next_sequence() = 0;
  // Whether the connection is known broken without sending anything: a request already
  // failed on it, or the server closed its socket (its process ended). Does not wait. The
  // failover asks it of a process's other GPUs when one's agent is found gone (failover.h).
  virtual bool PeerGone() { return false; }
  // Nothing more is to be sent on the connection: its peer is known gone, perhaps silent (a
  // stopped host reads nothing and closes nothing, so a send waiting for room would wait
  // forever). A send under way or to come fails, and closing the connection sends nothing.
  // Takes no lock and does not wait (a send may hold the connection's lock).
  virtual void Abandon() {}
};

class RpcClient : public ClientConnection {
 public:
  // Connects to "HOST:PORT" (the connection completes on first use).
  // `lane_key`: the GPU uuid the connection is for; the server runs it on that
  // GPU's thread (bootstrap.h).
  // `lease_id`/`token` or `ticket`: the credential presented at the handshake
  // (bootstrap.h). A server that refuses it answers PermissionDenied with its reason. A
  // handshake that breaks after the TCP connection was made (a server too busy to finish
  // it) is tried again with backoff for up to kHandshakeRetrySeconds; a refusal or a
  // connection refused is not.
  struct Credential {
    std::string lease_id;
    std::string token;
    std::string ticket;
  };
  static Result<std::unique_ptr<RpcClient>> Connect(const std::string& endpoint, const std::string& lane_key = "",
                                                    const Credential& credential = {});
  static constexpr int kHandshakeRetrySeconds = 10;
  ~RpcClient() override;

  Status Call(const Request& request, Reply* reply) override;
  Status CallOverlapped(const Request& request, Reply* reply, const std::function<void()>& while_waiting) override;
  Status Post(const Request& request) override;
  Status PostOverlapped(const Request& request, const std::function<bool()>& step) override;
  Status Start(const Request& request) override;
  Status Drain(int32_t* first_error) override;
  void SetAbandonCheck(std::function<std::string()> check) override;
  uint64_t next_sequence() override;
  bool PeerGone() override;
  void Abandon() override { abandoned_.store(true); }

  const std::string& endpoint() const { return endpoint_; }

  static constexpr auto kBurstGap = std::chrono::microseconds(10);
  static constexpr auto kBatchDelay = std::chrono::microseconds(100);
  static constexpr size_t kBatchItemBytes = 2048;  // RequestHeader, args, payload
  static constexpr size_t kBatchBytes = 16 << 10;  // a batch this large goes out
  static constexpr uint32_t kBatchItems = 64;      // ...and one of this many items
  // Posts that waited for the server (flow control, wire.h) so far (for tests).
  uint64_t windowed_posts_for_testing();
  // Batches sent so far (for tests).
  uint64_t batches_sent_for_testing();
  // Replies whose bulk data came by rendezvous so far (for tests).
  uint64_t rendezvous_replies_for_testing();
  // Whether payloads up to kEagerPayloadMax go eagerly on this connection (for tests).
  bool eager_midsize_for_testing() const { return eager_midsize_; }
  // For tests of the server's checks only: sends `header` and `data` as a batch message,
  // as they are (a client that forges or garbles one).
  Status SendRawBatchForTesting(const BatchHeader& header, const std::string& data);

  // For tests of the server's checks only: the id the server gave this
  // connection, and a replacement for it in every later request (a client
  // forging another's id).
  uint64_t connection_id_for_testing();
  void set_connection_id_for_testing(uint64_t id);

 private:
  static Result<std::unique_ptr<RpcClient>> ConnectOnce(const std::string& endpoint, const std::string& lane_key,
                                                        const Credential& credential);
  struct Pending;
  RpcClient() = default;
  static ucs_status_t OnReply(void* arg, const void* header, size_t header_len, void* data, size_t length,
                              const ucp_am_recv_param_t* param);
  static void OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status);
  // Call and CallOverlapped (`while_waiting` may be null); takes mu_.
  Status CallLocking(const Request& request, Reply* reply, const std::function<void()>* while_waiting);

  // REQUIRES: mu_ held (for all below).
  // Sends one request; returns once its payload may be reused. `overlap` (may be null):
  // PostOverlapped's step, run to its end before this returns.
  Status SendLocked(const Request& request, uint32_t flags, uint64_t seq,
                    const std::function<bool()>* overlap = nullptr);
  RequestHeader HeaderLocked(const Request& request, uint64_t seq, uint32_t flags) const;
  // Sends one active message and waits until its buffers may be reused.
  Status SendAmLocked(unsigned id, const void* header, size_t header_len, const void* data, size_t data_len,
                      uint32_t send_flags, const std::function<bool()>* overlap);
  // Sends the batch, if any (before any other request goes out).
  Status FlushLocked();
  void AppendToBatchLocked(const Request& request, uint64_t seq);
  // The first item is in: the flusher times the batch from `now`.
  void BeginBatchLocked(std::chrono::steady_clock::time_point now);
  void FlusherLoop();  // the flusher's thread; takes mu_ only to send a batch that is due
  // wire.h's flow control: counts a post; true when it fills the window.
  bool WindowFullLocked(const Request& request);
  // Sends a post two-way and waits for its answer (the window is full).
  Status PostAndWaitLocked(const Request& request, uint64_t seq, const std::function<bool()>* step);
  Status WaitLocked(uint64_t seq);  // until reply `seq` and its bulk data are complete
  void StartBulkReceivesLocked();
  // Whether `pending`'s bulk data stopped short; if so, the connection is broken too.
  bool BulkFailedLocked(Pending* pending);
  // Called when the server's socket closed: marks the connection broken, and returns
  // whether the replies up to `seq` had nevertheless all arrived.
  bool ServerClosedLocked(uint64_t seq);
  Status BrokenLocked() const;
  // A Pending for request `seq`: the one a finished call left (a call at a time, the common
  // case, allocates none), else a new one.
  std::unique_ptr<Pending> NewPendingLocked(uint64_t seq, const Request& request);
  // Keeps `done` (its reply taken, no pull of bulk data outstanding) for the next request.
  void RecyclePendingLocked(std::unique_ptr<Pending> done);

  std::mutex mu_;
  std::string endpoint_;
  int control_fd_ = -1;             // bootstrap socket; its closing means the server is gone
  uint64_t connection_ = 0;         // the id the server gave us
  std::unique_ptr<UcxWorker> ucx_;  // guarded by mu_
  ucp_ep_h ep_ = nullptr;           // guarded by mu_
  // Written under mu_; atomic so that next_sequence() reads it without taking mu_ (the
  // failover asks before every request).
  std::atomic<uint64_t> next_seq_{1};
  std::vector<char> send_header_;                 // the AM header being sent; guarded by mu_
  std::deque<std::unique_ptr<Pending>> pending_;  // in seq order; guarded by mu_
  std::unique_ptr<Pending> spare_;                // guarded by mu_
  std::string broken_;                            // non-empty once the connection failed; guarded by mu_
  // One-way requests (and their bytes) sent since the last answered request (wire.h's
  // flow control); guarded by mu_.
  uint64_t unanswered_posts_ = 0;
  uint64_t unanswered_post_bytes_ = 0;
  std::function<std::string()> abandon_;  // guarded by mu_
  std::atomic<bool> abandoned_{false};    // Abandon: read without mu_ by a waiting send
  void NoteAbandonedLocked();             // an Abandon becomes broken_ (mu_ held)

  // Batching (see the top of this file); guarded by mu_ but where said.
  std::vector<char> batch_;  // the items of the batch not yet sent
  uint32_t batch_items_ = 0;
  // When the last post came, as far as batching needs to know: read from the clock only
  // when a post finds no batch open and when a batch goes out (a post costs a clock read
  // less), so a burst counts as one post at its end.
  std::chrono::steady_clock::time_point last_post_;
  uint64_t batches_sent_ = 0;
  uint64_t windowed_posts_ = 0;
  uint64_t rendezvous_replies_ = 0;
  // Payloads up to kEagerPayloadMax go eagerly (wire.h): the endpoint detects peer
  // failure. Set once by Connect.
  bool eager_midsize_ = false;
  std::thread flusher_;    // sends a batch kBatchDelay after its first item
  pid_t flusher_pid_ = 0;  // the process that started it (a forked child has none)
  // What the flusher reads without mu_ (written under mu_): it takes mu_ only to send a
  // batch that is due, so a stream of full batches sent by the posting thread never
  // waits on it, nor has to wake it.
  std::atomic<uint64_t> batch_generation_{0};  // batches begun so far
  std::atomic<int64_t> batch_started_ns_{0};   // steady clock at the open batch's first item
  std::atomic<bool> batch_open_{false};
  std::atomic<bool> flusher_idle_{false};  // waiting for a batch to begin
  std::atomic<bool> stopping_{false};
  std::mutex flusher_mu_;  // the flusher's sleep, and waking it
  std::condition_variable flusher_wake_;
};

}  // namespace gpupool::transport

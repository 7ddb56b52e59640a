#include "remote/transport/rpc_client.h"

#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstring>
#include <vector>

#include "common/latency_probe.h"
#include "remote/transport/bootstrap.h"

namespace gpupool::transport {

namespace {

// A reply's rendezvous bulk data being pulled into the caller's buffer. Its UCX request
// outlives the Pending that started it when the wait ends first (the connection broke):
// UCX completes the request later, when it purges the failed endpoint, and the callback
// then frees this.
struct BulkReceive {
  bool done = false;
  ucs_status_t status = UCS_OK;  // UCS_OK: every byte is in the buffer
  bool abandoned = false;        // nobody waits any more: the callback deletes it
};

}  // namespace

// One request whose reply has not been fully consumed yet.
struct RpcClient::Pending {
  Pending() = default;
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  ~Pending() {
    if (receive == nullptr) return;
    if (receive->done) {
      delete receive;
    } else {
      receive->abandoned = true;
    }
  }
  // The reply's bulk data (if any) is in result_buffer, or its receive ended.
  bool bulk_done() const { return rndv_desc == nullptr && (receive == nullptr || receive->done); }
  // A receive that ended without all its bytes: a peer that died mid-transfer.
  bool bulk_failed() const { return receive != nullptr && receive->done && receive->status != UCS_OK; }

  uint64_t seq = 0;
  void* result_buffer = nullptr;
  size_t result_capacity = 0;
  bool replied = false;       // the reply's header arrived
  void* rndv_desc = nullptr;  // rendezvous bulk data not yet pulled
  size_t rndv_len = 0;
  BulkReceive* receive = nullptr;  // the pull of rndv data, once started
  Reply reply;
};

namespace {

// Completion flag for a UCX request, set by its callback.
struct Completion {
  bool done = false;
  ucs_status_t status = UCS_OK;
};

void OnSendDone(void* request, ucs_status_t status, void* user_data) {
  auto* completion = static_cast<Completion*>(user_data);
  completion->done = true;
  completion->status = status;
}

// Callbacks fire only for requests not yet freed: they free the request themselves.
void OnBulkReceived(void* request, ucs_status_t status, size_t length, void* user_data) {
  ucp_request_free(request);
  auto* receive = static_cast<BulkReceive*>(user_data);
  if (receive->abandoned) {
    delete receive;
    return;
  }
  receive->done = true;
  receive->status = status;
}

// Polls this long on a quiet worker before sleeping on its event fd: short calls stay
// at wire latency, long waits (a kernel running for seconds) do not burn a core. Each idle
// poll yields the CPU, so that on a host with more runnable threads than cores the
// polling does not starve the very peer (a local agent) it is waiting for.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(2000);
// Polls without yielding for this long first: a quiet host answers within it.
constexpr auto kSpinBeforeYield = std::chrono::microseconds(20);
// A quiet worker's clock is read once per this many polls: a read costs about as much as a
// poll (30 ns here), and every poll it replaces takes a reply sooner.
constexpr unsigned kIdlePollsPerClockRead = 8;

// How long a wait has gone without progress, from the clock read once every
// kIdlePollsPerClockRead quiet polls (in between, the last answer stands). The first read
// comes at the kIdlePollsPerClockRead-th quiet poll, not the first: a quick reply (a
// synchronous call over shared memory) then costs no clock read at all, and the quiet
// time it misses (a few polls) is nothing beside the waits it decides (microseconds).
class IdleClock {
 public:
  // Progress: the quiet time starts again.
  void Progressed() {
    polls_ = 0;
    since_ = {};
    quiet_ = {};
  }
  // A poll found nothing: how long nothing has come.
  std::chrono::steady_clock::duration Quiet() {
    if (++polls_ % kIdlePollsPerClockRead != 0) return quiet_;
    const auto now = std::chrono::steady_clock::now();
    if (since_ == std::chrono::steady_clock::time_point{}) since_ = now;
    quiet_ = now - since_;
    return quiet_;
  }

 private:
  unsigned polls_ = 0;  // wraps after 2^32, a multiple of kIdlePollsPerClockRead
  std::chrono::steady_clock::time_point since_{};
  std::chrono::steady_clock::duration quiet_{};
};
constexpr int kConnectTimeoutMs = 5000;

}  // namespace

namespace {
// Set by ConnectOnce for a failure that happened after the TCP connection was made and
// that was not the server's refusal: worth another try.
thread_local bool handshake_broke = false;
}  // namespace

Result<std::unique_ptr<RpcClient>> RpcClient::Connect(const std::string& endpoint, const std::string& lane_key,
                                                      const Credential& credential) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(kHandshakeRetrySeconds);
  auto backoff = std::chrono::milliseconds(50);
  int tries = 0;
  while (true) {
    handshake_broke = false;
    ++tries;
    auto connected = ConnectOnce(endpoint, lane_key, credential);
    if (connected.ok() || !handshake_broke) return connected;
    if (std::chrono::steady_clock::now() + backoff > give_up) {
      return Status::Unavailable(connected.status().message() + " (" + std::to_string(tries) + " tries in " +
                                 std::to_string(kHandshakeRetrySeconds) + " s)");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

Result<std::unique_ptr<RpcClient>> RpcClient::ConnectOnce(const std::string& endpoint, const std::string& lane_key,
                                                          const Credential& credential) {
  std::unique_ptr<RpcClient> self(new RpcClient());
  self->endpoint_ = endpoint;
  auto fd = ConnectTcp(endpoint, kConnectTimeoutMs);
  if (!fd.ok()) return fd.status();
  self->control_fd_ = fd.value();
  auto ucx = UcxWorker::Create("gpupool-client", UcxWorker::Threads::kSerialized);
  if (!ucx.ok()) return ucx.status();
  self->ucx_ = std::move(ucx.value());
  GPUPOOL_RETURN_IF_ERROR(self->ucx_->SetAmHandler(kReplyAmId, &RpcClient::OnReply, self.get()));
  auto address = self->ucx_->Address();
  if (!address.ok()) return address.status();
  // Handshake: our worker address and whether we can detect a dead peer out; the
  // connection id, the mode both ends use and the server's address back.
  int fd_value = self->control_fd_;
  ClientHello hello;
  hello.flags = UcxWorker::CanDetectPeerFailure() ? kDetectsPeerFailure : 0;
  hello.worker_address = address.value();
  hello.lane_key = lane_key;
  hello.lease_id = credential.lease_id;
  hello.token = credential.token;
  hello.ticket = credential.ticket;
  Status status = SendClientHello(fd_value, hello);
  Result<ServerHello> answer = status.ok() ? ReceiveServerHello(fd_value) : status;
  if (!answer.ok() && answer.status().code() == Status::Code::kPermissionDenied) {
    return answer.status();  // the server's reason, as it said it
  }
  if (!answer.ok()) {
    handshake_broke = answer.status().code() == Status::Code::kUnavailable;
    std::string why = answer.status().message();
    if (answer.status().code() == Status::Code::kInvalidArgument) {
      why = "not a gpupool data-path server of this version (" + why + ")";
    }
    return Status::Unavailable("handshake with " + endpoint + " failed: " + why);
  }
  self->connection_ = answer->connection;
  bool detect = (answer->flags & kDetectsPeerFailure) != 0;
  bool detecting = false;
  auto ep = self->ucx_->Connect(answer->worker_address, &RpcClient::OnPeerError, self.get(), detect, &detecting);
  if (ep.ok() && detecting != detect) {
    // The server made its endpoint the other way: the two would not pair (bootstrap.h).
    self->ep_ = ep.value();  // closed by the destructor
    return Status::Unavailable("cannot reach " + endpoint +
                               ": UCX refused peer failure detection the server agreed to");
  }
  if (!ep.ok()) return Status::Unavailable("cannot reach " + endpoint + ": " + ep.status().message());
  self->ep_ = ep.value();
  self->eager_midsize_ = detecting;
  return self;
}

RpcClient::~RpcClient() {
  {
    std::lock_guard<std::mutex> sleep(flusher_mu_);
    stopping_ = true;
  }
  flusher_wake_.notify_all();
  if (flusher_.joinable()) {
    if (flusher_pid_ == getpid()) {
      flusher_.join();
    } else {
      // A forked child: the thread is its parent's. Nothing to join here.
      try {
        flusher_.detach();
      } catch (...) {
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (flusher_pid_ == 0 || flusher_pid_ == getpid()) {
    (void)FlushLocked();  // the last launches too (none once abandoned); a failure has no one left to tell
  }
  // The bootstrap socket goes first: the server then reads the endpoint close that follows
  // as this clean exit, not as a failed peer.
  if (control_fd_ >= 0) shutdown(control_fd_, SHUT_RDWR);
  if (ep_ != nullptr && ucx_ != nullptr) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request = ucp_ep_close_nbx(ep_, &param);
    if (UCS_PTR_IS_PTR(request)) {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (ucp_request_check_status(request) == UCS_INPROGRESS && std::chrono::steady_clock::now() < deadline) {
        ucp_worker_progress(ucx_->worker());
      }
      ucp_request_free(request);
    }
    ep_ = nullptr;
  }
  for (auto& pending : pending_) {
    if (pending->rndv_desc != nullptr && ucx_ != nullptr) ucp_am_data_release(ucx_->worker(), pending->rndv_desc);
  }
  if (control_fd_ >= 0) close(control_fd_);
}

void RpcClient::OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<RpcClient*>(arg);
  // Runs inside ucp_worker_progress, i.e. with mu_ already held by the progressing thread.
  self->broken_ = "connection to " + self->endpoint_ + " lost: " + UcxError(status);
}

ucs_status_t RpcClient::OnReply(void* arg, const void* header, size_t header_len, void* data, size_t length,
                                const ucp_am_recv_param_t* param) {
  auto* self = static_cast<RpcClient*>(arg);  // mu_ held by the progressing thread
  ReplyHeader reply_header;
  if (!DecodeReplyHeader(header, header_len, &reply_header)) return UCS_OK;
  Pending* pending = nullptr;
  for (auto& candidate : self->pending_) {
    if (candidate->seq == reply_header.seq) pending = candidate.get();
  }
  if (pending == nullptr) return UCS_OK;  // nobody waits (cannot happen with a sane server)
  pending->replied = true;
  pending->reply.status = reply_header.status;
  pending->reply.async_status = reply_header.async_status;
  pending->reply.out.assign(static_cast<const char*>(header) + sizeof(ReplyHeader), reply_header.out_len);
  size_t take = std::min(length, pending->result_capacity);
  pending->reply.bulk_received = take;
  if (length == 0) return UCS_OK;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    ++self->rendezvous_replies_;
    if (take == 0) {
      ucp_am_data_release(self->ucx_->worker(), data);
      return UCS_OK;
    }
    pending->rndv_desc = data;
    pending->rndv_len = take;
    return UCS_INPROGRESS;
  }
  if (take > 0) std::memcpy(pending->result_buffer, data, take);
  return UCS_OK;
}

Status RpcClient::BrokenLocked() const { return Status::Unavailable(broken_); }

Status RpcClient::SendLocked(const Request& request, uint32_t flags, uint64_t seq,
                             const std::function<bool()>* overlap) {
  if (request.args_len > kMaxArgsLen) {
    // The overlapped work always runs to its end, whatever happens to the send.
    while (overlap != nullptr && (*overlap)()) {
    }
    return Status::InvalidArgument("RPC arguments too large");
  }
  // The AM header: RequestHeader + args, in a buffer reused by every request (we wait for
  // local completion below, under mu_).
  send_header_.resize(sizeof(RequestHeader) + request.args_len);
  const RequestHeader request_header = HeaderLocked(request, seq, flags);
  std::memcpy(send_header_.data(), &request_header, sizeof(request_header));
  if (request.args_len > 0) {
    std::memcpy(send_header_.data() + sizeof(request_header), request.args, request.args_len);
  }
  const uint32_t protocol = SendsEagerly(eager_midsize_, request.payload_len) ? UCP_AM_SEND_FLAG_EAGER : 0;
  return SendAmLocked(kRequestAmId, send_header_.data(), send_header_.size(), request.payload, request.payload_len,
                      protocol, overlap);
}

Status RpcClient::SendAmLocked(unsigned id, const void* header, size_t header_len, const void* data, size_t data_len,
                               uint32_t send_flags, const std::function<bool()>* overlap) {
  // The overlapped work always runs to its end, whatever happens to the send.
  bool overlapping = overlap != nullptr;
  struct FinishOverlap {
    const std::function<bool()>* step;
    bool* more;
    ~FinishOverlap() {
      while (*more) *more = (*step)();
    }
  } finish{overlap, &overlapping};
  NoteAbandonedLocked();
  if (!broken_.empty()) return BrokenLocked();
  Completion completion;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &OnSendDone;
  param.user_data = &completion;
  // Tells the server which endpoint the request came on: it accepts a request only on the
  // endpoint of the connection the request names (rpc_server.h).
  param.flags = UCP_AM_SEND_FLAG_REPLY | send_flags;
  ucs_status_ptr_t sent;
  {
    GPUPOOL_PROBE_SCOPE(probe, "client.ucx_send");
    sent = ucp_am_send_nbx(ep_, id, header, header_len, data, data_len, &param);
  }
  if (UCS_PTR_IS_ERR(sent)) {
    broken_ = "send to " + endpoint_ + " failed: " + UcxError(UCS_PTR_STATUS(sent));
    return BrokenLocked();
  }
  if (UCS_PTR_IS_PTR(sent)) {
    // We always wait for local completion: the payload (user memory) and header must stay
    // valid, and the caller is allowed to reuse its buffer once we return.
    IdleClock quiet;
    while (!completion.done) {
      // Replies to earlier requests may need pulling before the server can take this one.
      StartBulkReceivesLocked();
      if (overlapping) {
        // A slice of the overlapped work, then progress: over shared memory the server
        // pulls the payload meanwhile; over TCP the progress pushes the next fragments.
        overlapping = (*overlap)();
        ucx_->ProgressAll();
        quiet.Progressed();
        continue;
      }
      if (ucx_->ProgressAll() > 0) continue;
      auto idle = quiet.Quiet();
      if (idle > kSpinBeforeYield) sched_yield();
      if (idle > kSpinBeforeSleep) {
        ucx_->WaitForEvents(100, control_fd_);
        if (PeerClosed(control_fd_)) broken_ = "the server at " + endpoint_ + " closed the connection";
        // A silent server reads nothing: the send would wait for room forever.
        NoteAbandonedLocked();
      }
      if (!broken_.empty()) break;
    }
    ucp_request_free(sent);
    if (!completion.done) return BrokenLocked();
    if (completion.status != UCS_OK) {
      broken_ = "send to " + endpoint_ + " failed: " + UcxError(completion.status);
      return BrokenLocked();
    }
  }
  return Status::OK();
}

RequestHeader RpcClient::HeaderLocked(const Request& request, uint64_t seq, uint32_t flags) const {
  RequestHeader header;
  header.op = request.op;
  header.connection = connection_;
  header.seq = seq;
  header.flags = flags;
  header.args_len = static_cast<uint32_t>(request.args_len);
  return header;
}

void RpcClient::AppendToBatchLocked(const Request& request, uint64_t seq) {
  const RequestHeader header = HeaderLocked(request, seq, kFlagOneWay);
  const uint32_t payload_len = static_cast<uint32_t>(request.payload_len);
  // Appended piece by piece (a resize would zero the bytes first).
  auto append = [this](const void* bytes, size_t size) {
    const char* from = static_cast<const char*>(bytes);
    batch_.insert(batch_.end(), from, from + size);
  };
  append(&header, sizeof(header));
  if (request.args_len > 0) append(request.args, request.args_len);
  append(&payload_len, sizeof(payload_len));
  if (payload_len > 0) append(request.payload, payload_len);
  ++batch_items_;
}

Status RpcClient::FlushLocked() {
  if (batch_items_ == 0) return Status::OK();
  BatchHeader header;
  header.count = batch_items_;
  header.connection = connection_;
  header.bytes = static_cast<uint32_t>(batch_.size());
  // Eager: the server splits it inside its receive callback (wire.h).
  Status status =
      SendAmLocked(kBatchAmId, &header, sizeof(header), batch_.data(), batch_.size(), UCP_AM_SEND_FLAG_EAGER, nullptr);
  batch_.clear();
  batch_items_ = 0;
  batch_open_ = false;
  ++batches_sent_;
  last_post_ = std::chrono::steady_clock::now();
  return status;
}

void RpcClient::BeginBatchLocked(std::chrono::steady_clock::time_point now) {
  batch_started_ns_.store(now.time_since_epoch().count());
  batch_generation_.fetch_add(1);
  batch_open_ = true;
  if (!flusher_.joinable()) {
    flusher_pid_ = getpid();
    flusher_ = std::thread([this] { FlusherLoop(); });
  } else if (flusher_idle_) {
    // The flusher sleeps until woken: it set flusher_idle_ before it looked at
    // batch_open_ a last time, so either it saw this batch or it is seen idle here.
    std::lock_guard<std::mutex> sleep(flusher_mu_);
    flusher_wake_.notify_one();
  }
}

void RpcClient::FlusherLoop() {
  using Clock = std::chrono::steady_clock;
  std::unique_lock<std::mutex> sleep(flusher_mu_);
  while (!stopping_) {
    if (!batch_open_) {
      flusher_idle_ = true;
      if (!batch_open_ && !stopping_) flusher_wake_.wait(sleep);
      flusher_idle_ = false;
      continue;
    }
    const uint64_t generation = batch_generation_;
    const Clock::time_point due = Clock::time_point(Clock::duration(batch_started_ns_.load())) + kBatchDelay;
    if (Clock::now() < due) {
      flusher_wake_.wait_until(sleep, due);
      continue;
    }
    sleep.unlock();
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Only the batch that came due: one begun since waits for its own time.
      // A failure marks the connection broken: the process's next call reports it.
      if (batch_items_ > 0 && batch_generation_ == generation) (void)FlushLocked();
    }
    sleep.lock();
  }
}

Status RpcClient::SendRawBatchForTesting(const BatchHeader& header, const std::string& data) {
  std::lock_guard<std::mutex> lock(mu_);
  GPUPOOL_RETURN_IF_ERROR(FlushLocked());
  return SendAmLocked(kBatchAmId, &header, sizeof(header), data.data(), data.size(), UCP_AM_SEND_FLAG_EAGER, nullptr);
}

uint64_t RpcClient::batches_sent_for_testing() {
  std::lock_guard<std::mutex> lock(mu_);
  return batches_sent_;
}

uint64_t RpcClient::rendezvous_replies_for_testing() {
  std::lock_guard<std::mutex> lock(mu_);
  return rendezvous_replies_;
}

void RpcClient::StartBulkReceivesLocked() {
  for (auto& pending : pending_) {
    if (pending->rndv_desc == nullptr) continue;
    void* desc = pending->rndv_desc;
    pending->rndv_desc = nullptr;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    pending->receive = new BulkReceive;
    param.cb.recv_am = &OnBulkReceived;
    param.user_data = pending->receive;
    ucs_status_ptr_t received =
        ucp_am_recv_data_nbx(ucx_->worker(), desc, pending->result_buffer, pending->rndv_len, &param);
    if (UCS_PTR_IS_PTR(received)) continue;  // OnBulkReceived ends it and frees the request
    pending->receive->done = true;
    pending->receive->status = UCS_PTR_STATUS(received);  // UCS_OK when it completed at once
  }
}

// A reply whose bulk data stopped short fails the connection: its reader must never take
// the bytes that did arrive for the whole (a checkpoint read cut short by an agent's death
// would keep the rest of its image as zeros, and restore them after the recovery).
bool RpcClient::BulkFailedLocked(Pending* pending) {
  if (!pending->bulk_failed()) return false;
  pending->reply.bulk_received = 0;
  if (broken_.empty()) {
    broken_ = "bulk data from " + endpoint_ + " stopped short: " + UcxError(pending->receive->status);
  }
  return true;
}

uint64_t RpcClient::next_sequence() { return next_seq_.load(std::memory_order_relaxed); }

void RpcClient::NoteAbandonedLocked() {
  if (abandoned_.load() && broken_.empty()) broken_ = "the connection to " + endpoint_ + " was given up";
}

bool RpcClient::PeerGone() {
  std::lock_guard<std::mutex> lock(mu_);
  return !broken_.empty() || (control_fd_ >= 0 && PeerClosed(control_fd_));
}

void RpcClient::SetAbandonCheck(std::function<std::string()> check) {
  std::lock_guard<std::mutex> lock(mu_);
  abandon_ = std::move(check);
}

Status RpcClient::WaitLocked(uint64_t seq) {
  IdleClock quiet;
  // Set at the first sleep: a wait that ends before (nearly all) reads no clock for it.
  std::chrono::steady_clock::time_point last_abandon_check{};
  while (true) {
    StartBulkReceivesLocked();
    // Done when every pending request up to `seq` is replied and has its bulk data.
    bool done = true;
    for (auto& pending : pending_) {
      if (pending->seq > seq) break;
      if (BulkFailedLocked(pending.get())) return BrokenLocked();
      if (!pending->replied || !pending->bulk_done()) {
        done = false;
        break;
      }
    }
    if (done) return Status::OK();
    if (!broken_.empty()) return BrokenLocked();
    if (ucx_->Progress() > 0) {
      quiet.Progressed();
      continue;
    }
    auto idle = quiet.Quiet();
    if (idle > kSpinBeforeYield) sched_yield();
    if (idle > kSpinBeforeSleep) {
      // Sleep until UCX has events or the server's socket changes (it died or closed).
      ucx_->WaitForEvents(100, control_fd_);
      if (PeerClosed(control_fd_) && !ServerClosedLocked(seq)) return BrokenLocked();
      auto now = std::chrono::steady_clock::now();
      if (last_abandon_check == std::chrono::steady_clock::time_point{}) last_abandon_check = now;
      if (abandon_ && now - last_abandon_check > std::chrono::milliseconds(200)) {
        last_abandon_check = now;
        if (std::string why = abandon_(); !why.empty()) {
          broken_ = "gave up waiting for " + endpoint_ + ": " + why;
          return BrokenLocked();
        }
      }
    }
  }
}

bool RpcClient::ServerClosedLocked(uint64_t seq) {
  // The server flushes its last replies before closing the socket, but they may still sit
  // in our receive queue: take them before declaring the connection dead.
  for (int i = 0; i < 100; ++i) {
    ucx_->ProgressAll();
    StartBulkReceivesLocked();
  }
  bool done = true;
  for (auto& pending : pending_) {
    if (pending->seq > seq) break;
    done &= pending->replied && pending->bulk_done() && !BulkFailedLocked(pending.get());
  }
  if (broken_.empty()) broken_ = "the server at " + endpoint_ + " closed the connection";
  return done;
}

uint64_t RpcClient::connection_id_for_testing() {
  std::lock_guard<std::mutex> lock(mu_);
  return connection_;
}

void RpcClient::set_connection_id_for_testing(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)FlushLocked();  // what was posted before goes with the id it was posted with
  connection_ = id;
}

std::unique_ptr<RpcClient::Pending> RpcClient::NewPendingLocked(uint64_t seq, const Request& request) {
  std::unique_ptr<Pending> pending = spare_ ? std::move(spare_) : std::make_unique<Pending>();
  pending->seq = seq;
  pending->result_buffer = request.result_buffer;
  pending->result_capacity = request.result_buffer ? request.result_capacity : 0;
  return pending;
}

void RpcClient::RecyclePendingLocked(std::unique_ptr<Pending> done) {
  if (done->receive != nullptr || done->rndv_desc != nullptr) return;  // its destructor ends it
  done->replied = false;
  done->rndv_len = 0;
  done->reply = Reply();
  spare_ = std::move(done);
}

Status RpcClient::Call(const Request& request, Reply* reply) { return CallLocking(request, reply, nullptr); }

Status RpcClient::CallOverlapped(const Request& request, Reply* reply, const std::function<void()>& while_waiting) {
  return CallLocking(request, reply, &while_waiting);
}

Status RpcClient::CallLocking(const Request& request, Reply* reply, const std::function<void()>* while_waiting) {
  static probe::Site before_send{"client.call.before_send"}, wait_for_reply{"client.call.wait"},
      after_reply{"client.call.after_reply"};
  uint64_t phase = probe::StartTicks();
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t seq = next_seq_.fetch_add(1, std::memory_order_relaxed);
  pending_.push_back(NewPendingLocked(seq, request));
  Status status = FlushLocked();
  if (status.ok()) status = SendLocked(request, 0, seq);
  if (while_waiting != nullptr) (*while_waiting)();
  probe::AddSince(before_send, phase);
  phase = probe::StartTicks();
  if (status.ok()) status = WaitLocked(seq);
  if (status.ok()) unanswered_posts_ = unanswered_post_bytes_ = 0;
  probe::AddSince(wait_for_reply, phase);
  // Ends at the return, just before the lock is released.
  struct AfterReply {
    uint64_t start;
    ~AfterReply() { probe::AddSince(after_reply, start); }
  } after_reply_span{probe::StartTicks()};
  // Collect this reply and every earlier one; earlier failures surface as async errors.
  int32_t earlier_error = 0;
  while (!pending_.empty() && pending_.front()->seq <= seq) {
    auto& front = pending_.front();
    if (front->seq == seq) {
      *reply = std::move(front->reply);
    } else if (earlier_error == 0) {
      // A post that waited for flow control carries its own status and the async one.
      earlier_error = front->reply.status != 0 ? front->reply.status : front->reply.async_status;
    }
    RecyclePendingLocked(std::move(front));
    pending_.pop_front();
  }
  if (!status.ok()) return status;
  if (reply->async_status == 0) reply->async_status = earlier_error;
  return Status::OK();
}

Status RpcClient::Post(const Request& request) {
  GPUPOOL_PROBE_SCOPE(probe, "client.post");
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_.fetch_add(1, std::memory_order_relaxed);
  if (!broken_.empty()) return BrokenLocked();
  // In an open batch the post is part of a burst, whenever it comes.
  std::chrono::steady_clock::time_point now{};
  bool burst = batch_items_ > 0;
  if (!burst) {
    now = std::chrono::steady_clock::now();
    burst = now - last_post_ < kBurstGap;
    last_post_ = now;
  }
  if (WindowFullLocked(request)) return PostAndWaitLocked(request, seq, nullptr);
  if (burst && request.args_len <= kMaxArgsLen &&
      sizeof(RequestHeader) + request.args_len + request.payload_len <= kBatchItemBytes) {
    AppendToBatchLocked(request, seq);
    if (batch_items_ == 1) BeginBatchLocked(now);
    if (batch_items_ >= kBatchItems || batch_.size() >= kBatchBytes) return FlushLocked();
    return Status::OK();
  }
  GPUPOOL_RETURN_IF_ERROR(FlushLocked());
  Status sent = SendLocked(request, kFlagOneWay, seq);
  // The gap to the next post counts from here: a send that took long is no pause.
  last_post_ = std::chrono::steady_clock::now();
  return sent;
}

bool RpcClient::WindowFullLocked(const Request& request) {
  unanswered_posts_ += 1;
  unanswered_post_bytes_ += uint64_t{request.args_len} + request.payload_len;
  return unanswered_posts_ >= kMaxUnansweredPosts || unanswered_post_bytes_ >= kMaxUnansweredPostBytes;
}

Status RpcClient::PostAndWaitLocked(const Request& request, uint64_t seq, const std::function<bool()>* step) {
  pending_.push_back(NewPendingLocked(seq, request));
  Status status = FlushLocked();
  if (status.ok()) status = SendLocked(request, 0, seq, step);
  if (status.ok()) status = WaitLocked(seq);
  if (!status.ok()) return status;
  // Its reply stays queued: the next call reports its errors as earlier ones (Call).
  ++windowed_posts_;
  unanswered_posts_ = unanswered_post_bytes_ = 0;
  last_post_ = std::chrono::steady_clock::now();
  return Status::OK();
}

uint64_t RpcClient::windowed_posts_for_testing() {
  std::lock_guard<std::mutex> lock(mu_);
  return windowed_posts_;
}

Status RpcClient::PostOverlapped(const Request& request, const std::function<bool()>& step) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_.fetch_add(1, std::memory_order_relaxed);
  if (WindowFullLocked(request)) {
    Status waited = PostAndWaitLocked(request, seq, &step);
    if (!waited.ok()) {
      while (step()) {
      }
    }
    return waited;
  }
  Status flushed = FlushLocked();
  if (!flushed.ok()) {
    while (step()) {
    }
    return flushed;
  }
  return SendLocked(request, kFlagOneWay, seq, &step);
}

Status RpcClient::Start(const Request& request) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t seq = next_seq_.fetch_add(1, std::memory_order_relaxed);
  pending_.push_back(NewPendingLocked(seq, request));
  GPUPOOL_RETURN_IF_ERROR(FlushLocked());
  return SendLocked(request, 0, seq);
}

Status RpcClient::Drain(int32_t* first_error) {
  std::lock_guard<std::mutex> lock(mu_);
  *first_error = 0;
  Status status = FlushLocked();
  if (pending_.empty()) return status;
  if (status.ok()) status = WaitLocked(pending_.back()->seq);
  while (!pending_.empty()) {
    const Reply& reply = pending_.front()->reply;
    if (*first_error == 0) *first_error = reply.status != 0 ? reply.status : reply.async_status;
    pending_.pop_front();
  }
  return status;
}

}  // namespace gpupool::transport

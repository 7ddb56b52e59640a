#include "remote/transport/rpc_server.h"

#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/latency_probe.h"
#include "common/log.h"
#include "remote/transport/acceptor.h"
#include "remote/transport/bootstrap.h"
#include "remote/transport/ucx_worker.h"

namespace gpupool::transport {
namespace {

// How long a lane keeps polling after the last event before it sleeps.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(2000);
// ...and polls without yielding the CPU for this long first (a quiet host is that fast).
constexpr auto kSpinBeforeYield = std::chrono::microseconds(20);
// An idle lane reads the clock once per this many polls: a read costs about as much as a
// poll of an idle worker (30 ns here), and every poll it replaces answers a request sooner.
constexpr unsigned kIdlePollsPerClockRead = 8;

// Requests that name no connection of the endpoint they came on are dropped; they are
// reported at most this often, with their count (a client that keeps trying must not fill
// the log).
constexpr auto kDroppedReportInterval = std::chrono::seconds(10);

// How often a lane looks at its clients' sockets (for a client that closed its end). Not
// every few polls: an epoll_wait costs as much as a dozen idle polls, and a request that
// comes during one waits for it.
constexpr auto kSocketPollPeriod = std::chrono::microseconds(200);
// A lane keeps at most this many buffers of finished requests, of at most this capacity.
constexpr size_t kSpareBytesKept = 8;
constexpr size_t kSpareBytesCapacity = 4096;

// A connection id from the kernel's random source. The id is the second proof of a
// request's origin (after its endpoint): it must not be predictable from earlier ids, as
// those of a seeded generator are. Fails only when getrandom keeps failing.
Result<ConnectionId> RandomConnectionId() {
  for (int attempt = 0; attempt < 16; ++attempt) {
    ConnectionId id = 0;
    ssize_t n = getrandom(&id, sizeof(id), 0);
    if (n == static_cast<ssize_t>(sizeof(id))) return id;
    if (n < 0 && errno != EINTR && errno != EAGAIN) {
      return Status::Internal(std::string("getrandom failed: ") + std::strerror(errno));
    }
  }
  return Status::Internal("getrandom keeps returning short reads");
}

// wire.h's caps; tests lower them (SetQueueCapsForTesting).
std::atomic<uint64_t> g_max_queued_requests{kMaxQueuedRequests};
std::atomic<uint64_t> g_max_queued_bytes{kMaxQueuedBytes};

struct Incoming {
  RequestHeader header;
  // What came in UCX's buffers, copied out: the arguments and an eager payload. The items
  // of a batch share one copy of their batch.
  std::shared_ptr<const std::string> bytes;
  std::string_view args;      // in `bytes`
  std::string_view eager;     // payload received eagerly, in `bytes`
  void* rndv_desc = nullptr;  // payload still on the client, to pull by rendezvous
  size_t rndv_len = 0;
  uint64_t arrived = 0;  // probe::StartTicks() when it came (0: probes off)
};

struct Connection {
  ConnectionId id = 0;  // random: clients prove which connection they are on
  int control_fd = -1;  // the bootstrap socket, open while the client lives
  ucp_ep_h ep = nullptr;
  std::string peer;
  std::deque<Incoming> queue;  // received, not yet started
  uint64_t queued_bytes = 0;   // of `queue`'s arguments and eager payloads (wire.h's caps)
  // The request in flight: its bulk data is being received, its reply being
  // sent, or its reply deferred by the handler.
  bool busy = false;
  bool deferred = false;      // the handler answers the current request through OnWake
  bool bulk_arrived = false;  // set by the receive callback; the loop then runs it
  Incoming current;
  void* current_payload = nullptr;
  std::vector<char> temp;         // bulk data with no handler-given destination
  std::vector<char> temp_header;  // the reply header, alive until its send completes
  bool closing = false;           // close once idle (close_after, or the peer failed)
  bool graceful_close = false;    // flush before closing (close_after)
  std::string close_reason;
  std::string transport_error;  // what UCX reported about the peer, if anything
  bool eager_midsize = false;   // replies up to kEagerPayloadMax go eagerly (wire.h)
};

// One lane: a thread, its UCX worker, its connections and its handler
// (rpc_server.h).
class Lane {
 public:
  Lane(RpcHandler* handler, std::unique_ptr<UcxWorker> ucx, const ServerLog* log)
      : handler_(handler), ucx_(std::move(ucx)), log_(log) {}

  ~Lane() {
    Stop();
    if (epfd_ >= 0) close(epfd_);
    std::lock_guard<std::mutex> lock(inbox_mu_);
    for (Handshaken& h : arrivals_) close(h.fd);
  }

  Status Start() {
    GPUPOOL_RETURN_IF_ERROR(ucx_->SetAmHandler(kRequestAmId, &Lane::OnRequestAm, this));
    GPUPOOL_RETURN_IF_ERROR(ucx_->SetAmHandler(kBatchAmId, &Lane::OnBatchAm, this));
    auto address = ucx_->Address();
    if (!address.ok()) return address.status();
    worker_address_ = std::move(address.value());
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) return Status::Internal("epoll_create1 failed");
    Watch(ucx_->event_fd());
    thread_ = std::thread([this] { Loop(); });
    return Status::OK();
  }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) {
      ucp_worker_signal(ucx_->worker());
      thread_.join();
    }
  }

  // Any thread: the lane takes the client over (creates its endpoint, answers
  // the handshake, watches its socket).
  void Adopt(Handshaken client) {
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      arrivals_.push_back(std::move(client));
    }
    has_arrivals_ = true;
    ucp_worker_signal(ucx_->worker());
  }

  // Any thread: the handler's OnWake runs soon.
  void Wake() {
    wake_ = true;
    ucp_worker_signal(ucx_->worker());
  }

 private:
  void Watch(int fd) {
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.fd = fd;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &event);
  }

  // Creates the endpoints of clients the acceptor handed over, and tells them
  // their id.
  void TakeArrivals() {
    std::vector<Handshaken> arrivals;
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      arrivals.swap(arrivals_);
    }
    for (Handshaken& client : arrivals) Connect(std::move(client));
  }

  void Connect(Handshaken client) {
    auto connection = std::make_unique<Connection>();
    connection->control_fd = client.fd;
    connection->peer = std::move(client.peer);
    do {
      Result<ConnectionId> id = RandomConnectionId();
      if (!id.ok()) {
        (*log_)("refusing " + id.status().message(),
                "refusing client " + connection->peer + ": " + id.status().message());
        close(client.fd);
        return;
      }
      connection->id = id.value();
    } while (connection->id == 0 || connections_.count(connection->id));
    // Peer failure detection only when both ends can have it (kDetectsPeerFailure).
    bool detecting = false;
    auto ep =
        ucx_->Connect(client.hello.worker_address, &Lane::OnPeerError, connection.get(),
                      (client.hello.flags & kDetectsPeerFailure) != 0 && UcxWorker::CanDetectPeerFailure(), &detecting);
    if (ep.ok()) connection->ep = ep.value();
    connection->eager_midsize = detecting;
    Status status = ep.ok() ? Status::OK() : ep.status();
    if (status.ok()) {
      // A few hundred bytes into a fresh socket's empty buffer: does not block
      // in practice, and the socket's send timeout (kHandshakeTimeoutMs) bounds
      // it anyway.
      ServerHello answer;
      answer.connection = connection->id;
      answer.flags = detecting ? kDetectsPeerFailure : 0;
      answer.worker_address = worker_address_;
      status = SendServerHello(client.fd, answer);
    }
    if (!status.ok()) {
      (*log_)("handshake " + HostOf(connection->peer) + " " + status.message(),
              "handshake with " + connection->peer + " failed: " + status.message());
      connection->closing = true;
      connection->close_reason = status.message();
    }
    Watch(client.fd);
    by_fd_[client.fd] = connection.get();
    handler_->OnConnect(connection->id, connection->peer);
    in_order_.push_back(connection.get());
    connections_[connection->id] = std::move(connection);
  }

  // Looks at the clients' sockets without blocking, or for up to `timeout_ms`
  // when the worker was armed.
  void PollSockets(int timeout_ms) {
    epoll_event events[16];
    int n = epoll_wait(epfd_, events, 16, timeout_ms);
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (auto found = by_fd_.find(fd); found != by_fd_.end()) {
        if (PeerClosed(fd)) {
          found->second->closing = true;
          if (found->second->close_reason.empty()) {
            found->second->close_reason = "the client closed its connection";
          }
        }
      }
    }
  }

  // UCX reports a peer's endpoint close like a failure ("Endpoint timeout", "Connection
  // reset"); Close() tells the two apart by the bootstrap socket, which a client that
  // exits cleanly closes first.
  static void OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* connection = static_cast<Connection*>(arg);
    connection->closing = true;
    if (connection->transport_error.empty()) connection->transport_error = UcxError(status);
  }

  // The connection `id` names, if the message came on that connection's endpoint (the
  // client sends with UCP_AM_SEND_FLAG_REPLY); null otherwise. A request counts only on
  // its own connection's endpoint: a guessed id, or a real one replayed from another
  // client's endpoint, reaches nothing.
  Connection* SenderConnection(ConnectionId id, const ucp_am_recv_param_t* param) {
    auto found = connections_.find(id);
    ucp_ep_h from = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
    if (found == connections_.end() || from == nullptr || found->second->ep != from) {
      return nullptr;
    }
    return found->second.get();
  }

  // Queues a request of `c`, within wire.h's caps. A client past them does not speak this
  // wire (its library waits long before): its connection closes, nothing more of it queued.
  bool Enqueue(Connection* c, Incoming incoming) {
    if (c->closing) return false;
    const uint64_t bytes = incoming.args.size() + incoming.eager.size();
    const uint64_t max_requests = g_max_queued_requests.load(std::memory_order_relaxed);
    const uint64_t max_bytes = g_max_queued_bytes.load(std::memory_order_relaxed);
    if (c->queue.size() >= max_requests || c->queued_bytes + bytes > max_bytes) {
      c->closing = true;
      c->close_reason = "the client queued more than " + std::to_string(max_requests) + " requests or " +
                        std::to_string(max_bytes >> 20) +
                        " MiB without waiting for an answer (the wire's flow control allows " +
                        std::to_string(kMaxUnansweredPosts) + ")";
      return false;
    }
    c->queued_bytes += bytes;
    c->queue.push_back(std::move(incoming));
    return true;
  }

  static ucs_status_t OnRequestAm(void* arg, const void* header, size_t header_len, void* data, size_t length,
                                  const ucp_am_recv_param_t* param) {
    auto* self = static_cast<Lane*>(arg);
    RequestHeader request_header;
    // Not a request of this wire: dropped (rndv data too).
    if (!DecodeRequestHeader(header, header_len, &request_header)) return UCS_OK;
    Connection* c = self->SenderConnection(request_header.connection, param);
    if (c == nullptr) {
      ++self->dropped_;  // not ours, or a connection that is gone: drop (rndv data too)
      return UCS_OK;
    }
    Incoming incoming;
    incoming.header = request_header;
    incoming.arrived = probe::StartTicks();
    const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    const size_t eager_len = rendezvous ? 0 : length;
    if (request_header.args_len + eager_len > 0) {
      std::shared_ptr<std::string> bytes = self->TakeSpareBytes();
      bytes->reserve(request_header.args_len + eager_len);
      bytes->append(static_cast<const char*>(header) + sizeof(request_header), request_header.args_len);
      if (eager_len > 0) bytes->append(static_cast<const char*>(data), eager_len);
      incoming.args = std::string_view(bytes->data(), request_header.args_len);
      incoming.eager = std::string_view(bytes->data() + request_header.args_len, eager_len);
      incoming.bytes = std::move(bytes);
    }
    ucs_status_t keep = UCS_OK;
    if (rendezvous) {
      incoming.rndv_desc = data;
      incoming.rndv_len = length;
      keep = UCS_INPROGRESS;
    }
    if (!self->Enqueue(c, std::move(incoming))) return UCS_OK;  // closing: rndv data dropped
    return keep;
  }

  // A batch of one-way requests (wire.h): queued in order as if they had come one by one,
  // once every item has passed the checks. A malformed batch on a client's own connection
  // closes it (the client no longer speaks this wire), with nothing of it run.
  static ucs_status_t OnBatchAm(void* arg, const void* header, size_t header_len, void* data, size_t length,
                                const ucp_am_recv_param_t* param) {
    auto* self = static_cast<Lane*>(arg);
    GPUPOOL_PROBE_SCOPE(probe, "agent.batch_receive");
    BatchHeader batch;
    if (!DecodeBatchHeader(header, header_len, &batch)) return UCS_OK;
    Connection* c = self->SenderConnection(batch.connection, param);
    if (c == nullptr) {
      self->dropped_ += batch.count;  // as for single requests (OnRequestAm)
      return UCS_OK;
    }
    const char* why = "it came by rendezvous";
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0 && length != batch.bytes) {
      why = "its data is not the length its header says";  // (copied only when bounded)
    } else if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
      // One copy of the whole batch, its items views into it (checked on the copy).
      // (Not a const string: KeepSpareBytes may reuse it once its items are done.)
      auto bytes = std::make_shared<std::string>(static_cast<const char*>(data), length);
      if (DecodeBatch(batch, bytes->data(), bytes->size(), self->batch_items_.data(), &why)) {
        for (uint32_t i = 0; i < batch.count; ++i) {
          const BatchItem& item = self->batch_items_[i];
          Incoming incoming;
          incoming.header = item.header;
          incoming.bytes = bytes;
          incoming.args = std::string_view(item.args, item.header.args_len);
          incoming.eager = std::string_view(item.payload, item.payload_len);
          if (!self->Enqueue(c, std::move(incoming))) break;
        }
        return UCS_OK;
      }
    }
    if (!c->closing) {
      c->closing = true;
      c->close_reason = std::string("malformed request batch: ") + why;
    }
    return UCS_OK;  // rendezvous data is dropped with it
  }

  static void OnBulkArrived(void* request, ucs_status_t status, size_t length, void* user_data) {
    ucp_request_free(request);  // callbacks only fire for requests not freed before
    auto* connection = static_cast<Connection*>(user_data);
    connection->bulk_arrived = true;
    if (status != UCS_OK) {
      connection->closing = true;
      connection->close_reason = "bulk receive failed: " + UcxError(status);
    }
  }

  static void OnReplySent(void* request, ucs_status_t status, void* user_data) {
    ucp_request_free(request);
    auto* connection = static_cast<Connection*>(user_data);
    connection->busy = false;
    if (status != UCS_OK) {
      connection->closing = true;
      if (connection->close_reason.empty()) {
        connection->close_reason = "reply failed: " + UcxError(status);
      }
    }
  }

  // Runs the current request of `c` (its payload is complete) and sends the
  // reply, unless the handler defers it.
  void Execute(Connection* c, const void* payload, size_t payload_len) {
    ServerReply reply;
    {
      GPUPOOL_PROBE_SCOPE(probe, "agent.handler");
      handler_->OnRequest(c->id, c->current.header, c->current.args, payload, payload_len, &reply);
    }
    if (reply.deferred) {
      c->busy = true;
      c->deferred = true;
      return;
    }
    Finish(c, reply);
  }

  // Sends the reply of the current request of `c` (not for one-way requests).
  void Finish(Connection* c, const ServerReply& reply) {
    c->busy = false;
    c->deferred = false;
    if (reply.tick_soon) next_tick_ = {};
    if (reply.close_after) {
      c->closing = true;
      c->graceful_close = true;
      c->close_reason = "closed by the server";
    }
    if (c->current.header.flags & kFlagOneWay) return;
    // The header must outlive a rendezvous send: it lives in the connection.
    c->temp_header.resize(sizeof(ReplyHeader) + reply.out.size());
    ReplyHeader header;
    header.status = reply.status;
    header.async_status = reply.async_status;
    header.seq = c->current.header.seq;
    header.out_len = static_cast<uint32_t>(reply.out.size());
    std::memcpy(c->temp_header.data(), &header, sizeof(header));
    std::memcpy(c->temp_header.data() + sizeof(header), reply.out.data(), reply.out.size());
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = SendsEagerly(c->eager_midsize, reply.bulk_len) ? UCP_AM_SEND_FLAG_EAGER : 0;
    param.cb.send = &Lane::OnReplySent;
    param.user_data = c;
    ucs_status_ptr_t sent;
    {
      GPUPOOL_PROBE_SCOPE(probe, "agent.ucx_send");
      sent = ucp_am_send_nbx(c->ep, kReplyAmId, c->temp_header.data(), c->temp_header.size(), reply.bulk,
                             reply.bulk_len, &param);
    }
    static probe::Site request_to_reply{"agent.request_to_reply"};
    probe::AddSince(request_to_reply, c->current.arrived);
    if (UCS_PTR_IS_ERR(sent)) {
      c->closing = true;
      c->close_reason = "reply failed: " + UcxError(UCS_PTR_STATUS(sent));
    } else if (UCS_PTR_IS_PTR(sent)) {
      c->busy = true;  // until OnReplySent, which also frees the request
    }
  }

  // Sends the deferred replies the handler has ready.
  void DeliverDeferred() {
    std::vector<std::pair<ConnectionId, ServerReply>> replies;
    handler_->OnWake(&replies);
    for (auto& [id, reply] : replies) {
      auto found = connections_.find(id);
      if (found == connections_.end() || !found->second->deferred) continue;
      Finish(found->second.get(), reply);
    }
  }

  // A buffer for a request's bytes: one a finished request left, else a new one.
  std::shared_ptr<std::string> TakeSpareBytes() {
    if (spare_bytes_.empty()) return std::make_shared<std::string>();
    std::shared_ptr<std::string> bytes = std::move(spare_bytes_.back());
    spare_bytes_.pop_back();
    bytes->clear();
    return bytes;
  }
  // Keeps a finished request's buffer for the next request, unless another request (of its
  // batch) still uses it, or it is large: a request at a time allocates nothing.
  void KeepSpareBytes(std::shared_ptr<const std::string> bytes) {
    if (bytes == nullptr || bytes.use_count() != 1 || bytes->capacity() > kSpareBytesCapacity ||
        spare_bytes_.size() >= kSpareBytesKept) {
      return;
    }
    spare_bytes_.push_back(std::const_pointer_cast<std::string>(std::move(bytes)));
  }

  // Starts queued requests of `c` until one has to wait for a transfer or the
  // handler. Returns whether anything was started.
  bool Pump(Connection* c) {
    bool worked = false;
    if (c->busy && c->bulk_arrived) {
      c->bulk_arrived = false;
      worked = true;
      if (!c->closing) {
        Execute(c, c->current_payload, c->current.rndv_len);
      } else {
        c->busy = false;
      }
    }
    while (!c->busy && !c->closing && !c->queue.empty()) {
      worked = true;
      KeepSpareBytes(std::move(c->current.bytes));
      c->current = std::move(c->queue.front());
      c->queue.pop_front();
      c->queued_bytes -= c->current.args.size() + c->current.eager.size();
      if (c->current.rndv_desc == nullptr) {
        Execute(c, c->current.eager.data(), c->current.eager.size());
        continue;
      }
      void* desc = c->current.rndv_desc;
      c->current.rndv_desc = nullptr;
      void* destination = handler_->BulkDestination(c->id, c->current.header, c->current.args, c->current.rndv_len);
      if (destination == nullptr) {
        c->temp.resize(c->current.rndv_len);
        destination = c->temp.data();
      }
      c->current_payload = destination;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.recv_am = &Lane::OnBulkArrived;
      param.user_data = c;
      ucs_status_ptr_t received = ucp_am_recv_data_nbx(ucx_->worker(), desc, destination, c->current.rndv_len, &param);
      if (UCS_PTR_IS_ERR(received)) {
        c->closing = true;
        c->close_reason = "bulk receive failed: " + UcxError(UCS_PTR_STATUS(received));
      } else if (received == nullptr) {
        Execute(c, destination, c->current.rndv_len);
      } else {
        c->busy = true;  // until OnBulkArrived, which also frees the request
      }
    }
    return worked;
  }

  void Close(Connection* c) {
    if (c->close_reason.empty()) {
      // A client that exits closes its bootstrap socket before its endpoint: then the UCX
      // error is only the echo of that clean close.
      c->close_reason = c->transport_error.empty() || PeerClosed(c->control_fd) ? "the client closed its connection"
                                                                                : c->transport_error;
    }
    for (auto& incoming : c->queue) {
      if (incoming.rndv_desc != nullptr) ucp_am_data_release(ucx_->worker(), incoming.rndv_desc);
    }
    by_fd_.erase(c->control_fd);
    epoll_ctl(epfd_, EPOLL_CTL_DEL, c->control_fd, nullptr);
    // Closing on our initiative (close_after) flushes the last reply to the client before
    // the bootstrap socket closes; a failed or departed peer gets a forced close.
    Closing closing{nullptr, c->control_fd};
    if (c->ep != nullptr) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = c->graceful_close ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t request = ucp_ep_close_nbx(c->ep, &param);
      if (UCS_PTR_IS_PTR(request)) closing.request = request;
    }
    if (closing.request == nullptr) {
      close(closing.fd);
    } else {
      closing_requests_.push_back(closing);
    }
    handler_->OnDisconnect(c->id, c->close_reason);
  }

  // Completes endpoint closes that finished: frees the request, closes the socket.
  void FinishClosing() {
    for (auto it = closing_requests_.begin(); it != closing_requests_.end();) {
      if (ucp_request_check_status(it->request) != UCS_INPROGRESS) {
        ucp_request_free(it->request);
        close(it->fd);
        it = closing_requests_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Lets the handler close connections (e.g. revoked sessions), and reports dropped
  // requests now and then.
  void Tick(std::chrono::steady_clock::time_point now) {
    next_tick_ = now + std::chrono::milliseconds(kTickIntervalMs);
    std::vector<std::pair<ConnectionId, std::string>> to_close;
    handler_->OnTick(&to_close);
    for (auto& [id, reason] : to_close) {
      auto found = connections_.find(id);
      if (found == connections_.end()) continue;
      Connection* c = found->second.get();
      for (auto& incoming : c->queue) {
        if (incoming.rndv_desc != nullptr) ucp_am_data_release(ucx_->worker(), incoming.rndv_desc);
      }
      c->queue.clear();
      c->queued_bytes = 0;
      c->closing = true;
      c->close_reason = reason;
    }
    if (dropped_ > dropped_reported_ && now >= next_dropped_report_) {
      (*log_)("dropped", "dropped " + std::to_string(dropped_ - dropped_reported_) +
                             " request(s) that named no connection of the endpoint they came on "
                             "(a closed connection, or a guessed or replayed id)");
      dropped_reported_ = dropped_;
      next_dropped_report_ = now + kDroppedReportInterval;
    }
  }

  void Loop() {
    auto last_activity = std::chrono::steady_clock::now();
    auto next_socket_poll = last_activity;
    unsigned idle_polls = 0;  // since the last work (wraps after 2^32: a multiple of 8)
    bool yielding = false;    // idle past kSpinBeforeYield: every idle poll yields the CPU
    while (!stop_) {
      bool worked = false;
      // A plain load first: an exchange is a locked instruction even when nothing came.
      if (has_arrivals_.load(std::memory_order_relaxed) && has_arrivals_.exchange(false)) {
        TakeArrivals();
        worked = true;
      }
      worked |= ucx_->Progress() > 0;
      if (wake_.load(std::memory_order_relaxed) && wake_.exchange(false)) {
        DeliverDeferred();
        worked = true;
      }
      // Connections to close go before any other request runs: a session the handler
      // revoked for a new one (OnTick) is gone before the new one's next request.
      for (int pass = 0; pass < 2; ++pass) {
        for (size_t i = 0; i < in_order_.size();) {
          Connection* c = in_order_[i];
          if (pass == 1) worked |= Pump(c);
          if (c->closing && !c->busy) {
            Close(c);
            in_order_.erase(in_order_.begin() + i);
            connections_.erase(c->id);  // frees c
            worked = true;
          } else {
            ++i;
          }
        }
      }
      FinishClosing();
      if (!worked && ++idle_polls % kIdlePollsPerClockRead != 0) {
        if (yielding) sched_yield();
        continue;
      }
      // A connection a tick closes (OnTick) goes in the next iteration's first pass,
      // before any other request runs.
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_tick_) Tick(now);
      if (now >= next_socket_poll) {
        next_socket_poll = now + kSocketPollPeriod;
        PollSockets(0);
      }
      if (worked) {
        last_activity = now;
        idle_polls = 0;
        yielding = false;
      } else if (now - last_activity > kSpinBeforeSleep) {
        PollSockets(ucx_->Arm() ? kTickIntervalMs : 0);
      } else if (now - last_activity > kSpinBeforeYield) {
        yielding = true;
        sched_yield();  // polling must not starve local clients on a busy host
      }
    }
    for (auto& [id, connection] : connections_) {
      connection->close_reason = "server stopping";
      Close(connection.get());
    }
    connections_.clear();
    in_order_.clear();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!closing_requests_.empty() && std::chrono::steady_clock::now() < deadline) {
      ucx_->ProgressAll();
      FinishClosing();
    }
    for (Closing& closing : closing_requests_) close(closing.fd);  // requests die with the worker
  }

  RpcHandler* handler_;
  std::unique_ptr<UcxWorker> ucx_;
  const ServerLog* log_;  // the server's
  int epfd_ = -1;         // worker event fd, clients' sockets
  std::string worker_address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Handed over by other threads.
  std::mutex inbox_mu_;
  std::vector<Handshaken> arrivals_;  // guarded by inbox_mu_
  std::atomic<bool> has_arrivals_{false};
  std::atomic<bool> wake_{false};
  // Everything below is touched only by the lane's thread.
  std::map<ConnectionId, std::unique_ptr<Connection>> connections_;
  // The same connections, for the loop's passes: a vector's walk costs less than a map's.
  std::vector<Connection*> in_order_;
  // Buffers of finished single requests, for the next ones (TakeSpareBytes).
  std::vector<std::shared_ptr<std::string>> spare_bytes_;
  std::map<int, Connection*> by_fd_;  // by bootstrap socket
  struct Closing {
    void* request;  // ucp_ep_close_nbx in progress
    int fd;         // the bootstrap socket, closed once the endpoint is
  };
  std::vector<Closing> closing_requests_;
  std::chrono::steady_clock::time_point next_tick_{};
  uint64_t dropped_ = 0;  // requests dropped by OnRequestAm and OnBatchAm
  std::vector<BatchItem> batch_items_ = std::vector<BatchItem>(kMaxBatchItems);  // OnBatchAm's
  uint64_t dropped_reported_ = 0;                                                // ...of which the log has told
  std::chrono::steady_clock::time_point next_dropped_report_{};
};

class RpcServerImpl : public RpcServer {
 public:
  RpcServerImpl(LanePicker pick_lane, ServerLog log) : pick_lane_(std::move(pick_lane)), log_(std::move(log)) {
    if (!log_) log_ = [](const std::string&, const std::string& line) { log::Warning(line); };
  }

  ~RpcServerImpl() override {
    acceptor_.reset();  // no more arrivals
    lanes_.clear();     // each stops its thread and closes its connections
  }

  int port() const override { return acceptor_ ? acceptor_->port() : 0; }

  void Wake(size_t lane) override {
    if (lane < lanes_.size()) lanes_[lane]->Wake();
  }

  void Adopt(Handshaken client) override {
    size_t lane = pick_lane_ ? pick_lane_(client.hello.lane_key) : 0;
    lanes_[lane < lanes_.size() ? lane : 0]->Adopt(std::move(client));
  }

  Status StartLanes(const std::vector<RpcHandler*>& handlers) {
    if (handlers.empty()) return Status::InvalidArgument("rpc server: no lanes");
    for (size_t i = 0; i < handlers.size(); ++i) {
      auto ucx = UcxWorker::Create("gpupool-dataplane-lane" + std::to_string(i), UcxWorker::Threads::kOne);
      if (!ucx.ok()) return ucx.status();
      lanes_.push_back(std::make_unique<Lane>(handlers[i], std::move(ucx.value()), &log_));
    }
    for (auto& lane : lanes_) GPUPOOL_RETURN_IF_ERROR(lane->Start());
    return Status::OK();
  }

  Status Listen(const std::string& listen) {
    auto acceptor = HandshakeAcceptor::Start(
        listen, [this](Handshaken client) { Adopt(std::move(client)); }, log_);
    if (!acceptor.ok()) return acceptor.status();
    acceptor_ = std::move(acceptor.value());
    return Status::OK();
  }

 private:
  LanePicker pick_lane_;
  ServerLog log_;  // used by the acceptor and the lanes (must be thread-safe)
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::unique_ptr<HandshakeAcceptor> acceptor_;
};

}  // namespace

void SetQueueCapsForTesting(uint64_t requests, uint64_t bytes) {
  g_max_queued_requests.store(requests);
  g_max_queued_bytes.store(bytes);
}

Result<std::unique_ptr<RpcServer>> RpcServer::Start(const std::string& listen, RpcHandler* handler) {
  return Start(listen, std::vector<RpcHandler*>{handler}, nullptr, nullptr);
}

Result<std::unique_ptr<RpcServer>> RpcServer::Start(const std::string& listen, std::vector<RpcHandler*> lanes,
                                                    LanePicker pick_lane, ServerLog log) {
  auto server = std::make_unique<RpcServerImpl>(std::move(pick_lane), std::move(log));
  GPUPOOL_RETURN_IF_ERROR(server->StartLanes(lanes));
  GPUPOOL_RETURN_IF_ERROR(server->Listen(listen));
  return std::unique_ptr<RpcServer>(std::move(server));
}

Result<std::unique_ptr<RpcServer>> RpcServer::StartWithoutListening(std::vector<RpcHandler*> lanes,
                                                                    LanePicker pick_lane, ServerLog log) {
  auto server = std::make_unique<RpcServerImpl>(std::move(pick_lane), std::move(log));
  GPUPOOL_RETURN_IF_ERROR(server->StartLanes(lanes));
  return std::unique_ptr<RpcServer>(std::move(server));
}

}  // namespace gpupool::transport

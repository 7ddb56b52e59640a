#include "remote/dataplane/server.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "remote/dataplane/executor_factory.h"
#include "remote/dataplane/protocol.h"
#include "remote/dataplane/session.h"
#include "remote/transport/rpc_server.h"

namespace gpupool::dataplane {

Server::~Server() = default;

namespace {

class ServerImpl;

// A hello whose credential the authorizer thread checks, and its verdict.
struct HelloCheck {
  transport::ConnectionId id = 0;
  std::string lease_id;
  std::string token;
  std::string gpu_uuid;
  uint64_t epoch = 0;  // the authorization epoch before the check
  bool authorized = false;
};

// The peer's address without its port: repeated refusals of one host are one
// kind.
std::string PeerHost(const std::string& peer) {
  size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

// Runs every session of one GPU, on that GPU's transport lane (its own thread).
class GpuWorker : public transport::RpcHandler {
 public:
  // `gpu`: nullptr when the host has no GPU (every hello is then refused).
  GpuWorker(ServerImpl* server, size_t lane, const backend::GpuInfo* gpu)
      : server_(server), lane_(lane), gpu_(gpu) {}

  size_t attached() const { return attached_.load(); }

  // For the watchdog (any thread): since when the current operation runs (0: none, or one
  // the watchdog leaves alone), and the progress count it moves.
  int64_t busy_since_ns() const { return busy_since_ns_.load(); }
  uint64_t progress() const { return progress_.load(std::memory_order_relaxed); }
  const backend::GpuInfo* gpu() const { return gpu_; }

  // Any thread (the authorizer): a hello's verdict; the lane is woken to finish
  // it.
  void Deliver(HelloCheck check) {
    std::lock_guard<std::mutex> lock(checked_mu_);
    checked_.push_back(std::move(check));
  }

  void OnConnect(transport::ConnectionId id, const std::string& peer) override;
  void OnDisconnect(transport::ConnectionId id, const std::string& reason) override;
  void* BulkDestination(transport::ConnectionId id, const transport::RequestHeader& header,
                        std::string_view args, size_t len) override;
  void OnRequest(transport::ConnectionId id, const transport::RequestHeader& header,
                 std::string_view args, const void* payload, size_t payload_len,
                 transport::ServerReply* reply) override;
  void OnTick(std::vector<std::pair<transport::ConnectionId, std::string>>* close) override;
  void OnWake(
      std::vector<std::pair<transport::ConnectionId, transport::ServerReply>>* replies) override;

 private:
  void CountAttached();
  bool StillAuthorized(Session* session, uint64_t epoch);
  void Revoke(transport::ConnectionId id, Session* session,
              const std::string& why =
                  "no longer holds it (released, expired, or moved to "
                  "another GPU)");
  void Refuse(Session* session, int32_t status, const std::string& why,
              transport::ServerReply* reply);
  void Hello(transport::ConnectionId id, Session* session, std::string_view args,
             transport::ServerReply* reply);
  void FinishHello(const HelloCheck& check, transport::ServerReply* reply);

  ServerImpl* const server_;
  const size_t lane_;
  const backend::GpuInfo* const gpu_;
  std::mutex checked_mu_;
  std::vector<HelloCheck> checked_;  // verdicts not yet delivered; guarded by checked_mu_
  // Everything below is used by the lane's thread only.
  std::map<transport::ConnectionId, std::unique_ptr<Session>> sessions_;
  std::vector<std::pair<transport::ConnectionId, std::string>> to_close_;  // revoked
  uint64_t ticked_epoch_ = 0;
  std::atomic<size_t> attached_{0};  // written by the lane, read by any thread
  std::atomic<int64_t> busy_since_ns_{0};
  std::atomic<uint64_t> progress_{0};  // operations done, and the blocks kernels ran
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class ServerImpl : public Server {
 public:
  explicit ServerImpl(ServerOptions options)
      : options_(std::move(options)), executors_(options_.backend) {}

  ~ServerImpl() override {
    {
      std::lock_guard<std::mutex> lock(hello_mu_);
      stopping_ = true;
    }
    hello_wanted_.notify_all();
    watchdog_wake_.notify_all();
    if (authorizer_.joinable()) authorizer_.join();  // after its current check, if any
    if (watchdog_.joinable()) watchdog_.join();
    rpc_.reset();                                    // stops the GPU threads before the sessions go
  }

  Status Start() {
    if (options_.backend == nullptr) return Status::InvalidArgument("dataplane: no backend");
    if (!options_.authorize) return Status::InvalidArgument("dataplane: no authorizer");
    if (!options_.still_authorized) options_.still_authorized = options_.authorize;
    gpus_ = options_.backend->Discover();
    std::vector<transport::RpcHandler*> lanes;
    for (size_t i = 0; i < std::max<size_t>(gpus_.size(), 1); ++i) {
      workers_.push_back(
          std::make_unique<GpuWorker>(this, i, i < gpus_.size() ? &gpus_[i] : nullptr));
      lanes.push_back(workers_.back().get());
    }
    auto rpc = transport::RpcServer::Start(
        options_.listen, lanes, [this](const std::string& uuid) { return LaneOf(uuid); },
        [this](const std::string& key, const std::string& line) {
          log_.Log("transport " + key, line);
        });
    if (!rpc.ok()) return rpc.status();
    rpc_ = std::move(rpc.value());
    // Started once rpc_ is set (it wakes lanes through it); hellos that came
    // sooner wait.
    authorizer_ = std::thread([this] { AuthorizeLoop(); });
    if (options_.hang_timeout.count() > 0) watchdog_ = std::thread([this] { WatchLoop(); });
    return Status::OK();
  }

  int port() const override { return rpc_->port(); }
  size_t attached_sessions() const override {
    size_t attached = 0;
    for (const auto& worker : workers_) attached += worker->attached();
    return attached;
  }

  // The watchdog thread: a GPU whose operation has made no progress for hang_timeout is
  // reported FAILED (once per stall); gpupoold then swaps it out of its leases and the
  // clients recover on the replacement (gpupool-remote(7), FAILOVER).
  void WatchLoop() {
    struct Watch {
      int64_t since = 0;
      uint64_t progress = 0;
      int64_t last_change = 0;
      bool reported = false;
    };
    std::vector<Watch> watches(workers_.size());
    const int64_t limit = std::chrono::nanoseconds(options_.hang_timeout).count();
    while (true) {
      {
        std::unique_lock<std::mutex> lock(hello_mu_);
        watchdog_wake_.wait_for(lock, std::chrono::milliseconds(100));
        if (stopping_) break;
      }
      const int64_t now = NowNs();
      for (size_t i = 0; i < workers_.size(); ++i) {
        GpuWorker& worker = *workers_[i];
        Watch& watch = watches[i];
        int64_t since = worker.busy_since_ns();
        uint64_t progress = worker.progress();
        if (since == 0 || since != watch.since || progress != watch.progress) {
          watch = Watch{since, progress, now, since == watch.since && watch.reported};
          continue;
        }
        if (watch.reported || worker.gpu() == nullptr || now - watch.last_change < limit) continue;
        watch.reported = true;
        char seconds[32];
        std::snprintf(seconds, sizeof(seconds), "%.1f", static_cast<double>(limit) / 1e9);
        std::string why =
            std::string("no progress for ") + seconds + " s: the GPU hangs (agent watchdog)";
        log_.Log("hung " + worker.gpu()->uuid,
                 "GPU " + worker.gpu()->uuid + " reported FAILED: " + why);
        options_.backend->ReportFailure(worker.gpu()->index, why);
      }
    }
  }

  const ServerOptions& options() const { return options_; }
  ExecutorFactory& executors() { return executors_; }
  LogLimiter& log() { return log_; }
  LogLimiter& sessions_log() { return sessions_log_; }
  const backend::GpuInfo* FindGpu(const std::string& uuid) const {
    for (const auto& gpu : gpus_) {
      if (gpu.uuid == uuid) return &gpu;
    }
    return nullptr;
  }
  uint64_t Epoch() const {
    return options_.authorization_epoch ? options_.authorization_epoch() : 0;
  }

  // Any GPU thread: has the authorizer thread check a hello's credential, then
  // hand the verdict to `worker` and wake its lane.
  void CheckHello(GpuWorker* worker, size_t lane, HelloCheck check) {
    {
      std::lock_guard<std::mutex> lock(hello_mu_);
      hellos_.push_back(Pending{worker, lane, std::move(check)});
    }
    hello_wanted_.notify_one();
  }

 private:
  struct Pending {
    GpuWorker* worker;
    size_t lane;
    HelloCheck check;
  };

  size_t LaneOf(const std::string& uuid) const {
    for (size_t i = 0; i < gpus_.size(); ++i) {
      if (gpus_[i].uuid == uuid) return i;
    }
    return 0;  // its hello is refused there (no such GPU, or not this lane's)
  }

  // The authorizer thread: one hello at a time, each bounded by the authorizer
  // (the agent's lease refresh gives up after a couple of seconds).
  void AuthorizeLoop() {
    while (true) {
      Pending pending;
      {
        std::unique_lock<std::mutex> lock(hello_mu_);
        // Bounded wait: looks at `stopping_` at least every 100 ms.
        while (!stopping_ && hellos_.empty()) {
          hello_wanted_.wait_for(lock, std::chrono::milliseconds(100));
        }
        if (stopping_) return;
        pending = std::move(hellos_.front());
        hellos_.pop_front();
      }
      HelloCheck& check = pending.check;
      check.authorized = options_.authorize(check.lease_id, check.token, check.gpu_uuid);
      pending.worker->Deliver(std::move(check));
      rpc_->Wake(pending.lane);
    }
  }

  ServerOptions options_;
  ExecutorFactory executors_;  // thread-safe
  std::vector<backend::GpuInfo> gpus_;
  LogLimiter log_;  // thread-safe; warnings
  // Comings and goings of sessions (informational), also rate-limited.
  LogLimiter sessions_log_{std::chrono::seconds(10),
                           [](const std::string& line) { log::Info(line); }};
  std::vector<std::unique_ptr<GpuWorker>> workers_;  // one per GPU (lane)
  std::mutex hello_mu_;
  std::condition_variable hello_wanted_;
  std::condition_variable watchdog_wake_;  // at stop (with hello_mu_)
  std::deque<Pending> hellos_;  // guarded by hello_mu_
  bool stopping_ = false;       // guarded by hello_mu_
  std::thread authorizer_;
  std::thread watchdog_;
  std::unique_ptr<transport::RpcServer> rpc_;
};

void GpuWorker::OnConnect(transport::ConnectionId id, const std::string& peer) {
  sessions_[id] = std::make_unique<Session>(peer, &server_->log());
}

void GpuWorker::OnDisconnect(transport::ConnectionId id, const std::string& reason) {
  auto found = sessions_.find(id);
  if (found == sessions_.end()) return;
  if (!found->second->lease_id().empty()) {
    // One line per session: which process of which lease left, and how, is what an admin
    // looks for (and the clean-close tests check it per process). Only an identical line
    // (same peer address and port) is folded by the limiter.
    const Session& s = *found->second;
    server_->sessions_log().Log("disconnected " + s.peer() + " " + s.lease_id() + " " + s.gpu_uuid() + " " + reason,
                                "client " + s.peer() + " (lease " + s.lease_id() + ", GPU " +
                                    s.gpu_uuid() + ") disconnected: " + reason);
  }
  sessions_.erase(found);  // the executor frees the client's device memory
  CountAttached();
}

void* GpuWorker::BulkDestination(transport::ConnectionId id, const transport::RequestHeader& header,
                                 std::string_view args, size_t len) {
  auto found = sessions_.find(id);
  if (found == sessions_.end()) return nullptr;
  return found->second->BulkDestination(header, args, len);
}

void GpuWorker::OnRequest(transport::ConnectionId id, const transport::RequestHeader& header,
                          std::string_view args, const void* payload, size_t payload_len,
                          transport::ServerReply* reply) {
  auto found = sessions_.find(id);
  if (found == sessions_.end()) {
    reply->status = kCuNotPermitted;
    reply->close_after = true;
    return;
  }
  Session* session = found->second.get();
  if (header.op == kOpHello) {
    Hello(id, session, args, reply);
    return;
  }
  if (session->authorized() && !StillAuthorized(session, server_->Epoch())) {
    Revoke(id, session);
    reply->tick_soon = true;
  }
  const bool watched = session->watched();
  if (watched) busy_since_ns_.store(NowNs());
  session->Run(header, args, payload, payload_len, reply);
  if (watched) {
    busy_since_ns_.store(0);
    progress_.fetch_add(1, std::memory_order_relaxed);
  }
}

void GpuWorker::OnTick(std::vector<std::pair<transport::ConnectionId, std::string>>* close) {
  uint64_t epoch = server_->Epoch();
  if (!server_->options().authorization_epoch || epoch != ticked_epoch_) {
    ticked_epoch_ = epoch;
    for (auto& [id, session] : sessions_) {
      if (session->authorized() && !StillAuthorized(session.get(), epoch)) {
        Revoke(id, session.get());
      }
    }
  }
  CountAttached();
  for (auto& [id, reason] : to_close_) {
    if (sessions_.count(id)) close->emplace_back(id, std::move(reason));
  }
  to_close_.clear();
  server_->log().Flush();
}

void GpuWorker::OnWake(
    std::vector<std::pair<transport::ConnectionId, transport::ServerReply>>* replies) {
  std::vector<HelloCheck> checked;
  {
    std::lock_guard<std::mutex> lock(checked_mu_);
    checked.swap(checked_);
  }
  for (const HelloCheck& check : checked) {
    transport::ServerReply reply;
    FinishHello(check, &reply);
    replies->emplace_back(check.id, std::move(reply));
  }
}

void GpuWorker::CountAttached() {
  size_t attached = 0;
  for (auto& [id, session] : sessions_) attached += session->authorized() ? 1 : 0;
  attached_.store(attached);
}

// Whether `session`'s lease still holds its GPU; checks again only when the
// epoch moved.
bool GpuWorker::StillAuthorized(Session* session, uint64_t epoch) {
  if (server_->options().authorization_epoch && session->checked_epoch() == epoch) return true;
  if (!server_->options().still_authorized(session->lease_id(), session->token(),
                                           session->gpu_uuid())) {
    return false;
  }
  session->set_checked_epoch(epoch);
  return true;
}

// Revokes `session` and has its connection closed at the next tick (which frees
// its memory, once no reply is sending from it).
void GpuWorker::Revoke(transport::ConnectionId id, Session* session, const std::string& why) {
  std::string reason = "lease " + session->lease_id() + " " + why;
  std::string message = "GPU " + session->gpu_uuid() + " revoked: " + reason;
  server_->log().Log("closing " + session->gpu_uuid() + " " + reason,
                     "closing the session of client " + session->peer() + " on GPU " +
                         session->gpu_uuid() + ": " + reason);
  session->Revoke(message);
  to_close_.emplace_back(id, message);
}

void GpuWorker::Refuse(Session* session, int32_t status, const std::string& why,
                       transport::ServerReply* reply) {
  server_->log().Log("refused " + PeerHost(session->peer()) + " " + why,
                     "refused client " + session->peer() + ": " + why);
  reply->status = status;
  reply->out = why;
  reply->close_after = true;
}

// The checks that need nothing slow run here; the credential goes to the
// authorizer thread, and the reply waits (deferred) for its verdict: this GPU's
// other sessions go on.
void GpuWorker::Hello(transport::ConnectionId id, Session* session, std::string_view args,
                      transport::ServerReply* reply) {
  HelloArgs hello;
  if (args.size() != sizeof(hello))
    return Refuse(session, kCuInvalidValue, "malformed hello", reply);
  std::memcpy(&hello, args.data(), sizeof(hello));
  hello.lease_id[sizeof(hello.lease_id) - 1] = '\0';
  hello.token[sizeof(hello.token) - 1] = '\0';
  hello.gpu_uuid[sizeof(hello.gpu_uuid) - 1] = '\0';
  if (hello.protocol_version != kProtocolVersion) {
    return Refuse(session, kCuNotSupported,
                  "protocol version " + std::to_string(hello.protocol_version) +
                      " not supported (server speaks " + std::to_string(kProtocolVersion) + ")",
                  reply);
  }
  if (session->authorized() || session->revoked()) {
    return Refuse(session, kCuNotPermitted, "this connection already said hello", reply);
  }
  std::string uuid = hello.gpu_uuid;
  if (server_->FindGpu(uuid) == nullptr) {
    return Refuse(session, kCuNoDevice, "no GPU " + uuid + " on this host", reply);
  }
  if (gpu_ == nullptr || gpu_->uuid != uuid) {
    // Its sessions would run on another GPU's thread, outside that GPU's
    // revocations.
    return Refuse(session, kCuInvalidValue,
                  "hello names GPU " + uuid + ", but the connection was opened for GPU " +
                      (gpu_ == nullptr ? std::string("(none)") : gpu_->uuid) +
                      " (the GPU named at the transport handshake)",
                  reply);
  }
  HelloCheck check;
  check.id = id;
  check.lease_id = hello.lease_id;
  check.token = hello.token;
  check.gpu_uuid = uuid;
  // The epoch before the check: a change during it makes the next request check
  // again.
  check.epoch = server_->Epoch();
  server_->CheckHello(this, lane_, std::move(check));
  reply->deferred = true;
}

void GpuWorker::FinishHello(const HelloCheck& check, transport::ServerReply* reply) {
  auto found = sessions_.find(check.id);
  if (found == sessions_.end()) return;  // the lane drops the reply of a connection gone
  Session* session = found->second.get();
  if (!check.authorized) {
    return Refuse(
        session, kCuNotPermitted,
        "lease '" + check.lease_id + "' with that token does not hold GPU " + check.gpu_uuid,
        reply);
  }
  auto executor = server_->executors().Create(*gpu_);
  if (!executor.ok()) return Refuse(session, kCuNoDevice, executor.status().message(), reply);
  // The GPU is this lease's now: sessions of any other lease on it (all on this
  // thread) are revoked before this one starts, and closed right after this
  // reply.
  for (auto& [other_id, other] : sessions_) {
    if (other.get() != session && other->authorized() && other->gpu_uuid() == check.gpu_uuid &&
        other->lease_id() != check.lease_id) {
      Revoke(other_id, other.get(), "lost the GPU to lease " + check.lease_id);
      reply->tick_soon = true;
    }
  }
  // The watchdog follows this session's operations when its executor reports progress.
  bool watched = server_->options().hang_timeout.count() > 0 &&
                 executor.value()->SetProgressCounter(&progress_);
  session->Authorize(check.lease_id, check.token, *gpu_, server_->options().backend,
                     std::move(executor.value()), check.epoch);
  session->set_watched(watched);
  session->set_recovery_listener(server_->options().on_recovered);
  CountAttached();
  DeviceDescription description = server_->executors().Describe(*gpu_);
  reply->out.assign(reinterpret_cast<const char*>(&description), sizeof(description));
  server_->sessions_log().Log("attached " + session->peer() + " " + check.gpu_uuid + " " + check.lease_id,
                              "client " + session->peer() + " attached to GPU " + check.gpu_uuid +
                                  " (lease " + check.lease_id + ")");
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  auto server = std::make_unique<ServerImpl>(std::move(options));
  GPUPOOL_RETURN_IF_ERROR(server->Start());
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace gpupool::dataplane

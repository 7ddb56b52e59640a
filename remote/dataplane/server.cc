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
#include <utility>
#include <vector>

#include "common/constant_time.h"
#include "common/log.h"
#include "common/random.h"
#include "remote/dataplane/executor_factory.h"
#include "remote/dataplane/session.h"
#include "remote/protocol/protocol.h"
#include "remote/transport/rpc_client.h"
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

std::string VersionMismatch(uint32_t version) {
  return "protocol version " + std::to_string(version) + " not supported (server speaks " +
         std::to_string(kProtocolVersion) + ")";
}

// The peer's address without its port: repeated refusals of one host are one
// kind.
std::string PeerHost(const std::string& peer) {
  size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

int64_t NowNs();

// A ticket for a handoff or restore streams: 32 random bytes in hex; false with the reason
// in `reply` when the kernel's random source fails.
bool NewTicket(std::string* ticket, transport::ServerReply* reply) {
  auto random = RandomHex(32);
  if (!random.ok()) {
    reply->status = kCuUnknown;
    reply->out = random.status().message();
    return false;
  }
  *ticket = std::move(random.value());
  return true;
}

// What the watchdog reads of one GPU: since when something has run on it without a break
// (0: nothing), and a count that moves with every operation done and every block a kernel
// ran. The session's operations (on the GPU's lane) and restore copies (on restore lanes)
// run at once, so the mark is counted: it is set when the first starts and stays until the
// last ends. A GPU that hangs in one copy after another copy ended is still seen busy.
class GpuWatch {
 public:
  // Where the figures go (the worker's shared page) instead of our own; before any start.
  void Export(std::atomic<int64_t>* busy_since, std::atomic<uint64_t>* progress) {
    busy_since_ = busy_since;
    progress_ = progress;
  }
  void Starts() {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_++ == 0) busy_since_->store(NowNs());
  }
  void Ends() {
    std::lock_guard<std::mutex> lock(mu_);
    progress_->fetch_add(1, std::memory_order_relaxed);
    if (--running_ == 0) busy_since_->store(0);
  }
  int64_t busy_since_ns() const { return busy_since_->load(); }
  uint64_t progress() const { return progress_->load(std::memory_order_relaxed); }
  std::atomic<uint64_t>* progress_counter() { return progress_; }  // kernels' blocks count here

 private:
  std::mutex mu_;
  uint32_t running_ = 0;  // guarded by mu_
  std::atomic<int64_t> own_busy_since_{0};
  std::atomic<uint64_t> own_progress_{0};
  std::atomic<int64_t>* busy_since_ = &own_busy_since_;
  std::atomic<uint64_t>* progress_ = &own_progress_;
};

// A session's offer of its memory to restore streams (protocol.h, kOpRestoreOffer). The
// session's GPU lane ends it (End) before the session runs anything again, is revoked or
// closes; the restore lanes write through `executor` only between Begin and Finish, which
// End waits for. So the executor is used by one side at a time, and never after the
// session freed it.
struct RestoreGrant {
  std::string ticket;
  std::string gpu_uuid;
  device::Executor* executor = nullptr;  // the session's; valid while open or writing
  uint32_t streams = 0;                  // attaches allowed
  // The GPU's watchdog figures (GpuWorker's): a copy on the GPU is watched as the session's
  // own operations are, so that a GPU that hangs in a restore is found hung.
  GpuWatch* watch = nullptr;

  std::mutex mu;
  std::condition_variable idle;
  bool open = true;       // guarded by mu
  uint32_t writing = 0;   // copies under way, their bytes arriving or not; guarded by mu
  uint32_t attached = 0;  // guarded by mu

  bool Begin() {
    std::lock_guard<std::mutex> lock(mu);
    if (!open) return false;
    ++writing;
    return true;
  }
  void Finish() {
    std::lock_guard<std::mutex> lock(mu);
    if (--writing == 0) idle.notify_all();
  }
  // Closes the offer and waits for the copies under way. A copy still waiting for its
  // bytes waits on its client, which holds only its own session here (an agent's worker
  // serves one lease).
  void End() {
    std::unique_lock<std::mutex> lock(mu);
    open = false;
    idle.wait(lock, [this] { return writing == 0; });
  }
};

// Runs every session of one GPU, on that GPU's transport lane (its own thread).
class GpuWorker : public transport::RpcHandler {
 public:
  // `gpu`: nullptr when the host has no GPU (every hello is then refused).
  GpuWorker(ServerImpl* server, size_t lane, const device::GpuInfo* gpu) : server_(server), lane_(lane), gpu_(gpu) {}

  size_t attached() const { return attached_.load(); }

  // For the watchdog (any thread), and for ServerImpl to export before any session.
  GpuWatch& watch() { return watch_; }
  size_t connections() const { return connections_.load(); }
  const device::GpuInfo* gpu() const { return gpu_; }

  // Any thread (the authorizer): a hello's verdict; the lane is woken to finish
  // it.
  void Deliver(HelloCheck check) {
    std::lock_guard<std::mutex> lock(checked_mu_);
    checked_.push_back(std::move(check));
  }

  void OnConnect(transport::ConnectionId id, const std::string& peer) override;
  void OnDisconnect(transport::ConnectionId id, const std::string& reason) override;
  void* BulkDestination(transport::ConnectionId id, const transport::RequestHeader& header, std::string_view args,
                        size_t len) override;
  void OnRequest(transport::ConnectionId id, const transport::RequestHeader& header, std::string_view args,
                 const void* payload, size_t payload_len, transport::ServerReply* reply) override;
  void OnTick(std::vector<std::pair<transport::ConnectionId, std::string>>* close) override;
  void OnWake(std::vector<std::pair<transport::ConnectionId, transport::ServerReply>>* replies) override;

 private:
  void CountAttached();
  bool StillAuthorized(Session* session, uint64_t epoch);
  // `retain`: the session may keep its memory for a handoff (when the GPU is healthy).
  void Revoke(transport::ConnectionId id, Session* session,
              const std::string& why =
                  "no longer holds it (released, expired, or moved to "
                  "another GPU)",
              bool retain = true);
  void Refuse(Session* session, int32_t status, const std::string& why, transport::ServerReply* reply);
  void Hello(transport::ConnectionId id, Session* session, std::string_view args, transport::ServerReply* reply);
  // Handoff (protocol.h): the old GPU's side (Offer, Attach, Serve) and the new one's (Pull).
  bool Healthy() const;
  void HandoffOffer(transport::ConnectionId id, Session* session, transport::ServerReply* reply);
  void HandoffAttach(transport::ConnectionId id, Session* session, std::string_view args,
                     transport::ServerReply* reply);
  void HandoffServe(Session* reader, const transport::RequestHeader& header, std::string_view args,
                    transport::ServerReply* reply);
  void HandoffPull(Session* session, std::string_view args, transport::ServerReply* reply);
  // Closes `id`'s retained session (its memory goes), and forgets its tickets.
  void CloseRetained(transport::ConnectionId id, const std::string& why);
  void FinishHello(const HelloCheck& check, transport::ServerReply* reply);
  // kOpGpuStatus (protocol.h): the session's own GPU, and its own lease's sessions on it.
  void GpuStatus(Session* session, std::string_view args, transport::ServerReply* reply);
  // kOpRestoreOffer (protocol.h): a ticket for restore streams into `session`'s memory.
  void RestoreOffer(transport::ConnectionId id, Session* session, std::string_view args, transport::ServerReply* reply);
  // Ends `id`'s offer to restore streams, if it has one, once their copies under way ended.
  void EndRestore(transport::ConnectionId id);

  ServerImpl* const server_;
  const size_t lane_;
  const device::GpuInfo* const gpu_;
  std::mutex checked_mu_;
  std::vector<HelloCheck> checked_;  // verdicts not yet delivered; guarded by checked_mu_
  // Everything below is used by the lane's thread only.
  std::map<transport::ConnectionId, std::unique_ptr<Session>> sessions_;
  std::vector<std::pair<transport::ConnectionId, std::string>> to_close_;  // revoked
  // Handoff tickets offered, not yet used -> the retained session each reads (a ticket
  // lapses with its session's retention: CloseRetained).
  std::map<std::string, transport::ConnectionId> tickets_;
  // Sessions that offered their memory to restore streams, and their offers.
  std::map<transport::ConnectionId, std::shared_ptr<RestoreGrant>> restoring_;
  uint64_t ticked_epoch_ = 0;
  std::atomic<size_t> attached_{0};     // written by the lane, read by any thread
  std::atomic<size_t> connections_{0};  // written by the lane, read by any thread
  GpuWatch watch_;                      // the session's watched operations here, restore copies on their lanes
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A lane of restore streams for one GPU (protocol.h, kOpRestoreOffer): each connection
// attaches to one session's offer, then copies into that session's memory.
class RestoreLane : public transport::RpcHandler {
 public:
  RestoreLane(ServerImpl* server, const device::GpuInfo* gpu) : server_(server), gpu_(gpu) {}

  void OnConnect(transport::ConnectionId id, const std::string& peer) override { streams_[id].peer = peer; }
  void OnDisconnect(transport::ConnectionId id, const std::string& reason) override;
  void* BulkDestination(transport::ConnectionId id, const transport::RequestHeader& header, std::string_view args,
                        size_t len) override;
  void OnRequest(transport::ConnectionId id, const transport::RequestHeader& header, std::string_view args,
                 const void* payload, size_t payload_len, transport::ServerReply* reply) override;

 private:
  struct Stream {
    std::string peer;
    std::shared_ptr<RestoreGrant> grant;
    bool writing = false;     // between the grant's Begin and Finish
    int32_t async_error = 0;  // of a one-way copy, for the next reply
  };
  void Refuse(Stream* stream, int32_t status, const std::string& why, transport::ServerReply* reply);
  void Attach(Stream* stream, std::string_view args, transport::ServerReply* reply);

  ServerImpl* const server_;
  const device::GpuInfo* const gpu_;
  std::map<transport::ConnectionId, Stream> streams_;  // the lane's thread only
};

class ServerImpl : public Server {
 public:
  explicit ServerImpl(ServerOptions options) : options_(std::move(options)), executors_(options_.backend) {}

  ~ServerImpl() override {
    {
      std::lock_guard<std::mutex> lock(hello_mu_);
      stopping_ = true;
    }
    hello_wanted_.notify_all();
    watchdog_wake_.notify_all();
    if (authorizer_.joinable()) authorizer_.join();  // after its current check, if any
    if (watchdog_.joinable()) watchdog_.join();
    rpc_.reset();  // stops the GPU threads before the sessions go
  }

  Status Start() {
    if (options_.backend == nullptr) return Status::InvalidArgument("dataplane: no backend");
    if (!options_.authorize) return Status::InvalidArgument("dataplane: no authorizer");
    if (!options_.still_authorized) options_.still_authorized = options_.authorize;
    gpus_ = options_.backend->Discover();
    std::vector<transport::RpcHandler*> lanes;
    for (size_t i = 0; i < std::max<size_t>(gpus_.size(), 1); ++i) {
      workers_.push_back(std::make_unique<GpuWorker>(this, i, i < gpus_.size() ? &gpus_[i] : nullptr));
      lanes.push_back(workers_.back().get());
    }
    if (options_.restore_streams > kMaxRestoreStreams) {
      return Status::InvalidArgument("dataplane: at most " + std::to_string(kMaxRestoreStreams) +
                                     " restore streams per GPU");
    }
    for (const device::GpuInfo& gpu : gpus_) {
      for (uint32_t i = 0; i < options_.restore_streams; ++i) {
        restore_lanes_.push_back(std::make_unique<RestoreLane>(this, &gpu));
        lanes.push_back(restore_lanes_.back().get());
      }
    }
    if (options_.progress != nullptr && options_.busy_since_ns != nullptr && !workers_.empty()) {
      workers_[0]->watch().Export(options_.busy_since_ns, options_.progress);
    }
    auto pick = [this](const std::string& uuid) { return LaneOf(uuid); };
    auto log = [this](const std::string& key, const std::string& line) { log_.Log("transport " + key, line); };
    auto rpc = options_.listen.empty() ? transport::RpcServer::StartWithoutListening(lanes, pick, log)
                                       : transport::RpcServer::Start(options_.listen, lanes, pick, log);
    if (!rpc.ok()) return rpc.status();
    rpc_ = std::move(rpc.value());
    // Started once rpc_ is set (it wakes lanes through it); hellos that came
    // sooner wait.
    authorizer_ = std::thread([this] { AuthorizeLoop(); });
    if (options_.hang_timeout.count() > 0) watchdog_ = std::thread([this] { WatchLoop(); });
    return Status::OK();
  }

  int port() const override { return rpc_->port(); }
  void Adopt(transport::Handshaken client) override { rpc_->Adopt(std::move(client)); }
  size_t connections() const override {
    size_t open = 0;
    for (const auto& worker : workers_) open += worker->connections();
    return open;
  }
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
        int64_t since = worker.watch().busy_since_ns();
        uint64_t progress = worker.watch().progress();
        if (since == 0 || since != watch.since || progress != watch.progress) {
          watch = Watch{since, progress, now, since == watch.since && watch.reported};
          continue;
        }
        if (watch.reported || worker.gpu() == nullptr || now - watch.last_change < limit) continue;
        watch.reported = true;
        char seconds[32];
        std::snprintf(seconds, sizeof(seconds), "%.1f", static_cast<double>(limit) / 1e9);
        std::string why = std::string("no progress for ") + seconds + " s: the GPU hangs (agent watchdog)";
        log_.Log("hung " + worker.gpu()->uuid, "GPU " + worker.gpu()->uuid + " reported FAILED: " + why);
        options_.backend->ReportFailure(worker.gpu()->index, why);
      }
    }
  }

  const ServerOptions& options() const { return options_; }
  ExecutorFactory& executors() { return executors_; }
  LogLimiter& log() { return log_; }
  LogLimiter& sessions_log() { return sessions_log_; }
  const device::GpuInfo* FindGpu(const std::string& uuid) const {
    for (const auto& gpu : gpus_) {
      if (gpu.uuid == uuid) return &gpu;
    }
    return nullptr;
  }
  uint64_t Epoch() const { return options_.authorization_epoch ? options_.authorization_epoch() : 0; }

  // Restore offers by ticket (any lane's thread).
  void AddRestoreGrant(const std::shared_ptr<RestoreGrant>& grant) {
    std::lock_guard<std::mutex> lock(restore_mu_);
    restore_grants_[grant->ticket] = grant;
  }
  void RemoveRestoreGrant(const std::string& ticket) {
    std::lock_guard<std::mutex> lock(restore_mu_);
    restore_grants_.erase(ticket);
  }
  // The open offer with `ticket` for GPU `gpu_uuid`, counted as attached once more; nullptr
  // with *why when there is none or it took all its streams.
  std::shared_ptr<RestoreGrant> AttachRestore(const std::string& ticket, const std::string& gpu_uuid,
                                              std::string* why) {
    std::shared_ptr<RestoreGrant> grant;
    {
      std::lock_guard<std::mutex> lock(restore_mu_);
      for (const auto& [offered, candidate] : restore_grants_) {
        if (EqualInConstantTime(offered, ticket)) grant = candidate;
      }
    }
    if (grant == nullptr || grant->gpu_uuid != gpu_uuid) {
      *why = "no such restore ticket for this GPU (wrong, or its offer ended)";
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(grant->mu);
    if (!grant->open) {
      *why = "the restore offer ended (its session ran another request, or was revoked or closed)";
      return nullptr;
    }
    if (grant->attached >= grant->streams) {
      *why = "the restore offer has all its " + std::to_string(grant->streams) + " streams";
      return nullptr;
    }
    ++grant->attached;
    return grant;
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

  // A GPU's lane, or for "<uuid>#restore" the next of its restore lanes (after the GPUs').
  size_t LaneOf(const std::string& key) const {
    bool restore = false;
    const std::string uuid = GpuOfLaneKey(key, &restore);
    for (size_t i = 0; i < gpus_.size(); ++i) {
      if (gpus_[i].uuid != uuid) continue;
      if (!restore) return i;
      if (options_.restore_streams == 0) break;
      const size_t next = next_restore_lane_.fetch_add(1, std::memory_order_relaxed) % options_.restore_streams;
      return gpus_.size() + i * options_.restore_streams + next;
    }
    // Lane 0: a hello is refused there (no such GPU, or not this lane's), as is a restore
    // stream's attach (it is no restore lane).
    return 0;
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
  std::vector<device::GpuInfo> gpus_;
  LogLimiter log_;  // thread-safe; warnings
  // Comings and goings of sessions (informational), also rate-limited.
  LogLimiter sessions_log_{std::chrono::seconds(10), [](const std::string& line) { log::Info(line); }};
  std::vector<std::unique_ptr<GpuWorker>> workers_;          // one per GPU (lane)
  std::vector<std::unique_ptr<RestoreLane>> restore_lanes_;  // restore_streams per GPU, after them
  mutable std::atomic<size_t> next_restore_lane_{0};
  std::mutex restore_mu_;
  std::map<std::string, std::shared_ptr<RestoreGrant>> restore_grants_;  // by ticket; guarded by restore_mu_
  std::mutex hello_mu_;
  std::condition_variable hello_wanted_;
  std::condition_variable watchdog_wake_;  // at stop (with hello_mu_)
  std::deque<Pending> hellos_;             // guarded by hello_mu_
  bool stopping_ = false;                  // guarded by hello_mu_
  std::thread authorizer_;
  std::thread watchdog_;
  std::unique_ptr<transport::RpcServer> rpc_;
};

void GpuWorker::OnConnect(transport::ConnectionId id, const std::string& peer) {
  sessions_[id] = std::make_unique<Session>(peer, &server_->log());
  connections_.store(sessions_.size());
}

void GpuWorker::OnDisconnect(transport::ConnectionId id, const std::string& reason) {
  EndRestore(id);  // before the executor, and the memory the streams write, goes
  auto found = sessions_.find(id);
  if (found == sessions_.end()) return;
  if (!found->second->lease_id().empty()) {
    // One line per session: which process of which lease left, and how, is what an admin
    // looks for (and the clean-close tests check it per process). Only an identical line
    // (same peer address and port) is folded by the limiter.
    const Session& s = *found->second;
    server_->sessions_log().Log(
        "disconnected " + s.peer() + " " + s.lease_id() + " " + s.gpu_uuid() + " " + reason,
        "client " + s.peer() + " (lease " + s.lease_id() + ", GPU " + s.gpu_uuid() + ") disconnected: " + reason);
  }
  sessions_.erase(found);  // the executor frees the client's device memory
  connections_.store(sessions_.size());
  CountAttached();
}

void* GpuWorker::BulkDestination(transport::ConnectionId id, const transport::RequestHeader& header,
                                 std::string_view args, size_t len) {
  EndRestore(id);  // the request writes the session's memory: the restore streams are done
  auto found = sessions_.find(id);
  if (found == sessions_.end()) return nullptr;
  return found->second->BulkDestination(header, args, len);
}

void GpuWorker::OnRequest(transport::ConnectionId id, const transport::RequestHeader& header, std::string_view args,
                          const void* payload, size_t payload_len, transport::ServerReply* reply) {
  auto found = sessions_.find(id);
  if (found == sessions_.end()) {
    reply->status = kCuNotPermitted;
    reply->close_after = true;
    return;
  }
  EndRestore(id);  // whatever the request is, the session runs it alone
  Session* session = found->second.get();
  if (header.op == kOpHello) {
    Hello(id, session, args, reply);
    return;
  }
  if (header.op == kOpHandoffAttach) return HandoffAttach(id, session, args, reply);
  if (session->handoff_of() != 0) return HandoffServe(session, header, args, reply);
  if (session->authorized() && !StillAuthorized(session, server_->Epoch())) {
    Revoke(id, session);
    reply->tick_soon = true;
  }
  if (header.op == kOpHandoffOffer) return HandoffOffer(id, session, reply);
  if (header.op == kOpRestoreOffer) return RestoreOffer(id, session, args, reply);
  if (header.op == kOpGpuStatus) return GpuStatus(session, args, reply);
  if (header.op == kOpHandoffPull && session->authorized()) {
    HandoffPull(session, args, reply);
    session->set_last_run_seq(header.seq);
    return;
  }
  const bool ran = session->authorized();
  const bool watched = session->watched();
  if (watched) watch_.Starts();
  session->Run(header, args, payload, payload_len, reply);
  if (watched) watch_.Ends();
  if (ran) session->set_last_run_seq(header.seq);
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
  const int64_t now = NowNs();
  for (auto& [id, session] : sessions_) {
    if (session->retained() && now > session->retained_until_ns()) {
      CloseRetained(id, "its memory was kept for a handoff that did not come");
    }
  }
  CountAttached();
  for (auto& [id, reason] : to_close_) {
    if (sessions_.count(id)) close->emplace_back(id, std::move(reason));
  }
  to_close_.clear();
  server_->log().Flush();
}

void GpuWorker::OnWake(std::vector<std::pair<transport::ConnectionId, transport::ServerReply>>* replies) {
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
  if (!server_->options().still_authorized(session->lease_id(), session->token(), session->gpu_uuid())) {
    return false;
  }
  session->set_checked_epoch(epoch);
  return true;
}

// Revokes `session` and has its connection closed at the next tick (which frees
// its memory, once no reply is sending from it).
void GpuWorker::Revoke(transport::ConnectionId id, Session* session, const std::string& why, bool retain) {
  EndRestore(id);  // the lease no longer holds the GPU: no stream writes more
  std::string reason = "lease " + session->lease_id() + " " + why;
  std::string message = "GPU " + session->gpu_uuid() + " revoked: " + reason;
  server_->log().Log(
      "closing " + session->gpu_uuid() + " " + reason,
      "closing the session of client " + session->peer() + " on GPU " + session->gpu_uuid() + ": " + reason);
  // A lease moved off a healthy GPU (a drain, gpupoolctl migrate): the memory stays for a
  // handoff. Not when the GPU went to another lease: its kernels could reach it.
  const auto window = server_->options().handoff_window;
  if (window.count() > 0 && retain && Healthy()) {
    session->Revoke(message + "; its memory is kept for a handoff to the lease's new GPU",
                    NowNs() + std::chrono::nanoseconds(window).count());
    return;
  }
  session->Revoke(message);
  to_close_.emplace_back(id, message);
}

void GpuWorker::CloseRetained(transport::ConnectionId id, const std::string& why) {
  auto found = sessions_.find(id);
  if (found == sessions_.end()) return;
  found->second->set_retained_until_ns(0);
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    it = it->second == id ? tickets_.erase(it) : std::next(it);
  }
  to_close_.emplace_back(
      id, "GPU " + found->second->gpu_uuid() + " session of lease " + found->second->lease_id() + " closed: " + why);
}

bool GpuWorker::Healthy() const {
  if (gpu_ == nullptr) return false;
  if (server_->options().gpu_failed && server_->options().gpu_failed(gpu_->uuid)) return false;
  device::GpuBackend* backend = server_->options().backend;
  return backend->Health(gpu_->index).health == device::Health::kOk &&
         backend->CurrentFault(gpu_->index).mode == device::FaultMode::kNone;
}

void GpuWorker::Refuse(Session* session, int32_t status, const std::string& why, transport::ServerReply* reply) {
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
  if (args.size() != sizeof(hello)) return Refuse(session, kCuInvalidValue, "malformed hello", reply);
  std::memcpy(&hello, args.data(), sizeof(hello));
  hello.lease_id[sizeof(hello.lease_id) - 1] = '\0';
  hello.token[sizeof(hello.token) - 1] = '\0';
  hello.gpu_uuid[sizeof(hello.gpu_uuid) - 1] = '\0';
  if (hello.protocol_version != kProtocolVersion) {
    return Refuse(session, kCuNotSupported, VersionMismatch(hello.protocol_version), reply);
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
  hello.client_host[sizeof(hello.client_host) - 1] = '\0';
  std::string client_host = hello.client_host;
  for (char& c : client_host) {
    if (c < 0x21 || c > 0x7e) c = '?';  // shown back in tables and logs: printable only
  }
  if ((hello.flags & ~kHelloMonitorOnly) != 0 || hello.reserved != 0) {
    return Refuse(session, kCuInvalidValue, "malformed hello: unknown flags", reply);
  }
  session->set_client(hello.client_pid, std::move(client_host), (hello.flags & kHelloMonitorOnly) != 0);
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
    return Refuse(session, kCuNotPermitted,
                  "lease '" + check.lease_id + "' with that token does not hold GPU " + check.gpu_uuid, reply);
  }
  auto executor = server_->executors().Create(*gpu_);
  if (!executor.ok()) return Refuse(session, kCuNoDevice, executor.status().message(), reply);
  // The GPU is this lease's now: sessions of any other lease on it (all on this
  // thread) are revoked before this one starts, and closed right after this
  // reply.
  for (auto& [other_id, other] : sessions_) {
    if (other.get() != session && other->authorized() && other->gpu_uuid() == check.gpu_uuid &&
        other->lease_id() != check.lease_id) {
      Revoke(other_id, other.get(), "lost the GPU to lease " + check.lease_id, false);
      reply->tick_soon = true;
    } else if (other->retained() && other->lease_id() != check.lease_id) {
      CloseRetained(other_id, "the GPU went to lease " + check.lease_id);
      reply->tick_soon = true;
    }
  }
  // The watchdog follows this session's operations when its executor reports progress.
  bool watched = (server_->options().hang_timeout.count() > 0 || server_->options().progress != nullptr) &&
                 executor.value()->SetProgressCounter(watch_.progress_counter());
  session->Authorize(check.lease_id, check.token, *gpu_, server_->options().backend, std::move(executor.value()),
                     check.epoch);
  session->set_watched(watched);
  session->set_recovery_listener(server_->options().on_recovered);
  CountAttached();
  DeviceDescription description = server_->executors().Describe(*gpu_);
  // The total the program sees (cuDeviceTotalMem, totalGlobalMem) is the one its
  // cuMemGetInfo says: the executor's. NVML counts more than a CUDA driver hands out
  // (81559 MiB against 81079 MiB on an H100 with driver 580).
  uint64_t free_bytes = 0, total_bytes = 0;
  session->executor()->MemoryInfo(&free_bytes, &total_bytes);
  if (total_bytes > 0) description.total_memory = total_bytes;
  reply->out.assign(reinterpret_cast<const char*>(&description), sizeof(description));
  server_->sessions_log().Log(
      "attached " + session->peer() + " " + check.gpu_uuid + " " + check.lease_id,
      "client " + session->peer() + " attached to GPU " + check.gpu_uuid + " (lease " + check.lease_id + ")");
}

// Only an attached session asks, about its own GPU (this lane's); the processes are the
// sessions of its own lease here. A worker process serves one lease, but a test server's
// lane may hold several leases' connections: the lease is compared all the same.
void GpuWorker::GpuStatus(Session* session, std::string_view args, transport::ServerReply* reply) {
  GpuStatusArgs request;
  if (args.size() != sizeof(request)) {
    reply->status = kCuInvalidValue;
    reply->out = "malformed GPU status request: " + std::to_string(args.size()) + " bytes, expected " +
                 std::to_string(sizeof(request));
    return;
  }
  std::memcpy(&request, args.data(), sizeof(request));
  if (request.reserved != 0 || request.max_processes > kMaxGpuProcesses) {
    reply->status = kCuInvalidValue;
    reply->out = request.reserved != 0 ? std::string("malformed GPU status request: reserved bits set")
                                       : "GPU status request for " + std::to_string(request.max_processes) +
                                             " processes: at most " + std::to_string(kMaxGpuProcesses);
    return;
  }
  if (!session->authorized() || gpu_ == nullptr || session->gpu_uuid() != gpu_->uuid) {
    reply->status = kCuNotPermitted;
    reply->out = session->revoked() ? "this session's lease no longer holds the GPU"
                                    : "only a session attached to its GPU may ask for that GPU's status";
    return;
  }
  const device::GpuActivity activity = server_->executors().Activity(*gpu_);
  GpuStatusResult result;
  if (activity.has_utilization) {
    result.reported |= kGpuStatusUtilization;
    result.gpu_percent = std::min<uint32_t>(activity.gpu_percent, 100);
    result.memory_percent = std::min<uint32_t>(activity.memory_percent, 100);
    result.sample_period_ms = activity.sample_period_ms;
  }
  if (activity.has_temperature) {
    result.reported |= kGpuStatusTemperature;
    result.temperature_c = activity.temperature_c;
  }
  if (activity.has_power) {
    result.reported |= kGpuStatusPower;
    result.power_mw = activity.power_mw;
  }
  if (!activity.driver_version.empty()) {
    result.reported |= kGpuStatusDriverVersion;
    std::snprintf(result.driver_version, sizeof(result.driver_version), "%s", activity.driver_version.c_str());
  }
  result.cuda_driver_version = activity.cuda_driver_version;
  std::snprintf(result.why_not, sizeof(result.why_not), "%s", activity.why_not.c_str());
  std::vector<GpuProcess> processes;
  for (const auto& [other_id, other] : sessions_) {
    if (!other->authorized() || other->monitor_only() || other->lease_id() != session->lease_id() ||
        other->gpu_uuid() != session->gpu_uuid()) {
      continue;
    }
    if (result.process_count == UINT32_MAX) break;
    ++result.process_count;
    if (processes.size() >= request.max_processes) continue;
    GpuProcess process;
    process.pid = other->client_pid();
    uint64_t held = 0;
    for (const auto& [start, size] : other->executor()->Ranges()) {
      held = size > UINT64_MAX - held ? UINT64_MAX : held + size;  // saturates, never wraps
    }
    process.used_bytes = held;
    std::snprintf(process.host, sizeof(process.host), "%s", other->client_host().c_str());
    processes.push_back(process);
  }
  reply->out.assign(reinterpret_cast<const char*>(&result), sizeof(result));
  reply->out.append(reinterpret_cast<const char*>(processes.data()),
                    processes.size() * sizeof(GpuProcess));  // at most kMaxGpuProcesses
}

// The old GPU's side: the client of a retained session asks for a ticket. The session's
// work is finished first, so that what the new agent reads is what the client's requests
// up to last_seq made.
void GpuWorker::HandoffOffer(transport::ConnectionId id, Session* session, transport::ServerReply* reply) {
  if (!session->retained() || session->offered()) {
    reply->status = kCuNotPermitted;
    reply->out = session->retained() ? "this session has offered its memory already"
                                     : "only a session whose lease moved away from a healthy GPU may offer its "
                                       "memory for a handoff";
    return;
  }
  if (!Healthy()) {
    reply->status = kCuEccUncorrectable;
    reply->out = "GPU " + session->gpu_uuid() + " is not healthy: its memory is not handed off";
    CloseRetained(id, "its GPU failed before the handoff");
    reply->tick_soon = true;
    return;
  }
  device::Executor* executor = session->executor();
  int32_t status = executor->SynchronizeStream(0);
  if (status != kCuSuccess) {
    reply->status = status;
    reply->out = "the session's work failed (CUDA error " + std::to_string(status) + "): its memory is not handed off";
    CloseRetained(id, "its work failed before the handoff");
    reply->tick_soon = true;
    return;
  }
  std::string ticket;
  if (!NewTicket(&ticket, reply)) return;
  session->set_offered();
  const int64_t until = NowNs() + std::chrono::nanoseconds(server_->options().handoff_window).count();
  session->set_retained_until_ns(until);
  tickets_[ticket] = id;
  if (server_->options().on_ticket) server_->options().on_ticket(ticket);
  HandoffOfferResult result{};
  std::snprintf(result.ticket, sizeof(result.ticket), "%s", ticket.c_str());
  result.last_seq = session->last_run_seq();
  reply->out.assign(reinterpret_cast<const char*>(&result), sizeof(result));
  reply->out += executor->TakeOutput();  // printf text of work the client has not seen yet
  server_->sessions_log().Log("offered " + session->peer() + " " + session->lease_id(),
                              "client " + session->peer() + " (lease " + session->lease_id() +
                                  ") offered its memory on GPU " + session->gpu_uuid() + " for a handoff");
}

// The old GPU's side: another agent attaches with a ticket. Compared in constant time, so
// that the answer's timing tells nothing about a ticket; used up by this attach.
void GpuWorker::HandoffAttach(transport::ConnectionId id, Session* session, std::string_view args,
                              transport::ServerReply* reply) {
  HandoffAttachArgs attach;
  if (args.size() != sizeof(attach)) {
    return Refuse(session, kCuInvalidValue, "malformed handoff attach", reply);
  }
  std::memcpy(&attach, args.data(), sizeof(attach));
  attach.gpu_uuid[sizeof(attach.gpu_uuid) - 1] = '\0';
  attach.ticket[sizeof(attach.ticket) - 1] = '\0';
  if (attach.protocol_version != kProtocolVersion) {
    return Refuse(session, kCuNotSupported, VersionMismatch(attach.protocol_version), reply);
  }
  if (session->authorized() || session->revoked() || session->handoff_of() != 0) {
    return Refuse(session, kCuNotPermitted, "a handoff attach must be the first request of a connection", reply);
  }
  const std::string offered(attach.ticket, strnlen(attach.ticket, sizeof(attach.ticket)));
  auto match = tickets_.end();
  for (auto it = tickets_.begin(); it != tickets_.end(); ++it) {
    if (EqualInConstantTime(it->first, offered)) match = it;
  }
  if (match == tickets_.end()) {
    return Refuse(session, kCuNotPermitted, "no such handoff ticket on this GPU (wrong, used, or expired)", reply);
  }
  const transport::ConnectionId offering = match->second;
  tickets_.erase(match);
  auto found = sessions_.find(offering);
  if (found == sessions_.end() || !found->second->retained() || NowNs() > found->second->retained_until_ns() ||
      (gpu_ != nullptr && gpu_->uuid != attach.gpu_uuid)) {
    return Refuse(session, kCuNotPermitted, "the offered session is gone", reply);
  }
  session->set_handoff_of(offering);
  server_->sessions_log().Log("handoff " + session->peer() + " " + found->second->lease_id(),
                              "agent " + session->peer() + " attached to read the memory lease " +
                                  found->second->lease_id() + " offered on GPU " + found->second->gpu_uuid());
}

// The old GPU's side: what an attached agent may do, reads of the offered session's ranges
// (the executor checks them against the session's allocations) and the end.
void GpuWorker::HandoffServe(Session* reader, const transport::RequestHeader& header, std::string_view args,
                             transport::ServerReply* reply) {
  auto found = sessions_.find(reader->handoff_of());
  if (found == sessions_.end() || !found->second->retained()) {
    reader->set_handoff_of(0);
    return Refuse(reader, kCuNotPermitted, "the offered session is gone", reply);
  }
  Session* offered = found->second.get();
  if (header.op == kOpHandoffRead) {
    HandoffReadArgs read;
    if (args.size() != sizeof(read)) {
      return Refuse(reader, kCuInvalidValue, "malformed handoff read", reply);
    }
    std::memcpy(&read, args.data(), sizeof(read));
    const void* data = nullptr;
    int32_t status = offered->executor()->CopyFromDevice(read.src, read.size, 0, &data);
    reply->status = status;
    if (status == kCuSuccess) {
      // The reply goes out after this returns, and the offered session may be closed
      // before it has (its client gone, its window over): the bytes are the reader's own.
      std::vector<char>& bytes = reader->reply_bytes();
      bytes.assign(static_cast<const char*>(data), static_cast<const char*>(data) + read.size);
      reply->bulk = bytes.data();
      reply->bulk_len = read.size;
    }
    return;
  }
  if (header.op == kOpHandoffDone) {
    CloseRetained(found->first, "its memory was handed off to another GPU");
    reader->set_handoff_of(0);
    reply->close_after = true;
    reply->tick_soon = true;
    return;
  }
  reader->set_handoff_of(0);
  Refuse(reader, kCuNotPermitted, "a handoff connection may only read the offered memory and end the handoff", reply);
}

// The new GPU's side: copies every range of `session` from the session offered on the old
// GPU, straight into this GPU's memory (the sim: received in place). Runs on this GPU's
// thread (its other sessions are the same lease's), bounded by a deadline.
void GpuWorker::HandoffPull(Session* session, std::string_view args, transport::ServerReply* reply) {
  HandoffPullArgs pull;
  if (args.size() != sizeof(pull)) {
    reply->status = kCuInvalidValue;
    reply->out = "malformed handoff pull";
    return;
  }
  std::memcpy(&pull, args.data(), sizeof(pull));
  pull.endpoint[sizeof(pull.endpoint) - 1] = '\0';
  pull.gpu_uuid[sizeof(pull.gpu_uuid) - 1] = '\0';
  pull.ticket[sizeof(pull.ticket) - 1] = '\0';
  auto fail = [&](const std::string& why) {
    reply->status = kCuInvalidValue;
    reply->out = "handoff from GPU " + std::string(pull.gpu_uuid) + " at " + pull.endpoint + " failed: " + why;
    server_->log().Log("handoff " + session->lease_id() + " " + why.substr(0, 60),
                       "client " + session->peer() + " (lease " + session->lease_id() + "): " + reply->out);
  };
  // The agent connects only where gpupoold says the lease moved from: a client cannot
  // point it at another host.
  if (server_->options().handoff_source) {
    const std::string source = server_->options().handoff_source(session->gpu_uuid());
    if (source != pull.endpoint) {
      reply->status = kCuNotPermitted;
      reply->out = "handoff from " + std::string(pull.endpoint) + " refused: " +
                   (source.empty() ? std::string("gpupoold names no GPU this lease moved from")
                                   : "the lease moved here from " + source);
      return;
    }
  }
  device::Executor* executor = session->executor();
  const auto ranges = executor->Ranges();
  uint64_t total = 0;
  for (const auto& [start, size] : ranges) total += size;
  // Generous for any fabric: 30 s, and a second per 100 MiB.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30) + std::chrono::seconds(total / (100 << 20));
  transport::RpcClient::Credential credential;
  credential.ticket = pull.ticket;  // the old agent routes the attach by it (bootstrap.h)
  auto connected = transport::RpcClient::Connect(pull.endpoint, pull.gpu_uuid, credential);
  if (!connected.ok()) return fail(connected.status().message());
  std::unique_ptr<transport::RpcClient> old = std::move(connected.value());
  old->SetAbandonCheck([deadline]() -> std::string {
    return std::chrono::steady_clock::now() > deadline ? "the handoff took too long" : "";
  });
  auto call = [&](uint32_t op, const void* call_args, size_t len, void* into, size_t capacity, std::string* why) {
    transport::Reply answer;
    Status sent = old->Call({op, call_args, len, nullptr, 0, into, capacity}, &answer);
    if (!sent.ok()) {
      *why = sent.message();
      return false;
    }
    if (answer.status != kCuSuccess) {
      *why = "CUDA error " + std::to_string(answer.status) + (answer.out.empty() ? std::string() : ": " + answer.out);
      return false;
    }
    if (into != nullptr && answer.bulk_received != capacity) {
      *why = "a read came back short";
      return false;
    }
    return true;
  };
  const auto pull_started = std::chrono::steady_clock::now();
  std::string why;
  HandoffAttachArgs attach;
  std::snprintf(attach.gpu_uuid, sizeof(attach.gpu_uuid), "%s", pull.gpu_uuid);
  std::memcpy(attach.ticket, pull.ticket, sizeof(attach.ticket));
  if (!call(kOpHandoffAttach, &attach, sizeof(attach), nullptr, 0, &why)) return fail(why);
  // Reads of at most kChunk: the old agent copies each read's bytes into a buffer of its
  // own before its reply (HandoffServe), so a whole 1 GiB range read at once cost it 1 GiB
  // of fresh memory, faulted in and filled before the first byte went out.
  constexpr uint64_t kChunk = uint64_t{16} << 20;
  std::vector<char> staging;  // where memory is not the host's
  for (const auto& [start, size] : ranges) {
    if (char* view = static_cast<char*>(executor->ReceiveView(start, size)); view != nullptr) {
      // Received in place; the executor may make the range ready meanwhile (ReceiveView),
      // and CopyToDevice of the view itself says the bytes are there.
      bool read_all = true;
      for (uint64_t done = 0; done < size && read_all;) {
        const uint64_t take = std::min(kChunk, size - done);
        HandoffReadArgs read{start + done, take};
        read_all = call(kOpHandoffRead, &read, sizeof(read), view + done, take, &why);
        done += take;
      }
      const int32_t status = executor->CopyToDevice(start, view, size, 0);  // after a failed read too
      if (!read_all) return fail(why);
      if (status != kCuSuccess) return fail("writing to this GPU gave CUDA error " + std::to_string(status));
      continue;
    }
    for (uint64_t done = 0; done < size;) {
      const uint64_t take = std::min(kChunk, size - done);
      staging.resize(take);
      HandoffReadArgs read{start + done, take};
      if (!call(kOpHandoffRead, &read, sizeof(read), staging.data(), take, &why)) return fail(why);
      if (int32_t status = executor->CopyToDevice(start + done, staging.data(), take, 0); status != kCuSuccess) {
        return fail("writing to this GPU gave CUDA error " + std::to_string(status));
      }
      done += take;
    }
  }
  if (int32_t status = executor->SynchronizeStream(0); status != kCuSuccess) {
    return fail("writing to this GPU gave CUDA error " + std::to_string(status));
  }
  if (!call(kOpHandoffDone, nullptr, 0, nullptr, 0, &why)) return fail(why);
  HandoffPullResult result{total, ranges.size()};
  reply->out.assign(reinterpret_cast<const char*>(&result), sizeof(result));
  // The time says whether a slow move was the fabric or something else (the client's own
  // view includes its replay and journal).
  const auto pull_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - pull_started).count();
  server_->sessions_log().Log("pulled " + session->peer() + " " + session->lease_id(),
                              "client " + session->peer() + " (lease " + session->lease_id() +
                                  "): " + std::to_string(total) + " bytes in " + std::to_string(ranges.size()) +
                                  " range(s) handed off from GPU " + pull.gpu_uuid + " agent to agent in " +
                                  std::to_string(pull_ms) + " ms");
}

void GpuWorker::RestoreOffer(transport::ConnectionId id, Session* session, std::string_view args,
                             transport::ServerReply* reply) {
  const uint32_t streams = server_->options().restore_streams;
  if (!args.empty()) {
    reply->status = kCuInvalidValue;
    reply->out = "a restore offer takes no arguments (" + std::to_string(args.size()) + " bytes given)";
    return;
  }
  auto refuse = [reply](int32_t status, const char* why) {
    reply->status = status;
    reply->out = why;
  };
  if (!session->authorized()) return refuse(kCuNotPermitted, "restore streams need an attached session");
  if (session->sticky_error() != 0) return refuse(session->sticky_error(), "the session's context is unusable");
  if (streams == 0) return refuse(kCuNotSupported, "this agent takes no restore streams");
  auto grant = std::make_shared<RestoreGrant>();
  if (!NewTicket(&grant->ticket, reply)) return;
  grant->gpu_uuid = session->gpu_uuid();
  grant->executor = session->executor();
  grant->streams = streams;
  grant->watch = &watch_;
  server_->AddRestoreGrant(grant);
  restoring_[id] = grant;
  RestoreOfferResult result{};
  std::snprintf(result.ticket, sizeof(result.ticket), "%s", grant->ticket.c_str());
  result.streams = streams;
  reply->out.assign(reinterpret_cast<const char*>(&result), sizeof(result));
}

void GpuWorker::EndRestore(transport::ConnectionId id) {
  auto found = restoring_.find(id);
  if (found == restoring_.end()) return;
  std::shared_ptr<RestoreGrant> grant = std::move(found->second);
  restoring_.erase(found);
  server_->RemoveRestoreGrant(grant->ticket);
  grant->End();
}

void RestoreLane::Refuse(Stream* stream, int32_t status, const std::string& why, transport::ServerReply* reply) {
  server_->log().Log("restore refused " + PeerHost(stream->peer) + " " + why,
                     "refused restore stream " + stream->peer + " for GPU " + gpu_->uuid + ": " + why);
  reply->status = status;
  reply->out = why;
  reply->close_after = true;
}

void RestoreLane::Attach(Stream* stream, std::string_view args, transport::ServerReply* reply) {
  RestoreAttachArgs attach;
  if (stream->grant != nullptr) return Refuse(stream, kCuInvalidValue, "a restore stream attaches once", reply);
  if (args.size() != sizeof(attach)) {
    return Refuse(stream, kCuInvalidValue,
                  "a restore attach of " + std::to_string(args.size()) + " bytes (" + std::to_string(sizeof(attach)) +
                      " expected)",
                  reply);
  }
  std::memcpy(&attach, args.data(), sizeof(attach));
  if (attach.protocol_version != kProtocolVersion) {
    return Refuse(stream, kCuInvalidValue, VersionMismatch(attach.protocol_version), reply);
  }
  attach.ticket[sizeof(attach.ticket) - 1] = '\0';
  std::string why;
  stream->grant = server_->AttachRestore(attach.ticket, gpu_->uuid, &why);
  if (stream->grant == nullptr) return Refuse(stream, kCuNotPermitted, why, reply);
}

// Copy arguments a restore stream may send: its size, on stream 0 (the restore's order is
// the session's, which runs nothing meanwhile).
static bool RestoreCopy(const transport::RequestHeader& header, std::string_view args, size_t len,
                        MemcpyHtoDArgs* copy) {
  if (header.op != kOpMemcpyHtoD || args.size() != sizeof(*copy)) return false;
  std::memcpy(copy, args.data(), sizeof(*copy));
  return copy->size == len && copy->stream == 0;
}

void* RestoreLane::BulkDestination(transport::ConnectionId id, const transport::RequestHeader& header,
                                   std::string_view args, size_t len) {
  auto found = streams_.find(id);
  if (found == streams_.end()) return nullptr;
  Stream& stream = found->second;
  MemcpyHtoDArgs copy{};
  if (stream.grant == nullptr || stream.writing || !RestoreCopy(header, args, len, &copy)) return nullptr;
  if (!stream.grant->Begin()) return nullptr;  // OnRequest refuses it
  stream.writing = true;
  // The session's memory, received in place (the sim), or nullptr: a buffer of the server's,
  // copied from in OnRequest (a range not the session's is refused there).
  return stream.grant->executor->ReceiveView(copy.dst, copy.size);
}

void RestoreLane::OnRequest(transport::ConnectionId id, const transport::RequestHeader& header, std::string_view args,
                            const void* payload, size_t payload_len, transport::ServerReply* reply) {
  auto found = streams_.find(id);
  if (found == streams_.end()) {
    reply->status = kCuNotPermitted;
    reply->close_after = true;
    return;
  }
  Stream& stream = found->second;
  if (header.op == kOpRestoreAttach) return Attach(&stream, args, reply);
  MemcpyHtoDArgs copy{};
  if (stream.grant == nullptr || !RestoreCopy(header, args, payload_len, &copy)) {
    if (stream.writing) stream.grant->Finish();
    stream.writing = false;
    return Refuse(
        &stream, kCuNotPermitted,
        stream.grant == nullptr
            ? "a restore stream's first request attaches it with a ticket (kOpRestoreAttach)"
            : "a restore stream only copies to the device, on stream 0 (request " + std::to_string(header.op) + ")",
        reply);
  }
  if (!stream.writing && !stream.grant->Begin()) {
    return Refuse(&stream, kCuNotPermitted,
                  "the restore offer ended (its session ran another request, or was revoked or closed)", reply);
  }
  stream.writing = true;
  int32_t status = kCuSuccess;
  stream.grant->watch->Starts();
  if (Status usable = server_->options().backend->BeforeOperation(gpu_->index); !usable.ok()) {
    status = kCuEccUncorrectable;  // the session's next request finds it, and reports it
  } else {
    status = stream.grant->executor->CopyToDevice(copy.dst, payload, copy.size, 0);
  }
  stream.grant->watch->Ends();
  stream.grant->Finish();
  stream.writing = false;
  if (header.flags & transport::kFlagOneWay) {
    if (status != kCuSuccess && stream.async_error == kCuSuccess) stream.async_error = status;
    return;
  }
  reply->status = status;
  reply->async_status = std::exchange(stream.async_error, kCuSuccess);
}

void RestoreLane::OnDisconnect(transport::ConnectionId id, const std::string& reason) {
  auto found = streams_.find(id);
  if (found == streams_.end()) return;
  if (found->second.writing) found->second.grant->Finish();  // its receive ended with it
  streams_.erase(found);
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  auto server = std::make_unique<ServerImpl>(std::move(options));
  GPUPOOL_RETURN_IF_ERROR(server->Start());
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace gpupool::dataplane

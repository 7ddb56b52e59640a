#include "remote/dataplane/server.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "remote/dataplane/executor_factory.h"
#include "remote/dataplane/protocol.h"
#include "remote/dataplane/session.h"
#include "remote/transport/rpc_server.h"

namespace gpupool::dataplane {

Server::~Server() = default;

namespace {

class ServerImpl : public Server, public transport::RpcHandler {
 public:
  explicit ServerImpl(ServerOptions options)
      : options_(std::move(options)), executors_(options_.backend) {}

  ~ServerImpl() override {
    rpc_.reset();  // stops the server thread before the sessions go
  }

  Status Start() {
    if (options_.backend == nullptr) return Status::InvalidArgument("dataplane: no backend");
    if (!options_.authorize) return Status::InvalidArgument("dataplane: no authorizer");
    if (!options_.still_authorized) options_.still_authorized = options_.authorize;
    gpus_ = options_.backend->Discover();
    auto rpc = transport::RpcServer::Start(options_.listen, this);
    if (!rpc.ok()) return rpc.status();
    rpc_ = std::move(rpc.value());
    return Status::OK();
  }

  int port() const override { return rpc_->port(); }
  size_t attached_sessions() const override { return attached_.load(); }

  void OnConnect(transport::ConnectionId id, const std::string& peer) override {
    sessions_[id] = std::make_unique<Session>(peer, &log_);
  }

  void OnDisconnect(transport::ConnectionId id, const std::string& reason) override {
    auto found = sessions_.find(id);
    if (found == sessions_.end()) return;
    if (!found->second->lease_id().empty()) {
      std::fprintf(stderr, "gpupool-dataplane: client %s (lease %s, GPU %s) disconnected: %s\n",
                   found->second->peer().c_str(), found->second->lease_id().c_str(),
                   found->second->gpu_uuid().c_str(), reason.c_str());
    }
    sessions_.erase(found);  // the executor frees the client's device memory
    CountAttached();
  }

  void* BulkDestination(transport::ConnectionId id, const transport::RequestHeader& header,
                        std::string_view args, size_t len) override {
    auto found = sessions_.find(id);
    if (found == sessions_.end()) return nullptr;
    return found->second->BulkDestination(header, args, len);
  }

  void OnRequest(transport::ConnectionId id, const transport::RequestHeader& header,
                 std::string_view args, const void* payload, size_t payload_len,
                 transport::ServerReply* reply) override {
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
    if (session->authorized() && !StillAuthorized(session, Epoch())) {
      Revoke(id, session);
      reply->tick_soon = true;
    }
    session->Run(header, args, payload, payload_len, reply);
  }

  void OnTick(std::vector<std::pair<transport::ConnectionId, std::string>>* close) override {
    uint64_t epoch = Epoch();
    if (!options_.authorization_epoch || epoch != ticked_epoch_) {
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
    log_.Flush();
  }

 private:
  void CountAttached() {
    size_t attached = 0;
    for (auto& [id, session] : sessions_) attached += session->authorized() ? 1 : 0;
    attached_.store(attached);
  }

  uint64_t Epoch() const {
    return options_.authorization_epoch ? options_.authorization_epoch() : 0;
  }

  // Whether `session`'s lease still holds its GPU; checks again only when the epoch moved.
  bool StillAuthorized(Session* session, uint64_t epoch) {
    if (options_.authorization_epoch && session->checked_epoch() == epoch) return true;
    if (!options_.still_authorized(session->lease_id(), session->token(), session->gpu_uuid())) {
      return false;
    }
    session->set_checked_epoch(epoch);
    return true;
  }

  // Revokes `session` and has its connection closed at the next tick (which frees its
  // memory, once no reply is sending from it).
  void Revoke(transport::ConnectionId id, Session* session,
              const std::string& why = "no longer holds it (released, expired, or moved to "
                                       "another GPU)") {
    std::string reason = "lease " + session->lease_id() + " " + why;
    std::string message = "GPU " + session->gpu_uuid() + " revoked: " + reason;
    std::fprintf(stderr, "gpupool-dataplane: closing the session of client %s on GPU %s: %s\n",
                 session->peer().c_str(), session->gpu_uuid().c_str(), reason.c_str());
    session->Revoke(message);
    to_close_.emplace_back(id, message);
  }

  // The peer's address without its port: repeated refusals of one host are one kind.
  static std::string PeerHost(const std::string& peer) {
    size_t colon = peer.rfind(':');
    return colon == std::string::npos ? peer : peer.substr(0, colon);
  }

  void Hello(transport::ConnectionId id, Session* session, std::string_view args,
             transport::ServerReply* reply) {
    auto refuse = [&](int32_t status, const std::string& why) {
      log_.Log("refused " + PeerHost(session->peer()) + " " + why,
               "gpupool-dataplane: refused client " + session->peer() + ": " + why);
      reply->status = status;
      reply->out = why;
      reply->close_after = true;
    };
    HelloArgs hello;
    if (args.size() != sizeof(hello)) return refuse(kCuInvalidValue, "malformed hello");
    std::memcpy(&hello, args.data(), sizeof(hello));
    hello.lease_id[sizeof(hello.lease_id) - 1] = '\0';
    hello.token[sizeof(hello.token) - 1] = '\0';
    hello.gpu_uuid[sizeof(hello.gpu_uuid) - 1] = '\0';
    if (hello.protocol_version != kProtocolVersion) {
      return refuse(kCuNotSupported, "protocol version " +
                                         std::to_string(hello.protocol_version) +
                                         " not supported (server speaks " +
                                         std::to_string(kProtocolVersion) + ")");
    }
    if (session->authorized() || session->revoked()) {
      return refuse(kCuNotPermitted, "this connection already said hello");
    }
    std::string uuid = hello.gpu_uuid;
    const backend::GpuInfo* gpu = nullptr;
    for (const auto& candidate : gpus_) {
      if (candidate.uuid == uuid) gpu = &candidate;
    }
    if (gpu == nullptr) return refuse(kCuNoDevice, "no GPU " + uuid + " on this host");
    // The epoch before the check: a change during it makes the next request check again.
    uint64_t epoch = Epoch();
    if (!options_.authorize(hello.lease_id, hello.token, uuid)) {
      return refuse(kCuNotPermitted, "lease '" + std::string(hello.lease_id) +
                                         "' with that token does not hold GPU " + uuid);
    }
    auto executor = executors_.Create(*gpu);
    if (!executor.ok()) return refuse(kCuNoDevice, executor.status().message());
    // The GPU is this lease's now: sessions of any other lease on it are revoked before
    // this one starts, and closed right after this reply.
    for (auto& [other_id, other] : sessions_) {
      if (other.get() != session && other->authorized() && other->gpu_uuid() == uuid &&
          other->lease_id() != hello.lease_id) {
        Revoke(other_id, other.get(),
               "lost the GPU to lease " + std::string(hello.lease_id));
        reply->tick_soon = true;
      }
    }
    session->Authorize(hello.lease_id, hello.token, *gpu, options_.backend,
                       std::move(executor.value()), epoch);
    CountAttached();
    DeviceDescription description = executors_.Describe(*gpu);
    reply->out.assign(reinterpret_cast<const char*>(&description), sizeof(description));
    std::fprintf(stderr, "gpupool-dataplane: client %s attached to GPU %s (lease %s)\n",
                 session->peer().c_str(), uuid.c_str(), hello.lease_id);
  }

  ServerOptions options_;
  ExecutorFactory executors_;
  std::vector<backend::GpuInfo> gpus_;
  // Everything below is used by the server thread only.
  LogLimiter log_;
  std::map<transport::ConnectionId, std::unique_ptr<Session>> sessions_;
  std::vector<std::pair<transport::ConnectionId, std::string>> to_close_;  // revoked
  uint64_t ticked_epoch_ = 0;
  std::atomic<size_t> attached_{0};  // written by the server thread, read by any
  std::unique_ptr<transport::RpcServer> rpc_;
};

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  auto server = std::make_unique<ServerImpl>(std::move(options));
  GPUPOOL_RETURN_IF_ERROR(server->Start());
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace gpupool::dataplane

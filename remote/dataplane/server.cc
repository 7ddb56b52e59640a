#include "remote/dataplane/server.h"

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
    gpus_ = options_.backend->Discover();
    auto rpc = transport::RpcServer::Start(options_.listen, this);
    if (!rpc.ok()) return rpc.status();
    rpc_ = std::move(rpc.value());
    return Status::OK();
  }

  int port() const override { return rpc_->port(); }

  void OnConnect(transport::ConnectionId id, const std::string& peer) override {
    sessions_[id] = std::make_unique<Session>(peer);
  }

  void OnDisconnect(transport::ConnectionId id, const std::string& reason) override {
    auto found = sessions_.find(id);
    if (found == sessions_.end()) return;
    if (found->second->authorized()) {
      std::fprintf(stderr, "gpupool-dataplane: client %s (lease %s, GPU %s) disconnected: %s\n",
                   found->second->peer().c_str(), found->second->lease_id().c_str(),
                   found->second->gpu_uuid().c_str(), reason.c_str());
    }
    sessions_.erase(found);  // the executor frees the client's device memory
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
      Hello(session, args, reply);
      return;
    }
    session->Run(header, args, payload, payload_len, reply);
  }

 private:
  void Hello(Session* session, std::string_view args, transport::ServerReply* reply) {
    auto refuse = [&](int32_t status, const std::string& why) {
      std::fprintf(stderr, "gpupool-dataplane: refused client %s: %s\n",
                   session->peer().c_str(), why.c_str());
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
    std::string uuid = hello.gpu_uuid;
    const backend::GpuInfo* gpu = nullptr;
    for (const auto& candidate : gpus_) {
      if (candidate.uuid == uuid) gpu = &candidate;
    }
    if (gpu == nullptr) return refuse(kCuNoDevice, "no GPU " + uuid + " on this host");
    if (!options_.authorize(hello.lease_id, hello.token, uuid)) {
      return refuse(kCuNotPermitted, "lease '" + std::string(hello.lease_id) +
                                         "' with that token does not hold GPU " + uuid);
    }
    auto executor = executors_.Create(*gpu);
    if (!executor.ok()) return refuse(kCuNoDevice, executor.status().message());
    session->Authorize(hello.lease_id, *gpu, options_.backend, std::move(executor.value()));
    DeviceDescription description = executors_.Describe(*gpu);
    reply->out.assign(reinterpret_cast<const char*>(&description), sizeof(description));
    std::fprintf(stderr, "gpupool-dataplane: client %s attached to GPU %s (lease %s)\n",
                 session->peer().c_str(), uuid.c_str(), hello.lease_id);
  }

  ServerOptions options_;
  ExecutorFactory executors_;
  std::vector<backend::GpuInfo> gpus_;
  std::map<transport::ConnectionId, std::unique_ptr<Session>> sessions_;  // server thread only
  std::unique_ptr<transport::RpcServer> rpc_;
};

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  auto server = std::make_unique<ServerImpl>(std::move(options));
  GPUPOOL_RETURN_IF_ERROR(server->Start());
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace gpupool::dataplane

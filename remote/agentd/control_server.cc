#include "remote/agentd/control_server.h"

#include <httplib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/json_fields.h"
#include "common/log.h"
#include "remote/agentd/options.h"

namespace gpupool::agentd {
namespace {

int ErrorAnswer(const Status& s, nlohmann::json* answer) {
  *answer = {{"error", s.message()}};
  return s.HttpCode();
}

// Strips the brackets httplib may leave around IPv6 peers.
bool PeerIsLoopback(std::string addr) {
  if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']') addr = addr.substr(1, addr.size() - 2);
  if (addr.rfind("::ffff:", 0) == 0) addr = addr.substr(7);  // v4-mapped
  return IsLoopbackHost(addr);
}

}  // namespace

struct ControlServer::Impl {
  ControlServerOptions options;
  httplib::Server http;
  std::thread thread;
  int port = 0;
};

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int ControlServer::port() const { return impl_->port; }

nlohmann::json ControlServer::GpuView(const device::GpuInfo& info) const {
  device::GpuBackend* b = impl_->options.backend;
  device::HealthState h = b->Health(info.index);
  device::Fault f = b->CurrentFault(info.index);
  nlohmann::json fault = {{"mode", device::FaultModeName(f.mode)}};
  if (f.mode == device::FaultMode::kFailAfter) fault["ops"] = f.ops;
  if (f.mode == device::FaultMode::kFail || f.mode == device::FaultMode::kFailAfter) fault["reason"] = f.reason;
  nlohmann::json view = {{"index", info.index},
                         {"uuid", info.uuid},
                         {"model", info.model},
                         {"memory_mib", info.memory_bytes / (1024 * 1024)},
                         {"pci_bus_id", info.pci_bus_id},
                         {"numa_node", info.numa_node},
                         {"health", device::HealthName(h.health)},
                         {"reason", h.reason},
                         {"fault", fault},
                         {"operations", b->OperationCount(info.index)},
                         {"lease", ""}};
  LeaseGrant grant;
  if (impl_->options.leases != nullptr && impl_->options.leases->Find(info.uuid, &grant)) {
    view["lease"] = grant.lease_id;  // never the token
    view["generation"] = grant.generation;
  }
  return view;
}

int ControlServer::HandleGetGpus(nlohmann::json* answer) const {
  nlohmann::json gpus = nlohmann::json::array();
  for (const device::GpuInfo& info : impl_->options.backend->Discover()) gpus.push_back(GpuView(info));
  *answer = {{"host", impl_->options.host},
             {"backend", impl_->options.backend->name()},
             {"registered", impl_->options.agent != nullptr && impl_->options.agent->registered()},
             {"gpus", gpus}};
  return 200;
}

int ControlServer::HandlePostFault(const std::string& body, nlohmann::json* answer) const {
  Result<nlohmann::json> req = json_fields::Parse(body);
  if (!req.ok()) return ErrorAnswer(req.status(), answer);
  Status s = json_fields::CheckObject(req.value(), {"index", "mode", "ops", "reason"});
  if (!s.ok()) return ErrorAnswer(s, answer);
  int64_t index = 0;
  std::string mode_name, reason;
  if (!(s = json_fields::GetInt(req.value(), "index", true, 0, 1 << 20, &index)).ok()) return ErrorAnswer(s, answer);
  if (!(s = json_fields::GetString(req.value(), "mode", true, &mode_name)).ok()) return ErrorAnswer(s, answer);
  if (!(s = json_fields::GetString(req.value(), "reason", false, &reason)).ok()) return ErrorAnswer(s, answer);
  Result<device::FaultMode> mode = device::ParseFaultMode(mode_name);
  if (!mode.ok()) return ErrorAnswer(Status::InvalidArgument("field 'mode': " + mode.status().message()), answer);
  device::Fault fault;
  fault.mode = mode.value();
  fault.reason = reason;
  bool has_ops = req->contains("ops");
  if (fault.mode == device::FaultMode::kFailAfter) {
    int64_t ops = 0;
    if (!(s = json_fields::GetInt(req.value(), "ops", true, 0, INT64_MAX, &ops)).ok()) return ErrorAnswer(s, answer);
    fault.ops = static_cast<uint64_t>(ops);
  } else if (has_ops) {
    return ErrorAnswer(Status::InvalidArgument("field 'ops' is only for mode fail_after"), answer);
  }
  if (!reason.empty() && fault.mode != device::FaultMode::kFail && fault.mode != device::FaultMode::kFailAfter) {
    return ErrorAnswer(Status::InvalidArgument("field 'reason' is only for modes fail and fail_after"), answer);
  }
  std::vector<device::GpuInfo> gpus = impl_->options.backend->Discover();
  if (index >= static_cast<int64_t>(gpus.size())) {
    return ErrorAnswer(Status::NotFound("no GPU with index " + std::to_string(index) + " (this host has " +
                                        std::to_string(gpus.size()) + ")"),
                       answer);
  }
  s = impl_->options.backend->InjectFault(static_cast<int>(index), fault);
  if (!s.ok()) return ErrorAnswer(s, answer);
  log::Info("control API: GPU " + std::to_string(index) + " fault set to " + device::FaultModeName(fault.mode) +
            (fault.mode == device::FaultMode::kFailAfter ? "=" + std::to_string(fault.ops) : "") +
            (reason.empty() ? "" : " (" + reason + ")"));
  *answer = {{"gpu", GpuView(gpus[index])}};
  return 200;
}

Result<std::unique_ptr<ControlServer>> ControlServer::Start(ControlServerOptions options) {
  if (options.backend == nullptr || !options.authorize) {
    return Status::Internal("control server needs a backend and an authorizer");
  }
  Result<HostPort> hp = ParseHostPort(options.listen, /*allow_zero=*/true);
  if (!hp.ok()) return Status::InvalidArgument("control address " + hp.status().message());
  if (!IsLoopbackHost(hp->host)) {
    return Status::InvalidArgument("control address '" + options.listen + "' is not a loopback address");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  std::unique_ptr<ControlServer> server(new ControlServer(std::move(impl)));
  Impl* p = server->impl_.get();
  ControlServer* self = server.get();

  p->http.set_payload_max_length(p->options.max_request_bytes);
  p->http.set_keep_alive_timeout(2);  // bounds how long stopping waits for idle clients
  // Every request: loopback peer, then credential; nothing runs before both pass.
  p->http.set_pre_routing_handler([p](const httplib::Request& req, httplib::Response& res) {
    Status s;
    if (!PeerIsLoopback(req.remote_addr)) {
      s = Status::PermissionDenied("the control API answers loopback clients only");
    } else {
      s = p->options.authorize(req.get_header_value("Authorization"));
    }
    if (s.ok()) return httplib::Server::HandlerResponse::Unhandled;
    res.status = s.HttpCode();
    res.set_content(nlohmann::json{{"error", s.message()}}.dump() + "\n", "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  auto reply = [](httplib::Response& res, int code, const nlohmann::json& answer) {
    res.status = code;
    res.set_content(answer.dump() + "\n", "application/json");
  };
  p->http.Get("/v1/gpus", [self, reply](const httplib::Request&, httplib::Response& res) {
    nlohmann::json answer;
    int code = self->HandleGetGpus(&answer);
    reply(res, code, answer);
  });
  p->http.Post("/v1/faults", [self, reply](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json answer;
    int code = self->HandlePostFault(req.body, &answer);
    reply(res, code, answer);
  });
  p->http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = res.status == 404   ? "no such endpoint " + req.method + " " + req.path
                          : res.status == 413 ? "request larger than the limit"
                                              : "HTTP " + std::to_string(res.status);
    res.set_content(nlohmann::json{{"error", message}}.dump() + "\n", "application/json");
  });

  std::string host = hp->host == "localhost" ? "127.0.0.1" : hp->host;
  if (hp->port == 0) {
    p->port = p->http.bind_to_any_port(host.c_str());
  } else {
    p->port = p->http.bind_to_port(host.c_str(), hp->port) ? hp->port : -1;
  }
  if (p->port <= 0) {
    return Status::Unavailable("cannot listen on control address '" + p->options.listen + "': " + std::strerror(errno));
  }
  p->thread = std::thread([p] { p->http.listen_after_bind(); });
  // Until the thread runs its accept loop, httplib's stop() does nothing, and a destructor
  // right after Start (the agent failing at its next step) would wait on accept for ever.
  for (int waited = 0; !p->http.is_running() && waited < 5000; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return server;
}

}  // namespace gpupool::agentd

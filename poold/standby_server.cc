#include "poold/standby_server.h"

#include <httplib.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

namespace gpupool::poold {

using nlohmann::json;

StandbyServer::StandbyServer(std::string my_url, std::function<std::string()> leader_url)
    : my_url_(std::move(my_url)), leader_url_(std::move(leader_url)), http_(std::make_unique<httplib::Server>()) {
  http_->new_task_queue = [] { return new httplib::ThreadPool(4); };
  http_->set_keep_alive_max_count(1);  // a client sent elsewhere should not keep this connection
  http_->Get("/v1/ping", [this](const httplib::Request&, httplib::Response& res) {
    std::string leader = leader_url_();
    res.set_content(json{{"ok", true}, {"role", "follower"}, {"leader", leader}, {"url", my_url_}}.dump(),
                    "application/json");
  });
  http_->Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("# TYPE gpupool_leader gauge\ngpupool_leader 0\n", "text/plain; version=0.0.4");
  });
  auto redirect = [this](const httplib::Request&, httplib::Response& res) {
    std::string leader = leader_url_();
    std::string where = leader.empty() ? "no leader is elected yet" : "the leader is at " + leader;
    res.status = 503;
    json body = {{"error", "gpupoold at " + my_url_ + " is a follower; " + where}, {"retry", true}};
    if (!leader.empty() && leader != my_url_) body["leader"] = leader;
    res.set_content(body.dump(), "application/json");
  };
  http_->Get(".*", redirect);
  http_->Post(".*", redirect);
}

StandbyServer::~StandbyServer() = default;

Status StandbyServer::Bind(const std::string& listen) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("bad listen address '" + listen + "'");
  std::string host = listen.substr(0, colon);
  int port = 0;
  try {
    port = std::stoi(listen.substr(colon + 1));
  } catch (...) {
    return Status::InvalidArgument("bad port in listen address '" + listen + "'");
  }
  if (port == 0) {
    port_ = http_->bind_to_any_port(host);
    if (port_ < 0) return Status::Unavailable("cannot listen on " + listen);
  } else {
    if (!http_->bind_to_port(host, port)) return Status::Unavailable("cannot listen on " + listen + " (address in use?)");
    port_ = port;
  }
  return Status::OK();
}

void StandbyServer::Serve() {
  if (serving_.exchange(true)) return;  // Stop() came first and closed the socket
  http_->listen_after_bind();
}

void StandbyServer::Stop() {
  stop_requested_ = true;
  if (!serving_.exchange(true)) {
    // Serve() has not begun and now never will, but the port is bound and listening: a
    // replica elected at once (before Serve) would otherwise leave it open beside the
    // leader's API (both with SO_REUSEPORT), and the kernel would hand it connections that
    // nobody accepts. httplib closes its socket only from a running loop: run one to close.
    std::thread loop([this] { http_->listen_after_bind(); });
    for (int i = 0; i < 1000 && !http_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    http_->stop();
    loop.join();
    return;
  }
  for (int i = 0; i < 1000 && !http_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  http_->stop();
}

}  // namespace gpupool::poold

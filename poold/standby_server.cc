#include "poold/standby_server.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

namespace gpupool::poold {

using nlohmann::json;

StandbyServer::StandbyServer(std::string my_url, std::function<std::string()> leader_url)
    : my_url_(std::move(my_url)), leader_url_(std::move(leader_url)), http_(std::make_unique<HttpServer>(Limits())) {
  http_->Handle("GET", "/v1/ping", [this](const httplib::Request&, httplib::Response& res) {
    std::string leader = leader_url_();
    res.set_content(json{{"ok", true}, {"role", "follower"}, {"leader", leader}, {"url", my_url_}}.dump(),
                    "application/json");
  });
  http_->Handle("GET", "/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("# TYPE gpupool_leader gauge\ngpupool_leader 0\n", "text/plain; version=0.0.4");
  });
  // Every other path and method is the leader's: the server's own 404 and 405 become the
  // redirect. Its 400, 411 and 413 (a malformed request) stay what they are.
  http_->SetErrorHandler([this](const httplib::Request&, httplib::Response& res) {
    if (res.status != 404 && res.status != 405) return;
    std::string leader = leader_url_();
    std::string where = leader.empty() ? "no leader is elected yet" : "the leader is at " + leader;
    res.status = 503;
    json body = {{"error", "gpupoold at " + my_url_ + " is a follower; " + where}, {"retry", true}};
    if (!leader.empty() && leader != my_url_) body["leader"] = leader;
    res.set_content(body.dump(), "application/json");
  });
}

StandbyServer::~StandbyServer() = default;

// A follower answers little, and only small requests: a few workers, small bodies.
HttpLimits StandbyServer::Limits() {
  HttpLimits limits;
  limits.workers = 4;
  limits.priority_workers = 0;
  return limits;
}

Status StandbyServer::Bind(const std::string& listen) {
  GPUPOOL_RETURN_IF_ERROR(http_->Bind(listen));
  port_ = http_->port();
  return Status::OK();
}

void StandbyServer::Serve() { http_->Serve(); }

void StandbyServer::Stop() { http_->Stop(); }

}  // namespace gpupool::poold

// StandbyServer: what a follower replica answers (`state = "etcd"`, not the leader).
//
// Every API request gets 503 with the leader's URL, so that clients (common/api_client)
// go there: {"error": "gpupoold at URL is a follower; the leader is at URL2", "leader":
// "URL2", "retry": true}. /v1/ping answers 200 with {"role": "follower", "leader": ...};
// /metrics says gpupool_leader 0. Nobody needs to authenticate: nothing is revealed
// beyond where the leader is, which every client's configuration already lists.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "poold/http_server.h"

namespace gpupool::poold {

class StandbyServer {
 public:
  // `leader_url` answers the current leader's URL ("" while none is known).
  StandbyServer(std::string my_url, std::function<std::string()> leader_url);
  ~StandbyServer();

  Status Bind(const std::string& listen);  // "host:port"; port 0 picks one
  void Serve();                            // until Stop()
  void Stop();
  int port() const { return port_; }

 private:
  const std::string my_url_;
  std::function<std::string()> leader_url_;
  static HttpLimits Limits();

  std::unique_ptr<HttpServer> http_;
  int port_ = 0;
};

}  // namespace gpupool::poold

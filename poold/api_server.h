// ApiServer: gpupoold's HTTP+JSON API (docs/api.md) over the PoolEngine.
//
// Each request is authenticated (MUNGE), its body checked strictly, handed to the engine,
// and answered only once the change is durable. Served by HttpServer: requests are read
// whole by one event loop under deadlines, then run on `threads` workers; agents' register
// and heartbeat on workers of their own (see http_server.h).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/auth.h"
#include "common/config.h"
#include "common/status.h"
#include "poold/http_server.h"
#include "poold/metrics.h"
#include "poold/pool_engine.h"
#include "poold/sessions.h"
#include "poold/store.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace gpupool::poold {

class ApiServer {
 public:
  ApiServer(const Config& config, PoolEngine* engine, Store* store);
  ~ApiServer();

  // Binds the listen address (`listen`, else gpupoold.listen); returns an error naming it
  // when it cannot.
  Status Bind(const std::string& listen = "");
  // Serves until Stop(). Blocks. Stop() may come first, from any thread: Serve() then
  // returns at once instead of serving forever.
  void Serve();
  void Stop();
  int port() const { return port_; }
  // Whether the server was too busy to hear agents in time within the last `seconds`
  // (HttpServer::Stalled): no host is declared UNREACHABLE for silence then.
  bool Stalled(int seconds) const { return http_->Stalled(seconds); }

 private:
  struct Context;
  void Route();
  // Authenticates `req` (MUNGE credential or session token); fills *caller. Returns the
  // error to answer otherwise.
  Status Authenticate(const httplib::Request& req, Caller* caller);
  // A MUNGE credential only (for POST /v1/session).
  Status AuthenticateMunge(const httplib::Request& req, Caller* caller);
  // `inline_write`: the request's own InlineWrite, which writes its change here when it
  // was served alone.
  void Answer(httplib::Response& res, const Result<nlohmann::json>& result, int ok_code = 200,
              Store::InlineWrite* inline_write = nullptr);
  static nlohmann::json StateNotSaved(const Status& failure);
  std::string Metrics();

  const Config config_;
  PoolEngine* const engine_;
  Store* const store_;
  std::string munge_socket_;
  auth::RolePolicy roles_;
  RequestMetrics metrics_;
  Sessions sessions_;
  std::unique_ptr<HttpServer> http_;
  int port_ = 0;
};

}  // namespace gpupool::poold

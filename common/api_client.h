// ApiClient: calls gpupoold's HTTP+JSON API (docs/api.md) with a MUNGE credential.
//
// Used by gpupoolctl, gpupool-agentd, spank_gpupool and the capacity publisher. One
// client keeps one keep-alive connection; it is not thread-safe (use one per thread).
// Never throws: errors come back as Status with the server's one-line message, or a
// message naming the unreachable address.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace gpupool {

struct ApiClientOptions {
  // "http://host:port" or "host:port"; replicas comma separated. A follower's redirect is
  // followed only to one of these.
  std::string server = "http://127.0.0.1:6830";
  int timeout_ms = 5000;     // connect + read timeout per call
  std::string munge_socket;  // empty: libmunge's default (or $MUNGE_SOCKET if set)
  bool authenticate = true;  // false only for /v1/ping and /metrics
  // Authenticate once with MUNGE (POST /v1/session) and send the session token after
  // that, instead of a fresh credential per request. The token is renewed on expiry.
  bool use_session = true;
};

class ApiClient {
 public:
  explicit ApiClient(ApiClientOptions options);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // GET/POST `path` (e.g. "/v1/leases?job=42"). On a 2xx answer returns the parsed JSON
  // body; otherwise a Status whose code follows the HTTP code and whose message is the
  // server's "error" text. Transport failures are Unavailable("cannot reach gpupoold at
  // ...: ...").
  Result<nlohmann::json> Get(const std::string& path);
  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body);

  const ApiClientOptions& options() const { return options_; }

 private:
  struct Impl;
  ApiClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool

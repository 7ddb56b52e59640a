#include "common/api_client.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "common/auth.h"
#include "common/http_connection.h"

namespace gpupool {
namespace {

struct HostPort {
  std::string host;
  int port = 0;
};

// "http://h:p", "h:p" → HostPort; InvalidArgument naming the text otherwise.
Result<HostPort> ParseServer(const std::string& server) {
  std::string s = server;
  const std::string scheme = "http://";
  if (s.rfind(scheme, 0) == 0) s = s.substr(scheme.size());
  while (!s.empty() && s.back() == '/') s.pop_back();
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    return Status::InvalidArgument("bad server address '" + server + "' (expected http://HOST:PORT)");
  }
  HostPort hp;
  hp.host = s.substr(0, colon);
  try {
    size_t used = 0;
    hp.port = std::stoi(s.substr(colon + 1), &used);
    if (used != s.size() - colon - 1 || hp.port <= 0 || hp.port > 65535) throw 0;
  } catch (...) {
    return Status::InvalidArgument("bad port in server address '" + server + "'");
  }
  return hp;
}

}  // namespace

struct ApiClient::Impl {
  Status parse_status;
  std::vector<std::string> urls;  // "http://host:port", as configured
  std::vector<HostPort> servers;  // parsed urls
  size_t current = 0;             // the server requests go to
  int timeout_ms = 5000;
  std::unique_ptr<HttpConnection> http;
  std::string munge_socket;
  std::string session_token;  // empty: none yet (a session belongs to one server)

  void Connect(size_t index) {
    current = index;
    session_token.clear();
    // Among replicas, one that hangs (a paused process, a machine gone silent) must not take
    // a call's whole timeout: each attempt gets a third of it, so the next one is tried.
    int ms = servers.size() > 1 ? std::max(500, timeout_ms / 3) : timeout_ms;
    http = std::make_unique<HttpConnection>(servers[index].host, servers[index].port, ms);
  }

  // One request to the current server and its answer (status and body), or why there is none.
  Result<std::pair<int, std::string>> SendOnce(const ApiClientOptions& options, const std::string& method,
                                               const std::string& path, const std::string* body);
  // SendOnce, following the leader among replicas (see api_client.h).
  Result<std::pair<int, std::string>> Send(const ApiClientOptions& options, const std::string& method,
                                           const std::string& path, const std::string* body);

 private:
  // The Authorization header's value: a session token (opened first if need be) or a fresh
  // MUNGE credential. When gpupoold does not open a session, *refused holds its answer (or
  // the transport's failure).
  Result<std::string> Authorization(const ApiClientOptions& options, HttpReply* refused);
};

ApiClient::ApiClient(ApiClientOptions options) : options_(std::move(options)), impl_(new Impl) {
  impl_->munge_socket = auth::ResolveMungeSocket(options_.munge_socket);
  impl_->timeout_ms = options_.timeout_ms;
  // "URL[,URL...]": the replicas of gpupoold, in the order to try them.
  std::string list = options_.server;
  for (size_t begin = 0; begin <= list.size();) {
    size_t comma = list.find(',', begin);
    if (comma == std::string::npos) comma = list.size();
    std::string one = list.substr(begin, comma - begin);
    begin = comma + 1;
    Result<HostPort> hp = ParseServer(one);
    if (!hp.ok()) {
      impl_->parse_status = hp.status();
      return;
    }
    impl_->servers.push_back(hp.value());
    impl_->urls.push_back(one);
  }
  impl_->Connect(0);
}

ApiClient::~ApiClient() = default;

namespace {

Result<std::string> MungeAuthorization(const std::string& munge_socket) {
  Result<std::string> cred = auth::EncodeCredential(munge_socket);
  if (!cred.ok()) return cred.status();
  return "MUNGE " + cred.value();
}

Status TransportError(const std::string& server, const HttpReply& reply) {
  std::string why;
  switch (reply.failure) {
    case HttpFailure::kConnection:
    case HttpFailure::kConnectionTimeout:
      why = "cannot connect: " + reply.detail;
      break;
    case HttpFailure::kWrite:
      why = "cannot send the request: " + reply.detail;
      break;
    case HttpFailure::kRead:
      why = "no answer: " + reply.detail;
      break;
    case HttpFailure::kBadAnswer:
      why = "bad answer: " + reply.detail;
      break;
    case HttpFailure::kBadRequest:
    case HttpFailure::kNone:
      why = reply.detail;
      break;
  }
  return Status::Unavailable("cannot reach gpupoold at " + server + ": " + why);
}

Result<nlohmann::json> ParseAnswer(int status, const std::string& text) {
  nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  bool is_json = !body.is_discarded();
  if (status >= 200 && status < 300) {
    if (!is_json) return Status::Internal("gpupoold sent a reply that is not JSON");
    return body;
  }
  std::string message = "HTTP " + std::to_string(status);
  if (is_json && body.is_object() && body.contains("error") && body["error"].is_string()) {
    message = body["error"].get<std::string>();
  }
  return Status::FromHttp(status, message);
}

}  // namespace

Result<std::string> ApiClient::Impl::Authorization(const ApiClientOptions& options, HttpReply* refused) {
  if (!options.use_session) return MungeAuthorization(munge_socket);
  if (session_token.empty()) {
    Result<std::string> munge = MungeAuthorization(munge_socket);
    if (!munge.ok()) return munge.status();
    const std::string empty;
    HttpReply s = http->Exchange("POST", "/v1/session", munge.value(), &empty);
    nlohmann::json j = s.ok() && s.status == 200 ? nlohmann::json::parse(s.body, nullptr, false) : nlohmann::json();
    if (!j.is_object() || !j.contains("token") || !j["token"].is_string()) {
      *refused = std::move(s);
      return Status::Unauthenticated("gpupoold opened no session");
    }
    session_token = j["token"].get<std::string>();
  }
  return "Bearer " + session_token;
}

// With sessions, a 401 on a token (expired, or gpupoold restarted) gets one fresh session
// and one retry: a 401 is answered before the request is acted on, so the retry cannot do
// anything twice.
Result<std::pair<int, std::string>> ApiClient::Impl::SendOnce(const ApiClientOptions& options,
                                                              const std::string& method, const std::string& path,
                                                              const std::string* body) {
  if (!parse_status.ok()) return parse_status;
  for (int attempt = 0;; ++attempt) {
    std::string authorization;
    HttpReply res;
    bool sent_session_request = false;
    if (options.authenticate) {
      Result<std::string> auth = Authorization(options, &res);
      if (auth.ok()) {
        authorization = auth.value();
      } else if (res.ok() && res.status == 0) {
        return auth.status();  // no credential: munged unreachable or refused
      } else {
        sent_session_request = true;  // res holds gpupoold's answer to it, or why none came
      }
    }
    if (!sent_session_request) {
      res = http->Exchange(method, path, authorization, method == "GET" ? nullptr : body);
    }
    if (res.failure == HttpFailure::kBadRequest) return Status::InvalidArgument(res.detail);
    if (!res.ok()) return TransportError(urls[current], res);
    bool stale_token = res.status == 401 && authorization.rfind("Bearer ", 0) == 0;
    if (stale_token && attempt == 0) {
      session_token.clear();
      continue;
    }
    return std::make_pair(res.status, std::move(res.body));
  }
}

// With one server, one attempt (the answer or the transport error, as always). With
// replicas: a transport error moves to the next server; a follower's 503 names the leader,
// and the request goes there if it is one of the configured servers (a leader named
// outside them is never contacted); when no server leads yet, rounds repeat every 100 ms. All of
// it within the one timeout of a call. Requests are retried only where that cannot do
// anything twice: a follower acts on nothing, a refused connection carried nothing, and the
// requests that can be cut off after they were sent (acquire, release, renew, update) are
// idempotent in gpupoold's API.
Result<std::pair<int, std::string>> ApiClient::Impl::Send(const ApiClientOptions& options, const std::string& method,
                                                          const std::string& path, const std::string* body) {
  if (!parse_status.ok()) return parse_status;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t tried_this_round = 0;
  std::string ignored_leader;
  for (;;) {
    Result<std::pair<int, std::string>> reply = SendOnce(options, method, path, body);
    bool redirected = false;
    if (reply.ok() && reply->first == 503) {
      nlohmann::json answer = nlohmann::json::parse(reply->second, nullptr, false);
      if (!answer.is_object() || !answer.contains("leader") || !answer["leader"].is_string()) {
        if (servers.size() == 1 || !answer.is_object() || !answer.value("retry", false)) return reply;
      } else {
        Result<HostPort> leader = ParseServer(answer["leader"].get<std::string>());
        if (!leader.ok()) return reply;
        size_t index =
            std::find_if(servers.begin(), servers.end(),
                         [&](const HostPort& s) { return s.host == leader->host && s.port == leader->port; }) -
            servers.begin();
        if (index == servers.size()) {
          // Only a configured server is followed: the leader's URL comes from etcd, where
          // whoever can write it would otherwise receive every client's fresh credential.
          ignored_leader = "replica " + urls[current] + " names as leader " + answer["leader"].get<std::string>() +
                           ", which is not in the configured server list: not followed";
          if (servers.size() == 1) return Status::Unavailable(ignored_leader);
        } else if (index != current) {
          Connect(index);
          redirected = true;
        }
      }
    } else if (reply.ok() || reply.status().code() != Status::Code::kUnavailable || servers.size() == 1 ||
               !reply.status().message().starts_with("cannot reach gpupoold")) {
      return reply;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      if (!ignored_leader.empty()) return Status::Unavailable(ignored_leader);
      if (reply.ok()) return reply;
      return Status::Unavailable("no gpupoold replica answers as leader (" + reply.status().message() + ")");
    }
    if (!redirected) {
      if (++tried_this_round >= servers.size()) {
        tried_this_round = 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      Connect((current + 1) % servers.size());
    }
  }
}

Result<nlohmann::json> ApiClient::Get(const std::string& path) {
  Result<std::pair<int, std::string>> reply = impl_->Send(options_, "GET", path, nullptr);
  if (!reply.ok()) return reply.status();
  return ParseAnswer(reply->first, reply->second);
}

Result<nlohmann::json> ApiClient::Post(const std::string& path, const nlohmann::json& body) {
  std::string text = body.dump();
  Result<std::pair<int, std::string>> reply = impl_->Send(options_, "POST", path, &text);
  if (!reply.ok()) return reply.status();
  return ParseAnswer(reply->first, reply->second);
}

}  // namespace gpupool

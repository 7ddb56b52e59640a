#include "common/api_client.h"

#include <httplib.h>

#include "common/auth.h"

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
  std::unique_ptr<httplib::Client> http;
  std::string munge_socket;
  std::string session_token;  // empty: none yet

  httplib::Result Send(const ApiClientOptions& options, const std::string& method, const std::string& path,
                       const std::string* body, Status* auth_error);
};

ApiClient::ApiClient(ApiClientOptions options) : options_(std::move(options)), impl_(new Impl) {
  impl_->munge_socket = auth::ResolveMungeSocket(options_.munge_socket);
  Result<HostPort> hp = ParseServer(options_.server);
  if (!hp.ok()) {
    impl_->parse_status = hp.status();
    return;
  }
  impl_->http = std::make_unique<httplib::Client>(hp->host, hp->port);
  int ms = options_.timeout_ms;
  impl_->http->set_connection_timeout(ms / 1000, (ms % 1000) * 1000);
  impl_->http->set_read_timeout(ms / 1000, (ms % 1000) * 1000);
  impl_->http->set_write_timeout(ms / 1000, (ms % 1000) * 1000);
  impl_->http->set_keep_alive(true);
  // Requests go out as header + body writes: without TCP_NODELAY, Nagle and delayed ACKs
  // add ~40 ms to every call.
  impl_->http->set_tcp_nodelay(true);
}

ApiClient::~ApiClient() = default;

namespace {

Result<httplib::Headers> MungeHeaders(const std::string& munge_socket) {
  httplib::Headers headers;
  Result<std::string> cred = auth::EncodeCredential(munge_socket);
  if (!cred.ok()) return cred.status();
  headers.emplace("Authorization", "MUNGE " + cred.value());
  return headers;
}

Status TransportError(const std::string& server, httplib::Error err) {
  std::string why;
  switch (err) {
    case httplib::Error::Connection: why = "connection refused or timed out"; break;
    case httplib::Error::Read: why = "no answer (read failed or timed out)"; break;
    case httplib::Error::Write: why = "cannot send the request"; break;
    case httplib::Error::ConnectionTimeout: why = "connection timed out"; break;
    default: why = httplib::to_string(err); break;
  }
  return Status::Unavailable("cannot reach gpupoold at " + server + ": " + why);
}

Result<nlohmann::json> ParseAnswer(const httplib::Result& res) {
  nlohmann::json body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  bool is_json = !body.is_discarded();
  if (res->status >= 200 && res->status < 300) {
    if (!is_json) return Status::Internal("gpupoold sent a reply that is not JSON");
    return body;
  }
  std::string message = "HTTP " + std::to_string(res->status);
  if (is_json && body.is_object() && body.contains("error") && body["error"].is_string()) {
    message = body["error"].get<std::string>();
  }
  return Status::FromHttp(res->status, message);
}

}  // namespace

// Sends one request with the right Authorization header. With sessions, a 401 on a token
// (expired, or gpupoold restarted) gets one fresh session and one retry: a 401 is answered
// before the request is acted on, so the retry cannot do anything twice.
httplib::Result ApiClient::Impl::Send(const ApiClientOptions& options_, const std::string& method,
                                     const std::string& path, const std::string* body, Status* auth_error) {
  Impl* impl_ = this;
  for (int attempt = 0; attempt < 2; ++attempt) {
    httplib::Headers headers;
    bool with_token = false;
    if (options_.authenticate) {
      if (options_.use_session && impl_->session_token.empty()) {
        Result<httplib::Headers> munge = MungeHeaders(impl_->munge_socket);
        if (!munge.ok()) {
          *auth_error = munge.status();
          return httplib::Result(nullptr, httplib::Error::Unknown);
        }
        httplib::Result s = impl_->http->Post("/v1/session", munge.value(), "", "application/json");
        if (!s) return s;
        if (s->status != 200) return s;  // the caller reports the server's error
        nlohmann::json j = nlohmann::json::parse(s->body, nullptr, false);
        if (j.is_discarded() || !j.contains("token") || !j["token"].is_string()) return s;
        impl_->session_token = j["token"].get<std::string>();
      }
      if (options_.use_session) {
        headers.emplace("Authorization", "Bearer " + impl_->session_token);
        with_token = true;
      } else {
        Result<httplib::Headers> munge = MungeHeaders(impl_->munge_socket);
        if (!munge.ok()) {
          *auth_error = munge.status();
          return httplib::Result(nullptr, httplib::Error::Unknown);
        }
        headers = munge.value();
      }
    }
    httplib::Result res = method == "GET"
                              ? impl_->http->Get(path.c_str(), headers)
                              : impl_->http->Post(path.c_str(), headers, *body, "application/json");
    if (res && res->status == 401 && with_token && attempt == 0) {
      impl_->session_token.clear();
      continue;
    }
    return res;
  }
  return httplib::Result(nullptr, httplib::Error::Unknown);
}

Result<nlohmann::json> ApiClient::Get(const std::string& path) {
  if (!impl_->parse_status.ok()) return impl_->parse_status;
  Status auth_error;
  httplib::Result res = impl_->Send(options_, "GET", path, nullptr, &auth_error);
  if (!auth_error.ok()) return auth_error;
  if (!res) return TransportError(options_.server, res.error());
  return ParseAnswer(res);
}

Result<nlohmann::json> ApiClient::Post(const std::string& path, const nlohmann::json& body) {
  if (!impl_->parse_status.ok()) return impl_->parse_status;
  std::string text = body.dump();
  Status auth_error;
  httplib::Result res = impl_->Send(options_, "POST", path, &text, &auth_error);
  if (!auth_error.ok()) return auth_error;
  if (!res) return TransportError(options_.server, res.error());
  return ParseAnswer(res);
}

Result<std::string> ApiClient::GetText(const std::string& path) {
  if (!impl_->parse_status.ok()) return impl_->parse_status;
  Status auth_error;
  httplib::Result res = impl_->Send(options_, "GET", path, nullptr, &auth_error);
  if (!auth_error.ok()) return auth_error;
  if (!res) return TransportError(options_.server, res.error());
  if (res->status != 200) return Status::FromHttp(res->status, "HTTP " + std::to_string(res->status));
  return res->body;
}

}  // namespace gpupool

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
}

ApiClient::~ApiClient() = default;

namespace {

Result<httplib::Headers> AuthHeaders(bool authenticate, const std::string& munge_socket) {
  httplib::Headers headers;
  if (!authenticate) return headers;
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

Result<nlohmann::json> ApiClient::Get(const std::string& path) {
  if (!impl_->parse_status.ok()) return impl_->parse_status;
  Result<httplib::Headers> headers = AuthHeaders(options_.authenticate, impl_->munge_socket);
  if (!headers.ok()) return headers.status();
  httplib::Result res = impl_->http->Get(path.c_str(), headers.value());
  if (!res) return TransportError(options_.server, res.error());
  return ParseAnswer(res);
}

Result<nlohmann::json> ApiClient::Post(const std::string& path, const nlohmann::json& body) {
  if (!impl_->parse_status.ok()) return impl_->parse_status;
  Result<httplib::Headers> headers = AuthHeaders(options_.authenticate, impl_->munge_socket);
  if (!headers.ok()) return headers.status();
  httplib::Result res = impl_->http->Post(path.c_str(), headers.value(), body.dump(), "application/json");
  if (!res) return TransportError(options_.server, res.error());
  return ParseAnswer(res);
}

Result<std::string> ApiClient::GetText(const std::string& path) {
  if (!impl_->parse_status.ok()) return impl_->parse_status;
  Result<httplib::Headers> headers = AuthHeaders(options_.authenticate, impl_->munge_socket);
  if (!headers.ok()) return headers.status();
  httplib::Result res = impl_->http->Get(path.c_str(), headers.value());
  if (!res) return TransportError(options_.server, res.error());
  if (res->status != 200) return Status::FromHttp(res->status, "HTTP " + std::to_string(res->status));
  return res->body;
}

}  // namespace gpupool

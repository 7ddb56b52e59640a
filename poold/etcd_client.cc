#include "poold/etcd_client.h"

#include <httplib.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>

namespace gpupool::poold {
namespace {

using nlohmann::json;

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The gateway writes int64 fields as JSON strings ("revision": "12"); absent means 0.
int64_t Int64Field(const json& object, const char* name) {
  if (!object.is_object() || !object.contains(name)) return 0;
  const json& v = object[name];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    try {
      return std::stoll(v.get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

struct Endpoint {
  std::string url, host;
  int port = 0;
  bool tls = false;  // https://
};

}  // namespace

std::string Base64Encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) out += kAlphabet[(n >> shift) & 63];
  }
  if (i + 1 == bytes.size()) {
    uint32_t n = uint8_t(bytes[i]) << 16;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += '=';
  }
  return out;
}

Result<std::string> Base64Decode(const std::string& text) {
  std::string out;
  uint32_t bits = 0;
  int nbits = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* p = std::strchr(kAlphabet, c);
    if (c == '\0' || p == nullptr) return Status::Internal("etcd sent a value that is not base64");
    bits = (bits << 6) | uint32_t(p - kAlphabet);
    nbits += 6;
    if (nbits >= 8) {
      nbits -= 8;
      out += char((bits >> nbits) & 0xff);
    }
  }
  return out;
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (uint8_t(end.back()) < 0xff) {
      end.back() = char(uint8_t(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

json EtcdCompareCreateRevision(const std::string& key, int64_t revision) {
  return {{"key", Base64Encode(key)},
          {"target", "CREATE"},
          {"result", "EQUAL"},
          {"create_revision", std::to_string(revision)}};
}

json EtcdPut(const std::string& key, const std::string& value, int64_t lease) {
  json put = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return {{"request_put", put}};
}

json EtcdDelete(const std::string& key) { return {{"request_delete_range", {{"key", Base64Encode(key)}}}}; }

json EtcdDeleteRange(const std::string& begin, const std::string& end) {
  return {{"request_delete_range", {{"key", Base64Encode(begin)}, {"range_end", Base64Encode(end)}}}};
}

json EtcdGet(const std::string& key) { return {{"request_range", {{"key", Base64Encode(key)}}}}; }

namespace {

// The PEM file's certificates; an error naming `key` and the file when there is none.
Result<std::vector<X509*>> ReadCertificates(const std::string& key, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return Status::InvalidArgument(key + " '" + path + "': " + std::strerror(errno));
  std::vector<X509*> certs;
  while (X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr)) certs.push_back(cert);
  std::fclose(f);
  if (certs.empty()) return Status::InvalidArgument(key + " '" + path + "' holds no PEM certificate");
  return certs;
}

Status CheckTlsFiles(const PooldConfig& c) {
  if (!c.etcd_ca_file.empty()) {
    Result<std::vector<X509*>> ca = ReadCertificates("etcd_ca_file", c.etcd_ca_file);
    if (!ca.ok()) return ca.status();
    for (X509* cert : ca.value()) X509_free(cert);
  }
  if (c.etcd_cert_file.empty()) return Status::OK();
  Result<std::vector<X509*>> certs = ReadCertificates("etcd_cert_file", c.etcd_cert_file);
  if (!certs.ok()) return certs.status();
  X509* cert = certs->front();
  Status status;
  // etcd's gateway refuses a certificate with a CN when --client-cert-auth is on (it would
  // take the CN for the user on gRPC, and the gateway cannot pass it on).
  char cn[256];
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn)) >= 0) {
    status = Status::InvalidArgument("etcd_cert_file '" + c.etcd_cert_file + "' has a Common Name (CN=" + cn +
                                     "): etcd's JSON gateway, which gpupoold speaks, refuses such client "
                                     "certificates; issue one without a CN (the etcd user is etcd_user)");
  }
  FILE* f = status.ok() ? std::fopen(c.etcd_key_file.c_str(), "r") : nullptr;
  if (status.ok() && f == nullptr) {
    status = Status::InvalidArgument("etcd_key_file '" + c.etcd_key_file + "': " + std::strerror(errno));
  }
  if (f != nullptr) {
    EVP_PKEY* pkey = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
    std::fclose(f);
    if (pkey == nullptr) {
      status = Status::InvalidArgument("etcd_key_file '" + c.etcd_key_file +
                                       "' holds no PEM private key (or one with a passphrase)");
    } else if (X509_check_private_key(cert, pkey) != 1) {
      status = Status::InvalidArgument("etcd_key_file '" + c.etcd_key_file + "' is not the key of etcd_cert_file '" +
                                       c.etcd_cert_file + "'");
    }
    EVP_PKEY_free(pkey);
  }
  for (X509* each : certs.value()) X509_free(each);
  return status;
}

Result<std::string> ReadPassword(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return Status::InvalidArgument("etcd_password_file '" + path + "': " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    return Status::InvalidArgument("etcd_password_file '" + path +
                                   "' may be read by group or others: make it readable by gpupoold's user only "
                                   "(chmod 600)");
  }
  std::ifstream in(path);
  std::string password;
  if (!in || !std::getline(in, password)) {
    return Status::InvalidArgument("etcd_password_file '" + path + "' cannot be read or is empty");
  }
  if (!password.empty() && password.back() == '\r') password.pop_back();
  if (password.empty()) return Status::InvalidArgument("etcd_password_file '" + path + "' holds an empty first line");
  return password;
}

}  // namespace

Result<EtcdAccess> LoadEtcdAccess(const PooldConfig& c) {
  EtcdAccess access;
  access.endpoints = c.etcd_endpoints;
  access.ca_file = c.etcd_ca_file;
  access.cert_file = c.etcd_cert_file;
  access.key_file = c.etcd_key_file;
  access.user = c.etcd_user;
  GPUPOOL_RETURN_IF_ERROR(CheckTlsFiles(c));
  if (!c.etcd_password_file.empty()) {
    Result<std::string> password = ReadPassword(c.etcd_password_file);
    if (!password.ok()) return password.status();
    access.password = password.value();
  }
  return access;
}

Result<EtcdKeyValue> ParseKeyValue(const json& kv) {
  EtcdKeyValue out;
  if (!kv.is_object() || !kv.contains("key") || !kv["key"].is_string()) {
    return Status::Internal("etcd sent a key/value without a key");
  }
  Result<std::string> key = Base64Decode(kv["key"].get<std::string>());
  if (!key.ok()) return key.status();
  out.key = key.value();
  if (kv.contains("value") && kv["value"].is_string()) {
    Result<std::string> value = Base64Decode(kv["value"].get<std::string>());
    if (!value.ok()) return value.status();
    out.value = value.value();
  }
  out.create_revision = Int64Field(kv, "create_revision");
  out.mod_revision = Int64Field(kv, "mod_revision");
  out.lease = Int64Field(kv, "lease");
  return out;
}

struct EtcdClient::Impl {
  EtcdAccess access;
  std::vector<Endpoint> endpoints;
  size_t current = 0;
  int timeout_ms = 2000;
  std::unique_ptr<httplib::Client> http;  // to endpoints[current]
  std::string token;                      // etcd auth token; empty: none yet (or no user)
  Status bad_endpoint;

  void Connect() {
    const Endpoint& e = endpoints[current];
    if (e.tls) {
      // cpp-httplib checks the server's certificate against ca_file (the system's CAs when
      // empty) and its subjectAltName against the endpoint's host.
      http = std::make_unique<httplib::Client>("https://" + e.host + ":" + std::to_string(e.port), access.cert_file,
                                               access.key_file);
      if (!access.ca_file.empty()) http->set_ca_cert_path(access.ca_file.c_str());
      http->enable_server_certificate_verification(true);
    } else {
      http = std::make_unique<httplib::Client>(e.host, e.port);
    }
    int ms = timeout_ms;
    http->set_connection_timeout(ms / 1000, (ms % 1000) * 1000);
    http->set_read_timeout(ms / 1000, (ms % 1000) * 1000);
    http->set_write_timeout(ms / 1000, (ms % 1000) * 1000);
    http->set_keep_alive(true);
    http->set_tcp_nodelay(true);
    if (!token.empty()) http->set_default_headers({{"Authorization", token}});
  }
};

namespace {

// What etcd says when a token no longer holds: it lapsed (--auth-token-ttl of disuse, or the
// member restarted) or users/roles changed since it was issued. Authenticating again cures both.
bool StaleToken(const std::string& message) {
  return message.find("etcdserver: invalid auth token") != std::string::npos ||
         message.find("etcdserver: revision of auth store is old") != std::string::npos;
}

}  // namespace

EtcdClient::EtcdClient(EtcdAccess access, int timeout_ms) : impl_(new Impl) {
  impl_->timeout_ms = timeout_ms;
  impl_->access = std::move(access);
  for (const std::string& url : impl_->access.endpoints) {
    Endpoint e;
    e.url = url;
    e.tls = url.rfind("https://", 0) == 0;
    std::string rest = url.rfind("http://", 0) == 0 ? url.substr(7) : e.tls ? url.substr(8) : url;
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    size_t colon = rest.rfind(':');
    try {
      if (colon == std::string::npos) throw 0;
      e.host = rest.substr(0, colon);
      e.port = std::stoi(rest.substr(colon + 1));
      if (e.port <= 0 || e.port > 65535 || e.host.empty()) throw 0;
    } catch (...) {
      impl_->bad_endpoint =
          Status::InvalidArgument("bad etcd endpoint '" + url + "' (expected http://HOST:PORT or https://HOST:PORT)");
      continue;
    }
    impl_->endpoints.push_back(e);
  }
  if (impl_->endpoints.empty() && impl_->bad_endpoint.ok()) {
    impl_->bad_endpoint = Status::InvalidArgument("no etcd endpoint given");
  }
  if (!impl_->endpoints.empty()) {
    impl_->Connect();
    if (!impl_->http->is_valid()) {
      impl_->bad_endpoint =
          Status::InvalidArgument("cannot load the etcd client certificate '" + impl_->access.cert_file +
                                  "' or its key '" + impl_->access.key_file + "'");
    }
  }
}

EtcdClient::~EtcdClient() = default;

const std::string& EtcdClient::endpoint() const {
  static const std::string none;
  return impl_->endpoints.empty() ? none : impl_->endpoints[impl_->current].url;
}

Result<json> EtcdClient::Send(const std::string& path, const json& body) {
  if (!impl_->bad_endpoint.ok()) return impl_->bad_endpoint;
  std::string text = body.dump();
  std::string errors;
  // Each endpoint once, starting with the one that answered last.
  for (size_t tried = 0; tried < impl_->endpoints.size(); ++tried) {
    httplib::Result res = impl_->http->Post(path.c_str(), text, "application/json");
    if (res) {
      json answer = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
      if (res->status == 200 && answer.is_object()) return answer;
      std::string message = answer.is_object() && answer.contains("error") && answer["error"].is_string()
                                ? answer["error"].get<std::string>()
                                : "HTTP " + std::to_string(res->status);
      // "etcdserver: no leader", timeouts of a member cut off from quorum: another member may do.
      if (res->status >= 500) {
        errors += (errors.empty() ? "" : "; ") + impl_->endpoints[impl_->current].url + ": " + message;
      } else {
        if (message.find("permission denied") != std::string::npos) {
          message += impl_->access.user.empty()
                         ? " (etcd has auth on: set etcd_user and etcd_password_file)"
                         : " (etcd user '" + impl_->access.user + "' needs a role granting readwrite on etcd_prefix)";
        } else if (message.find("user name is empty") != std::string::npos) {
          message += " (etcd has auth on: set etcd_user and etcd_password_file)";
        }
        return Status::Internal("etcd at " + impl_->endpoints[impl_->current].url + " refused " + path + ": " +
                                message);
      }
    } else {
      std::string why = httplib::to_string(res.error());
      if (res.error() == httplib::Error::SSLServerVerification) {
        why += " (etcd's certificate is not signed by etcd_ca_file, or does not name the endpoint's host)";
      } else if (res.error() == httplib::Error::SSLConnection) {
        why += " (TLS handshake refused: does etcd trust etcd_cert_file's CA?)";
      } else if (res.error() == httplib::Error::SSLLoadingCerts) {
        why += " (cannot load etcd_ca_file '" + impl_->access.ca_file + "')";
      } else if (impl_->endpoints[impl_->current].tls &&
                 (res.error() == httplib::Error::Read || res.error() == httplib::Error::Write)) {
        // With TLS 1.3 the client's handshake ends before etcd has checked its certificate:
        // a refused one is learnt as a closed connection on the first request.
        why += " (also how etcd refuses a client certificate it does not trust: see etcd_cert_file)";
      }
      errors += (errors.empty() ? "" : "; ") + impl_->endpoints[impl_->current].url + ": " + why;
    }
    impl_->current = (impl_->current + 1) % impl_->endpoints.size();
    impl_->Connect();
  }
  return Status::Unavailable("etcd unavailable (" + errors + ")");
}

Status EtcdClient::Authenticate() {
  impl_->token.clear();
  impl_->http->set_default_headers({});
  // A bcrypt check in etcd and a raft round: done once per client, not per call.
  Result<json> answer =
      Send("/v3/auth/authenticate", json{{"name", impl_->access.user}, {"password", impl_->access.password}});
  if (!answer.ok()) {
    std::string why = "cannot authenticate to etcd as '" + impl_->access.user + "': " + answer.status().message();
    return answer.status().code() == Status::Code::kUnavailable ? Status::Unavailable(why) : Status::Internal(why);
  }
  std::string token = answer->value("token", "");
  if (token.empty()) return Status::Internal("etcd answered authenticate without a token: " + answer->dump());
  impl_->token = token;
  impl_->http->set_default_headers({{"Authorization", token}});
  return Status::OK();
}

Result<json> EtcdClient::Call(const std::string& path, const json& body) {
  const bool auth = !impl_->access.user.empty();
  if (auth && impl_->token.empty()) GPUPOOL_RETURN_IF_ERROR(Authenticate());
  Result<json> answer = Send(path, body);
  if (auth && !answer.ok() && StaleToken(answer.status().message())) {
    GPUPOOL_RETURN_IF_ERROR(Authenticate());
    answer = Send(path, body);
  }
  return answer;
}

Result<EtcdClient::TxnResult> EtcdClient::Txn(const json& compare, const json& success, const json& failure) {
  json body = {{"compare", compare}, {"success", success}, {"failure", failure}};
  Result<json> answer = Call("/v3/kv/txn", body);
  if (!answer.ok()) return answer.status();
  TxnResult out;
  // The gateway leaves out false booleans.
  out.succeeded =
      answer->contains("succeeded") && (*answer)["succeeded"].is_boolean() && (*answer)["succeeded"].get<bool>();
  out.revision = Int64Field(answer->value("header", json::object()), "revision");
  out.responses = answer->value("responses", json::array());
  return out;
}

Result<std::vector<EtcdKeyValue>> EtcdClient::Range(const std::string& begin, const std::string& end, int64_t limit,
                                                    bool descending) {
  json body = {{"key", Base64Encode(begin)}};
  if (!end.empty()) body["range_end"] = Base64Encode(end);
  if (limit > 0) body["limit"] = std::to_string(limit);
  if (descending) {
    body["sort_order"] = "DESCEND";
    body["sort_target"] = "KEY";
  }
  Result<json> answer = Call("/v3/kv/range", body);
  if (!answer.ok()) return answer.status();
  std::vector<EtcdKeyValue> out;
  for (const json& kv : answer->value("kvs", json::array())) {
    Result<EtcdKeyValue> parsed = ParseKeyValue(kv);
    if (!parsed.ok()) return parsed.status();
    out.push_back(std::move(parsed.value()));
  }
  return out;
}

Result<int64_t> EtcdClient::LeaseGrant(int ttl_seconds) {
  Result<json> answer = Call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_seconds)}});
  if (!answer.ok()) return answer.status();
  int64_t id = Int64Field(answer.value(), "ID");
  if (id == 0) return Status::Internal("etcd granted no lease: " + answer->dump());
  return id;
}

Result<int64_t> EtcdClient::LeaseKeepAlive(int64_t lease) {
  Result<json> answer = Call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}});
  if (!answer.ok()) return answer.status();
  // A stream in gRPC; the gateway answers {"result": {...}} with the TTL (absent when lapsed).
  json result = answer->value("result", answer.value());
  return Int64Field(result, "TTL");
}

Status EtcdClient::LeaseRevoke(int64_t lease) {
  Result<json> answer = Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}});
  return answer.ok() ? Status::OK() : answer.status();
}

}  // namespace gpupool::poold

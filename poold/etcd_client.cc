#include "poold/etcd_client.h"

#include <httplib.h>

#include <cstring>

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
  std::vector<Endpoint> endpoints;
  size_t current = 0;
  int timeout_ms = 2000;
  std::unique_ptr<httplib::Client> http;  // to endpoints[current]
  Status bad_endpoint;

  void Connect() {
    const Endpoint& e = endpoints[current];
    http = std::make_unique<httplib::Client>(e.host, e.port);
    int ms = timeout_ms;
    http->set_connection_timeout(ms / 1000, (ms % 1000) * 1000);
    http->set_read_timeout(ms / 1000, (ms % 1000) * 1000);
    http->set_write_timeout(ms / 1000, (ms % 1000) * 1000);
    http->set_keep_alive(true);
    http->set_tcp_nodelay(true);
  }
};

EtcdClient::EtcdClient(std::vector<std::string> endpoints, int timeout_ms) : impl_(new Impl) {
  impl_->timeout_ms = timeout_ms;
  for (const std::string& url : endpoints) {
    Endpoint e;
    e.url = url;
    std::string rest = url.rfind("http://", 0) == 0 ? url.substr(7) : url;
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    size_t colon = rest.rfind(':');
    try {
      if (colon == std::string::npos) throw 0;
      e.host = rest.substr(0, colon);
      e.port = std::stoi(rest.substr(colon + 1));
      if (e.port <= 0 || e.port > 65535 || e.host.empty()) throw 0;
    } catch (...) {
      impl_->bad_endpoint = Status::InvalidArgument("bad etcd endpoint '" + url + "' (expected http://HOST:PORT)");
      continue;
    }
    impl_->endpoints.push_back(e);
  }
  if (impl_->endpoints.empty() && impl_->bad_endpoint.ok()) {
    impl_->bad_endpoint = Status::InvalidArgument("no etcd endpoint given");
  }
  if (!impl_->endpoints.empty()) impl_->Connect();
}

EtcdClient::~EtcdClient() = default;

const std::string& EtcdClient::endpoint() const {
  static const std::string none;
  return impl_->endpoints.empty() ? none : impl_->endpoints[impl_->current].url;
}

Result<json> EtcdClient::Call(const std::string& path, const json& body) {
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
        return Status::Internal("etcd at " + impl_->endpoints[impl_->current].url + " refused " + path + ": " +
                                message);
      }
    } else {
      errors += (errors.empty() ? "" : "; ") + impl_->endpoints[impl_->current].url + ": " +
                httplib::to_string(res.error());
    }
    impl_->current = (impl_->current + 1) % impl_->endpoints.size();
    impl_->Connect();
  }
  return Status::Unavailable("etcd unavailable (" + errors + ")");
}

Result<EtcdClient::TxnResult> EtcdClient::Txn(const json& compare, const json& success, const json& failure) {
  json body = {{"compare", compare}, {"success", success}, {"failure", failure}};
  Result<json> answer = Call("/v3/kv/txn", body);
  if (!answer.ok()) return answer.status();
  TxnResult out;
  // The gateway leaves out false booleans.
  out.succeeded = answer->contains("succeeded") && (*answer)["succeeded"].is_boolean() &&
                  (*answer)["succeeded"].get<bool>();
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

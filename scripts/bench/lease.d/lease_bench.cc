// gpupool-bench-lease: N concurrent clients doing lease pairs through a real API, for
// scripts/bench/lease. One pair is:
//   gpupool: POST /v1/leases (acquire 1 GPU) + POST /v1/leases/release, MUNGE on each
//   etcd:    POST /v3/lease/grant + /v3/kv/put with the lease + /v3/lease/revoke
//   etcd-txn: what gpupoold with state = "etcd" writes for the same pair, done directly:
//            two transactions, each fenced on a leader key's create revision, the first
//            putting a lease row, a GPU row, an event and the lease counter, the second
//            deleting the lease row and putting the GPU row and an event (rows of the size
//            gpupoold writes)
// Each client keeps one keep-alive connection. Prints one JSON line with pairs/s and the
// p50/p99 latency of a whole pair.
// Against a locked-down etcd (an https:// --url): --cacert, --cert/--key (the client
// certificate) and --user/--password-file (etcd auth), as gpupoold's etcd_* keys do; each
// client authenticates once, as each of gpupoold's etcd connections does.
// The etcd targets over plain http:// use the same HTTP connection as gpupool's ApiClient
// (common/http_connection.h: one send per request), so that the two sides differ in their
// servers, not in their HTTP clients; over https:// they use httplib's client, as that
// connection speaks no TLS.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/api_client.h"
#include "common/http_connection.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::string Base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -6;
  for (unsigned char c : in) {
    val = (val << 8) + c;
    bits += 8;
    while (bits >= 0) {
      out.push_back(t[(val >> bits) & 0x3F]);
      bits -= 6;
    }
  }
  if (bits > -6) out.push_back(t[((val << 8) >> (bits + 8)) & 0x3F]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

// A keep-alive connection to etcd: HttpConnection for http://, httplib's client for https://.
class EtcdClient {
 public:
  struct Answer {
    bool ok = false;  // an answer came (of any status)
    int status = 0;
    std::string body;
    std::string error;  // why none came
  };

  static std::unique_ptr<EtcdClient> Open(const std::string& url, const std::string& cert, const std::string& key,
                                          const std::string& cacert) {
    auto c = std::unique_ptr<EtcdClient>(new EtcdClient);
    const std::string plain = "http://";
    if (url.rfind(plain, 0) == 0) {
      std::string hostport = url.substr(plain.size());
      while (!hostport.empty() && hostport.back() == '/') hostport.pop_back();
      size_t colon = hostport.rfind(':');
      const std::string port = colon == std::string::npos ? "" : hostport.substr(colon + 1);
      if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
        return nullptr;  // EtcdConnect names the URL
      }
      // 64 clients authenticating at once wait on etcd's bcrypt, one at a time per core.
      c->plain_ = std::make_unique<gpupool::HttpConnection>(hostport.substr(0, colon), std::stoi(port), 30000);
      return c;
    }
    c->tls_ = std::make_unique<httplib::Client>(url, cert, key);
    if (!cacert.empty()) c->tls_->set_ca_cert_path(cacert.c_str());
    c->tls_->enable_server_certificate_verification(true);
    c->tls_->set_keep_alive(true);
    c->tls_->set_tcp_nodelay(true);
    c->tls_->set_read_timeout(30, 0);
    return c;
  }

  void set_token(std::string token) { token_ = std::move(token); }

  Answer Post(const std::string& path, const std::string& body) {
    Answer a;
    if (plain_) {
      gpupool::HttpReply r = plain_->Exchange("POST", path, token_, &body);
      a.ok = r.ok();
      a.status = r.status;
      a.body = std::move(r.body);
      a.error = r.detail;
      return a;
    }
    httplib::Headers headers;
    if (!token_.empty()) headers.emplace("Authorization", token_);
    auto r = tls_->Post(path, headers, body, "application/json");
    a.ok = static_cast<bool>(r);
    if (r) {
      a.status = r->status;
      a.body = r->body;
    } else {
      a.error = httplib::to_string(r.error());
    }
    return a;
  }

 private:
  EtcdClient() = default;
  std::unique_ptr<gpupool::HttpConnection> plain_;
  std::unique_ptr<httplib::Client> tls_;
  std::string token_;
};

// One pair against gpupoold; false on error.
bool GpupoolPair(gpupool::ApiClient& c, int64_t job, const std::string& pool) {
  auto l = c.Post("/v1/leases", {{"job_id", job}, {"request", {{{"pool", pool}, {"count", 1}}}}});
  if (!l.ok()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) std::fprintf(stderr, "acquire: %s\n", l.status().message().c_str());
    return false;
  }
  auto r = c.Post("/v1/leases/release", {{"job_id", job}});
  if (!r.ok()) std::fprintf(stderr, "release: %s\n", r.status().message().c_str());
  return r.ok();
}

bool EtcdPair(EtcdClient& c, int64_t job) {
  auto g = c.Post("/v3/lease/grant", R"({"TTL":600})");
  if (!g.ok || g.status != 200) return false;
  json grant = json::parse(g.body, nullptr, false);
  if (!grant.is_object()) return false;
  std::string id = grant.value("ID", "");
  json put = {
      {"key", Base64("/gpupool/leases/" + std::to_string(job))}, {"value", Base64("gpuhost1:0")}, {"lease", id}};
  auto p = c.Post("/v3/kv/put", put.dump());
  if (!p.ok || p.status != 200) return false;
  auto r = c.Post("/v3/lease/revoke", json{{"ID", id}}.dump());
  return r.ok && r.status == 200;
}

// The create revision of `key` (0 if absent or on error).
int64_t CreateRevision(EtcdClient& c, const std::string& key) {
  auto r = c.Post("/v3/kv/range", json{{"key", Base64(key)}}.dump());
  if (!r.ok || r.status != 200) return 0;
  json j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("kvs") || j["kvs"].empty()) return 0;
  return std::stoll(j["kvs"][0].value("create_revision", "0"));
}

bool EtcdTxn(EtcdClient& c, int64_t fence, const json& ops) {
  json body = {{"compare", json::array({{{"key", Base64("/bench/leader")},
                                         {"target", "CREATE"},
                                         {"result", "EQUAL"},
                                         {"create_revision", std::to_string(fence)}}})},
               {"success", ops}};
  auto r = c.Post("/v3/kv/txn", body.dump());
  if (!r.ok || r.status != 200) return false;
  json j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.value("succeeded", false);
}

bool EtcdTxnPair(EtcdClient& c, int64_t fence, int64_t job) {
  auto put = [](const std::string& key, const std::string& value) {
    return json{{"request_put", {{"key", Base64(key)}, {"value", Base64(value)}}}};
  };
  std::string lease_key = "/bench/leases/" + std::to_string(job);
  std::string gpu_key = "/bench/gpus/GPU-" + std::to_string(job % 512);
  // Rows as long as gpupoold's JSON rows.
  std::string lease_row(420, 'l'), gpu_row(260, 'g'), event_row(180, 'e');
  json acquire = json::array({put(lease_key, lease_row), put(gpu_key, gpu_row),
                              put("/bench/events/a" + std::to_string(job), event_row),
                              put("/bench/meta/next_lease", std::to_string(job + 1))});
  if (!EtcdTxn(c, fence, acquire)) return false;
  json release = json::array({json{{"request_delete_range", {{"key", Base64(lease_key)}}}}, put(gpu_key, gpu_row),
                              put("/bench/events/r" + std::to_string(job), event_row)});
  return EtcdTxn(c, fence, release);
}

struct EtcdSecurity {
  std::string cacert, cert, key, user, password;
};

// A keep-alive client for etcd at `url` (http:// or https://), authenticated when a user is
// given; nullptr (and a message) when it cannot be.
std::unique_ptr<EtcdClient> EtcdConnect(const std::string& url, const EtcdSecurity& sec) {
  auto c = EtcdClient::Open(url, sec.cert, sec.key, sec.cacert);
  if (!c) {
    std::fprintf(stderr, "bad etcd URL %s (expected http://HOST:PORT or https://...)\n", url.c_str());
    return nullptr;
  }
  if (!sec.user.empty()) {
    auto r = c->Post("/v3/auth/authenticate", json{{"name", sec.user}, {"password", sec.password}}.dump());
    json j = r.ok ? json::parse(r.body, nullptr, false) : json();
    if (!r.ok || r.status != 200 || !j.is_object() || j.value("token", "").empty()) {
      std::fprintf(stderr, "cannot authenticate to etcd as %s: %s\n", sec.user.c_str(),
                   r.ok ? r.body.c_str() : r.error.c_str());
      return nullptr;
    }
    c->set_token(j.value("token", ""));
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string target = "gpupool", url, pool = "a100";
  int clients = 1;
  double seconds = 5;
  EtcdSecurity sec;
  std::string password_file;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--target")
      target = v;
    else if (k == "--cacert")
      sec.cacert = v;
    else if (k == "--cert")
      sec.cert = v;
    else if (k == "--key")
      sec.key = v;
    else if (k == "--user")
      sec.user = v;
    else if (k == "--password-file")
      password_file = v;
    else if (k == "--url")
      url = v;
    else if (k == "--clients")
      clients = std::stoi(v);
    else if (k == "--seconds")
      seconds = std::stod(v);
    else if (k == "--pool")
      pool = v;
    else {
      std::fprintf(stderr,
                   "usage: gpupool-bench-lease --target gpupool|etcd|etcd-txn --url URL --clients N --seconds S\n"
                   "       [--cacert CA --cert CERT --key KEY --user USER --password-file FILE]\n");
      return 2;
    }
  }
  if (!password_file.empty()) {
    std::ifstream in(password_file);
    if (!std::getline(in, sec.password) || sec.password.empty()) {
      std::fprintf(stderr, "gpupool-bench-lease: cannot read a password from %s\n", password_file.c_str());
      return 2;
    }
  }
  if (url.empty() || (target != "gpupool" && target != "etcd" && target != "etcd-txn")) {
    std::fprintf(stderr, "gpupool-bench-lease: --target gpupool|etcd|etcd-txn and --url are required\n");
    return 2;
  }
  std::atomic<bool> go{false}, stop{false};
  // Clients that have connected (and authenticated) and found their fence: the clock starts
  // when all have, so 64 authentications against etcd's bcrypt are not timed as pairs.
  std::atomic<int> ready{0};
  std::atomic<int> errors{0};
  std::vector<std::vector<double>> latencies(clients);
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<gpupool::ApiClient> api;
      std::unique_ptr<EtcdClient> http;
      if (target == "gpupool") {
        api = std::make_unique<gpupool::ApiClient>(gpupool::ApiClientOptions{url, 10000, "", true});
      } else {
        http = EtcdConnect(url, sec);
        if (!http) {
          ++errors;
          ++ready;
          return;
        }
      }
      int64_t fence = 0;
      if (target == "etcd-txn") {
        // The "leader key" every transaction is fenced on, as gpupoold's are.
        if (t == 0) {
          json put = {{"key", Base64("/bench/leader")}, {"value", Base64("bench")}};
          if (!http->Post("/v3/kv/put", put.dump()).ok) ++errors;
        }
        for (int i = 0; i < 100 && fence == 0; ++i) {
          fence = CreateRevision(*http, "/bench/leader");
          if (fence == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
      ++ready;
      while (!go) std::this_thread::yield();
      int64_t job = int64_t{t + 1} * 100000000 + 1;
      while (!stop) {
        auto start = Clock::now();
        bool ok = api                    ? GpupoolPair(*api, job++, pool)
                  : target == "etcd-txn" ? EtcdTxnPair(*http, fence, job++)
                                         : EtcdPair(*http, job++);
        if (!ok) {
          ++errors;
          continue;
        }
        latencies[t].push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
    });
  }
  while (ready < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto start = Clock::now();
  go = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& v : latencies) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty() ? 0.0 : all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))];
  };
  std::printf(
      "{\"target\":\"%s\",\"clients\":%d,\"pairs\":%zu,\"errors\":%d,\"pairs_per_s\":%.1f,\"p50_us\":%.0f,\"p99_us\":%."
      "0f}\n",
      target.c_str(), clients, all.size(), errors.load(), all.size() / elapsed, pct(0.50), pct(0.99));
  return errors > 0 && all.empty() ? 1 : 0;
}

// EtcdClient: the few etcd v3 calls gpupoold needs, over etcd's HTTP/JSON gateway (/v3/...).
//
// Why the gateway and not gRPC: Debian ships no C++ etcd client, and etcd's .proto files
// import gogoproto, so a gRPC client means vendoring and cleaning protos; the gateway is part
// of every etcd 3.4+ server, and cpp-httplib is already a dependency. Its cost (JSON and
// base64) is small beside etcd's own commit (a raft round and an fsync).
//
// One client per thread (it keeps one keep-alive connection). Calls go to the endpoint that
// answered last; on a transport error the next endpoint is tried, so a dead etcd member is
// skipped. Never throws.
//
// A locked-down etcd (EtcdAccess): https:// endpoints, the server's certificate checked
// against the configured CA (and its name against the endpoint's host), a client
// certificate for etcd's --client-cert-auth, and etcd's own auth: the client authenticates
// as its user once (/v3/auth/authenticate), sends the token with every call, and
// authenticates again when etcd says the token lapsed or the auth store changed. The
// gateway takes no user from a certificate's CN (it refuses such certificates), so the
// user is always a name and password.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/status.h"

namespace gpupool::poold {

// How to reach etcd: gpupool.conf's etcd_* keys, the password read from its file.
struct EtcdAccess {
  std::vector<std::string> endpoints;  // all "http://HOST:PORT" or all "https://HOST:PORT"
  std::string ca_file;                 // https: the CA of etcd's server certificate; empty: the system's
  std::string cert_file, key_file;     // https: the client certificate and its key; empty: none
  std::string user, password;          // etcd auth; empty user: none
};

// The access gpupool.conf describes, checked before gpupoold campaigns: the certificate
// files parse, the key is the certificate's, the certificate has no CN (etcd's gateway
// refuses one), the password file is readable by its owner only and not empty. Every
// error names the key and the file.
Result<EtcdAccess> LoadEtcdAccess(const PooldConfig& config);

struct EtcdKeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, lease = 0;
};

// One comparison of a transaction (etcd's Compare, in the gateway's JSON form).
nlohmann::json EtcdCompareCreateRevision(const std::string& key,
                                         int64_t revision);  // key's create_revision == revision
nlohmann::json EtcdPut(const std::string& key, const std::string& value, int64_t lease = 0);
nlohmann::json EtcdDelete(const std::string& key);
nlohmann::json EtcdDeleteRange(const std::string& begin, const std::string& end);
nlohmann::json EtcdGet(const std::string& key);

std::string Base64Encode(const std::string& bytes);
Result<std::string> Base64Decode(const std::string& text);
// The end of the range of keys that start with `prefix` (etcd's "prefix + 1").
std::string PrefixEnd(const std::string& prefix);

class EtcdClient {
 public:
  EtcdClient(EtcdAccess access, int timeout_ms);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  struct TxnResult {
    bool succeeded = false;
    int64_t revision = 0;      // the store's revision after the transaction
    nlohmann::json responses;  // the gateway's "responses" array
  };
  Result<TxnResult> Txn(const nlohmann::json& compare, const nlohmann::json& success,
                        const nlohmann::json& failure = nlohmann::json::array());
  // Keys in [begin, end) (end empty: just `begin`), ascending by key unless `descending`;
  // at most `limit` (0: all).
  Result<std::vector<EtcdKeyValue>> Range(const std::string& begin, const std::string& end, int64_t limit = 0,
                                          bool descending = false);

  // An etcd lease (not a gpupool lease): keys put with it vanish when it lapses.
  Result<int64_t> LeaseGrant(int ttl_seconds);
  // The lease's remaining TTL in seconds after the renewal; 0 when it had already lapsed.
  Result<int64_t> LeaseKeepAlive(int64_t lease);
  Status LeaseRevoke(int64_t lease);

  // Where the last call went ("http://host:port").
  const std::string& endpoint() const;

 private:
  // Send() with the auth token, authenticating first (and once more when etcd calls the
  // token stale) when a user is configured.
  Result<nlohmann::json> Call(const std::string& path, const nlohmann::json& body);
  // One request, to each endpoint in turn until one answers.
  Result<nlohmann::json> Send(const std::string& path, const nlohmann::json& body);
  Status Authenticate();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads one key/value of the gateway's "kvs" array.
Result<EtcdKeyValue> ParseKeyValue(const nlohmann::json& kv);

}  // namespace gpupool::poold

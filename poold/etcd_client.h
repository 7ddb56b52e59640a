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
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace gpupool::poold {

struct EtcdKeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, lease = 0;
};

// One comparison of a transaction (etcd's Compare, in the gateway's JSON form).
nlohmann::json EtcdCompareCreateRevision(const std::string& key, int64_t revision);  // key's create_revision == revision
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
  EtcdClient(std::vector<std::string> endpoints, int timeout_ms);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  struct TxnResult {
    bool succeeded = false;
    int64_t revision = 0;             // the store's revision after the transaction
    nlohmann::json responses;         // the gateway's "responses" array
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
  Result<nlohmann::json> Call(const std::string& path, const nlohmann::json& body);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads one key/value of the gateway's "kvs" array.
Result<EtcdKeyValue> ParseKeyValue(const nlohmann::json& kv);

}  // namespace gpupool::poold

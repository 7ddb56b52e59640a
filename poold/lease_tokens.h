// LeaseTokens: how a lease's token is kept at rest.
//
// A lease's token lets its job's processes use its GPUs' agents, so whoever reads the state
// (the SQLite file, a backup, etcd's keyspace) must not learn it. gpupoold stores only a
// random salt per lease; the token is HMAC-SHA256(key, salt), and the key lives in a file
// of its own (token_key_file, gpupool.conf(5)), outside the state. gpupoold derives the
// token again after a restart or a failover (agents and steps need it), but the state alone
// gives nothing.
//
// Thread safety: const after construction.
#pragma once

#include <string>

#include "common/status.h"

namespace gpupool::poold {

class LeaseTokens {
 public:
  // `key` empty: tokens are stored in clear (etcd without a token_key_file; said at start).
  explicit LeaseTokens(std::string key = "") : key_(std::move(key)) {}

  // A fresh token (32 hex digits) and what to store for it.
  Status Issue(std::string* token, std::string* stored) const;
  // The token from what Issue stored. A stored value from before (a bare token) is the token.
  // InvalidArgument when it is sealed but there is no key or it is malformed.
  Result<std::string> Open(const std::string& stored) const;
  bool sealed() const { return !key_.empty(); }

 private:
  std::string key_;
};

// The key in file `path` (hex, at least 32 digits, whitespace ignored). When it does not
// exist and `create` is set, writes a fresh one there (mode 0600) first.
Result<std::string> LoadTokenKey(const std::string& path, bool create);

}  // namespace gpupool::poold

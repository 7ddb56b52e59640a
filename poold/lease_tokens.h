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

#include <memory>
#include <string>

#include "common/status.h"

typedef struct evp_mac_ctx_st EVP_MAC_CTX;

namespace gpupool::poold {

class LeaseTokens {
 public:
  // `key` empty: tokens are stored in clear (etcd without a token_key_file; said at start).
  explicit LeaseTokens(std::string key = "");

  // A fresh token (32 hex digits) and what to store for it.
  Status Issue(std::string* token, std::string* stored) const;
  // The token from what Issue stored. A stored value from before (a bare token) is the token.
  // InvalidArgument when it is sealed but there is no key or it is malformed.
  Result<std::string> Open(const std::string& stored) const;
  bool sealed() const { return !key_.empty(); }

 private:
  std::string Derive(const std::string& salt) const;

  std::string key_;
  // HMAC-SHA256 keyed with key_, made once: each token is derived from a copy of it. The
  // one-shot HMAC() looked SHA-256 and HMAC up in OpenSSL's providers (shared, locked) at
  // every call: 1.3 us a token on one thread, 0.8 us now. Null without a key. Shared by
  // copies: it is only read (EVP_MAC_CTX_dup).
  std::shared_ptr<EVP_MAC_CTX> keyed_;
};

// The key in file `path` (hex, at least 32 digits, whitespace ignored). When it does not
// exist and `create` is set, writes a fresh one there (mode 0600) first.
Result<std::string> LoadTokenKey(const std::string& path, bool create);

}  // namespace gpupool::poold

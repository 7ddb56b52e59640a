// Sessions: short-lived bearer tokens that stand for a MUNGE authentication.
//
// A client proves its uid once with a MUNGE credential (POST /v1/session) and then sends
// "Authorization: Bearer <token>" on the following requests, so that munged is not asked
// twice per request. A token is 128 random bits, bound to the uid and to the client's
// address, and expires after `idle_seconds` without use.
//
// Thread safety: all methods lock mu_.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/status.h"

namespace gpupool::poold {

class Sessions {
 public:
  explicit Sessions(int idle_seconds = 300, size_t max_sessions = 100000) : idle_(idle_seconds), max_(max_sessions) {}

  // The new token; fails only when the random source does (common/random.h).
  Result<std::string> Create(uid_t uid, const std::string& address);
  // True and *uid when `token` is live and was issued to `address`; refreshes its expiry.
  bool Lookup(const std::string& token, const std::string& address, uid_t* uid);
  int idle_seconds() const { return static_cast<int>(idle_.count()); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Session {
    uid_t uid;
    std::string address;
    Clock::time_point expires;
  };
  void DropExpired(Clock::time_point now);  // REQUIRES: mu_ held

  const std::chrono::seconds idle_;
  const size_t max_;
  std::mutex mu_;
  std::unordered_map<std::string, Session> sessions_;  // GUARDED_BY(mu_)
};

}  // namespace gpupool::poold

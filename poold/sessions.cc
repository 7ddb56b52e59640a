#include "poold/sessions.h"

#include <utility>

#include "common/random.h"

namespace gpupool::poold {

Result<std::string> Sessions::Create(uid_t uid, const std::string& address) {
  Result<std::string> random = RandomHex(16);
  if (!random.ok()) return random.status();
  std::string token = std::move(random.value());
  std::lock_guard<std::mutex> lock(mu_);
  Clock::time_point now = Clock::now();
  if (sessions_.size() >= max_) DropExpired(now);
  if (sessions_.size() >= max_) sessions_.erase(sessions_.begin());  // the table never grows unbounded
  sessions_[token] = Session{uid, address, now + idle_};
  return Result<std::string>(std::move(token));
}

bool Sessions::Lookup(const std::string& token, const std::string& address, uid_t* uid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(token);
  if (it == sessions_.end()) return false;
  Clock::time_point now = Clock::now();
  if (it->second.expires < now) {
    sessions_.erase(it);
    return false;
  }
  if (it->second.address != address) return false;
  it->second.expires = now + idle_;
  *uid = it->second.uid;
  return true;
}

void Sessions::DropExpired(Clock::time_point now) {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = it->second.expires < now ? sessions_.erase(it) : std::next(it);
  }
}

}  // namespace gpupool::poold

#include "remote/dataplane/log_limiter.h"

#include "common/log.h"

namespace gpupool::dataplane {
namespace {

// Kinds remembered at most; past it the oldest summaries are written early, so a client
// that varies its messages cannot grow the map without bound.
constexpr size_t kMaxKinds = 1024;

}  // namespace

LogLimiter::LogLimiter(Clock::duration interval, Sink sink) : interval_(interval), sink_(std::move(sink)) {
  if (!sink_) sink_ = [](const std::string& line) { log::Warning(line); };
}

void LogLimiter::Log(const std::string& key, const std::string& line) { LogAt(Clock::now(), key, line); }

void LogLimiter::LogAt(Clock::time_point now, const std::string& key, const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  FlushLocked(now);
  auto found = kinds_.find(key);
  if (found != kinds_.end()) {
    ++found->second.suppressed;
    return;
  }
  if (kinds_.size() >= kMaxKinds) FlushLocked(now + interval_);  // everything is "over"
  kinds_[key] = Kind{now, line, 0};
  sink_(line);
}

void LogLimiter::Flush() { FlushAt(Clock::now()); }

void LogLimiter::FlushAt(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  FlushLocked(now);
}

void LogLimiter::FlushLocked(Clock::time_point now) {
  for (auto it = kinds_.begin(); it != kinds_.end();) {
    if (now - it->second.since < interval_) {
      ++it;
      continue;
    }
    if (it->second.suppressed > 0) {
      auto seconds = std::chrono::duration_cast<std::chrono::seconds>(interval_).count();
      sink_(it->second.line + " (" + std::to_string(it->second.suppressed) + " more like this in " +
            std::to_string(seconds) + " s)");
    }
    it = kinds_.erase(it);
  }
}

}  // namespace gpupool::dataplane

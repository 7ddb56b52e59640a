// LogLimiter: keeps a line the agent would log over and over (a client retrying
// a refused hello, every request on a failed GPU) from flooding its log.
//
// The first line of a kind is written at once; more of the same kind within
// `interval` are only counted, and once the interval is over one line says how
// many there were
// ("... (N more like this in 10 s)"). Lines are of one kind when their keys are
// equal: callers leave out what changes every time, such as a client's port.
// Thread-safe (the dataplane's GPU threads share one).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace gpupool::dataplane {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  using Sink = std::function<void(const std::string& line)>;

  // `sink` receives each line to write (default: common/log, as a warning).
  explicit LogLimiter(Clock::duration interval = std::chrono::seconds(10), Sink sink = nullptr);

  void Log(const std::string& key, const std::string& line);
  // Writes the counts of intervals that are over and forgets their kinds. The server
  // calls it every tick; Log calls it too.
  void Flush();
  void FlushAt(Clock::time_point now);  // for tests: Flush at a given time
  void LogAt(Clock::time_point now, const std::string& key, const std::string& line);

 private:
  struct Kind {
    Clock::time_point since;  // when the line was last written
    std::string line;
    uint64_t suppressed = 0;
  };
  void FlushLocked(Clock::time_point now);  // REQUIRES: mu_ held

  const Clock::duration interval_;
  Sink sink_;
  std::mutex mu_;
  std::map<std::string, Kind> kinds_;  // guarded by mu_
};

}  // namespace gpupool::dataplane

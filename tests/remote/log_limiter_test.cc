#include "remote/dataplane/log_limiter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpupool::dataplane {
namespace {

using namespace std::chrono_literals;

TEST(LogLimiter, WritesOneLineOfAKindPerIntervalThenTheCount) {
  std::vector<std::string> lines;
  LogLimiter log(10s, [&](const std::string& line) { lines.push_back(line); });
  auto t0 = LogLimiter::Clock::now();
  log.LogAt(t0, "refused 10.0.0.5", "refused client 10.0.0.5:1000");
  for (int i = 1; i <= 41; ++i) {
    log.LogAt(t0 + i * 100ms, "refused 10.0.0.5", "refused client 10.0.0.5:" + std::to_string(1000 + i));
  }
  log.LogAt(t0 + 1s, "other", "another kind");
  EXPECT_EQ(lines, (std::vector<std::string>{"refused client 10.0.0.5:1000", "another kind"}));
  log.FlushAt(t0 + 10s);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2], "refused client 10.0.0.5:1000 (41 more like this in 10 s)");
  log.FlushAt(t0 + 11s);  // "another kind" had no repeats: nothing to add
  EXPECT_EQ(lines.size(), 3u);
  log.LogAt(t0 + 12s, "refused 10.0.0.5", "refused client 10.0.0.5:2000");  // a new interval
  EXPECT_EQ(lines.back(), "refused client 10.0.0.5:2000");
  EXPECT_EQ(lines.size(), 4u);
}

TEST(LogLimiter, ManyKindsDoNotGrowWithoutBound) {
  size_t written = 0;
  LogLimiter log(10s, [&](const std::string&) { ++written; });
  auto t0 = LogLimiter::Clock::now();
  for (int i = 0; i < 5000; ++i) {
    log.LogAt(t0, "kind " + std::to_string(i), "line");
    log.LogAt(t0, "kind " + std::to_string(i), "line");  // counted, summarised when evicted
  }
  // Every kind was written once, and every evicted one with its count.
  EXPECT_GE(written, 5000u);
  EXPECT_LE(written, 10000u);
}

}  // namespace
}  // namespace gpupool::dataplane

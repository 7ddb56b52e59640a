// The latency probes (common/latency_probe.h): off unless GPUPOOL_LATENCY_PROBES=1, and on,
// every span counted and reported at exit with its mean. Each case runs in a child process,
// since a process reads the setting once.
#include "common/latency_probe.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace gpupool::probe {
namespace {

struct ChildResult {
  int exit_code = -1;
  std::string stderr_text;
};

// Runs `body` in a child whose GPUPOOL_LATENCY_PROBES is `setting` (nullptr: unset); the
// child exits (running the at-exit report) with what `body` returns.
template <typename Body>
ChildResult RunInChild(const char* setting, Body body) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {};
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    dup2(pipe_fds[1], STDERR_FILENO);
    if (setting == nullptr) {
      unsetenv("GPUPOOL_LATENCY_PROBES");
    } else {
      setenv("GPUPOOL_LATENCY_PROBES", setting, 1);
    }
    // The parent may have read the setting already (the transport tests probe too, when
    // they run first in this process): the child reads it afresh.
    internal::enabled_state.store(-1);
    std::exit(body());
  }
  close(pipe_fds[1]);
  ChildResult result;
  char buffer[4096];
  ssize_t got;
  while ((got = read(pipe_fds[0], buffer, sizeof(buffer))) > 0) result.stderr_text.append(buffer, got);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

void Sleep(std::chrono::milliseconds how_long) { std::this_thread::sleep_for(how_long); }

TEST(LatencyProbe, OffUnlessTheEnvironmentSaysOne) {
  for (const char* setting : {static_cast<const char*>(nullptr), "", "0", "yes", "11"}) {
    ChildResult child = RunInChild(setting, [] {
      static Site site("test.off");
      {
        Span span(site);
        Sleep(std::chrono::milliseconds(1));
      }
      AddSince(site, StartTicks());
      if (Enabled()) return 2;
      return site.spans() == 0 ? 0 : 3;
    });
    const std::string shown = setting == nullptr ? "(unset)" : setting;
    EXPECT_EQ(child.exit_code, 0) << "GPUPOOL_LATENCY_PROBES=" << shown;
    EXPECT_EQ(child.stderr_text, "") << "GPUPOOL_LATENCY_PROBES=" << shown;
  }
}

TEST(LatencyProbe, OnEverySpanCountsAndTheProcessReportsTheMeanAtExit) {
  ChildResult child = RunInChild("1", [] {
    static Site slept("test.slept");
    static Site unused("test.unused");
    for (int i = 0; i < 3; ++i) {
      Span span(slept);
      Sleep(std::chrono::milliseconds(5));
    }
    return slept.spans() == 3 && unused.spans() == 0 ? 0 : 4;
  });
  ASSERT_EQ(child.exit_code, 0) << child.stderr_text;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(child.stderr_text, match,
                                std::regex("gpupool-probe: Site=test\\.slept Spans=3 MeanNs=([0-9.]+)\n")))
      << child.stderr_text;
  const double mean_ns = std::stod(match[1]);
  EXPECT_GE(mean_ns, 5e6);  // each span slept 5 ms
  EXPECT_LT(mean_ns, 5e8);  // and the tick rate is not off by orders of magnitude
  EXPECT_EQ(child.stderr_text.find("test.unused"), std::string::npos) << child.stderr_text;
}

TEST(LatencyProbe, SpansOfSeveralThreadsAddUpInOneSite) {
  ChildResult child = RunInChild("1", [] {
    static Site shared("test.shared");
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([] {
        for (int i = 0; i < 10000; ++i) {
          GPUPOOL_PROBE_SCOPE(span, "test.macro");
          Span also(shared);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    return shared.spans() == 40000 ? 0 : 5;
  });
  EXPECT_EQ(child.exit_code, 0) << child.stderr_text;
  EXPECT_NE(child.stderr_text.find("Site=test.shared Spans=40000 "), std::string::npos) << child.stderr_text;
  EXPECT_NE(child.stderr_text.find("Site=test.macro Spans=40000 "), std::string::npos) << child.stderr_text;
}

}  // namespace
}  // namespace gpupool::probe

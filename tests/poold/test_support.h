// Helpers shared by gpupoold's tests: a private munged, credentials of other users, and
// raw HTTP calls.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <httplib.h>

#include "common/auth.h"
#include "tests/lib/credentials.h"

namespace gpupool::testing {

// Starts (once per process) a munged of the test's own under /tmp and exports MUNGE_SOCKET.
inline std::string StartPrivateMunged() {
  static std::string socket = [] {
    std::string dir = "/tmp/gpupool-test-munge-" + std::to_string(getpid());
    std::string cmd = std::string(GPUPOOL_SOURCE_DIR) + "/tests/lib/private-munged start " + dir;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[512] = {0};
    if (p == nullptr || std::fgets(buf, sizeof(buf), p) == nullptr) std::abort();
    pclose(p);
    std::string s(buf);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    setenv("MUNGE_SOCKET", s.c_str(), 1);
    std::atexit([] {
      std::string dir = "/tmp/gpupool-test-munge-" + std::to_string(getpid());
      std::string stop =
          std::string(GPUPOOL_SOURCE_DIR) + "/tests/lib/private-munged stop " + dir + " && rm -rf " + dir;
      if (std::system(stop.c_str()) != 0) std::fprintf(stderr, "could not stop private munged\n");
    });
    return s;
  }();
  return socket;
}

using test_lib::CredentialAs;

}  // namespace gpupool::testing

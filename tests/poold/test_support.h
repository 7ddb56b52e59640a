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
      std::string stop = std::string(GPUPOOL_SOURCE_DIR) + "/tests/lib/private-munged stop " + dir + " && rm -rf " + dir;
      if (std::system(stop.c_str()) != 0) std::fprintf(stderr, "could not stop private munged\n");
    });
    return s;
  }();
  return socket;
}

// A credential encoded by a child process running as `uid` (the test runs as root).
inline std::string CredentialAs(uid_t uid) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (setgid(uid) != 0 || setuid(uid) != 0) _exit(1);
    Result<std::string> cred = auth::EncodeCredential(auth::ResolveMungeSocket(""));
    if (!cred.ok()) _exit(2);
    ssize_t n = write(fds[1], cred->data(), cred->size());
    _exit(n == static_cast<ssize_t>(cred->size()) ? 0 : 3);
  }
  close(fds[1]);
  std::string out;
  char buf[1024];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return out;
}

}  // namespace gpupool::testing

// Credentials for tests: a MUNGE credential encoded as another user, for role tests.
// The test runs as root; a child process drops to `uid` and encodes through MUNGE_SOCKET.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "common/auth.h"

namespace gpupool::test_lib {

inline std::string CredentialAs(uid_t uid) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (setgid(uid) != 0 || setuid(uid) != 0) _exit(1);
    Result<std::string> cred = auth::EncodeCredential("");
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

}  // namespace gpupool::test_lib

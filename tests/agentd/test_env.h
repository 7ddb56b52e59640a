// Helpers shared by the agentd tests that need services: a private munged (started from
// tests/lib/private-munged, socket exported as MUNGE_SOCKET), free ports in the agentd
// test range, HTTP calls with credentials, and waiting for a condition.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/auth.h"
#include "tests/agentd/temp_dir.h"
#include "tests/lib/credentials.h"

extern char** environ;

namespace gpupool::agentd::testing_env {

// Everything left to read from `stream`.
inline std::string ReadToEnd(FILE* stream) {
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), stream)) > 0) out.append(buf, n);
  return out;
}

// Runs a shell command, returns its stdout (trailing newline removed) or "" on failure.
inline std::string Run(const std::string& cmd, int* status = nullptr) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out = ReadToEnd(p);
  int st = pclose(p);
  if (status != nullptr) *status = st;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// A munged of our own for the whole test binary.
class PrivateMunged : public ::testing::Environment {
 public:
  void SetUp() override {
    dir_ = MakeTempDir("gpupool-agentd-munge");
    ASSERT_FALSE(dir_.empty());
    int st = 0;
    std::string socket = Run(std::string(GPUPOOL_AGENTD_MUNGED_SH) + " start " + dir_, &st);
    ASSERT_EQ(st, 0) << "private-munged start failed";
    ASSERT_FALSE(socket.empty());
    setenv("MUNGE_SOCKET", socket.c_str(), 1);
  }
  void TearDown() override {
    Run(std::string(GPUPOOL_AGENTD_MUNGED_SH) + " stop " + dir_);
    Run("rm -rf " + dir_);
  }

 private:
  std::string dir_;
};

// A port in 21000-21999 that nothing listens on now (the range given to agentd tests).
inline int FreePort() {
  static int next = 21000 + static_cast<int>(getpid() % 500);
  for (int tries = 0; tries < 1000; ++tries) {
    int port = next++;
    if (next > 21999) next = 21000;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (free) return port;
  }
  return -1;
}

inline std::string Credential() {
  Result<std::string> c = auth::EncodeCredential(auth::ResolveMungeSocket(""));
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? c.value() : "";
}

using gpupool::test_lib::CredentialAs;

struct Answer {
  int status = 0;
  nlohmann::json body;
};

inline Answer Call(int port, const std::string& method, const std::string& path, const std::string& body = "",
                   const std::string& authorization = "fresh") {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(5, 0);
  httplib::Headers headers;
  if (authorization == "fresh") {
    headers.emplace("Authorization", "MUNGE " + Credential());
  } else if (!authorization.empty()) {
    headers.emplace("Authorization", authorization);
  }
  httplib::Result res = method == "GET" ? client.Get(path.c_str(), headers)
                                        : client.Post(path.c_str(), headers, body, "application/json");
  Answer a;
  if (!res) return a;
  a.status = res->status;
  a.body = nlohmann::json::parse(res->body, nullptr, false);
  return a;
}

// Starts `argv[0]` with stdout and stderr appended to `output_path`; returns its pid.
inline pid_t Spawn(std::vector<std::string> args, const std::string& output_path) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "cannot start " << args[0];
  return rc == 0 ? pid : -1;
}

inline std::string ReadFile(const std::string& path) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  std::string out = ReadToEnd(f);
  fclose(f);
  return out;
}

template <typename Pred>
bool Eventually(Pred pred, int timeout_ms = 5000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

}  // namespace gpupool::agentd::testing_env

// gpupoolctl's program logic with a fake transport: exit codes, the one-line errors, the
// precedence of --server / $GPUPOOL_SERVER / config, and that bad input sends nothing.
#include "poold/ctl/ctl.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace gpupool::ctl {
namespace {

using nlohmann::json;

// Records the requests it is given and answers each with the next canned result.
class FakeServer {
 public:
  std::vector<ApiRequest> requests;
  std::vector<Result<json>> answers;

  Transport transport() {
    return [this](const ApiRequest& r) -> Result<json> {
      requests.push_back(r);
      if (answers.empty()) return Status::Internal("fake server has no answer left");
      Result<json> next = answers.front();
      answers.erase(answers.begin());
      return next;
    };
  }
};

struct RunResult {
  int code;
  std::string out;
  std::string err;
};

RunResult Exec(std::vector<std::string> words, FakeServer* server) {
  Result<CtlArgs> args = ParseArgs(words);
  EXPECT_TRUE(args.ok()) << args.status().message();
  std::ostringstream out, err;
  int code = Execute(args.value(), "http://127.0.0.1:25001", server->transport(), out, err);
  return {code, out.str(), err.str()};
}

// A config file that lives as long as the object.
class TempConfig {
 public:
  explicit TempConfig(const std::string& text) {
    char name[] = "/tmp/c-ctl-test-XXXXXX";
    int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = name;
    std::ofstream(path_) << text;
  }
  ~TempConfig() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

CtlEnv NoEnv() {
  CtlEnv env;
  env.system_conf = "/nonexistent/c-ctl-test/gpupool.conf";
  return env;
}

CtlArgs ArgsOf(std::vector<std::string> words) {
  Result<CtlArgs> a = ParseArgs(words);
  EXPECT_TRUE(a.ok()) << a.status().message();
  return a.value();
}

TEST(CtlTest, PrintsFormattedAnswer) {
  FakeServer server;
  server.answers.push_back(json{{"pools", {{{"name", "a100"}, {"total", 8}}}}});
  RunResult r = Exec({"show", "pools", "-o"}, &server);
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.rfind("Pool=a100 Total=8 ", 0), 0u) << r.out;
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(server.requests[0].path, "/v1/pools");
}

TEST(CtlTest, JsonIsTheAnswerAsIs) {
  FakeServer server;
  json answer = {{"pools", json::array()}, {"extra", 1}};
  server.answers.push_back(answer);
  RunResult r = Exec({"show", "pools", "--json"}, &server);
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(json::parse(r.out), answer);
  EXPECT_EQ(r.out, answer.dump(2) + "\n");
}

TEST(CtlTest, ServerErrorIsOneLineAndExitOne) {
  FakeServer server;
  server.answers.push_back(Status::NotFound("no such lease 'L12'"));
  RunResult r = Exec({"release", "lease=L12"}, &server);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "gpupoolctl: error: no such lease 'L12'\n");
}

TEST(CtlTest, MissingCredentialWithDeadDaemonNamesTheAddress) {
  FakeServer server;
  server.answers.push_back(Status::Unauthenticated("cannot get a MUNGE credential: no socket"));
  server.answers.push_back(Status::Unavailable("cannot reach gpupoold at http://127.0.0.1:25001: Connection"));
  RunResult r = Exec({"show", "gpus"}, &server);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gpupoolctl: error: cannot reach gpupoold at http://127.0.0.1:25001: Connection\n");
  ASSERT_EQ(server.requests.size(), 2u);
  EXPECT_EQ(server.requests[1].path, "/v1/ping");
}

TEST(CtlTest, MissingCredentialWithLiveDaemonReportsTheCredential) {
  FakeServer server;
  server.answers.push_back(Status::Unauthenticated("cannot get a MUNGE credential: no socket"));
  server.answers.push_back(json{{"ok", true}});
  RunResult r = Exec({"show", "gpus"}, &server);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gpupoolctl: error: cannot get a MUNGE credential: no socket\n");
}

TEST(CtlTest, BadUsageExitsTwoAndSendsNothing) {
  std::ostringstream out, err;
  // Main with a server that does not exist: a request would fail with exit 1, not 2.
  int code = Main({"--server", "http://127.0.0.1:25996", "update", "gpu=g", "state=broken"}, NoEnv(), out, err);
  EXPECT_EQ(code, 2);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str().rfind("gpupoolctl: error: bad state 'broken' (expected drain, resume or fail)\n", 0), 0u)
      << err.str();
  EXPECT_NE(err.str().find("--help"), std::string::npos);
}

TEST(CtlTest, HelpAndVersionNeedNoServer) {
  std::ostringstream out, err;
  EXPECT_EQ(Main({"--help"}, NoEnv(), out, err), 0);
  EXPECT_NE(out.str().find("Usage: gpupoolctl"), std::string::npos);
  std::ostringstream vout, verr;
  EXPECT_EQ(Main({"--version"}, NoEnv(), vout, verr), 0);
  EXPECT_EQ(vout.str().rfind("gpupoolctl ", 0), 0u);
}

TEST(CtlTest, ServerPrecedence) {
  TempConfig conf(
      "client = { server = \"http://127.0.0.1:25003\"; timeout = 2; };\n"
      "munge_socket = \"/tmp/c-munge/sock\";\n");
  CtlEnv env = NoEnv();
  env.gpupool_conf = conf.path();

  Result<Settings> from_config = ResolveSettings(ArgsOf({"ping"}), env);
  ASSERT_TRUE(from_config.ok()) << from_config.status().message();
  EXPECT_EQ(from_config->server, "http://127.0.0.1:25003");
  EXPECT_EQ(from_config->timeout_ms, 2000);
  EXPECT_EQ(from_config->munge_socket, "/tmp/c-munge/sock");
  EXPECT_EQ(from_config->config_path, conf.path());

  env.gpupool_server = "http://127.0.0.1:25002";
  EXPECT_EQ(ResolveSettings(ArgsOf({"ping"}), env)->server, "http://127.0.0.1:25002");
  EXPECT_EQ(ResolveSettings(ArgsOf({"--server", "http://127.0.0.1:25001", "ping"}), env)->server,
            "http://127.0.0.1:25001");
}

TEST(CtlTest, ConfigPrecedence) {
  TempConfig flag("client = { server = \"http://flag:1\"; };\n");
  TempConfig envconf("client = { server = \"http://env:1\"; };\n");
  TempConfig system("client = { server = \"http://system:1\"; };\n");
  CtlEnv env = NoEnv();
  EXPECT_EQ(ResolveSettings(ArgsOf({"ping"}), env)->server, "http://127.0.0.1:6830");
  EXPECT_EQ(ResolveSettings(ArgsOf({"ping"}), env)->config_path, "");
  env.system_conf = system.path();
  EXPECT_EQ(ResolveSettings(ArgsOf({"ping"}), env)->server, "http://system:1");
  env.gpupool_conf = envconf.path();
  EXPECT_EQ(ResolveSettings(ArgsOf({"ping"}), env)->server, "http://env:1");
  EXPECT_EQ(ResolveSettings(ArgsOf({"-f", flag.path(), "ping"}), env)->server, "http://flag:1");
}

TEST(CtlTest, BadOrMissingConfigIsAnErrorNamingIt) {
  TempConfig bad("client = { sever = \"http://x:1\"; };\n");
  std::ostringstream out, err;
  int code = Main({"-f", bad.path(), "ping"}, NoEnv(), out, err);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(err.str().rfind("gpupoolctl: error: " + bad.path() + ":1: client.sever: unknown key", 0), 0u) << err.str();

  CtlEnv env = NoEnv();
  env.gpupool_conf = "/nonexistent/c-ctl-test/named.conf";
  Result<Settings> missing = ResolveSettings(ArgsOf({"ping"}), env);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/c-ctl-test/named.conf"), std::string::npos);
}

TEST(CtlTest, UnreachableDaemonNamesTheAddress) {
  // Nothing listens on this port of C's range: the connection is refused at once.
  std::ostringstream out, err;
  int code = Main({"--server", "http://127.0.0.1:25996", "ping"}, NoEnv(), out, err);
  EXPECT_EQ(code, 1);
  const std::string text = err.str();
  EXPECT_EQ(text.rfind("gpupoolctl: error: cannot reach gpupoold at http://127.0.0.1:25996", 0), 0u) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
}

}  // namespace
}  // namespace gpupool::ctl

// The gpupool-agentd binary: bad input exits 2 with one line, a backend that cannot start
// exits 1, and a running agent serves its control API, honours --fault and stops on
// SIGTERM, in the foreground (-D) and detached.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "test_env.h"

namespace gpupool::agentd {
namespace {

using testing_env::Call;
using testing_env::Eventually;

class AgentdCliTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_env::MakeTempDir("gpupool-agentd-cli");
    ASSERT_FALSE(dir_.empty());
    setenv("GPUPOOL_CONF", (dir_ + "/absent.conf").c_str(), 1);  // never the machine's config
  }
  void TearDown() override {
    for (pid_t pid : running_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    testing_env::Run("rm -rf " + dir_);
  }

  // Starts the agent with stdout+stderr into dir_/out; returns its pid.
  pid_t Spawn(std::vector<std::string> args) {
    args.insert(args.begin(), GPUPOOL_AGENTD_BIN);
    std::string out = dir_ + "/out";
    unlink(out.c_str());
    return testing_env::Spawn(args, out);
  }

  // Runs to the end; returns the exit code and sets *output.
  int RunToExit(std::vector<std::string> args, std::string* output) {
    pid_t pid = Spawn(std::move(args));
    int st = 0;
    waitpid(pid, &st, 0);
    *output = Output();
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

  std::string Output() { return testing_env::ReadFile(dir_ + "/out"); }

  std::vector<std::string> ServerArgs(int control_port, int poold_port) {
    return {"--server",   "http://127.0.0.1:" + std::to_string(poold_port),
            "--host",     "gpuhost1",
            "--listen",   "127.0.0.1:" + std::to_string(testing_env::FreePort()),
            "--control",  "127.0.0.1:" + std::to_string(control_port),
            "--backend",  "sim",
            "--sim-gpus", "A100-SXM4-80GB:80G:2"};
  }

  std::string dir_;
  std::vector<pid_t> running_;
};

TEST_F(AgentdCliTest, BadInputExitsTwoWithOneLine) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--frobnicate"}, "unknown option '--frobnicate'"},
      {{"--backend", "tpu", "-D"}, "--backend 'tpu'"},
      {{"--sim-gpus", "A100:80G", "-D"}, "--sim-gpus 'A100:80G'"},
      {{"--fault", "0:explode", "-D"}, "unknown fault mode 'explode'"},
      {{"--control", "0.0.0.0:21000", "-D"}, "loopback only"},
      {{"--listen", "nowhere", "-D"}, "--listen"},
      {{"-f", "/nonexistent/gpupool.conf", "-D"}, "does not exist"},
      {{"--fault", "7:fail", "-D", "--backend", "sim", "--sim-gpus", "A100:80G:2"}, "no GPU with index 7"},
      {{"--fault", "7:fail", "--backend", "sim", "--sim-gpus", "A100:80G:2"}, "no GPU with index 7"},  // detached too
      // No backend named anywhere: nothing starts (no simulated GPUs on an unconfigured host).
      {{"-D", "--sim-gpus", "A100:80G:2"}, "agent.backend is not set"},
      {{"--sim-gpus", "A100:80G:2"}, "agent.backend is not set"},
  };
  for (const auto& [args, message] : cases) {
    std::string out;
    EXPECT_EQ(RunToExit(args, &out), 2) << testing::PrintToString(args) << ": " << out;
    EXPECT_NE(out.find(message), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    EXPECT_EQ(out.rfind("gpupool-agentd: ", 0), 0u) << out;
  }
}

TEST_F(AgentdCliTest, CudaBackendFailsCleanlyWithoutAGpu) {
  for (bool foreground : {true, false}) {
    std::string out;
    std::vector<std::string> args = {"--backend", "cuda"};
    if (foreground) args.push_back("-D");
    EXPECT_EQ(RunToExit(args, &out), 1) << out;
    EXPECT_NE(out.find("cannot start backend 'cuda': cannot load libnvidia-ml.so.1: "), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
}

TEST_F(AgentdCliTest, ForegroundServesControlApiAndStopsOnSigterm) {
  int control = testing_env::FreePort();
  std::vector<std::string> args = ServerArgs(control, testing_env::FreePort());
  args.insert(args.end(), {"-D", "--fault", "1:fail=Xid 48"});
  pid_t pid = Spawn(args);
  running_.push_back(pid);
  testing_env::Answer a;
  ASSERT_TRUE(Eventually([&] { return (a = Call(control, "GET", "/v1/gpus")).status == 200; })) << Output();
  ASSERT_EQ(a.body["gpus"].size(), 2u);
  EXPECT_EQ(a.body["host"], "gpuhost1");
  EXPECT_EQ(a.body["registered"], false);  // nothing listens on --server
  EXPECT_EQ(a.body["gpus"][0]["health"], "OK");
  EXPECT_EQ(a.body["gpus"][1]["health"], "FAILED");
  EXPECT_EQ(a.body["gpus"][1]["reason"], "Xid 48");
  auto f = Call(control, "POST", "/v1/faults", R"({"index":1,"mode":"clear"})");
  EXPECT_EQ(f.status, 200) << f.body.dump();
  EXPECT_EQ(f.body["gpu"]["health"], "OK");
  // Let it retry a few times (backoff 200, 400 ms, ...) before stopping it.
  ASSERT_TRUE(Eventually([&] { return Output().find("cannot register with gpupoold") != std::string::npos; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  running_.clear();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << Output();
  // Unreachable gpupoold was logged once, not at every retry.
  std::string out = Output();
  size_t first = out.find("cannot register with gpupoold");
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_EQ(out.find("cannot register with gpupoold", first + 1), std::string::npos) << out;
}

TEST_F(AgentdCliTest, DetachesAndWritesPidFile) {
  int control = testing_env::FreePort();
  std::vector<std::string> args = ServerArgs(control, testing_env::FreePort());
  std::string pid_file = dir_ + "/agentd.pid";
  args.insert(args.end(), {"--pid-file", pid_file, "--log-file", dir_ + "/agentd.log"});
  std::string out;
  // The parent returns once the daemon serves, so the control API answers at once.
  ASSERT_EQ(RunToExit(args, &out), 0) << out;
  std::ifstream in(pid_file);
  pid_t pid = 0;
  in >> pid;
  ASSERT_GT(pid, 0);
  EXPECT_EQ(Call(control, "GET", "/v1/gpus").status, 200);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  // Not our child: wait for the pid file to go and the process to end.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(Eventually([&] { return access(pid_file.c_str(), F_OK) != 0; }, 3000));
  std::cerr << "stop took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()
            << " ms\n";
  EXPECT_NE(access(pid_file.c_str(), F_OK), 0);
  std::ifstream log(dir_ + "/agentd.log");
  std::stringstream ss;
  ss << log.rdbuf();
  EXPECT_NE(ss.str().find("stopping on signal"), std::string::npos) << ss.str();
}

}  // namespace
}  // namespace gpupool::agentd

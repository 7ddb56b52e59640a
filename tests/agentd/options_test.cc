// gpupool-agentd's command line and its merge with gpupool.conf: every bad input is one
// line naming the option.
#include "remote/agentd/options.h"
#include "tests/agentd/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace gpupool::agentd {
namespace {

Result<CommandLine> Parse(std::vector<std::string> args) { return ParseCommandLine(args); }

void ExpectError(std::vector<std::string> args, const std::string& must_contain) {
  Result<CommandLine> cl = Parse(args);
  Status s = cl.ok() ? ResolveSettings(cl.value()).status() : cl.status();
  ASSERT_FALSE(s.ok()) << "accepted: " << testing::PrintToString(args);
  EXPECT_NE(s.message().find(must_contain), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

class OptionsTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_env::MakeTempDir("gpupool-agentd-options");
    ASSERT_FALSE(dir_.empty());
    // Never read the machine's /etc/gpupool/gpupool.conf.
    setenv("GPUPOOL_CONF", (dir_ + "/absent.conf").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("GPUPOOL_CONF");
    std::system(("rm -rf " + dir_).c_str());
  }
  std::string WriteConfig(const std::string& text) {
    std::string path = dir_ + "/gpupool.conf";
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(OptionsTest, DefaultsWithoutConfigFile) {
  auto cl = Parse({"--backend", "sim"});
  ASSERT_TRUE(cl.ok());
  auto s = ResolveSettings(cl.value());
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->config.agent.backend, "sim");
  EXPECT_FALSE(s->config.agent.host.empty());  // gethostname()
  EXPECT_FALSE(s->foreground);
}

// Safe package defaults (issue 39): an agent nobody configured would otherwise register
// simulated GPUs with gpupoold. Neither the file nor the command line naming a backend is
// an error naming the key; either one naming it is enough.
TEST_F(OptionsTest, BackendMustBeSetExplicitly) {
  ExpectError({}, "agent.backend is not set (no ");
  std::string silent = WriteConfig("agent = { server = \"http://127.0.0.1:1\"; };\n");
  ExpectError({"-f", silent}, "agent.backend is not set in " + silent + ": set backend = \"cuda\";");
  ExpectError({"-f", silent, "--fault", "0:fail"}, "agent.backend is not set");
  auto from_line = ResolveSettings(Parse({"-f", silent, "--backend", "sim"}).value());
  ASSERT_TRUE(from_line.ok()) << from_line.status().message();
  EXPECT_EQ(from_line->config.agent.backend, "sim");
  std::string cuda = WriteConfig("agent = { backend = \"cuda\"; };\n");
  auto from_file = ResolveSettings(Parse({"-f", cuda}).value());
  ASSERT_TRUE(from_file.ok()) << from_file.status().message();
  EXPECT_EQ(from_file->config.agent.backend, "cuda");
  std::string empty = WriteConfig("agent = { backend = \"\"; };\n");
  ExpectError({"-f", empty}, "must be \"sim\" or \"cuda\"");
}

TEST_F(OptionsTest, CommandLineOverridesConfig) {
  std::string conf = WriteConfig(
      "agent = { server = \"http://127.0.0.1:1\"; host = \"fromfile\"; rack = \"r9\"; backend = \"sim\";\n"
      "  heartbeat_interval = 7; sim = { gpus = ( { model = \"L4\"; memory = \"24G\"; count = 2; } ); }; };\n");
  auto cl = Parse({"-D", "-vv", "-f", conf, "--host", "gpuhost1", "--listen=127.0.0.1:21010", "--control",
                   "127.0.0.1:21011", "--sim-gpus", "A100-SXM4-80GB:80G:2,H100:81920M:1", "--fault", "1:fail-after=3",
                   "--fault", "0:fail=Xid 79"});
  ASSERT_TRUE(cl.ok()) << cl.status().message();
  auto s = ResolveSettings(cl.value());
  ASSERT_TRUE(s.ok()) << s.status().message();
  const AgentConfig& a = s->config.agent;
  EXPECT_TRUE(s->foreground);
  EXPECT_EQ(s->verbose, 2);
  EXPECT_EQ(a.host, "gpuhost1");
  EXPECT_EQ(a.rack, "r9");                    // from the file
  EXPECT_EQ(a.server, "http://127.0.0.1:1");  // from the file
  EXPECT_EQ(a.heartbeat_interval, 7);
  EXPECT_EQ(a.listen, "127.0.0.1:21010");
  EXPECT_EQ(a.control, "127.0.0.1:21011");
  ASSERT_EQ(a.sim_gpus.size(), 2u);
  EXPECT_EQ(a.sim_gpus[0].model, "A100-SXM4-80GB");
  EXPECT_EQ(a.sim_gpus[0].memory_mib, 81920u);
  EXPECT_EQ(a.sim_gpus[0].count, 2);
  EXPECT_EQ(a.sim_gpus[1].memory_mib, 81920u);
  ASSERT_EQ(s->faults.size(), 2u);
  EXPECT_EQ(s->faults[0].first, 1);
  EXPECT_EQ(s->faults[0].second.mode, device::FaultMode::kFailAfter);
  EXPECT_EQ(s->faults[0].second.ops, 3u);
  EXPECT_EQ(s->faults[1].second.reason, "Xid 79");
}

TEST_F(OptionsTest, SimGpusFromConfigFile) {
  std::string conf = WriteConfig(
      "agent = { backend = \"sim\"; sim = { gpus = ( { model = \"L4\"; memory = \"24G\"; count = 3; } ); }; };\n");
  auto s = ResolveSettings(Parse({"-f", conf}).value());
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->config.agent.sim_gpus.size(), 1u);
  EXPECT_EQ(s->config.agent.sim_gpus[0].count, 3);
}

TEST_F(OptionsTest, SimFaultsFromConfigFileComeBeforeTheCommandLine) {
  std::string conf =
      WriteConfig("agent = { backend = \"sim\"; sim = { faults = [ \"0:fail=Xid 79\", \"2:hang\" ]; }; };\n");
  auto s = ResolveSettings(Parse({"-f", conf, "--fault", "1:fail-after=3"}).value());
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->faults.size(), 3u);
  EXPECT_EQ(s->faults[0].first, 0);
  EXPECT_EQ(s->faults[1].first, 2);
  EXPECT_EQ(s->faults[2].first, 1);
  std::string bad = WriteConfig("agent = { backend = \"sim\"; sim = { faults = [ \"0:explode\" ]; }; };\n");
  ExpectError({"-f", bad}, "agent.sim.faults: unknown fault mode 'explode'");
}

TEST_F(OptionsTest, BadOptions) {
  ExpectError({"--bogus"}, "unknown option '--bogus'");
  ExpectError({"-x"}, "unknown option '-x'");
  ExpectError({"stray"}, "unexpected argument 'stray'");
  ExpectError({"--server"}, "option '--server' needs a value");
  ExpectError({"--host="}, "needs a non-empty value");
  ExpectError({"--backend", "tpu"}, "--backend 'tpu'");
  ExpectError({"--listen", "nocolon"}, "--listen");
  ExpectError({"--listen", "127.0.0.1:0"}, "--listen");
  ExpectError({"--listen", "127.0.0.1:70000"}, "--listen");
  ExpectError({"--control", "0.0.0.0:21000"}, "loopback only");
  ExpectError({"--control", "10.1.2.3:21000"}, "loopback only");
  ExpectError({"--control", "127.0.0.1:x"}, "--control");
  ExpectError({"--sim-gpus", "A100:80G"}, "--sim-gpus 'A100:80G'");
  ExpectError({"--sim-gpus", "A100:80Q:2"}, "--sim-gpus");
  ExpectError({"--sim-gpus", "A100:80G:0"}, "count");
  ExpectError({"--sim-gpus", "A100:0:1"}, "memory");
  ExpectError({"--sim-gpus", ":80G:1"}, "empty model");
  ExpectError({"--sim-gpus", "A100:80G:1,"}, "--sim-gpus");
  ExpectError({"--fault", "fail"}, "--fault 'fail'");
  ExpectError({"--fault", "x:fail"}, "GPU index");
  ExpectError({"--fault", "0:explode"}, "unknown fault mode 'explode'");
  ExpectError({"--fault", "0:fail-after=abc"}, "fail-after");
  ExpectError({"--backend", "cuda", "--fault", "0:fail"}, "only the sim backend");
  ExpectError({"-f", "/nonexistent/gpupool.conf"}, "'/nonexistent/gpupool.conf' does not exist");
}

TEST_F(OptionsTest, BadConfigFileNamesFileAndKey) {
  std::string conf = WriteConfig("agent = { bakend = \"sim\"; };\n");
  ExpectError({"-f", conf}, "bakend");
}

TEST(HostPort, Parses) {
  auto hp = ParseHostPort("127.0.0.1:21000", false);
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_EQ(hp->port, 21000);
  hp = ParseHostPort("[::1]:21001", false);
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_TRUE(ParseHostPort("localhost:0", true).ok());
  EXPECT_FALSE(ParseHostPort("localhost:0", false).ok());
  EXPECT_FALSE(ParseHostPort(":80", false).ok());
  EXPECT_FALSE(ParseHostPort("::1:80", false).ok());
  EXPECT_TRUE(IsLoopbackHost("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("128.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("gpuhost1"));
}

}  // namespace
}  // namespace gpupool::agentd

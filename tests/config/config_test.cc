// The strict loader of gpupool.conf (common/config.h): every kind of bad input is refused
// with a message naming file, line and key; the example etc/gpupool.conf loads.
#include "common/config.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

// The parse must fail with a one-line message that starts with "gpupool.conf:<line>: "
// and names `key` (the last component of the key's path) followed by `what`.
void ExpectError(const std::string& text, int line, const std::string& key, const std::string& what) {
  Result<Config> r = ParseConfig(text, "gpupool.conf");
  ASSERT_FALSE(r.ok()) << "accepted:\n" << text;
  const std::string& m = r.status().message();
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  std::string where = "gpupool.conf:" + std::to_string(line) + ": ";
  EXPECT_EQ(m.rfind(where, 0), 0u) << "'" << m << "' does not start with '" << where << "'";
  EXPECT_NE(m.find(key + ": " + what), std::string::npos)
      << "'" << m << "' does not name '" << key << ": " << what << "'";
  EXPECT_EQ(m.find('\n'), std::string::npos) << "not one line: " << m;
}

TEST(ConfigTest, EmptyFileGivesDefaults) {
  Result<Config> r = ParseConfig("", "gpupool.conf");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->path, "gpupool.conf");
  EXPECT_EQ(r->munge_socket, "");
  EXPECT_EQ(r->poold.listen, "127.0.0.1:6830");
  EXPECT_EQ(r->poold.state_dir, "/var/lib/gpupool");
  EXPECT_EQ(r->poold.slurm_user, "slurm");
  EXPECT_EQ(r->poold.lease_ttl, 600);
  EXPECT_EQ(r->poold.max_lease_ttl, 604800);
  EXPECT_EQ(r->poold.unreachable_timeout, 15);
  EXPECT_EQ(r->poold.reap_interval, 30);
  EXPECT_TRUE(r->poold.slurm_reap);
  EXPECT_TRUE(r->poold.enforce_licenses);
  EXPECT_EQ(r->poold.durability, "fsync");
  EXPECT_EQ(r->poold.max_request_bytes, 65536);
  EXPECT_EQ(r->poold.threads, 128);
  EXPECT_TRUE(r->pools.empty());
  EXPECT_TRUE(r->gpus.empty());
  EXPECT_EQ(r->agent.server, "http://127.0.0.1:6830");
  EXPECT_EQ(r->agent.backend, "");  // not set: the agent refuses to start (issue 39)
  EXPECT_EQ(r->agent.heartbeat_interval, 2);
  ASSERT_EQ(r->agent.sim_gpus.size(), 1u);
  EXPECT_EQ(r->agent.sim_gpus[0].count, 4);
  EXPECT_EQ(r->agent.sim_gpus[0].memory_mib, 81920u);
  EXPECT_EQ(r->client.server, "http://127.0.0.1:6830");
  EXPECT_EQ(r->client.timeout, 5);
}

TEST(ConfigTest, EveryKeyIsRead) {
  Result<Config> r = ParseConfig(R"(
munge_socket = "/tmp/c-munge/sock";
gpupoold = { listen = "127.0.0.1:25010"; state_dir = "/tmp/c-state"; log_file = "/tmp/c-log";
  slurm_user = "root"; admins = ["alice", "1001"]; agent_users = ("gpupool");
  lease_ttl = 60; max_lease_ttl = 120; unreachable_timeout = 3; reap_interval = 0;
  slurm_reap = false; enforce_licenses = false; durability = "process"; max_request_bytes = 4096; threads = 8; };
pools = ( { name = "a100"; models = ["*A100*"]; racks = ["r1"]; hosts = ["h1", "h2"];
            min_memory = "40G"; },
          { name = "h100"; min_memory = 1024; } );
gpus = ( { gpu = "h1:0"; pool = "h100"; } );
agent = { server = "127.0.0.1:25010"; host = "h1"; rack = "r1"; listen = "127.0.0.1:25020";
  control = "127.0.0.1:25030"; backend = "cuda"; heartbeat_interval = 1;
  sim = { gpus = ( { model = "H100"; memory = "1T"; count = 2; } ); }; };
client = { server = "http://127.0.0.1:25010"; timeout = 9; };
)",
                                 "x.conf");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->munge_socket, "/tmp/c-munge/sock");
  EXPECT_EQ(r->poold.listen, "127.0.0.1:25010");
  EXPECT_EQ(r->poold.state_dir, "/tmp/c-state");
  EXPECT_EQ(r->poold.log_file, "/tmp/c-log");
  EXPECT_EQ(r->poold.slurm_user, "root");
  EXPECT_EQ(r->poold.admins, (std::vector<std::string>{"alice", "1001"}));
  EXPECT_EQ(r->poold.agent_users, (std::vector<std::string>{"gpupool"}));
  EXPECT_EQ(r->poold.lease_ttl, 60);
  EXPECT_EQ(r->poold.max_lease_ttl, 120);
  EXPECT_EQ(r->poold.unreachable_timeout, 3);
  EXPECT_EQ(r->poold.reap_interval, 0);
  EXPECT_FALSE(r->poold.slurm_reap);
  EXPECT_FALSE(r->poold.enforce_licenses);
  EXPECT_EQ(r->poold.durability, "process");
  EXPECT_EQ(r->poold.max_request_bytes, 4096);
  EXPECT_EQ(r->poold.threads, 8);
  ASSERT_EQ(r->pools.size(), 2u);
  EXPECT_EQ(r->pools[0].name, "a100");
  EXPECT_EQ(r->pools[0].models, (std::vector<std::string>{"*A100*"}));
  EXPECT_EQ(r->pools[0].racks, (std::vector<std::string>{"r1"}));
  EXPECT_EQ(r->pools[0].hosts, (std::vector<std::string>{"h1", "h2"}));
  EXPECT_EQ(r->pools[0].min_memory_mib, 40960u);
  EXPECT_EQ(r->pools[1].min_memory_mib, 1024u);
  ASSERT_EQ(r->gpus.size(), 1u);
  EXPECT_EQ(r->gpus[0].gpu, "h1:0");
  EXPECT_EQ(r->gpus[0].pool, "h100");
  EXPECT_EQ(r->gpus[0].line, 10);
  EXPECT_EQ(r->agent.host, "h1");
  EXPECT_EQ(r->agent.control, "127.0.0.1:25030");
  EXPECT_EQ(r->agent.backend, "cuda");
  ASSERT_EQ(r->agent.sim_gpus.size(), 1u);
  EXPECT_EQ(r->agent.sim_gpus[0].model, "H100");
  EXPECT_EQ(r->agent.sim_gpus[0].memory_mib, 1024u * 1024u);
  EXPECT_EQ(r->agent.sim_gpus[0].count, 2);
  EXPECT_EQ(r->client.timeout, 9);
}

TEST(ConfigTest, SessionWorkerLimitsAreRead) {
  auto r = ParseConfig("agent = { worker_cgroup = \"required\"; worker_memory = \"2G\"; worker_cpu_seconds = 60; };\n",
                       "x.conf");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->agent.worker_cgroup, "required");
  EXPECT_EQ(r->agent.worker_memory_mib, 2048u);
  EXPECT_EQ(r->agent.worker_cpu_seconds, 60);
  auto defaults = ParseConfig("", "x.conf");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->agent.worker_cgroup, "auto");
  EXPECT_EQ(defaults->agent.worker_memory_mib, 0u);
  EXPECT_EQ(defaults->agent.worker_cpu_seconds, 0);
}

TEST(ConfigTest, EtcdTlsAndAuthKeysAreRead) {
  Result<Config> r = ParseConfig(R"(
gpupoold = { state = "etcd"; etcd_endpoints = ["https://10.0.0.1:2379", "https://10.0.0.2:2379"];
  etcd_ca_file = "/etc/gpupool/etcd-ca.pem"; etcd_cert_file = "/etc/gpupool/etcd-client.pem";
  etcd_key_file = "/etc/gpupool/etcd-client.key"; etcd_user = "gpupool";
  etcd_password_file = "/etc/gpupool/etcd.password"; };
)",
                                 "x.conf");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->poold.etcd_endpoints.size(), 2u);
  EXPECT_EQ(r->poold.etcd_ca_file, "/etc/gpupool/etcd-ca.pem");
  EXPECT_EQ(r->poold.etcd_cert_file, "/etc/gpupool/etcd-client.pem");
  EXPECT_EQ(r->poold.etcd_key_file, "/etc/gpupool/etcd-client.key");
  EXPECT_EQ(r->poold.etcd_user, "gpupool");
  EXPECT_EQ(r->poold.etcd_password_file, "/etc/gpupool/etcd.password");
}

TEST(ConfigTest, UnknownKeyInEverySection) {
  ExpectError("\n\nbogus = 1;\n", 3, "bogus", "unknown key");
  ExpectError("gpupoold = {\n  listen = \"x:1\";\n  lisen = \"y:1\";\n};\n", 3, "lisen", "unknown key");
  ExpectError("pools = (\n  { name = \"a\"; },\n  { name = \"b\";\n    modles = [\"x\"]; }\n);\n", 4, "modles",
              "unknown key (expected one of: name, models");
  ExpectError("pools = ( { name = \"a\"; } );\ngpus = (\n  { gpu = \"h:0\"; pol = \"a\"; }\n);\n", 3, "pol",
              "unknown key");
  ExpectError("agent = {\n  backnd = \"sim\";\n};\n", 2, "backnd", "unknown key");
  ExpectError("agent = { sim = {\n  gpu = (); }; };\n", 2, "gpu", "unknown key");
  ExpectError("agent = { sim = { gpus = (\n  { model = \"x\";\n    colour = 1; } ); }; };\n", 3, "colour",
              "unknown key");
  ExpectError("client = {\n  server = \"x:1\";\n  timout = 2;\n};\n", 3, "timout", "unknown key");
}

TEST(ConfigTest, BadTypes) {
  ExpectError("gpupoold = {\n  lease_ttl = \"600\";\n};\n", 2, "lease_ttl", "must be an integer");
  ExpectError("gpupoold = { threads = 8.5; };\n", 1, "threads", "must be an integer");
  ExpectError("gpupoold = {\n  listen = 6830;\n};\n", 2, "listen", "must be a string");
  ExpectError("gpupoold = { slurm_reap = 1; };\n", 1, "slurm_reap", "must be true or false");
  ExpectError("gpupoold = { admins = \"alice\"; };\n", 1, "admins", "must be a list of strings");
  ExpectError("gpupoold = { admins = ( \"alice\", 7 ); };\n", 1, "[1]", "must be a string");
  ExpectError("munge_socket = true;\n", 1, "munge_socket", "must be a string");
  ExpectError("\npools = { name = \"a\"; };\n", 2, "pools", "must be a list");
  ExpectError("gpus = \"h:0\";\n", 1, "gpus", "must be a list");
  ExpectError("gpupoold = 1;\n", 1, "gpupoold", "must be a group");
  ExpectError("pools = ( { name = 5; } );\n", 1, "name", "must be a string");
  ExpectError("pools = ( { name = \"a\"; min_memory = true; } );\n", 1, "min_memory", "must be a size");
  ExpectError("client = { timeout = \"5s\"; };\n", 1, "timeout", "must be an integer");
}

TEST(ConfigTest, BadValues) {
  ExpectError("gpupoold = { lease_ttl = 0; };\n", 1, "lease_ttl", "must be between 1 and");
  ExpectError("gpupoold = { threads = 1; };\n", 1, "threads", "must be between 2 and 4096");
  ExpectError("gpupoold = { durability = \"sometimes\"; };\n", 1, "durability", "must be \"fsync\" or \"process\"");
  ExpectError("agent = { backend = \"opencl\"; };\n", 1, "backend", "must be \"sim\" or \"cuda\"");
  ExpectError("agent = { worker_cgroup = \"yes\"; };\n", 1, "worker_cgroup",
              "must be \"auto\", \"required\" or \"off\"");
  ExpectError("agent = { worker_memory = \"32M\"; };\n", 1, "worker_memory",
              "must be 0 (automatic) or at least 64 MiB");
  ExpectError("agent = { worker_cpu_seconds = -1; };\n", 1, "worker_cpu_seconds", "must be between");
  ExpectError("gpupoold = { state = \"zookeeper\"; };\n", 1, "state", "must be \"sqlite\" or \"etcd\"");
  ExpectError("gpupoold = { etcd_endpoints = []; };\n", 1, "etcd_endpoints", "must name at least one etcd endpoint");
  ExpectError("gpupoold = { etcd_endpoints = [\"127.0.0.1:2379\"]; };\n", 1, "etcd_endpoints",
              "must be http://HOST:PORT or https://HOST:PORT URLs");
  ExpectError("gpupoold = { etcd_endpoints = [\"https://a:2379\", \"http://b:2379\"]; };\n", 1, "etcd_endpoints",
              "must all be https:// or all be http://; 'http://b:2379'");
  // TLS and auth settings with plain-HTTP endpoints: the password would cross the network in clear.
  ExpectError("gpupoold = { etcd_user = \"gpupool\"; etcd_password_file = \"/p\"; };\n", 1, "etcd_user",
              "needs https:// etcd_endpoints");
  ExpectError("gpupoold = { etcd_ca_file = \"/ca.pem\"; };\n", 1, "etcd_ca_file", "needs https:// etcd_endpoints");
  ExpectError("gpupoold = { etcd_endpoints = [\"https://a:2379\"];\n  etcd_cert_file = \"/c.pem\"; };\n", 2,
              "etcd_cert_file", "etcd_cert_file and etcd_key_file go together");
  ExpectError("gpupoold = { etcd_endpoints = [\"https://a:2379\"];\n  etcd_password_file = \"/p\"; };\n", 2,
              "etcd_password_file", "etcd_user and etcd_password_file go together");
  ExpectError("gpupoold = { etcd_prefix = \"gpupool\"; };\n", 1, "etcd_prefix", "must begin and end with '/'");
  ExpectError("gpupoold = { leader_ttl = 1; };\n", 1, "leader_ttl", "must be between 2 and 600");
  ExpectError("pools = ( { name = \"a\"; min_memory = \"80X\"; } );\n", 1, "min_memory", "bad size unit");
  ExpectError("pools = ( { name = \"a\"; min_memory = -1; } );\n", 1, "min_memory", "must not be negative");
  ExpectError("pools = ( { name = \"a b\"; } );\n", 1, "name", "pool name 'a b' must be");
  ExpectError("pools = (\n  { models = [\"*\"]; }\n);\n", 2, "[0]", "pool has no name");
  ExpectError("pools = ( { name = \"a\"; } );\ngpus = (\n  { gpu = \"h:0\"; }\n);\n", 3, "[0]",
              "needs both gpu and pool");
  ExpectError("gpupoold = {\n  lease_ttl = 900; max_lease_ttl = 600; };\n", 1, "gpupoold",
              "lease_ttl must not exceed max_lease_ttl");
}

TEST(ConfigTest, DuplicatePool) {
  ExpectError("pools = (\n  { name = \"a100\"; },\n  { name = \"h100\"; },\n  { name = \"a100\"; }\n);\n", 4, "name",
              "duplicate pool 'a100'");
}

TEST(ConfigTest, DuplicateGpu) {
  ExpectError(
      "pools = ( { name = \"a\"; }, { name = \"b\"; } );\n"
      "gpus = (\n"
      "  { gpu = \"gpuhost1:0\"; pool = \"a\"; },\n"
      "  { gpu = \"gpuhost1:1\"; pool = \"a\"; },\n"
      "  { gpu = \"gpuhost1:0\"; pool = \"b\"; }\n"
      ");\n",
      5, "gpu", "duplicate GPU 'gpuhost1:0'");
}

TEST(ConfigTest, UnknownPoolInAssignment) {
  ExpectError(
      "pools = ( { name = \"a100\"; } );\n"
      "gpus = (\n"
      "  { gpu = \"GPU-0b1e\"; pool = \"a10\"; }\n"
      ");\n",
      3, "pool", "unknown pool 'a10' (not defined in pools)");
  // Assignments refer to pools of this file only; without a pools section none is known.
  ExpectError("gpus = ( { gpu = \"h:0\"; pool = \"a100\"; } );\n", 1, "pool", "unknown pool 'a100'");
}

TEST(ConfigTest, SyntaxErrorNamesFileAndLine) {
  Result<Config> r = ParseConfig("gpupoold = {\n  listen = \"x:1\";\n  threads = = 4;\n};\n", "gpupool.conf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("gpupool.conf:3: ", 0), 0u) << r.status().message();
  // libconfig refuses a key given twice while parsing; it reports the line, not the key.
  Result<Config> dup = ParseConfig("client = {\n  timeout = 1;\n  timeout = 2;\n};\n", "gpupool.conf");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message().rfind("gpupool.conf:3: ", 0), 0u) << dup.status().message();
  EXPECT_NE(dup.status().message().find("duplicate"), std::string::npos) << dup.status().message();
}

TEST(ConfigTest, LoadConfigNamesThePath) {
  char name[] = "/tmp/c-config-test-XXXXXX";
  int fd = mkstemp(name);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(name) << "# a comment\nclient = {\n  sever = \"x:1\";\n};\n";
  Result<Config> r = LoadConfig(name);
  std::remove(name);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind(std::string(name) + ":3: ", 0), 0u) << r.status().message();
  EXPECT_NE(r.status().message().find("sever: unknown key"), std::string::npos) << r.status().message();

  Result<Config> missing = LoadConfig("/nonexistent/c-config-test.conf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "/nonexistent/c-config-test.conf: cannot read config file");
}

TEST(ConfigTest, ExampleConfigLoads) {
  Result<Config> r = LoadConfig(GPUPOOL_EXAMPLE_CONF);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_GE(r->pools.size(), 2u);
  EXPECT_EQ(r->pools[0].name, "a100");
  EXPECT_EQ(r->pools[0].models, (std::vector<std::string>{"*A100*"}));
  EXPECT_EQ(r->pools[1].name, "h100");
  EXPECT_EQ(r->pools[1].models, (std::vector<std::string>{"*H100*"}));
  // The example documents the defaults: its values must be the built-in ones.
  Result<Config> defaults = ParseConfig("", "defaults");
  EXPECT_EQ(r->poold.listen, defaults->poold.listen);
  EXPECT_EQ(r->poold.state_dir, defaults->poold.state_dir);
  EXPECT_EQ(r->poold.lease_ttl, defaults->poold.lease_ttl);
  EXPECT_EQ(r->poold.max_lease_ttl, defaults->poold.max_lease_ttl);
  EXPECT_EQ(r->poold.unreachable_timeout, defaults->poold.unreachable_timeout);
  EXPECT_EQ(r->poold.reap_interval, defaults->poold.reap_interval);
  EXPECT_EQ(r->poold.durability, defaults->poold.durability);
  EXPECT_EQ(r->poold.max_request_bytes, defaults->poold.max_request_bytes);
  EXPECT_EQ(r->poold.threads, defaults->poold.threads);
  // agent.backend has no default (the agent refuses to start without it): the example
  // names the real GPUs' backend, so a copy of it never serves simulated ones.
  EXPECT_EQ(defaults->agent.backend, "");
  EXPECT_EQ(r->agent.backend, "cuda");
  EXPECT_EQ(r->agent.heartbeat_interval, defaults->agent.heartbeat_interval);
  EXPECT_EQ(r->client.server, defaults->client.server);
  EXPECT_EQ(r->client.timeout, defaults->client.timeout);
}

TEST(ConfigTest, ParseMemoryMib) {
  EXPECT_EQ(ParseMemoryMib("80G").value(), 81920u);
  EXPECT_EQ(ParseMemoryMib("81920M").value(), 81920u);
  EXPECT_EQ(ParseMemoryMib("512").value(), 512u);
  EXPECT_EQ(ParseMemoryMib("1T").value(), 1048576u);
  EXPECT_EQ(ParseMemoryMib("16GiB").value(), 16384u);
  EXPECT_FALSE(ParseMemoryMib("").ok());
  EXPECT_FALSE(ParseMemoryMib("G").ok());
  EXPECT_FALSE(ParseMemoryMib("80 G").ok());
  EXPECT_FALSE(ParseMemoryMib("99999999999T").ok());
}

TEST(ConfigTest, DefaultConfigPathHonoursEnvironment) {
  setenv("GPUPOOL_CONF", "/tmp/c-elsewhere.conf", 1);
  EXPECT_EQ(DefaultConfigPath(), "/tmp/c-elsewhere.conf");
  unsetenv("GPUPOOL_CONF");
  EXPECT_EQ(DefaultConfigPath(), "/etc/gpupool/gpupool.conf");
}

}  // namespace
}  // namespace gpupool

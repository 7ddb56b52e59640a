// Unit tests of remoting profiles: the parser, the rendering, and the shipped profiles.
#include "spank/profile.h"

#include <gtest/gtest.h>

#ifndef GPUPOOL_SOURCE_DIR
#error "GPUPOOL_SOURCE_DIR must be defined by the build"
#endif

namespace gpupool::spank {
namespace {

Lease TwoGpuLease() {
  nlohmann::json raw = {{"id", "L7"},
                        {"job_id", 42},
                        {"generation", 3},
                        {"state", "ACTIVE"},
                        {"token", "ab12"},
                        {"gpus",
                         {{{"id", "gpuhost1:0"},
                           {"uuid", "GPU-aaa"},
                           {"pool", "a100"},
                           {"rack", "rack1"},
                           {"host", "gpuhost1"},
                           {"index", 0},
                           {"endpoint", "10.0.0.5:7101"}},
                          {{"id", "gpuhost3:2"},
                           {"uuid", "GPU-bbb"},
                           {"pool", "a100"},
                           {"rack", "rack2"},
                           {"host", "gpuhost3"},
                           {"index", 2},
                           {"endpoint", "10.0.0.7:7103"}}}}};
  Result<Lease> lease = ParseLease(raw);
  EXPECT_TRUE(lease.ok()) << lease.status().message();
  return lease.value();
}

std::string Get(const EnvList& env, const std::string& name) {
  std::string value = "<unset>";
  for (const auto& [k, v] : env)
    if (k == name) value = v;
  return value;
}

Result<EnvList> Render(const std::string& text, const Lease& lease,
                       std::function<std::string(const std::string&)> current = nullptr) {
  Result<Profile> p = ParseProfile(text, "t.profile");
  if (!p.ok()) return p.status();
  ProfileContext ctx;
  ctx.lease = &lease;
  ctx.job_id = 42;
  ctx.lib_dir = "/opt/gp/lib/gpupool";
  ctx.lease_file = "/run/gpupool/job42.json";
  ctx.server = "http://pool:6830";
  ctx.current = std::move(current);
  return RenderProfile(*p, ctx);
}

// What the shipped etc/profiles/NAME.profile sets for a job of TwoGpuLease(), with gpupool's
// libraries in `lib_dir`.
Result<EnvList> RenderShipped(const std::string& name, const std::string& lib_dir = "") {
  Result<Profile> p = LoadProfile(std::string(GPUPOOL_SOURCE_DIR) + "/etc/profiles/" + name + ".profile");
  if (!p.ok()) return p.status();
  Lease lease = TwoGpuLease();
  ProfileContext ctx;
  ctx.lease = &lease;
  ctx.lib_dir = lib_dir;
  return RenderProfile(*p, ctx);
}

TEST(Profile, SetPrependAppend) {
  Lease lease = TwoGpuLease();
  auto env = Render(
      "set A={count}/{lease_id}/{generation}/{job_id}\n"
      "prepend LD_LIBRARY_PATH={lib_dir}\n"
      "append PATH=/x  # trailing comment\n"
      "prepend EMPTY={lib_dir}\n",
      lease, [](const std::string& n) { return n == "LD_LIBRARY_PATH" ? "/usr/lib"
                                               : n == "PATH"          ? "/bin"
                                                                      : ""; });
  ASSERT_TRUE(env.ok()) << env.status().message();
  EXPECT_EQ(Get(*env, "A"), "2/L7/3/42");
  EXPECT_EQ(Get(*env, "LD_LIBRARY_PATH"), "/opt/gp/lib/gpupool:/usr/lib");
  EXPECT_EQ(Get(*env, "PATH"), "/bin:/x");
  EXPECT_EQ(Get(*env, "EMPTY"), "/opt/gp/lib/gpupool");
}

TEST(Profile, EachAndJoinArePerGpuInDeviceOrder) {
  Lease lease = TwoGpuLease();
  auto env = Render(
      "each DEV_{i}={addr}:{index}:{port}:{uuid}\njoin ALL={host}/{endpoint}\n"
      "set LITERAL={{x}}\n",
      lease);
  ASSERT_TRUE(env.ok()) << env.status().message();
  EXPECT_EQ(Get(*env, "DEV_0"), "10.0.0.5:0:7101:GPU-aaa");
  EXPECT_EQ(Get(*env, "DEV_1"), "10.0.0.7:2:7103:GPU-bbb");
  EXPECT_EQ(Get(*env, "ALL"), "gpuhost1/10.0.0.5:7101,gpuhost3/10.0.0.7:7103");
  EXPECT_EQ(Get(*env, "LITERAL"), "{x}");
}

TEST(Profile, RejectsBadProfilesWithFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"sett A=1\n", "unknown rule 'sett'"},
      {"set A\n", "expected NAME=VALUE"},
      {"set\n", "expected"},
      {"set 1A=x\n", "bad variable name"},
      {"set A={nope}\n", "unknown field {nope}"},
      {"set A={uuid}\n", "per GPU"},
      {"set A={count\n", "unclosed"},
      {"set A=x}\n", "unmatched"},
      {"each DEV=x\n", "{i}"},
      {"each DEV-{i}=x\n", "variable name"},
  };
  for (const auto& [text, expected] : bad) {
    Result<Profile> p = ParseProfile("# ok\n" + text, "t.profile");
    ASSERT_FALSE(p.ok()) << "accepted: " << text;
    EXPECT_EQ(p.status().message().rfind("t.profile:2: ", 0), 0u) << p.status().message();
    EXPECT_NE(p.status().message().find(expected), std::string::npos) << p.status().message();
  }
}

TEST(Profile, ShippedGpupoolProfile) {
  Result<EnvList> env = RenderShipped("gpupool", "/opt/gp/lib/gpupool");
  ASSERT_TRUE(env.ok()) << env.status().message();
  EXPECT_EQ(Get(*env, "LD_LIBRARY_PATH"), "/opt/gp/lib/gpupool");
}

TEST(Profile, ShippedRcudaProfile) {
  Result<EnvList> env = RenderShipped("rcuda");
  ASSERT_TRUE(env.ok()) << env.status().message();
  EXPECT_EQ(Get(*env, "RCUDA_DEVICE_COUNT"), "2");
  EXPECT_EQ(Get(*env, "RCUDA_DEVICE_0"), "10.0.0.5:0");
  EXPECT_EQ(Get(*env, "RCUDA_DEVICE_1"), "10.0.0.7:2");
}

TEST(Profile, ShippedLupineProfile) {
  Result<EnvList> env = RenderShipped("lupine");
  ASSERT_TRUE(env.ok()) << env.status().message();
  EXPECT_EQ(Get(*env, "LUPINE_SERVER"), "10.0.0.5:14833,10.0.0.7:14833");
}

// A lease is movable (a drain moves it) only when its processes can follow: gpupool's own
// library with failover on, as the step brings it or the profile sets it.
TEST(Profile, ProcessesFollowMovesOnlyWithGpupoolsLibraryAndFailoverOn) {
  const std::string dir = std::string(GPUPOOL_SOURCE_DIR) + "/etc/profiles/";
  Result<Profile> gpupool = LoadProfile(dir + "gpupool.profile");
  Result<Profile> rcuda = LoadProfile(dir + "rcuda.profile");
  ASSERT_TRUE(gpupool.ok() && rcuda.ok());
  auto with = [](std::string failover) {
    return [failover](const std::string& name) { return name == "GPUPOOL_FAILOVER" ? failover : ""; };
  };
  EXPECT_TRUE(ProcessesFollowMoves(*gpupool, with("")));
  EXPECT_TRUE(ProcessesFollowMoves(*gpupool, with("replay")));
  EXPECT_FALSE(ProcessesFollowMoves(*gpupool, with("off")));
  EXPECT_FALSE(ProcessesFollowMoves(*rcuda, with("")));
  Result<Profile> site_off = ParseProfile("set GPUPOOL_FAILOVER=off\n", "gpupool.profile");
  ASSERT_TRUE(site_off.ok()) << site_off.status().message();
  EXPECT_FALSE(ProcessesFollowMoves(*site_off, with("replay")));
}

TEST(Profile, MissingFileIsNamed) {
  Result<Profile> p = LoadProfile("/nonexistent/x.profile");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("/nonexistent/x.profile"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::spank

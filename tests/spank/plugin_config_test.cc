// Unit tests of spank_gpupool's plugstack.conf argument parser.
#include "spank/plugin_config.h"

#include <gtest/gtest.h>

namespace gpupool::spank {
namespace {

TEST(PluginConfig, DefaultsWithoutArguments) {
  Result<PluginConfig> c = ParsePluginConfig({});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "http://127.0.0.1:6830");
  EXPECT_EQ(c->timeout_s, 10);
  EXPECT_EQ(c->retry_s, 15);
  EXPECT_EQ(c->profile, "gpupool");
  EXPECT_EQ(c->lease_dir, "/run/gpupool");
  EXPECT_TRUE(c->notify);
  EXPECT_FALSE(c->userfaultfd) << "jobs get /dev/userfaultfd only where the site says so";
}

TEST(PluginConfig, ReadsEveryKey) {
  Result<PluginConfig> c = ParsePluginConfig({"server=http://10.0.0.1:7000", "timeout=3", "retry=0", "profile=rcuda",
                                              "profile_dir=/p", "lib_dir=/l", "lease_dir=/d", "munge_socket=/m.sock",
                                              "ttl=60", "watch_interval=2", "notify=no", "userfaultfd=yes"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "http://10.0.0.1:7000");
  EXPECT_EQ(c->timeout_s, 3);
  EXPECT_EQ(c->retry_s, 0);
  EXPECT_EQ(c->profile, "rcuda");
  EXPECT_EQ(c->profile_dir, "/p");
  EXPECT_EQ(c->lib_dir, "/l");
  EXPECT_EQ(c->lease_dir, "/d");
  EXPECT_EQ(c->munge_socket, "/m.sock");
  EXPECT_EQ(c->ttl_s, 60);
  EXPECT_EQ(c->watch_interval_s, 2);
  EXPECT_FALSE(c->notify);
  EXPECT_TRUE(c->userfaultfd);
}

TEST(PluginConfig, UnknownKeyIsNamed) {
  Result<PluginConfig> c = ParsePluginConfig({"sever=http://x:1"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unknown argument 'sever'"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("server"), std::string::npos);
}

TEST(PluginConfig, RejectsMalformedArguments) {
  const std::vector<std::vector<std::string>> bad = {{"server"},
                                                     {"=x"},
                                                     {"timeout=0"},
                                                     {"timeout=abc"},
                                                     {"timeout=5s"},
                                                     {"timeout=301"},
                                                     {"retry=-1"},
                                                     {"retry=301"},
                                                     {"server="},
                                                     {"lease_dir=relative"},
                                                     {"profile_dir="},
                                                     {"notify=maybe"},
                                                     {"userfaultfd=on"},
                                                     {"userfaultfd="},
                                                     {"ttl=-1"},
                                                     {"watch_interval=0"},
                                                     {"timeout=1", "timeout=2"},
                                                     {"ttl=10", "watch_interval=6"}};
  for (const auto& args : bad) {
    Result<PluginConfig> c = ParsePluginConfig(args);
    EXPECT_FALSE(c.ok()) << "accepted: " << args[0];
    if (!c.ok()) {
      EXPECT_EQ(c.status().message().rfind("plugstack.conf: ", 0), 0u) << c.status().message();
    }
  }
}

TEST(PluginConfig, ProfilePathIsNameOrPath) {
  PluginConfig c;
  ApplyInstallDefaults("/opt/gp/lib", &c);
  EXPECT_EQ(ProfilePath(c), "/opt/gp/lib/../etc/gpupool/profiles/gpupool.profile");
  EXPECT_EQ(c.lib_dir, "/opt/gp/lib/remoting");
  c.profile = "/srv/site.profile";
  EXPECT_EQ(ProfilePath(c), "/srv/site.profile");
  PluginConfig given;
  given.profile_dir = "/etc/p";
  given.lib_dir = "/usr/lib/gp";
  ApplyInstallDefaults("/x", &given);
  EXPECT_EQ(given.profile_dir, "/etc/p");
  EXPECT_EQ(given.lib_dir, "/usr/lib/gp");
}

}  // namespace
}  // namespace gpupool::spank

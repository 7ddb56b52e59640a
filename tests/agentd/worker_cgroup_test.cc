// WorkerCgroups (remote/agentd/worker_cgroup.h) against trees of files laid out as the
// kernel lays out cgroup v1 and v2 (the directories and files the kernel would make are
// made here first): which hierarchy it picks, what it writes where, and what it refuses.
// The real kernel's side is in agentd.integration_test (EachWorkerRunsInACgroupOfItsOwn).
#include "remote/agentd/worker_cgroup.h"
#include "tests/agentd/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gpupool::agentd {
namespace {

namespace fs = std::filesystem;

class FakeCgroupTree : public testing::Test {
 protected:
  void SetUp() override {
    root_ = testing_env::MakeTempDir("gpupool-cgroup-test");
    ASSERT_FALSE(root_.empty());
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(root_ + "/" + path).parent_path());
    std::ofstream(root_ + "/" + path) << text;
  }
  std::string Read(const std::string& path) {
    std::ifstream in(root_ + "/" + path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // A v2 group with the files the kernel gives every group.
  void V2Group(const std::string& path, const std::string& controllers, const std::string& procs) {
    Write(path + "/cgroup.controllers", controllers);
    Write(path + "/cgroup.subtree_control", "");
    Write(path + "/cgroup.procs", procs);
    for (const char* file : {"memory.max", "memory.swap.max", "pids.max", "memory.events"}) {
      Write(path + "/" + file, "");
    }
  }
  std::string Self() { return std::to_string(getpid()); }

  std::string root_;
};

TEST_F(FakeCgroupTree, OnV2TheAgentMovesIntoALeafAndEachWorkerGetsAGroupWithItsLimits) {
  Write("cgroup.controllers", "cpu memory pids");
  V2Group("system.slice/gpupool-agentd.service", "cpu memory pids", Self() + "\n");
  V2Group("system.slice/gpupool-agentd.service/supervisor", "", "");
  Write("self", "0::/system.slice/gpupool-agentd.service\n");
  auto groups = WorkerCgroups::Open(CgroupMode::kRequired, root_, root_ + "/self");
  ASSERT_TRUE(groups.ok()) << groups.status().message();
  ASSERT_TRUE(groups.value()->usable());
  EXPECT_NE(groups.value()->Describe().find("cgroup v2"), std::string::npos);
  EXPECT_EQ(Read("system.slice/gpupool-agentd.service/supervisor/cgroup.procs"), Self());
  EXPECT_EQ(Read("system.slice/gpupool-agentd.service/cgroup.subtree_control"), "+memory +pids +cpu");

  const std::string worker = "system.slice/gpupool-agentd.service/worker-4242";
  V2Group(worker, "cpu memory pids", "");
  ASSERT_TRUE(groups.value()->Place(4242, {uint64_t{512} << 20, 1024}).ok());
  EXPECT_EQ(Read(worker + "/memory.max"), std::to_string(uint64_t{512} << 20));
  EXPECT_EQ(Read(worker + "/memory.swap.max"), "0");
  EXPECT_EQ(Read(worker + "/pids.max"), "1024");
  EXPECT_EQ(Read(worker + "/cgroup.procs"), "4242");
  EXPECT_EQ(groups.value()->PathOf(4242), root_ + "/" + worker);
  EXPECT_FALSE(groups.value()->OomKilled(4242));
  Write(worker + "/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n");
  EXPECT_TRUE(groups.value()->OomKilled(4242));
}

TEST_F(FakeCgroupTree, OnV2ASubtreeAlreadyDelegatedWithControllersIsUsedAsItIs) {
  Write("cgroup.controllers", "memory pids");
  V2Group("agent", "memory pids", "1\n2\n");
  Write("agent/cgroup.subtree_control", "memory pids");
  Write("self", "0::/agent\n");
  auto groups = WorkerCgroups::Open(CgroupMode::kRequired, root_, root_ + "/self");
  ASSERT_TRUE(groups.ok()) << groups.status().message();
  EXPECT_FALSE(fs::exists(root_ + "/agent/supervisor"));  // nobody moved
  EXPECT_EQ(Read("agent/cgroup.subtree_control"), "memory pids");
}

TEST_F(FakeCgroupTree, OnV2AGroupSharedWithOtherProcessesIsNotTaken) {
  Write("cgroup.controllers", "memory pids");
  V2Group("user.slice/session-1.scope", "memory pids", Self() + "\n999999\n");
  Write("self", "0::/user.slice/session-1.scope\n");
  auto groups = WorkerCgroups::Open(CgroupMode::kAuto, root_, root_ + "/self");
  ASSERT_TRUE(groups.ok());
  EXPECT_FALSE(groups.value()->usable());
  EXPECT_NE(groups.value()->why_not().find("holds other processes too"), std::string::npos)
      << groups.value()->why_not();
  EXPECT_EQ(Read("user.slice/session-1.scope/cgroup.procs"), Self() + "\n999999\n");
  auto required = WorkerCgroups::Open(CgroupMode::kRequired, root_, root_ + "/self");
  ASSERT_FALSE(required.ok());
  EXPECT_NE(required.status().message().find("Delegate=yes"), std::string::npos) << required.status().message();
}

TEST_F(FakeCgroupTree, OnV1EachWorkerGetsAGroupInTheMemoryPidsAndCpuHierarchies) {
  // A hybrid host: v1 controllers, a v2 tree with none of them.
  Write("unified/cgroup.controllers", "");
  for (const char* controller : {"memory", "pids", "cpu"}) {
    Write(std::string(controller) + "/cgroup.procs", "");
    Write(std::string(controller) + "/agent/cgroup.procs", Self());
    Write(std::string(controller) + "/agent/worker-77/cgroup.procs", "");
  }
  Write("memory/agent/worker-77/memory.limit_in_bytes", "");
  Write("memory/agent/worker-77/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  Write("pids/agent/worker-77/pids.max", "");
  Write("self", "8:pids:/agent\n4:memory:/agent\n2:cpu,cpuacct:/agent\n0::/\n");
  auto groups = WorkerCgroups::Open(CgroupMode::kRequired, root_, root_ + "/self");
  ASSERT_TRUE(groups.ok()) << groups.status().message();
  EXPECT_NE(groups.value()->Describe().find("cgroup v1"), std::string::npos) << groups.value()->Describe();
  ASSERT_TRUE(groups.value()->Place(77, {uint64_t{1} << 30, 1024}).ok());
  EXPECT_EQ(Read("memory/agent/worker-77/memory.limit_in_bytes"), std::to_string(uint64_t{1} << 30));
  EXPECT_EQ(Read("pids/agent/worker-77/pids.max"), "1024");
  for (const char* controller : {"memory", "pids", "cpu"}) {
    EXPECT_EQ(Read(std::string(controller) + "/agent/worker-77/cgroup.procs"), "77") << controller;
  }
  EXPECT_FALSE(groups.value()->OomKilled(77));
}

TEST_F(FakeCgroupTree, WithoutAUsableHierarchyAutoRunsWithoutAndRequiredRefusesToStart) {
  Write("self", "0::/\n");
  auto groups = WorkerCgroups::Open(CgroupMode::kAuto, root_, root_ + "/self");
  ASSERT_TRUE(groups.ok());
  EXPECT_FALSE(groups.value()->usable());
  EXPECT_TRUE(groups.value()->Place(5, {}).ok());  // nothing to place it in
  auto required = WorkerCgroups::Open(CgroupMode::kRequired, root_, root_ + "/self");
  ASSERT_FALSE(required.ok());
  EXPECT_NE(required.status().message().find("\"required\" but no cgroup is usable"), std::string::npos);
  auto off = WorkerCgroups::Open(CgroupMode::kOff, root_, root_ + "/self");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off.value()->usable());
  EXPECT_FALSE(ParseCgroupMode("sometimes").ok());
  EXPECT_TRUE(ParseCgroupMode("required").ok());
}

}  // namespace
}  // namespace gpupool::agentd

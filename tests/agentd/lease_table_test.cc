// LeaseTable: what the data path asks before serving a client.
#include "remote/agentd/lease_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace gpupool::agentd {
namespace {

TEST(LeaseTable, AuthorizesOnlyTheMatchingLeaseTokenAndGpu) {
  LeaseTable t;
  t.Replace({{"GPU-a", "L1", "tok1", 1}, {"GPU-b", "L1", "tok1", 1}, {"GPU-c", "L2", "tok2", 3}});
  uint64_t gen = 0;
  EXPECT_TRUE(t.Authorize("L1", "tok1", "GPU-a", &gen));
  EXPECT_EQ(gen, 1u);
  EXPECT_TRUE(t.Authorize("L2", "tok2", "GPU-c", &gen));
  EXPECT_EQ(gen, 3u);
  EXPECT_TRUE(t.Authorize("L1", "tok1", "GPU-b", nullptr));
  EXPECT_FALSE(t.Authorize("L1", "tok1", "GPU-c", &gen));  // another lease's GPU
  EXPECT_FALSE(t.Authorize("L2", "tok1", "GPU-c", &gen));  // wrong token
  EXPECT_FALSE(t.Authorize("L1", "tok2", "GPU-a", &gen));
  EXPECT_FALSE(t.Authorize("L1", "", "GPU-a", &gen));
  EXPECT_FALSE(t.Authorize("L1", "tok", "GPU-a", &gen));   // prefix of the token
  EXPECT_FALSE(t.Authorize("L1", "tok1", "GPU-z", &gen));  // unknown GPU
  EXPECT_EQ(t.size(), 3u);
}

TEST(LeaseTable, ReplaceRevokesAndCountsVersions) {
  LeaseTable t;
  EXPECT_EQ(t.version(), 0u);
  t.Replace({{"GPU-a", "L1", "tok1", 1}});
  EXPECT_EQ(t.version(), 1u);
  t.Replace({{"GPU-a", "L1", "tok1", 1}});  // same content: no new version
  EXPECT_EQ(t.version(), 1u);
  // Swap: L1 moved from GPU-a to GPU-b with generation 2.
  t.Replace({{"GPU-b", "L1", "tok1", 2}});
  EXPECT_EQ(t.version(), 2u);
  EXPECT_FALSE(t.Authorize("L1", "tok1", "GPU-a", nullptr));
  uint64_t gen = 0;
  EXPECT_TRUE(t.Authorize("L1", "tok1", "GPU-b", &gen));
  EXPECT_EQ(gen, 2u);
  t.Replace({});
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.Authorize("L1", "tok1", "GPU-b", nullptr));
}

TEST(LeaseTable, ParsesHeartbeatAnswers) {
  auto g = ParseLeaseGrants(
      nlohmann::json::parse(R"({"ok":true,"leases":[{"gpu":"GPU-a","lease":"L7","token":"ab12","generation":4}]})"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->size(), 1u);
  EXPECT_EQ((*g)[0].gpu_uuid, "GPU-a");
  EXPECT_EQ((*g)[0].lease_id, "L7");
  EXPECT_EQ((*g)[0].token, "ab12");
  EXPECT_EQ((*g)[0].generation, 4u);
  EXPECT_EQ((*g)[0].moved_from, "");
  auto moved = ParseLeaseGrants(
      nlohmann::json::parse(R"({"leases":[{"gpu":"GPU-a","lease":"L7","token":"t","moved_from":"10.0.0.2:7000"}]})"));
  ASSERT_TRUE(moved.ok());
  LeaseTable table;
  table.Replace(moved.value());
  EXPECT_EQ(table.MovedFrom("GPU-a"), "10.0.0.2:7000");
  EXPECT_EQ(table.MovedFrom("GPU-b"), "");
  EXPECT_TRUE(ParseLeaseGrants(nlohmann::json::parse(R"({"ok":true})"))->empty());
  for (const char* bad : {R"({"leases":{}})", R"({"leases":[1]})", R"({"leases":[{"gpu":"G","lease":"L"}]})",
                          R"({"leases":[{"gpu":"G","lease":"L","token":5}]})",
                          R"({"leases":[{"gpu":"G","lease":"L","token":"t","generation":-1}]})",
                          R"({"leases":[{"gpu":"G","lease":"L","token":"t","moved_from":5}]})"}) {
    auto r = ParseLeaseGrants(nlohmann::json::parse(bad));
    EXPECT_FALSE(r.ok()) << bad;
  }
}

TEST(LeaseTable, KnowsTheGpusGpupooldHoldsFailed) {
  auto failed = ParseFailedGpus(nlohmann::json::parse(R"({"ok":true,"failed":["GPU-b"]})"));
  ASSERT_TRUE(failed.ok()) << failed.status().message();
  LeaseTable t;
  t.SetFailed(failed.value());
  EXPECT_TRUE(t.Failed("GPU-b"));
  EXPECT_FALSE(t.Failed("GPU-a"));
  EXPECT_TRUE(ParseFailedGpus(nlohmann::json::parse(R"({"ok":true})"))->empty());
  for (const char* bad : {R"({"failed":{}})", R"({"failed":[1]})"}) {
    EXPECT_FALSE(ParseFailedGpus(nlohmann::json::parse(bad)).ok()) << bad;
  }
}

TEST(LeaseTable, ConcurrentReadersSeeWholeTables) {
  // Readers must see either the old or the new table, never a mix: each table gives both
  // GPUs to the same lease.
  LeaseTable t;
  t.Replace({{"GPU-a", "L0", "t0", 0}, {"GPU-b", "L0", "t0", 0}});
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread writer([&] {
    for (int i = 1; i < 2000; ++i) {
      std::string l = "L" + std::to_string(i), tok = "t" + std::to_string(i);
      t.Replace({{"GPU-a", l, tok, static_cast<uint64_t>(i)}, {"GPU-b", l, tok, static_cast<uint64_t>(i)}});
    }
    stop = true;
  });
  std::thread reader([&] {
    while (!stop) {
      auto snap = t.Snapshot();
      if (snap.size() != 2 || snap[0].lease_id != snap[1].lease_id) ++torn;
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_TRUE(t.Authorize("L1999", "t1999", "GPU-a", nullptr));
}

}  // namespace
}  // namespace gpupool::agentd

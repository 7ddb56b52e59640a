// Unit tests of the --gpu-pool option parsers and the acquire body they produce.
#include "spank/job_request.h"

#include <gtest/gtest.h>

namespace gpupool::spank {
namespace {

TEST(JobRequest, ParsesOnePool) {
  auto p = ParsePoolOption("a100:2");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].pool, "a100");
  EXPECT_EQ((*p)[0].count, 2);
}

TEST(JobRequest, ParsesSeveralPoolsInOrder) {
  auto p = ParsePoolOption("h100:1,a100:3");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].pool, "h100");
  EXPECT_EQ((*p)[1].pool, "a100");
  EXPECT_EQ((*p)[1].count, 3);
}

TEST(JobRequest, RejectsMalformedPoolValuesNamingTheOption) {
  for (const char* bad : {"", "a100", "a100:", ":2", "a100:0", "a100:-1", "a100:x", "a100:2x", "a100:+2", "a100:2,",
                          ",a100:2", "a100:2,a100:1", "a 100:1", "a100:99999", "a100:1:2", "a100:2,,h100:1", "a/b:1"}) {
    auto p = ParsePoolOption(bad);
    EXPECT_FALSE(p.ok()) << "accepted '" << bad << "'";
    if (!p.ok()) {
      EXPECT_EQ(p.status().message().rfind("--gpu-pool: ", 0), 0u) << p.status().message();
    }
  }
}

TEST(JobRequest, Place) {
  EXPECT_EQ(*ParsePlaceOption("pack"), "pack");
  EXPECT_EQ(*ParsePlaceOption("spread"), "spread");
  EXPECT_EQ(*ParsePlaceOption("rack:rack2"), "rack:rack2");
  for (const char* bad : {"", "packed", "rack:", "rack", "rack:a b", "Pack", "spread,pack"}) {
    auto p = ParsePlaceOption(bad);
    EXPECT_FALSE(p.ok()) << "accepted '" << bad << "'";
    if (!p.ok()) {
      EXPECT_EQ(p.status().message().rfind("--gpu-pool-place: ", 0), 0u);
    }
  }
}

TEST(JobRequest, Memory) {
  EXPECT_EQ(*ParseMemOption("40G"), 40u * 1024);
  EXPECT_EQ(*ParseMemOption("81920M"), 81920u);
  EXPECT_EQ(*ParseMemOption("512"), 512u);
  for (const char* bad : {"", "0", "0G", "40X", "G", "-1G", "forty"}) {
    auto m = ParseMemOption(bad);
    EXPECT_FALSE(m.ok()) << "accepted '" << bad << "'";
    if (!m.ok()) {
      EXPECT_EQ(m.status().message().rfind("--gpu-pool-mem: ", 0), 0u);
    }
  }
}

// An option value the callback could not store fails the request (never a job without
// the GPUs it asked for), naming the option.
TEST(JobRequest, ALostOptionFailsTheRequest) {
  RawOptions raw;
  raw.lost = kOptPool;
  EXPECT_TRUE(raw.any());
  auto r = ParseJobRequest(raw);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--gpu-pool was lost"), std::string::npos);
}

TEST(JobRequest, PlaceAndMemNeedPool) {
  RawOptions raw;
  raw.has_place = true;
  raw.place = "spread";
  auto r = ParseJobRequest(raw);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--gpu-pool-place: needs --gpu-pool"), std::string::npos);
  RawOptions mem;
  mem.has_mem = true;
  mem.mem = "1G";
  EXPECT_FALSE(ParseJobRequest(mem).ok());
  EXPECT_TRUE(ParseJobRequest(RawOptions{}).ok());
  EXPECT_TRUE(ParseJobRequest(RawOptions{})->pools.empty());
}

TEST(JobRequest, AcquireBodyFollowsTheApi) {
  RawOptions raw;
  raw.has_pool = raw.has_place = raw.has_mem = true;
  raw.pool = "a100:2,h100:1";
  raw.place = "rack:rack1";
  raw.mem = "40G";
  auto r = ParseJobRequest(raw);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->TotalCount(), 3);
  nlohmann::json body = AcquireBody(*r, 42, 1000, "alice", 0);
  EXPECT_EQ(body["job_id"], 42);
  EXPECT_EQ(body["request"][0]["pool"], "a100");
  EXPECT_EQ(body["request"][0]["count"], 2);
  EXPECT_EQ(body["request"][1]["pool"], "h100");
  EXPECT_EQ(body["place"], "rack:rack1");
  EXPECT_EQ(body["min_memory_mib"], 40960);
  EXPECT_EQ(body["uid"], 1000);
  EXPECT_EQ(body["user"], "alice");
  EXPECT_FALSE(body.contains("ttl"));
  EXPECT_EQ(AcquireBody(*r, 42, 1000, "alice", 60)["ttl"], 60);
  EXPECT_FALSE(body.contains("movable"));
  EXPECT_EQ(AcquireBody(*r, 42, 1000, "alice", 0, true)["movable"], true);
}

}  // namespace
}  // namespace gpupool::spank

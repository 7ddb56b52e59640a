// Formatting of canned API answers (the examples of docs/api.md) as scontrol-style text.
#include "poold/ctl/format.h"

#include <cstdlib>
#include <ctime>

#include <gtest/gtest.h>

namespace gpupool::ctl {
namespace {

using nlohmann::json;

// Times are printed in local time: pin the zone so the expected text is exact.
class FormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TZ", "UTC", 1);
    tzset();
  }
};

const json kPool = json::parse(R"({"name":"a100","total":8,"idle":6,"leased":2,"draining":0,
  "drained":0,"failed":0,"unreachable":0,"usable":8,"leases":1})");

const json kGpu = json::parse(R"({"id":"gpuhost1:0","uuid":"GPU-1234","pool":"a100",
  "rack":"rack1","host":"gpuhost1","index":0,"model":"A100-SXM4-80GB","memory_mib":81920,
  "pci_bus_id":"0000:07:00.0","numa_node":0,"state":"LEASED","health":"OK","reason":"",
  "lease":"L7","job_id":42,"endpoint":"127.0.0.1:7101","last_seen":1763760000})");

const json kLease = json::parse(R"({"id":"L7","job_id":42,"uid":1000,"user":"alice",
  "state":"ACTIVE","generation":1,"request":[{"pool":"a100","count":2}],"place":"pack",
  "min_memory_mib":0,
  "gpus":[{"id":"gpuhost1:0","uuid":"GPU-1","pool":"a100","rack":"rack1","host":"gpuhost1",
           "index":0,"endpoint":"127.0.0.1:7101"},
          {"id":"gpuhost1:1","uuid":"GPU-2","pool":"a100","rack":"rack1","host":"gpuhost1",
           "index":1,"endpoint":"127.0.0.1:7101"}],
  "token":"deadbeef","created":1763760000,"renewed":1763760000,"expires":1763760600,"ttl":600})");

const json kEvent = json::parse(R"({"seq":12,"time":1763760000,"type":"swapped",
  "gpu":"gpuhost1:0","job_id":42,"lease":"L7","detail":"gpuhost1:0 -> gpuhost1:1: Xid 79"})");

CtlArgs Args(std::vector<std::string> words) {
  Result<CtlArgs> a = ParseArgs(words);
  EXPECT_TRUE(a.ok()) << a.status().message();
  return a.value();
}

std::string Format(std::vector<std::string> words, const json& answer) {
  Result<std::string> text = FormatAnswer(Args(words), answer, "http://127.0.0.1:6830");
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? text.value() : "";
}

TEST_F(FormatTest, Pool) {
  EXPECT_EQ(Format({"show", "pools"}, {{"pools", {kPool}}}),
            "Pool=a100\n"
            "   Total=8 Idle=6 Leased=2 Draining=0 Drained=0 Failed=0 Unreachable=0\n"
            "   Usable=8 Leases=1\n\n");
  EXPECT_EQ(Format({"show", "pools", "-o"}, {{"pools", {kPool}}}),
            "Pool=a100 Total=8 Idle=6 Leased=2 Draining=0 Drained=0 Failed=0 Unreachable=0 "
            "Usable=8 Leases=1\n");
}

TEST_F(FormatTest, Gpu) {
  EXPECT_EQ(Format({"show", "gpus"}, {{"gpus", {kGpu}}}),
            "GpuId=gpuhost1:0 Uuid=GPU-1234\n"
            "   Pool=a100 Rack=rack1 Host=gpuhost1 Index=0\n"
            "   Model=A100-SXM4-80GB Memory=80G PciBusId=0000:07:00.0 NumaNode=0\n"
            "   State=LEASED Job=42 Lease=L7 Health=OK\n"
            "   Endpoint=127.0.0.1:7101 LastSeen=2025-11-21T21:20:00\n"
            "   Reason=(null)\n\n");
}

TEST_F(FormatTest, IdleGpuWithReasonOneLiner) {
  json g = kGpu;
  g["state"] = "DRAINED";
  g["job_id"] = 0;
  g["lease"] = "";
  g["reason"] = "fan \"3\" broken";
  g["numa_node"] = -1;
  EXPECT_EQ(Format({"show", "gpus", "-o"}, {{"gpus", {g}}}),
            "GpuId=gpuhost1:0 Uuid=GPU-1234 Pool=a100 Rack=rack1 Host=gpuhost1 Index=0 "
            "Model=A100-SXM4-80GB Memory=80G PciBusId=0000:07:00.0 NumaNode=(null) State=DRAINED "
            "Job=(null) Lease=(null) Health=OK Endpoint=127.0.0.1:7101 "
            "LastSeen=2025-11-21T21:20:00 Reason=\"fan \\\"3\\\" broken\"\n");
}

TEST_F(FormatTest, LeaseHidesTokenAndListsGpus) {
  std::string text = Format({"show", "leases"}, {{"leases", {kLease}}});
  EXPECT_EQ(text,
            "LeaseId=L7 JobId=42 User=alice(1000) State=ACTIVE\n"
            "   Pool=a100:2 Place=pack MinMemory=0 Generation=1 Movable=No\n"
            "   Gpus=gpuhost1:0,gpuhost1:1\n"
            "   Created=2025-11-21T21:20:00 Renewed=2025-11-21T21:20:00 "
            "Expires=2025-11-21T21:30:00 Ttl=600\n\n");
  EXPECT_EQ(text.find("deadbeef"), std::string::npos);
}

TEST_F(FormatTest, EventsOnePerLineWithOneLiner) {
  json second = kEvent;
  second["seq"] = 13;
  second["type"] = "released";
  second["detail"] = "";
  EXPECT_EQ(Format({"show", "events", "-o"}, {{"events", {kEvent, second}}}),
            "Seq=12 Time=2025-11-21T21:20:00 Type=swapped Gpu=gpuhost1:0 JobId=42 Lease=L7 "
            "Detail=\"gpuhost1:0 -> gpuhost1:1: Xid 79\"\n"
            "Seq=13 Time=2025-11-21T21:20:00 Type=released Gpu=gpuhost1:0 JobId=42 Lease=L7 "
            "Detail=(null)\n");
}

TEST_F(FormatTest, RecordsAreSeparatedByBlankLines) {
  json b = kPool;
  b["name"] = "h100";
  std::string text = Format({"show", "pools"}, {{"pools", {kPool, b}}});
  EXPECT_NE(text.find("Leases=1\n\nPool=h100\n"), std::string::npos) << text;
}

TEST_F(FormatTest, EmptyListsAndMissingObjects) {
  EXPECT_EQ(Format({"show", "pools"}, {{"pools", json::array()}}), "No pools defined\n");
  EXPECT_EQ(Format({"show", "leases", "job=5"}, {{"leases", json::array()}}), "No leases\n");
  EXPECT_EQ(Format({"show", "events"}, {{"events", json::array()}}), "No events\n");

  Result<std::string> pool = FormatAnswer(Args({"show", "pools", "x"}), {{"pools", json::array()}}, "s");
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(pool.status().message(), "no such pool 'x'");
  Result<std::string> lease = FormatAnswer(Args({"show", "leases", "lease=L9"}), {{"leases", json::array()}}, "s");
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().message(), "no such lease 'L9'");
}

TEST_F(FormatTest, MalformedAnswersAreErrorsNotCrashes) {
  Result<std::string> r = FormatAnswer(Args({"show", "gpus"}), {{"gpu", kGpu}}, "s");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "gpupoold's answer has no 'gpus' list");
  EXPECT_FALSE(FormatAnswer(Args({"update", "gpu=g", "state=drain"}), json::array(), "s").ok());
  EXPECT_FALSE(FormatAnswer(Args({"ping"}), {{"ok", false}}, "s").ok());
  // Fields of unexpected types are printed, never thrown on.
  json odd = {{"name", 5}, {"total", "eight"}, {"idle", nullptr}, {"leased", json::array()}};
  EXPECT_EQ(Format({"show", "pools", "-o"}, {{"pools", {odd}}}),
            "Pool=5 Total=eight Idle=(null) Leased=(null) Draining=(null) Drained=(null) "
            "Failed=(null) Unreachable=(null) Usable=(null) Leases=(null)\n");
}

TEST_F(FormatTest, UpdateReleaseAndPing) {
  EXPECT_EQ(Format({"update", "gpu=gpuhost1:0", "state=drain", "-o"}, {{"gpu", kGpu}}).substr(0, 30),
            "GpuId=gpuhost1:0 Uuid=GPU-1234");
  EXPECT_EQ(Format({"release", "job=42"}, {{"released", {"L7", "L8"}}}), "Released=L7,L8\n");
  EXPECT_EQ(Format({"release", "job=42"}, {{"released", json::array()}}), "Released=(null)\n");
  EXPECT_EQ(Format({"ping"}, {{"ok", true}, {"version", "0.1.0"}}),
            "gpupoold at http://127.0.0.1:6830 is UP (version 0.1.0)\n");
  EXPECT_EQ(Format({"ping"}, {{"ok", true}, {"version", "0.1.0"}, {"role", "leader"}, {"leader", "http://a:1"}}),
            "gpupoold at http://127.0.0.1:6830 is UP (version 0.1.0); it is the leader\n");
  EXPECT_EQ(Format({"ping"}, {{"ok", true}, {"version", "0.1.0"}, {"role", "follower"}, {"leader", "http://a:1"}}),
            "gpupoold at http://127.0.0.1:6830 is UP (version 0.1.0); it is a follower; the leader is http://a:1\n");
}

TEST_F(FormatTest, ValueRenderers) {
  EXPECT_EQ(QuoteValue(""), "(null)");
  EXPECT_EQ(QuoteValue("plain"), "plain");
  EXPECT_EQ(QuoteValue("a b"), "\"a b\"");
  EXPECT_EQ(QuoteValue("back\\slash"), "\"back\\\\slash\"");
  EXPECT_EQ(QuoteValue("two\nlines\x01"), "\"two\\nlines\\x01\"");
  EXPECT_EQ(FormatTime(0), "(null)");
  EXPECT_EQ(FormatTime(86400), "1970-01-02T00:00:00");
  EXPECT_EQ(FormatMemoryMib(81920), "80G");
  EXPECT_EQ(FormatMemoryMib(1000), "1000M");
  EXPECT_EQ(FormatMemoryMib(2 * 1024 * 1024), "2T");
  EXPECT_EQ(FormatMemoryMib(0), "0");
}

}  // namespace
}  // namespace gpupool::ctl

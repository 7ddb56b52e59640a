// gpupoolctl's argument parser: every command form, and every kind of bad input rejected
// with a message naming the offending word.
#include "poold/ctl/args.h"

#include <gtest/gtest.h>

namespace gpupool::ctl {
namespace {

Result<CtlArgs> Parse(std::vector<std::string> args) { return ParseArgs(args); }

// The parse must fail and its message must mention `needle`.
void ExpectRejected(std::vector<std::string> args, const std::string& needle) {
  Result<CtlArgs> r = ParseArgs(args);
  std::string line;
  for (const auto& a : args) line += a + " ";
  ASSERT_FALSE(r.ok()) << "accepted: " << line;
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "message '" << r.status().message() << "' does not name '" << needle << "'";
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "message is not one line";
}

TEST(ArgsTest, ShowPoolsWithAndWithoutName) {
  Result<CtlArgs> all = Parse({"show", "pools"});
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_EQ(all->verb, Verb::kShowPools);
  EXPECT_EQ(all->pool, "");
  Result<CtlArgs> one = Parse({"show", "pool", "a100"});
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->verb, Verb::kShowPools);
  EXPECT_EQ(one->pool, "a100");
}

TEST(ArgsTest, ShowGpusTakesIdAndPool) {
  Result<CtlArgs> r = Parse({"show", "gpus", "gpuhost1:0", "pool=a100"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->verb, Verb::kShowGpus);
  EXPECT_EQ(r->gpu, "gpuhost1:0");
  EXPECT_EQ(r->pool, "a100");
}

TEST(ArgsTest, ShowLeasesFilters) {
  Result<CtlArgs> r = Parse({"show", "leases", "job=42", "lease=L7"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->verb, Verb::kShowLeases);
  ASSERT_TRUE(r->job.has_value());
  EXPECT_EQ(*r->job, 42);
  EXPECT_EQ(r->lease, "L7");
}

TEST(ArgsTest, ShowEventsFilters) {
  Result<CtlArgs> r = Parse({"show", "events", "gpu=GPU-1", "job=7", "since=0", "limit=5"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->verb, Verb::kShowEvents);
  EXPECT_EQ(r->gpu, "GPU-1");
  EXPECT_EQ(*r->job, 7);
  EXPECT_EQ(*r->since, 0);
  EXPECT_EQ(*r->limit, 5);
}

TEST(ArgsTest, UpdateFoldsStateAndKeepsReason) {
  Result<CtlArgs> r = Parse({"update", "gpu=gpuhost1:0", "State=DRAIN", "reason=bad fan"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->verb, Verb::kUpdateGpu);
  EXPECT_EQ(r->gpu, "gpuhost1:0");
  EXPECT_EQ(r->state, "drain");
  ASSERT_TRUE(r->reason.has_value());
  EXPECT_EQ(*r->reason, "bad fan");
  Result<CtlArgs> no_reason = Parse({"update", "gpu=x", "state=resume"});
  ASSERT_TRUE(no_reason.ok());
  EXPECT_FALSE(no_reason->reason.has_value());
}

TEST(ArgsTest, ReleaseByLeaseOrJob) {
  Result<CtlArgs> by_lease = Parse({"release", "lease=L7"});
  ASSERT_TRUE(by_lease.ok());
  EXPECT_EQ(by_lease->lease, "L7");
  EXPECT_FALSE(by_lease->job.has_value());
  Result<CtlArgs> by_job = Parse({"release", "job=4294967295"});
  ASSERT_TRUE(by_job.ok()) << by_job.status().message();
  EXPECT_EQ(*by_job->job, 4294967295LL);
  Result<CtlArgs> with_reason = Parse({"release", "job=3", "reason=job hung"});
  ASSERT_TRUE(with_reason.ok()) << with_reason.status().message();
  EXPECT_EQ(*with_reason->reason, "job hung");
}

TEST(ArgsTest, MigrateNeedsALeaseAndTakesGpuAndTarget) {
  Result<CtlArgs> r = Parse({"migrate", "lease=L7", "gpu=gpuhost1:0", "to=gpuhost3:1", "reason=fan"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->verb, Verb::kMigrate);
  EXPECT_EQ(r->lease, "L7");
  EXPECT_EQ(r->gpu, "gpuhost1:0");
  EXPECT_EQ(r->to, "gpuhost3:1");
  EXPECT_EQ(*r->reason, "fan");
  Result<CtlArgs> only_lease = Parse({"migrate", "lease=L7"});
  ASSERT_TRUE(only_lease.ok());
  EXPECT_TRUE(only_lease->to.empty());
  ExpectRejected({"migrate", "gpu=gpuhost1:0"}, "'migrate' needs lease=ID");
  ExpectRejected({"migrate", "lease=L7", "to="}, "to");
  ExpectRejected({"migrate", "lease=L7", "state=drain"}, "state");
  ExpectRejected({"migrate", "L7"}, "L7");
}

TEST(ArgsTest, OptionsAnywhere) {
  Result<CtlArgs> r = Parse({"show", "gpus", "-o", "--server", "http://h:1", "-f", "/x.conf"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->oneliner);
  EXPECT_EQ(r->server, "http://h:1");
  EXPECT_EQ(r->config_path, "/x.conf");
  Result<CtlArgs> eq = Parse({"--server=http://h:2", "--json", "ping"});
  ASSERT_TRUE(eq.ok()) << eq.status().message();
  EXPECT_EQ(eq->server, "http://h:2");
  EXPECT_TRUE(eq->json);
  EXPECT_EQ(eq->verb, Verb::kPing);
}

TEST(ArgsTest, HelpAndVersionWinOverEverything) {
  EXPECT_EQ(Parse({"show", "bogus", "--help"})->verb, Verb::kHelp);
  EXPECT_EQ(Parse({"-V"})->verb, Verb::kVersion);
  EXPECT_EQ(Parse({"help"})->verb, Verb::kHelp);
  EXPECT_NE(UsageText().find("update gpu=ID state=drain|resume|fail"), std::string::npos);
}

TEST(ArgsTest, RejectsMissingOrUnknownCommand) {
  ExpectRejected({}, "no command");
  ExpectRejected({"shwo", "pools"}, "unknown command 'shwo'");
  ExpectRejected({"show"}, "pools, gpus, leases or events");
  ExpectRejected({"show", "jobs"}, "cannot show 'jobs'");
  ExpectRejected({"ping", "now"}, "unexpected word 'now'");
}

TEST(ArgsTest, RejectsUnknownOptions) {
  ExpectRejected({"-x", "ping"}, "unknown option '-x'");
  ExpectRejected({"--server"}, "--server needs a value");
  ExpectRejected({"ping", "-f"}, "-f needs a value");
  ExpectRejected({"--server=", "ping"}, "--server needs a value");
  ExpectRejected({"-o", "--json", "show", "pools"}, "cannot be combined");
}

TEST(ArgsTest, RejectsMisspeltKeys) {
  ExpectRejected({"update", "gpuu=gpuhost1:0", "state=drain"}, "unknown key 'gpuu'");
  ExpectRejected({"show", "leases", "jobs=4"}, "unknown key 'jobs'");
  ExpectRejected({"show", "events", "pool=a100"}, "unknown key 'pool'");
  ExpectRejected({"show", "pools", "name=a100"}, "unknown key 'name'");
  ExpectRejected({"release", "id=L7"}, "unknown key 'id'");
  ExpectRejected({"show", "gpus", "=x"}, "malformed argument '=x'");
}

TEST(ArgsTest, RejectsBadValues) {
  ExpectRejected({"release", "job=abc"}, "job must be a job id");
  ExpectRejected({"release", "job=0"}, "not '0'");
  ExpectRejected({"release", "job=-3"}, "not '-3'");
  ExpectRejected({"release", "job=4294967296"}, "not '4294967296'");
  ExpectRejected({"show", "leases", "job=12x"}, "not '12x'");
  ExpectRejected({"show", "events", "limit=0"}, "limit must be");
  ExpectRejected({"show", "events", "since=-1"}, "since must be");
  ExpectRejected({"show", "gpus", "pool=a 100"}, "bad pool name 'a 100'");
  ExpectRejected({"show", "pools", "a/100"}, "bad pool name");
  ExpectRejected({"release", "lease=L 7"}, "bad lease 'L 7'");
  ExpectRejected({"show", "leases", "job="}, "'job=' needs a value");
  ExpectRejected({"show", "leases", "job=1", "JOB=2"}, "'job' given more than once");
}

TEST(ArgsTest, RejectsIncompleteUpdateAndRelease) {
  ExpectRejected({"update", "state=drain"}, "needs gpu=ID");
  ExpectRejected({"update", "gpu=x"}, "needs state=");
  ExpectRejected({"update", "gpu=x", "state=drained"}, "bad state 'drained'");
  ExpectRejected({"update", "gpu=x", "state=fail", "reason=a\nb"}, "control characters");
  ExpectRejected({"update", "x", "state=fail"}, "unexpected word 'x'");
  ExpectRejected({"update", "gpu=x", "state=fail", "reason=" + std::string(1025, 'r')}, "longer than 1024");
  ExpectRejected({"release", "job=1", "reason=a\tb"}, "control characters");
  ExpectRejected({"release"}, "exactly one of");
  ExpectRejected({"release", "lease=L1", "job=1"}, "exactly one of");
  ExpectRejected({"show", "gpus", "a", "b"}, "unexpected word 'b'");
  ExpectRejected({"show", "leases", "L7"}, "unexpected word 'L7'");
}

}  // namespace
}  // namespace gpupool::ctl

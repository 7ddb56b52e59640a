// The API call built for each gpupoolctl command (paths and bodies from docs/api.md).
#include "poold/ctl/request.h"

#include <gtest/gtest.h>

namespace gpupool::ctl {
namespace {

ApiRequest For(std::vector<std::string> args) {
  Result<CtlArgs> parsed = ParseArgs(args);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return BuildRequest(parsed.value());
}

TEST(RequestTest, PingIsUnauthenticated) {
  ApiRequest r = For({"ping"});
  EXPECT_FALSE(r.post);
  EXPECT_EQ(r.path, "/v1/ping");
  EXPECT_FALSE(r.authenticate);
}

TEST(RequestTest, ShowQueries) {
  EXPECT_EQ(For({"show", "pools"}).path, "/v1/pools");
  EXPECT_EQ(For({"show", "pools", "a100"}).path, "/v1/pools?name=a100");
  EXPECT_EQ(For({"show", "gpus", "gpuhost1:0", "pool=a100"}).path, "/v1/gpus?id=gpuhost1%3A0&pool=a100");
  EXPECT_EQ(For({"show", "leases", "job=42", "lease=L7"}).path, "/v1/leases?job=42&id=L7");
  EXPECT_EQ(For({"show", "events", "gpu=GPU-ab", "job=1", "since=12", "limit=3"}).path,
            "/v1/events?gpu=GPU-ab&job=1&since=12&limit=3");
  EXPECT_TRUE(For({"show", "events"}).authenticate);
  EXPECT_FALSE(For({"show", "events"}).post);
}

TEST(RequestTest, UpdateBody) {
  ApiRequest r = For({"update", "gpu=gpuhost1:0", "state=Fail", "reason=Xid 79"});
  EXPECT_TRUE(r.post);
  EXPECT_EQ(r.path, "/v1/gpus/update");
  EXPECT_EQ(r.body, (nlohmann::json{{"gpu", "gpuhost1:0"}, {"state", "fail"}, {"reason", "Xid 79"}}));
  EXPECT_FALSE(For({"update", "gpu=g", "state=resume"}).body.contains("reason"));
}

TEST(RequestTest, MigrateBody) {
  ApiRequest r = For({"migrate", "lease=L7", "to=gpuhost3:1"});
  EXPECT_TRUE(r.post);
  EXPECT_EQ(r.path, "/v1/leases/migrate");
  EXPECT_EQ(r.body, (nlohmann::json{{"lease", "L7"}, {"to", "gpuhost3:1"}}));
}

TEST(RequestTest, ReleaseBody) {
  ApiRequest by_job = For({"release", "job=42"});
  EXPECT_TRUE(by_job.post);
  EXPECT_EQ(by_job.path, "/v1/leases/release");
  EXPECT_EQ(by_job.body, (nlohmann::json{{"job_id", 42}}));
  EXPECT_EQ(For({"release", "lease=L7"}).body, (nlohmann::json{{"id", "L7"}}));
  EXPECT_EQ(For({"release", "lease=L7", "reason=stuck"}).body, (nlohmann::json{{"id", "L7"}, {"reason", "stuck"}}));
}

TEST(RequestTest, QueryEscapeKeepsUnreservedOnly) {
  EXPECT_EQ(QueryEscape("aZ09-_.~"), "aZ09-_.~");
  EXPECT_EQ(QueryEscape("a b&c=d/e:f"), "a%20b%26c%3Dd%2Fe%3Af");
  EXPECT_EQ(QueryEscape("\xff"), "%FF");
}

}  // namespace
}  // namespace gpupool::ctl

// gpupoold's HTTP API end to end, in-process: authentication, roles, strict bodies, errors.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/api_client.h"
#include "poold/daemon.h"
#include "tests/poold/test_support.h"

namespace gpupool::poold {
namespace {

using nlohmann::json;

// A gpupoold of these tests: on a loopback port of its own, its state in `dir`, one pool
// of A100s, no Slurm reaper.
Config LocalConfig(const std::string& dir) {
  Config c;
  c.poold.listen = "127.0.0.1:0";
  c.poold.state_dir = dir;
  c.poold.slurm_reap = false;
  c.pools = {PoolConfig{"a100", {"A100*"}, {}, {}, 0}};
  return c;
}

class ApiTest : public ::testing::Test {
 protected:
  static constexpr uid_t kAgentUid1 = 64001, kAgentUid2 = 64002;
  static void SetUpTestSuite() { testing::StartPrivateMunged(); }

  void SetUp() override {
    dir_ = "/tmp/gpupool-api-test-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    Config c = LocalConfig(dir_);
    c.poold.max_request_bytes = 4096;
    // Two agents that do not run as root (AnAgentUserIsNoAdmin).
    c.poold.agent_users = {std::to_string(kAgentUid1), std::to_string(kAgentUid2)};
    // Slurm's view of jobs, as the tests need it: job 5 is nobody's, every other job root's;
    // each holds more gpupool_a100 licences than the pool has GPUs.
    daemon_ = std::make_unique<Daemon>(c, [](int64_t job) -> Result<SlurmJobOwner> {
      if (job >= 1000) return Status::NotFound("slurmctld knows no job " + std::to_string(job));
      return SlurmJobOwner{job == 5 ? uid_t{65534} : uid_t{0}, true, "gpupool_a100:16"};
    });
    Status s = daemon_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    server_ = std::thread([this] { daemon_->Run(); });
    url_ = "http://127.0.0.1:" + std::to_string(daemon_->port());
    client_ = std::make_unique<ApiClient>(ApiClientOptions{url_, 5000, "", true});
    // Wait for the listener.
    for (int i = 0; i < 100 && !client_->Get("/v1/pools").ok(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    json reg = {{"host", "g1"}, {"rack", "r1"}, {"endpoint", "127.0.0.1:7000"}, {"gpus", json::array()}};
    for (int i = 0; i < 4; ++i) {
      reg["gpus"].push_back(
          {{"uuid", "GPU-" + std::to_string(i)}, {"index", i}, {"model", "A100"}, {"memory_mib", 81920}});
    }
    ASSERT_TRUE(client_->Post("/v1/agents/register", reg).ok());
  }
  void TearDown() override {
    client_.reset();  // close its keep-alive connection so that Stop() need not wait
    daemon_->Stop();
    server_.join();
    daemon_.reset();
    std::filesystem::remove_all(dir_);
  }
  // A raw request with an explicit Authorization header (or none).
  httplib::Result Raw(const std::string& method, const std::string& path, const std::string& body,
                      const std::string& authorization) {
    httplib::Client http("127.0.0.1", daemon_->port());
    httplib::Headers h;
    if (!authorization.empty()) h.emplace("Authorization", authorization);
    if (method == "GET") return http.Get(path.c_str(), h);
    return http.Post(path.c_str(), h, body, "application/json");
  }
  std::string Error(const httplib::Result& r) { return json::parse(r->body)["error"].get<std::string>(); }
  size_t Leases() { return client_->Get("/v1/leases").value()["leases"].size(); }

  std::string dir_, url_;
  std::unique_ptr<Daemon> daemon_;
  std::thread server_;
  std::unique_ptr<ApiClient> client_;
};

TEST_F(ApiTest, PingAndMetricsNeedNoCredential) {
  auto r = Raw("GET", "/v1/ping", "", "");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto m = Raw("GET", "/metrics", "", "");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("gpupool_gpus{pool=\"a100\",state=\"IDLE\"} 4"), std::string::npos);
  EXPECT_NE(m->body.find("gpupool_request_duration_seconds_bucket"), std::string::npos);
}

// The commit histogram counts every transaction the store wrote, the lease's among them, so
// that a slow disk can be told apart from a busy daemon.
TEST_F(ApiTest, EveryCommitIsTimedInTheMetrics) {
  // {commits_total, the histogram's count, its +Inf bucket}, once the two counts agree (the
  // committer times a commit just before it counts it).
  auto scrape = [&]() -> std::array<long long, 3> {
    std::array<long long, 3> v{-1, -2, -3};
    for (int i = 0; i < 50 && v[0] != v[1]; ++i) {
      auto m = Raw("GET", "/metrics", "", "");
      if (!m) continue;
      auto metric = [&](const std::string& name) -> long long {
        size_t at = m->body.find("\n" + name + " ");
        return at == std::string::npos ? -1 : std::stoll(m->body.substr(at + name.size() + 2));
      };
      v = {metric("gpupool_store_commits_total"), metric("gpupool_store_commit_duration_seconds_count"),
           metric("gpupool_store_commit_duration_seconds_bucket{le=\"+Inf\"}")};
      if (v[0] != v[1]) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return v;
  };
  const auto before = scrape();
  EXPECT_GE(before[0], 1);  // the agent's registration
  EXPECT_EQ(before[1], before[0]);
  EXPECT_EQ(before[2], before[1]);
  ASSERT_TRUE(client_->Post("/v1/leases", json::parse(R"({"job_id":7,"request":[{"pool":"a100","count":1}]})")).ok());
  const auto after = scrape();
  EXPECT_GT(after[0], before[0]);
  EXPECT_EQ(after[1], after[0]);
  EXPECT_EQ(after[2], after[1]);
}

TEST_F(ApiTest, MissingForgedAndReplayedCredentialsChangeNothing) {
  std::string body = R"({"job_id":1,"request":[{"pool":"a100","count":1}]})";
  auto none = Raw("POST", "/v1/leases", body, "");
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(Error(none).find("authentication required"), std::string::npos);
  std::string cred = auth::EncodeCredential("").value();
  std::string forged = cred;
  forged[forged.size() / 2] = forged[forged.size() / 2] == 'A' ? 'B' : 'A';
  auto bad = Raw("POST", "/v1/leases", body, "MUNGE " + forged);
  EXPECT_EQ(bad->status, 401);
  EXPECT_NE(Error(bad).find("invalid MUNGE credential"), std::string::npos);
  auto first = Raw("POST", "/v1/leases", body, "MUNGE " + cred);
  EXPECT_EQ(first->status, 200);
  auto replay = Raw("POST", "/v1/leases/release", R"({"job_id":1})", "MUNGE " + cred);
  EXPECT_EQ(replay->status, 401);
  EXPECT_NE(Error(replay).find("Replayed"), std::string::npos);
  EXPECT_EQ(Leases(), 1u);
  auto basic = Raw("GET", "/v1/pools", "", "Basic abc");
  EXPECT_EQ(basic->status, 401);
}

TEST_F(ApiTest, RolesAreEnforced) {
  const uid_t nobody = 65534;
  std::string body = R"({"gpu":"g1:0","state":"drain"})";
  auto r = Raw("POST", "/v1/gpus/update", body, "MUNGE " + testing::CredentialAs(nobody));
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(Error(r).find("admin"), std::string::npos);
  auto reg = Raw("POST", "/v1/agents/register", R"({"host":"evil","rack":"r","gpus":[]})",
                 "MUNGE " + testing::CredentialAs(nobody));
  EXPECT_EQ(reg->status, 403);
  // Only admins move leases.
  auto migrate = Raw("POST", "/v1/leases/migrate", R"({"lease":"L1"})", "MUNGE " + testing::CredentialAs(nobody));
  EXPECT_EQ(migrate->status, 403);
  // Only agents report recoveries (with their heartbeat).
  auto recovered = Raw(
      "POST", "/v1/agents/heartbeat",
      R"({"host":"g1","recoveries":[{"uuid":"GPU-0","lease":"L1","from":"GPU-9","pause_ms":1,"restored_bytes":0,"replayed":0}]})",
      "MUNGE " + testing::CredentialAs(nobody));
  EXPECT_EQ(recovered->status, 403);
  EXPECT_EQ(client_->Get("/v1/gpus?id=g1:0").value()["gpus"][0]["state"], "IDLE");
  // A user acquires for themselves; root sees it; the user cannot release root's lease.
  auto mine = Raw("POST", "/v1/leases", R"({"job_id":5,"request":[{"pool":"a100","count":1}]})",
                  "MUNGE " + testing::CredentialAs(nobody));
  ASSERT_EQ(mine->status, 200) << mine->body;
  EXPECT_EQ(json::parse(mine->body)["lease"]["uid"], nobody);
  ASSERT_TRUE(client_->Post("/v1/leases", json::parse(R"({"job_id":6,"request":[{"pool":"a100","count":1}]})")).ok());
  // Nor acquire for root's job 6 (lease squatting), nor for a job Slurm does not know.
  auto squat = Raw("POST", "/v1/leases", R"({"job_id":6,"request":[{"pool":"a100","count":1}]})",
                   "MUNGE " + testing::CredentialAs(nobody));
  EXPECT_EQ(squat->status, 403) << squat->body;
  EXPECT_NE(Error(squat).find("job 6 belongs to uid 0"), std::string::npos);
  EXPECT_EQ(squat->body.find("token"), std::string::npos);
  auto future = Raw("POST", "/v1/leases", R"({"job_id":4242,"request":[{"pool":"a100","count":1}]})",
                    "MUNGE " + testing::CredentialAs(nobody));
  EXPECT_EQ(future->status, 403) << future->body;
  auto steal = Raw("POST", "/v1/leases/release", R"({"job_id":6})", "MUNGE " + testing::CredentialAs(nobody));
  EXPECT_EQ(steal->status, 403);
  auto list = Raw("GET", "/v1/leases", "", "MUNGE " + testing::CredentialAs(nobody));
  EXPECT_EQ(json::parse(list->body)["leases"].size(), 1u);
  EXPECT_EQ(Leases(), 2u);
}

// An agent that runs as a user of agent_users (not root) reports on its own host only and
// is no admin: it cannot drain, fail or move GPUs, report on a host another agent serves
// (on this machine too: agents of one address are told apart by uid), or lease GPUs for
// another user's job.
TEST_F(ApiTest, AnAgentUserIsNoAdmin) {
  auto as = [](uid_t uid) { return "MUNGE " + testing::CredentialAs(uid); };
  json reg = {{"host", "a1"},
              {"rack", "r1"},
              {"endpoint", "127.0.0.1:7001"},
              {"gpus", {{{"uuid", "GPU-a1-0"}, {"index", 0}, {"model", "A100"}, {"memory_mib", 81920}}}}};
  auto own = Raw("POST", "/v1/agents/register", reg.dump(), as(kAgentUid1));
  ASSERT_EQ(own->status, 200) << own->body;
  auto beat = Raw("POST", "/v1/agents/heartbeat", R"({"host":"a1","gpus":[]})", as(kAgentUid1));
  EXPECT_EQ(beat->status, 200) << beat->body;

  // Another host's GPU: g1 (registered by root in SetUp) and a1 (by the first agent user).
  std::string fail_g1 = R"({"host":"g1","gpus":[{"uuid":"GPU-0","health":"FAILED","reason":"Xid 79"}]})";
  auto other = Raw("POST", "/v1/agents/heartbeat", fail_g1, as(kAgentUid1));
  EXPECT_EQ(other->status, 403) << other->body;
  EXPECT_NE(Error(other).find("may not report for it"), std::string::npos) << other->body;
  std::string fail_a1 = R"({"host":"a1","gpus":[{"uuid":"GPU-a1-0","health":"FAILED","reason":"Xid 79"}]})";
  auto neighbour = Raw("POST", "/v1/agents/heartbeat", fail_a1, as(kAgentUid2));
  EXPECT_EQ(neighbour->status, 403) << neighbour->body;
  json empty_a1 = {{"host", "a1"}, {"rack", "r1"}, {"endpoint", "127.0.0.1:7002"}, {"gpus", json::array()}};
  auto take = Raw("POST", "/v1/agents/register", empty_a1.dump(), as(kAgentUid2));
  EXPECT_EQ(take->status, 403) << take->body;

  // No admin: drain, fail, resume and migrate are refused.
  for (const char* state : {"drain", "fail", "resume"}) {
    json update = {{"gpu", "g1:0"}, {"state", state}};
    auto r = Raw("POST", "/v1/gpus/update", update.dump(), as(kAgentUid1));
    EXPECT_EQ(r->status, 403) << state << ": " << r->body;
  }
  EXPECT_EQ(Raw("POST", "/v1/leases/migrate", R"({"lease":"L1"})", as(kAgentUid1))->status, 403);
  // Job 6 is root's: an agent user may not lease GPUs for it, nor name another owner.
  auto squat = Raw("POST", "/v1/leases", R"({"job_id":6,"request":[{"pool":"a100","count":1}]})", as(kAgentUid1));
  EXPECT_EQ(squat->status, 403) << squat->body;
  auto owner =
      Raw("POST", "/v1/leases", R"({"job_id":5,"uid":65534,"request":[{"pool":"a100","count":1}]})", as(kAgentUid1));
  EXPECT_EQ(owner->status, 403) << owner->body;

  // Nothing changed: every GPU idle, no lease.
  json gpus = client_->Get("/v1/gpus").value()["gpus"];
  for (const json& g : gpus) EXPECT_EQ(g["state"], "IDLE") << g.dump();
  EXPECT_EQ(gpus.size(), 5u);
  EXPECT_EQ(Leases(), 0u);
}

TEST_F(ApiTest, MalformedRequestsGetANamedErrorAndChangeNothing) {
  struct Case {
    std::string path, body;
    int code;
    std::string message;
  } cases[] = {
      {"/v1/leases", "{not json", 400, "malformed JSON"},
      {"/v1/leases", R"([1,2])", 400, "must be a JSON object"},
      {"/v1/leases", R"({"job_id":1,"request":[{"pool":"a100","count":1}],"colour":"red"})", 400,
       "unknown field 'colour'"},
      {"/v1/leases", R"({"job_id":"x","request":[{"pool":"a100","count":1}]})", 400, "'job_id' must be an integer"},
      {"/v1/leases", R"({"job_id":0,"request":[{"pool":"a100","count":1}]})", 400, "'job_id' must be between"},
      {"/v1/leases", R"({"job_id":1,"request":[{"pool":"a100","count":0}]})", 400, "must be at least 1"},
      {"/v1/leases", R"({"job_id":1,"request":[{"pool":"a100","count":-3}]})", 400, "must be at least 1"},
      {"/v1/leases", R"({"job_id":1,"request":[{"pool":"a100","count":1}],"movable":"yes"})", 400, "'movable' must be"},
      {"/v1/leases", R"({"job_id":1,"request":[{"pool":"a100","count":9}]})", 409, "has 4 GPUs, 9 requested"},
      {"/v1/leases", R"({"job_id":1,"request":[{"pool":"b200","count":1}]})", 400, "unknown pool 'b200'"},
      {"/v1/leases", R"({"job_id":1,"request":[]})", 400, "non-empty list"},
      {"/v1/leases", R"({"job_id":1,"request":[{"pool":"a100","count":1}],"place":"zigzag"})", 400, "bad place"},
      {"/v1/leases/release", R"({"id":"L999"})", 404, "no such lease 'L999'"},
      {"/v1/leases/release", R"({"id":"bogus"})", 400, "bad lease id"},
      {"/v1/leases/release", R"({})", 400, "exactly one of"},
      {"/v1/leases/renew", R"({"job_id":77})", 404, "job 77 holds no lease"},
      {"/v1/gpus/update", R"({"gpu":"g1:0","state":"explode"})", 400, "bad state 'explode'"},
      {"/v1/gpus/update", R"({"gpu":"g9:9","state":"drain"})", 404, "no such GPU 'g9:9'"},
      {"/v1/agents/register",
       R"({"host":"g2","rack":"r1","gpus":[{"uuid":"X","index":0,"model":"A100","memory_mib":1},{"uuid":"X","index":1,"model":"A100","memory_mib":1}]})",
       400, "duplicate GPU uuid"},
      {"/v1/agents/heartbeat", R"({"host":"nobody"})", 404, "unknown host 'nobody'"},
      {"/v1/agents/heartbeat", R"({"host":"g1","gpus":[{"uuid":"GPU-0","health":"SICK"}]})", 400,
       "must be OK or FAILED"},
      {"/v1/agents/heartbeat", R"({"host":"g1","recoveries":{}})", 400, "'recoveries' must be a list"},
      {"/v1/leases/migrate", R"({})", 400, "lease"},
      {"/v1/leases/migrate", R"({"lease":"L999"})", 404, "no such lease 'L999'"},
      {"/v1/leases/migrate", R"({"lease":"L1","colour":"red"})", 400, "unknown field 'colour'"},
      {"/v1/agents/heartbeat",
       R"({"host":"g1","recoveries":[{"uuid":"GPU-0","lease":"L1","from":"GPU-9","pause_ms":-5,"restored_bytes":0,"replayed":0}]})",
       400, "'pause_ms' must be a non-negative integer"},
      {"/v1/agents/heartbeat",
       R"({"host":"g1","recoveries":[{"uuid":"GPU-0","lease":"L1","from":"GPU-9","pause_ms":1,"restored_bytes":0,"replayed":0,"extra":1}]})",
       400, "unknown field 'extra'"},
      {"/v1/agents/heartbeat",
       R"({"host":"g1","recoveries":[{"uuid":"GPU-0","lease":"L1","from":"GPU-9","pause_ms":1,"restored_bytes":0,"replayed":0,"copied_bytes":"lots"}]})",
       400, "'copied_bytes' must be a non-negative integer"},
      {"/v1/nothing", R"({})", 404, "no such endpoint"},
  };
  for (const Case& c : cases) {
    auto r = Raw("POST", c.path, c.body, "MUNGE " + auth::EncodeCredential("").value());
    ASSERT_TRUE(r) << c.path;
    EXPECT_EQ(r->status, c.code) << c.path << " " << c.body << " -> " << r->body;
    EXPECT_NE(r->body.find(c.message), std::string::npos) << c.body << " -> " << r->body;
  }
  auto q = Raw("GET", "/v1/leases?job=abc", "", "MUNGE " + auth::EncodeCredential("").value());
  EXPECT_EQ(q->status, 400);
  EXPECT_NE(Error(q).find("'job' must be a number"), std::string::npos);
  std::string big(8192, ' ');
  auto huge =
      Raw("POST", "/v1/leases", "{\"job_id\":1,\"x\":\"" + big + "\"}", "MUNGE " + auth::EncodeCredential("").value());
  EXPECT_EQ(huge->status, 413);
  EXPECT_EQ(Leases(), 0u);
  EXPECT_EQ(client_->Get("/v1/pools").value()["pools"][0]["idle"], 4);
  EXPECT_TRUE(client_->Get("/v1/ping").ok());  // still serving
}

// A failed state write (issue 8, part 4): the change is not acknowledged, nothing more is
// changed, and the daemon stops itself so that a restart reloads what is on disk.
TEST_F(ApiTest, AFailedStateWriteStopsChangesAndTheDaemon) {
  // Another connection holds the database's write lock past gpupoold's 5 s busy timeout.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/gpupoold.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  httplib::Client http("127.0.0.1", daemon_->port());
  http.set_read_timeout(30, 0);  // the write fails only after the busy timeout
  auto drain = http.Post("/v1/gpus/update", {{"Authorization", "MUNGE " + testing::CredentialAs(0)}},
                         R"({"gpu":"g1:0","state":"drain"})", "application/json");
  ASSERT_TRUE(drain);
  EXPECT_EQ(drain->status, 500);
  EXPECT_NE(Error(drain).find("state not saved"), std::string::npos) << drain->body;
  sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  auto next = Raw("POST", "/v1/gpus/update", R"({"gpu":"g1:1","state":"drain"})", "MUNGE " + testing::CredentialAs(0));
  EXPECT_EQ(next->status, 503) << next->body;
  EXPECT_NE(Error(next).find("refuses changes until it restarts"), std::string::npos);
  // The daemon stops by itself within a few seconds, saying why.
  server_.join();
  EXPECT_FALSE(daemon_->fatal().ok());
  client_.reset();
  daemon_.reset();
  // Restarted from disk: neither unacknowledged drain happened.
  daemon_ = std::make_unique<Daemon>(LocalConfig(dir_));
  ASSERT_TRUE(daemon_->Start().ok());
  server_ = std::thread([this] { daemon_->Run(); });
  for (const char* id : {"g1:0", "g1:1"}) {
    auto gpus = daemon_->engine()->ListGpus(id, "");
    ASSERT_TRUE(gpus.ok());
    EXPECT_EQ(gpus.value()["gpus"][0]["state"], "IDLE") << id;
  }
}

// Issue 37: a request waiting for its change to reach the disk holds no worker. With one
// worker, while a drain's commit waits on a locked database, other requests are answered
// at once (here: a refused credential, which waits for nothing); before, the one worker
// waited in the drain's commit for the 5 s busy timeout. With 4 workers the drain, served
// alone, writes its own change (Store::InlineWrite) and its worker waits on the lock: the
// next request has another worker.
class ApiWorkersTest : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Workers, ApiWorkersTest, ::testing::Values(1, 4));

TEST_P(ApiWorkersTest, ARequestWaitingForTheDiskHoldsNoWorker) {
  testing::StartPrivateMunged();
  std::string dir = "/tmp/gpupool-api-workers-" + std::to_string(getpid()) + "-" + std::to_string(GetParam());
  std::filesystem::remove_all(dir);
  Config c = LocalConfig(dir);
  c.poold.threads = GetParam();
  Daemon daemon(c, [](int64_t) -> Result<SlurmJobOwner> { return SlurmJobOwner{0, true, "gpupool_a100:1"}; });
  ASSERT_TRUE(daemon.Start().ok());
  std::thread server([&] { daemon.Run(); });
  ApiClient client(ApiClientOptions{"http://127.0.0.1:" + std::to_string(daemon.port()), 5000, "", true});
  for (int i = 0; i < 100 && !client.Get("/v1/pools").ok(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  json reg = {{"host", "g1"}, {"rack", "r1"}, {"endpoint", "127.0.0.1:7000"}, {"gpus", json::array()}};
  reg["gpus"].push_back({{"uuid", "GPU-0"}, {"index", 0}, {"model", "A100"}, {"memory_mib", 81920}});
  ASSERT_TRUE(client.Post("/v1/agents/register", reg).ok());

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/gpupoold.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  std::atomic<int> drain_status{0};
  std::thread drain([&] {
    httplib::Client http("127.0.0.1", daemon.port());
    http.set_read_timeout(30, 0);
    auto r = http.Post("/v1/gpus/update", {{"Authorization", "MUNGE " + testing::CredentialAs(0)}},
                       R"({"gpu":"g1:0","state":"drain"})", "application/json");
    drain_status = r ? r->status : -1;
  });
  // Once the engine shows the drain, it is in memory and its commit waits on the lock; then
  // the one worker is asked again, with a bad credential.
  for (int i = 0; i < 200; ++i) {
    auto gpus = daemon.engine()->ListGpus("g1:0", "");
    if (gpus.ok() && gpus.value()["gpus"][0]["state"] != "IDLE") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto start = std::chrono::steady_clock::now();
  httplib::Client http("127.0.0.1", daemon.port());
  auto refused = http.Post("/v1/gpus/update", {{"Authorization", "MUNGE not-a-credential"}},
                           R"({"gpu":"g1:0","state":"resume"})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401) << refused->body;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(drain_status, 0) << "the drain was answered before its commit";
  sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  drain.join();
  // The lock went within the busy timeout: the drain committed and was answered then.
  EXPECT_EQ(drain_status, 200);
  // Written by its own worker where there was another.
  httplib::Client scrape("127.0.0.1", daemon.port());
  auto metrics = scrape.Get("/metrics");
  EXPECT_TRUE(metrics && metrics->body.find("\ngpupool_store_inline_commits_total ") != std::string::npos);
  if (metrics) {
    const bool written_inline = metrics->body.find("\ngpupool_store_inline_commits_total 0\n") == std::string::npos;
    EXPECT_EQ(written_inline, GetParam() > 1) << metrics->body;
  }
  daemon.Stop();
  server.join();
  EXPECT_TRUE(daemon.fatal().ok()) << daemon.fatal().message();
  std::filesystem::remove_all(dir);
}

TEST_F(ApiTest, ClientReportsUnreachableDaemonByAddress) {
  ApiClient dead(ApiClientOptions{"http://127.0.0.1:1", 500, "", true});
  auto r = dead.Get("/v1/pools");
  EXPECT_EQ(r.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot reach gpupoold at http://127.0.0.1:1"), std::string::npos);
  ApiClient bad(ApiClientOptions{"nonsense", 500, "", true});
  EXPECT_EQ(bad.Get("/v1/pools").status().code(), Status::Code::kInvalidArgument);
}

// Issue 37: a follower's redirect is followed only to a configured server. Someone who can
// write etcd's leader key (or answer as a follower) must not receive clients' credentials.
TEST_F(ApiTest, AForgedLeaderOutsideTheServerListIsIgnored) {
  std::atomic<int> forged_hits{0};
  httplib::Server forged;
  forged.Get(".*", [&](const httplib::Request&, httplib::Response& res) {
    ++forged_hits;
    res.set_content("{\"pools\":[]}", "application/json");
  });
  forged.Post(".*", [&](const httplib::Request&, httplib::Response& res) {
    ++forged_hits;
    res.set_content("{}", "application/json");
  });
  int forged_port = forged.bind_to_any_port("127.0.0.1");
  std::thread forged_thread([&] { forged.listen_after_bind(); });
  httplib::Server follower;
  std::string forged_url = "http://127.0.0.1:" + std::to_string(forged_port);
  auto redirect = [&](const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_content(json{{"error", "this gpupoold is a follower; the leader is at " + forged_url},
                         {"leader", forged_url},
                         {"retry", true}}
                        .dump(),
                    "application/json");
  };
  follower.Get(".*", redirect);
  follower.Post(".*", redirect);
  int follower_port = follower.bind_to_any_port("127.0.0.1");
  std::thread follower_thread([&] { follower.listen_after_bind(); });
  std::string follower_url = "http://127.0.0.1:" + std::to_string(follower_port);
  for (int i = 0; i < 100 && !(forged.is_running() && follower.is_running()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  {  // (the clients close their keep-alive connections before the servers stop)
    ApiClient only_follower(ApiClientOptions{follower_url, 2000, "", true});
    auto r = only_follower.Get("/v1/pools");
    EXPECT_EQ(r.status().code(), Status::Code::kUnavailable);
    EXPECT_NE(r.status().message().find("names as leader " + forged_url +
                                        ", which is not in the configured server list: not followed"),
              std::string::npos)
        << r.status().message();
    // With the real server listed too, the client ends there, never at the forged one.
    ApiClient listed(ApiClientOptions{follower_url + "," + url_, 3000, "", true});
    auto pools = listed.Get("/v1/pools");
    EXPECT_TRUE(pools.ok()) << pools.status().message();
    if (pools.ok()) {
      EXPECT_EQ(pools.value()["pools"][0]["name"], "a100");
    }
    EXPECT_EQ(forged_hits.load(), 0);
  }
  forged.stop();
  follower.stop();
  forged_thread.join();
  follower_thread.join();
}

// Issue 37: a connection that never finishes its headers is closed at header_timeout, and
// one source's connections beyond connections_per_source are refused; meanwhile agents and
// users are served.
TEST(ApiLimitsTest, SlowHeadersAreCutAndASourceIsCapped) {
  testing::StartPrivateMunged();
  std::string dir = "/tmp/gpupool-api-limits-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  Config c = LocalConfig(dir);
  c.poold.header_timeout = 1;
  c.poold.connections_per_source = 20;
  c.poold.threads = 2;
  Daemon daemon(c, [](int64_t) -> Result<SlurmJobOwner> { return SlurmJobOwner{0, true, "gpupool_a100:1"}; });
  ASSERT_TRUE(daemon.Start().ok());
  std::thread server([&] { daemon.Run(); });
  std::string url = "http://127.0.0.1:" + std::to_string(daemon.port());
  // A source is an address and, on loopback, a uid: this test's own client shares them
  // with the flood, so it keeps one connection open from before (a keep-alive session).
  ApiClient client(ApiClientOptions{url, 5000, "", true});
  for (int i = 0; i < 100 && !client.Get("/v1/pools").ok(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(client.Get("/v1/pools").ok());

  auto connect_slow = [&] {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(daemon.port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    const char part[] = "GET /v1/pools HTTP/1.1\r\nX-Slow: 1\r\n";  // never ends its headers
    EXPECT_GT(send(fd, part, sizeof(part) - 1, MSG_NOSIGNAL), 0);
    return fd;
  };
  std::vector<int> slow;
  for (int i = 0; i < 40; ++i) slow.push_back(connect_slow());
  // More slow connections than workers: requests are still answered at once.
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client.Get("/v1/pools").ok());
  json hb = {{"host", "g1"}, {"gpus", json::array()}};
  EXPECT_EQ(client.Post("/v1/agents/heartbeat", hb).status().code(), Status::Code::kNotFound);  // served
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // Beyond 20 (19 slow and the client's own): answered 503 and closed, or closed by the
  // deadline; none is open after header_timeout (1 s) and a margin.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  // (A refused connection may read its 503, or a reset: the server does not read it.)
  int closed = 0;
  for (int fd : slow) {
    char buf[512];
    ssize_t n = 0;
    do {
      n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    } while (n > 0);
    if (n == 0 || errno == ECONNRESET) ++closed;
    close(fd);
  }
  EXPECT_EQ(closed, 40);
  // The server closed every slow connection (each read its end above), so this source
  // holds only the client's: a connection of its own is under the cap again.
  httplib::Client http("127.0.0.1", daemon.port());
  httplib::Result scraped = http.Get("/metrics");
  ASSERT_TRUE(scraped) << httplib::to_string(scraped.error());
  ASSERT_EQ(scraped->status, 200) << scraped->body;
  const std::string metrics = scraped->body;
  auto metric = [&](const std::string& name) {
    size_t at = metrics.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stoll(metrics.substr(at + name.size() + 2));
  };
  EXPECT_EQ(metric("gpupool_http_refused_total"), 21) << metrics;  // 40 - 19
  EXPECT_EQ(metric("gpupool_http_timeouts_total"), 19) << metrics;
  daemon.Stop();
  server.join();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpupool::poold

// PoolEngine: leases, placement, health and swap, recovery — against a real Store in a
// temporary directory and a fake clock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "poold/agent_probe.h"
#include "poold/pool_engine.h"
#include "poold/store.h"

namespace gpupool::poold {
namespace {

using nlohmann::json;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("poold-engine-" + std::to_string(getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    config_.poold.state_dir = dir_.string();
    config_.poold.unreachable_timeout = 10;
    config_.poold.lease_ttl = 100;
    config_.pools = {PoolConfig{"a100", {"A100*"}, {}, {}, 0}, PoolConfig{"h100", {"H100*"}, {}, {}, 0}};
    Open();
  }
  void TearDown() override {
    engine_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Open() {
    engine_.reset();
    store_.reset();
    auto store = Store::Open(dir_.string(), /*fsync=*/false);
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(store.value());
    auto loaded = store_->Load(1000);
    ASSERT_TRUE(loaded.ok());
    engine_ = std::make_unique<PoolEngine>(config_, store_.get(), [this] { return now_.load(); });
    if (!token_key_.empty()) engine_->SetLeaseTokens(LeaseTokens(token_key_));
    ASSERT_TRUE(engine_->Recover(loaded.value()).ok());
    // Slurm's view unless a test says otherwise: every job is root's, running, and holds
    // more licences of each pool than any test asks for.
    engine_->SetJobOwnerLookup([](int64_t) -> Result<SlurmJobOwner> {
      return SlurmJobOwner{0, true, "gpupool_a100:1000,gpupool_h100:1000"};
    });
  }
  // Registers host `host` in `rack` with `n` GPUs of `model`.
  void AddHost(const std::string& host, const std::string& rack, int n, const std::string& model = "A100-80GB",
               uint64_t mem = 81920) {
    AgentRegistration reg{host, rack, "127.0.0.1:7000", {}};
    for (int i = 0; i < n; ++i) {
      reg.gpus.push_back(AgentGpu{"GPU-" + host + "-" + std::to_string(i), model, "", i, 0, mem, false, ""});
    }
    auto r = engine_->Register(reg);
    ASSERT_TRUE(r.ok()) << r.status().message();
  }
  Result<json> Acquire(int64_t job, const std::string& pool, int count, const std::string& place = "pack",
                       uint64_t mem = 0, bool movable = false) {
    AcquireRequest req;
    req.job_id = job;
    req.request = {PoolRequest{pool, count}};
    req.place = place;
    req.min_memory_mib = mem;
    req.movable = movable;
    bool created = false;
    return engine_->Acquire(admin_, req, &created);
  }
  std::set<std::string> Racks(const json& lease) {
    std::set<std::string> racks;
    for (const json& g : lease["gpus"]) racks.insert(g["rack"].get<std::string>());
    return racks;
  }
  json Gpu(const std::string& id) { return engine_->ListGpus(id, "").value()["gpus"][0]; }
  json Pool(const std::string& name) { return engine_->ListPools(name).value()["pools"][0]; }
  std::vector<std::string> EventTypes(int64_t job = 0) {
    EventFilter f;
    f.job_id = job;
    std::vector<std::string> out;
    json events = engine_->ListEvents(admin_, f).value()["events"];
    for (const json& e : events) out.push_back(e["type"]);
    return out;
  }

  std::filesystem::path dir_;
  Config config_;
  std::atomic<int64_t> now_{1000};
  std::unique_ptr<Store> store_;
  std::unique_ptr<PoolEngine> engine_;
  Caller admin_{0, auth::Role::kAdmin};
  std::string token_key_;  // lease tokens' key (empty: kept in clear)
};

TEST_F(EngineTest, RegistrationBuildsPoolsFromSelectors) {
  AddHost("g1", "r1", 4);
  AddHost("g2", "r1", 2, "H100-80GB");
  EXPECT_EQ(Pool("a100")["total"], 4);
  EXPECT_EQ(Pool("h100")["total"], 2);
  EXPECT_EQ(Gpu("g2:1")["pool"], "h100");
  EXPECT_EQ(Gpu("GPU-g1-3")["id"], "g1:3");  // uuid accepted as id
  EXPECT_EQ(engine_->ListGpus("g9:0", "").status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(EngineTest, AcquireIsIdempotentPerJob) {
  AddHost("g1", "r1", 4);
  auto a = Acquire(42, "a100", 2);
  ASSERT_TRUE(a.ok());
  auto b = Acquire(42, "a100", 2);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a.value()["id"], b.value()["id"]);
  EXPECT_EQ(a.value()["gpus"], b.value()["gpus"]);
  EXPECT_EQ(Pool("a100")["leased"], 2);
  auto c = Acquire(42, "a100", 3);
  EXPECT_EQ(c.status().code(), Status::Code::kConflict);
}

// Lease squatting (issue 8): a user may acquire only for a job Slurm says is theirs, and a
// job's lease held by anyone else is never handed to the job.
TEST_F(EngineTest, UsersAcquireOnlyForTheirOwnJobs) {
  AddHost("g1", "r1", 4);
  const uid_t alice = 5001, bob = 5002;
  std::map<int64_t, uid_t> owners = {{10, alice}, {11, bob}};
  bool slurm_down = false;
  engine_->SetJobOwnerLookup([&](int64_t job) -> Result<SlurmJobOwner> {
    if (slurm_down) return Status::Unavailable("slurmctld did not answer");
    if (job == 12) return SlurmJobOwner{alice, false, ""};  // alice's, still pending
    auto it = owners.find(job);
    if (it == owners.end()) return Status::NotFound("slurmctld knows no job " + std::to_string(job));
    return SlurmJobOwner{it->second, true, "gpupool_a100:1"};
  });
  AcquireRequest req;
  req.request = {PoolRequest{"a100", 1}};
  bool created = false;
  Caller as_alice{alice, auth::Role::kUser}, as_bob{bob, auth::Role::kUser};

  req.job_id = 11;  // bob's job
  auto squat = engine_->Acquire(as_alice, req, &created);
  EXPECT_EQ(squat.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(squat.status().message().find("job 11 belongs to uid 5002, not to uid 5001"), std::string::npos)
      << squat.status().message();
  req.job_id = 99;  // no such job: a squat on a future job id
  auto future = engine_->Acquire(as_alice, req, &created);
  EXPECT_EQ(future.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(future.status().message().find("not a pending or running Slurm job"), std::string::npos);
  // Her own job, but pending: the reaper would take its lease, so there is none to take.
  req.job_id = 12;
  auto pending = engine_->Acquire(as_alice, req, &created);
  EXPECT_EQ(pending.status().code(), Status::Code::kConflict);
  EXPECT_NE(pending.status().message().find("job 12 is pending"), std::string::npos);
  slurm_down = true;
  req.job_id = 10;
  EXPECT_EQ(engine_->Acquire(as_alice, req, &created).status().code(), Status::Code::kUnavailable);
  slurm_down = false;
  EXPECT_EQ(Pool("a100")["leased"], 0);  // nothing changed by refusals
  EXPECT_EQ(engine_->lease_count(), 0u);

  auto mine = engine_->Acquire(as_alice, req, &created);
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  EXPECT_EQ(mine.value()["uid"], alice);
  // Bob cannot get alice's lease (or its token) by asking for her job.
  EXPECT_EQ(engine_->Acquire(as_bob, req, &created).status().code(), Status::Code::kPermissionDenied);
  EXPECT_TRUE(engine_->CheckInvariants().ok());
}

// Without Slurm, gpupoold cannot learn a job's licences: by default nobody acquires; a site
// that turns the licence limit off lets only admins acquire.
TEST_F(EngineTest, NoSlurmMeansNobodyOrOnlyAdminsAcquire) {
  EXPECT_TRUE(Config().poold.enforce_licenses);  // the safe default
  engine_->SetJobOwnerLookup({});
  AddHost("g1", "r1", 2);
  AcquireRequest req;
  req.job_id = 7;
  req.request = {PoolRequest{"a100", 1}};
  bool created = false;
  auto r = engine_->Acquire(admin_, req, &created);
  EXPECT_EQ(r.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(r.status().message().find("cannot ask Slurm which gpupool licences job 7 holds"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(engine_->lease_count(), 0u);

  config_.poold.enforce_licenses = false;
  Open();
  engine_->SetJobOwnerLookup({});
  r = engine_->Acquire(Caller{5001, auth::Role::kUser}, req, &created);
  EXPECT_EQ(r.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(r.status().message().find("only root or SlurmUser may acquire"), std::string::npos);
  EXPECT_TRUE(engine_->Acquire(admin_, req, &created).ok());
}

// Issue 37: a lease holds at most the gpupool_<pool> licences Slurm allocated its job, for
// users and admins alike; a job's steps share the one lease.
TEST_F(EngineTest, LeasesStayWithinTheJobsLicences) {
  AddHost("g1", "r1", 4);
  AddHost("h1", "r1", 2, "H100-80GB");
  const uid_t alice = 5001;
  int lookups = 0;
  engine_->SetJobOwnerLookup([&](int64_t job) -> Result<SlurmJobOwner> {
    ++lookups;
    if (job == 30) return SlurmJobOwner{alice, true, "gpupool_a100:2"};
    if (job == 31) return SlurmJobOwner{alice, true, ""};  // a CPU-only job
    if (job == 32) return SlurmJobOwner{alice, true, "scratch:3,gpupool_h100@slurmdb:1"};
    if (job == 33) return SlurmJobOwner{alice, true, "gpupool_a100:x"};
    return Status::NotFound("slurmctld knows no job " + std::to_string(job));
  });
  Caller as_alice{alice, auth::Role::kUser};
  bool created = false;
  auto acquire = [&](const Caller& who, int64_t job, const std::string& pool, int count) {
    AcquireRequest req;
    req.job_id = job;
    req.request = {PoolRequest{pool, count}};
    if (who.is_admin()) {
      req.has_owner = true;  // as spank_gpupool does
      req.uid = alice;
    }
    return engine_->Acquire(who, req, &created);
  };
  auto refused = [&](const Result<json>& r, const std::string& why) {
    EXPECT_EQ(r.status().code(), Status::Code::kPermissionDenied) << r.status().message();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  refused(acquire(as_alice, 31, "a100", 1), "job 31 holds no gpupool licences (Slurm: Licenses=(null))");
  refused(acquire(admin_, 31, "a100", 1), "job 31 holds no gpupool licences");  // root is not exempt
  refused(acquire(as_alice, 30, "a100", 3), "job 30 holds 2 gpupool_a100 licences, 3 GPUs of pool 'a100'");
  refused(acquire(admin_, 30, "a100", 3), "job 30 holds 2 gpupool_a100 licences");
  refused(acquire(as_alice, 30, "h100", 1), "job 30 holds 0 gpupool_h100 licences");
  refused(acquire(admin_, 32, "h100", 2), "job 32 holds 1 gpupool_h100 licences");
  auto bad = acquire(admin_, 33, "a100", 1);
  EXPECT_EQ(bad.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(bad.status().message().find("bad licence count in 'gpupool_a100:x'"), std::string::npos);
  EXPECT_EQ(engine_->lease_count(), 0u);
  EXPECT_EQ(Pool("a100")["leased"], 0);

  auto lease = acquire(admin_, 30, "a100", 2);
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  EXPECT_TRUE(created);
  // The job's other steps (and its user) get the same lease, without asking Slurm again.
  int before = lookups;
  auto step = acquire(admin_, 30, "a100", 2);
  ASSERT_TRUE(step.ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(step.value()["id"], lease.value()["id"]);
  auto users = acquire(as_alice, 30, "a100", 2);
  ASSERT_TRUE(users.ok());
  EXPECT_EQ(users.value()["id"], lease.value()["id"]);
  EXPECT_EQ(lookups, before);
  // Beyond the licences is refused even with a lease in hand.
  refused(acquire(as_alice, 30, "a100", 4), "job 30 holds 2 gpupool_a100 licences");
  EXPECT_TRUE(acquire(as_alice, 32, "h100", 1).ok());  // NAME@SERVER: a licence from slurmdbd
  EXPECT_EQ(Pool("a100")["leased"], 2);
  EXPECT_EQ(Pool("h100")["leased"], 1);
  // An unknown pool is named as such, before Slurm is asked.
  auto unknown = acquire(as_alice, 30, "b200", 1);
  EXPECT_EQ(unknown.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(engine_->CheckInvariants().ok());
}

// Issue 37: the state keeps a salt, not the lease's token; the token comes back only with
// the key, which lives outside the state.
TEST_F(EngineTest, LeaseTokensAreNotStoredButDerivedWithTheKey) {
  token_key_ = std::string(64, 'a');
  Open();
  AddHost("g1", "r1", 1);
  auto lease = Acquire(1, "a100", 1);
  ASSERT_TRUE(lease.ok());
  std::string token = lease.value()["token"];
  EXPECT_EQ(token.size(), 32u);
  ASSERT_TRUE(store_->WaitDurable(store_->last_ticket()).ok());
  auto state = store_->Load(1000);
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->leases.size(), 1u);
  const std::string& stored = state->leases[0].token;
  EXPECT_EQ(stored.rfind("hmac-sha256:", 0), 0u) << stored;
  EXPECT_EQ(stored.find(token), std::string::npos);
  Open();  // a restart with the same key: the same token
  EXPECT_EQ(engine_->ListLeases(admin_, "", 1).value()["leases"][0]["token"], token);
  token_key_ = std::string(64, 'b');
  Open();  // another key derives another token: the stored salt alone gives nothing
  EXPECT_NE(engine_->ListLeases(admin_, "", 1).value()["leases"][0]["token"], token);
  // Without a key the sealed state cannot be opened: gpupoold says so rather than hand
  // out wrong tokens.
  auto loaded = store_->Load(1000);
  PoolEngine keyless(config_, store_.get(), [] { return int64_t{0}; });
  Status recovered = keyless.Recover(loaded.value());
  EXPECT_EQ(recovered.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(recovered.message().find("no token_key_file is set"), std::string::npos) << recovered.message();
}

// A token is the first 16 bytes of HMAC-SHA256(key, salt), in hex: the value here is
// `openssl dgst -sha256 -hmac` of the same key and salt. Each derivation starts from the
// keyed context made once; many at once from several threads agree.
TEST(LeaseTokensTest, TheTokenIsHmacSha256OfTheSaltUnderTheKey) {
  const LeaseTokens tokens(std::string(64, 'a'));
  const std::string salt = "00112233445566778899aabbccddeeff";
  auto token = tokens.Open("hmac-sha256:" + salt);
  ASSERT_TRUE(token.ok()) << token.status().message();
  EXPECT_EQ(token.value(), "e4cb473eeca8e297f112eca56e348c74");
  std::string issued, stored;
  ASSERT_TRUE(tokens.Issue(&issued, &stored).ok());
  EXPECT_EQ(tokens.Open(stored).value(), issued);
  const LeaseTokens copy = tokens;  // copies share the keyed context
  std::atomic<int> agreed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) agreed += copy.Open("hmac-sha256:" + salt).value() == token.value();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(agreed, 800);
}

TEST(LeaseTokensTest, KeyFileIsMadeOnceAndChecked) {
  std::string dir = std::filesystem::temp_directory_path() / ("poold-token-key-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string path = dir + "/token.key";
  EXPECT_EQ(LoadTokenKey(path, false).status().code(), Status::Code::kUnavailable);  // not made
  auto made = LoadTokenKey(path, true);
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ(made->size(), 64u);
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(LoadTokenKey(path, true).value(), made.value());  // kept, not made again
  std::ofstream(path) << "not hex at all\n";
  EXPECT_NE(LoadTokenKey(path, false).status().message().find("something else than hex digits"), std::string::npos);
  std::ofstream(path) << "abcd\n";
  EXPECT_NE(LoadTokenKey(path, false).status().message().find("at least 32 are needed"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(PoolLicensesTest, ReadsSlurmsLicenceList) {
  auto held = PoolLicenses("gpupool_a100:2,gpupool_h100,other:5,gpupool_a100@db:1,gpupool_:4,,gpupoolx:1");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, (std::map<std::string, int64_t>{{"a100", 3}, {"h100", 1}}));
  EXPECT_TRUE(PoolLicenses("")->empty());
  EXPECT_TRUE(PoolLicenses("(null)")->empty());
  for (const char* bad : {"gpupool_a100:", "gpupool_a100:-1", "gpupool_a100:99999999999", "gpupool_a100:1x"}) {
    EXPECT_EQ(PoolLicenses(bad).status().code(), Status::Code::kInvalidArgument) << bad;
  }
  // Counts add up without overflow.
  EXPECT_EQ(PoolLicenses("gpupool_a:2147483647,gpupool_a:2147483647")->at("a"), 2147483647);
}

TEST_F(EngineTest, AJobsLeaseHeldBySomeoneElseIsRevokedNotHandedOver) {
  // State from before the ownership and licence checks: only then could an admin lease a
  // job for someone else than its owner.
  config_.poold.enforce_licenses = false;
  Open();
  AddHost("g1", "r1", 4);
  // A lease of job 20 owned by uid 5002 (left from before the ownership check, say).
  AcquireRequest req;
  req.job_id = 20;
  req.request = {PoolRequest{"a100", 2}};
  req.has_owner = true;
  req.uid = 5002;
  bool created = false;
  auto squatted = engine_->Acquire(admin_, req, &created);
  ASSERT_TRUE(squatted.ok());
  // spank_gpupool acquires for the job's real user, uid 5001.
  req.uid = 5001;
  auto real = engine_->Acquire(admin_, req, &created);
  ASSERT_TRUE(real.ok()) << real.status().message();
  EXPECT_TRUE(created);
  EXPECT_EQ(real.value()["uid"], 5001);
  EXPECT_NE(real.value()["id"], squatted.value()["id"]);
  EXPECT_NE(real.value()["token"], squatted.value()["token"]);
  EXPECT_EQ(engine_->lease_count(), 1u);
  EXPECT_EQ(Pool("a100")["leased"], 2);
  auto types = EventTypes(20);
  EXPECT_NE(std::find(types.begin(), types.end(), "revoked"), types.end());
  // The squatter's lease is gone: its id finds nothing.
  EXPECT_EQ(engine_->ListLeases(admin_, squatted.value()["id"], 0).value()["leases"].size(), 0u);
  EXPECT_TRUE(engine_->CheckInvariants().ok());
}

// A refused registration changes nothing, in memory or on disk (issue 8, part 4).
TEST_F(EngineTest, RefusedRegistrationChangesNothing) {
  AddHost("g1", "r1", 2);
  AgentRegistration thief{"g2", "r2", "127.0.0.1:7001", {}};
  thief.gpus.push_back(AgentGpu{"GPU-new", "A100-80GB", "", 0, 0, 81920, false, ""});
  thief.gpus.push_back(AgentGpu{"GPU-g1-1", "A100-80GB", "", 1, 0, 81920, false, ""});  // g1's
  auto r = engine_->Register(thief);
  EXPECT_EQ(r.status().code(), Status::Code::kConflict);
  EXPECT_NE(r.status().message().find("GPU GPU-g1-1 is registered on host 'g1', not 'g2'"), std::string::npos);
  AgentRegistration twice{"g3", "r2", "127.0.0.1:7002", {}};
  twice.gpus.push_back(AgentGpu{"GPU-x", "A100-80GB", "", 0, 0, 81920, false, ""});
  twice.gpus.push_back(AgentGpu{"GPU-x", "A100-80GB", "", 1, 0, 81920, false, ""});
  EXPECT_EQ(engine_->Register(twice).status().code(), Status::Code::kInvalidArgument);
  auto check = [&] {
    EXPECT_EQ(Pool("a100")["total"], 2);
    EXPECT_EQ(engine_->ListGpus("GPU-new", "").status().code(), Status::Code::kNotFound);
    EXPECT_EQ(engine_->ListGpus("GPU-x", "").status().code(), Status::Code::kNotFound);
    EXPECT_EQ(engine_->ListGpus("", "").value()["gpus"].size(), 2u);
  };
  check();
  Open();  // and on disk
  check();
  EXPECT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(EngineTest, BadRequestsChangeNothing) {
  AddHost("g1", "r1", 4);
  EXPECT_EQ(Acquire(1, "a100", 5).status().code(), Status::Code::kConflict);  // larger than the pool
  EXPECT_NE(Acquire(1, "a100", 5).status().message().find("has 4 GPUs, 5 requested"), std::string::npos);
  EXPECT_EQ(Acquire(2, "nope", 1).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Acquire(3, "a100", 1, "rack:r9").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Acquire(4, "a100", 1, "diagonal").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Pool("a100")["idle"], 4);
  EXPECT_EQ(engine_->lease_count(), 0u);
  ASSERT_TRUE(Acquire(5, "a100", 3).ok());
  auto busy = Acquire(6, "a100", 2);
  EXPECT_EQ(busy.status().code(), Status::Code::kUnavailable);
  EXPECT_EQ(Pool("a100")["idle"], 1);
}

TEST_F(EngineTest, PackUsesFewestRacksAndSpreadUsesMany) {
  AddHost("g1", "r1", 4);
  AddHost("g2", "r2", 2);
  AddHost("g3", "r3", 3);
  auto pack = Acquire(1, "a100", 3);
  ASSERT_TRUE(pack.ok());
  EXPECT_EQ(Racks(pack.value()), std::set<std::string>{"r3"});  // best fit: the rack of exactly 3
  ASSERT_TRUE(engine_->Release(admin_, "", 1, "").ok());
  auto spread = Acquire(2, "a100", 3, "spread");
  ASSERT_TRUE(spread.ok());
  EXPECT_EQ(Racks(spread.value()).size(), 3u);
  ASSERT_TRUE(engine_->Release(admin_, "", 2, "").ok());
  auto big = Acquire(3, "a100", 6);  // no rack holds 6: the two largest racks
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(Racks(big.value()), (std::set<std::string>{"r1", "r2"}));
  ASSERT_TRUE(engine_->Release(admin_, "", 3, "").ok());
  auto named = Acquire(4, "a100", 2, "rack:r2");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(Racks(named.value()), std::set<std::string>{"r2"});
  EXPECT_EQ(Acquire(5, "a100", 1, "rack:r2").status().code(), Status::Code::kUnavailable);
}

TEST_F(EngineTest, MinimumMemoryFilters) {
  AddHost("g1", "r1", 2, "A100-40GB", 40960);
  AddHost("g2", "r1", 2, "A100-80GB", 81920);
  auto l = Acquire(1, "a100", 2, "pack", 65536);
  ASSERT_TRUE(l.ok());
  for (const json& g : l.value()["gpus"]) EXPECT_EQ(g["host"], "g2");
  EXPECT_EQ(Acquire(2, "a100", 1, "pack", 65536).status().code(), Status::Code::kUnavailable);
}

TEST_F(EngineTest, FailedLeasedGpuIsSwappedInItsRack) {
  AddHost("g1", "r1", 2);
  AddHost("g2", "r2", 3);  // best fit for 2 → r2, which keeps one spare
  AddHost("g3", "r1", 2);
  auto l = Acquire(7, "a100", 2);
  ASSERT_TRUE(l.ok());
  std::string failed = l.value()["gpus"][0]["id"];
  std::string rack = l.value()["gpus"][0]["rack"];
  ASSERT_TRUE(engine_->UpdateGpu(failed, "fail", "Xid 79").ok());
  json after = engine_->ListLeases(admin_, "", 7).value()["leases"][0];
  EXPECT_EQ(after["generation"], 2);
  EXPECT_EQ(after["state"], "ACTIVE");
  EXPECT_NE(after["gpus"][0]["id"], failed);
  EXPECT_EQ(after["gpus"][0]["rack"], rack);                      // same rack first
  EXPECT_EQ(after["gpus"][1]["id"], l.value()["gpus"][1]["id"]);  // device order kept
  EXPECT_EQ(Gpu(failed)["state"], "FAILED");
  EXPECT_EQ(Gpu(failed)["lease"], "");
  auto types = EventTypes(7);
  EXPECT_NE(std::find(types.begin(), types.end(), "swapped"), types.end());
  EXPECT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(EngineTest, NoSpareMeansDegradedUntilOneFreesUp) {
  AddHost("g1", "r1", 3);
  ASSERT_TRUE(Acquire(1, "a100", 2).ok());
  ASSERT_TRUE(Acquire(2, "a100", 1).ok());
  std::string victim = engine_->ListLeases(admin_, "", 1).value()["leases"][0]["gpus"][0]["id"];
  ASSERT_TRUE(engine_->UpdateGpu(victim, "fail", "Xid 48").ok());
  json l = engine_->ListLeases(admin_, "", 1).value()["leases"][0];
  EXPECT_EQ(l["state"], "DEGRADED");
  EXPECT_EQ(l["gpus"][0]["id"], victim);  // still listed, visibly failed
  EXPECT_EQ(l["gpus"][0]["state"], "FAILED");
  EXPECT_TRUE(engine_->CheckInvariants().ok());
  ASSERT_TRUE(engine_->Release(admin_, "", 2, "").ok());  // a spare appears
  l = engine_->ListLeases(admin_, "", 1).value()["leases"][0];
  EXPECT_EQ(l["state"], "ACTIVE");
  EXPECT_NE(l["gpus"][0]["id"], victim);
  EXPECT_EQ(l["generation"], 2);
  EXPECT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(EngineTest, DrainResumeLifecycle) {
  AddHost("g1", "r1", 2);
  ASSERT_TRUE(engine_->UpdateGpu("g1:0", "drain", "maintenance").ok());
  EXPECT_EQ(Gpu("g1:0")["state"], "DRAINED");
  auto l = Acquire(1, "a100", 1);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.value()["gpus"][0]["id"], "g1:1");  // drained GPUs get no new lease
  ASSERT_TRUE(engine_->UpdateGpu("g1:1", "drain", "").ok());
  EXPECT_EQ(Gpu("g1:1")["state"], "DRAINING");  // leased: finishes its job first
  ASSERT_TRUE(engine_->Release(admin_, "", 1, "").ok());
  EXPECT_EQ(Gpu("g1:1")["state"], "DRAINED");
  ASSERT_TRUE(engine_->UpdateGpu("g1:1", "resume", "").ok());
  EXPECT_EQ(Gpu("g1:1")["state"], "IDLE");
  EXPECT_EQ(engine_->UpdateGpu("g1:1", "sleep", "").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Gpu("g1:1")["state"], "IDLE");
}

TEST_F(EngineTest, SilentHostBecomesUnreachableAndComesBack) {
  AddHost("g1", "r1", 1);
  AddHost("g2", "r1", 1);
  ASSERT_TRUE(Acquire(1, "a100", 1).ok());
  std::string held = engine_->ListLeases(admin_, "", 1).value()["leases"][0]["gpus"][0]["host"];
  std::string other = held == "g1" ? "g2" : "g1";
  now_ += 5;
  ASSERT_TRUE(engine_->Heartbeat(other, {}).ok());
  now_ += 6;  // `held` silent for 11 s > 10 s
  // But gpupoold itself was too busy to hear it (issue 37): its silence proves nothing.
  engine_->Tick(/*deaf=*/true);
  EXPECT_EQ(Gpu(held + ":0")["state"], "LEASED");
  engine_->Tick();
  EXPECT_EQ(Gpu(held + ":0")["state"], "UNREACHABLE");
  json l = engine_->ListLeases(admin_, "", 1).value()["leases"][0];
  EXPECT_EQ(l["gpus"][0]["host"], other);
  EXPECT_EQ(l["generation"], 2);
  ASSERT_TRUE(engine_->Heartbeat(held, {}).ok());
  EXPECT_EQ(Gpu(held + ":0")["state"], "IDLE");
  EXPECT_EQ(engine_->Heartbeat("g9", {}).status().code(), Status::Code::kNotFound);
}

TEST_F(EngineTest, AgentReportedFailureSwapsAtOnceAndStaysUntilResume) {
  AddHost("g1", "r1", 2);
  auto l = Acquire(1, "a100", 1);
  std::string uuid = l.value()["gpus"][0]["uuid"];
  ASSERT_TRUE(engine_->Heartbeat("g1", {GpuHealthReport{uuid, true, "Xid 79"}}).ok());
  EXPECT_EQ(Gpu(uuid)["state"], "FAILED");
  EXPECT_EQ(Gpu(uuid)["health"], "FAILED");
  ASSERT_TRUE(engine_->Heartbeat("g1", {GpuHealthReport{uuid, false, ""}}).ok());
  EXPECT_EQ(Gpu(uuid)["state"], "FAILED");  // only an admin brings a failed GPU back
  ASSERT_TRUE(engine_->UpdateGpu(uuid, "resume", "").ok());
  EXPECT_EQ(Gpu(uuid)["state"], "IDLE");
}

// The heartbeat answer names the host's GPUs held FAILED (by an agent's report or an
// admin), so that their agent hands no memory off them.
TEST_F(EngineTest, HeartbeatAnswersNameTheHostsFailedGpus) {
  AddHost("g1", "r1", 2);
  EXPECT_EQ(engine_->Heartbeat("g1", {}).value()["failed"], json::array());
  ASSERT_TRUE(engine_->UpdateGpu("g1:1", "fail", "suspect ECC").ok());
  std::string uuid = Gpu("g1:1")["uuid"];
  EXPECT_EQ(engine_->Heartbeat("g1", {}).value()["failed"], json::array({uuid}));
  ASSERT_TRUE(engine_->UpdateGpu("g1:1", "resume", "").ok());
  EXPECT_EQ(engine_->Heartbeat("g1", {}).value()["failed"], json::array());
}

// A process recovered on a GPU after its previous one failed: the agent's heartbeat says
// so, and gpupoold records it, but only for the reporting host's own GPU and the lease
// that holds it.
// Issue 37: a host is bound to the address its agent speaks from; an agent's credential
// elsewhere cannot fail, drain or recover the host's GPUs, nor take its name.
TEST_F(EngineTest, AnAgentSpeaksOnlyForItsOwnHost) {
  using From = AgentSender;
  const From g1_agent{"10.0.0.1", 900}, g2_agent{"10.0.0.2", 900};
  AgentRegistration reg{"g1", "r1", "10.0.0.1:7000", {AgentGpu{"GPU-g1-0", "A100-80GB", "", 0, 0, 81920, false, ""}}};
  ASSERT_TRUE(engine_->Register(reg, g1_agent).ok());
  AgentRegistration reg2{"g2", "r1", "10.0.0.2:7000", {AgentGpu{"GPU-g2-0", "A100-80GB", "", 0, 0, 81920, false, ""}}};
  ASSERT_TRUE(engine_->Register(reg2, g2_agent).ok());
  // g2's agent reports g1's GPU failed, in g1's name: refused, nothing changes.
  auto fail = engine_->Heartbeat("g1", {GpuHealthReport{"GPU-g1-0", true, "Xid 79"}}, {}, g2_agent);
  EXPECT_EQ(fail.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(fail.status().message().find("host 'g1' is served by the agent at 10.0.0.1 (uid 900); uid 900 at "
                                         "10.0.0.2 may not report for it"),
            std::string::npos)
      << fail.status().message();
  EXPECT_EQ(Gpu("g1:0")["state"], "IDLE");
  // Nor can it register g1 anew (with no GPUs: that would make g1's GPU UNREACHABLE).
  AgentRegistration empty{"g1", "r1", "10.0.0.2:7000", {}};
  EXPECT_EQ(engine_->Register(empty, g2_agent).status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(Gpu("g1:0")["state"], "IDLE");
  // Its own host it may report on.
  ASSERT_TRUE(engine_->Heartbeat("g2", {GpuHealthReport{"GPU-g2-0", true, "Xid 79"}}, {}, g2_agent).ok());
  EXPECT_EQ(Gpu("g2:0")["state"], "FAILED");
  ASSERT_TRUE(engine_->Heartbeat("g1", {}, {}, g1_agent).ok());
  // A host silent long enough to be UNREACHABLE may come back from another address (it moved).
  now_ += 11;
  ASSERT_TRUE(engine_->Heartbeat("g2", {}, {}, g2_agent).ok());
  engine_->Tick();
  EXPECT_EQ(Gpu("g1:0")["state"], "UNREACHABLE");
  const From moved{"10.0.0.9", 900};
  ASSERT_TRUE(engine_->Register(reg, moved).ok());
  EXPECT_EQ(Gpu("g1:0")["state"], "IDLE");
  EXPECT_EQ(engine_->Heartbeat("g1", {}, {}, g1_agent).status().code(), Status::Code::kPermissionDenied);
}

// Agents of one machine (one address) running as different users are told apart by uid:
// one cannot report on, or register, the other's host.
TEST_F(EngineTest, AgentsOfOneAddressAreToldApartByUid) {
  const AgentSender a1{"127.0.0.1", 64001}, a2{"127.0.0.1", 64002};
  AgentRegistration reg1{"a1", "r1", "127.0.0.1:7001", {AgentGpu{"GPU-a1-0", "A100-80GB", "", 0, 0, 81920, false, ""}}};
  AgentRegistration reg2{"a2", "r1", "127.0.0.1:7002", {AgentGpu{"GPU-a2-0", "A100-80GB", "", 0, 0, 81920, false, ""}}};
  ASSERT_TRUE(engine_->Register(reg1, a1).ok());
  ASSERT_TRUE(engine_->Register(reg2, a2).ok());
  auto fail = engine_->Heartbeat("a1", {GpuHealthReport{"GPU-a1-0", true, "Xid 79"}}, {}, a2);
  EXPECT_EQ(fail.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(fail.status().message().find("served by the agent at 127.0.0.1 (uid 64001); uid 64002 at 127.0.0.1"),
            std::string::npos)
      << fail.status().message();
  EXPECT_EQ(Gpu("a1:0")["state"], "IDLE");
  AgentRegistration take{"a1", "r1", "127.0.0.1:7002", {}};
  EXPECT_EQ(engine_->Register(take, a2).status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(Gpu("a1:0")["state"], "IDLE");
  // Root at that address is no exception: the host is its agent's.
  EXPECT_EQ(engine_->Heartbeat("a1", {GpuHealthReport{"GPU-a1-0", true, "Xid 79"}}, {}, AgentSender{"127.0.0.1", 0})
                .status()
                .code(),
            Status::Code::kPermissionDenied);
  ASSERT_TRUE(engine_->Heartbeat("a1", {}, {}, a1).ok());
  EXPECT_EQ(Gpu("a1:0")["state"], "IDLE");
}

// Issue 37: recovered events come on a client's word: they name who reported them, and a
// lease gets at most kRecoveriesPerMinute of them a minute.
TEST_F(EngineTest, RecoveredEventsNameTheirReporterAndAreRateLimited) {
  AddHost("g1", "r1", 1);
  auto l = Acquire(1, "a100", 1);
  ASSERT_TRUE(l.ok());
  RecoveryReport report{
      l.value()["gpus"][0]["uuid"].get<std::string>(), l.value()["id"].get<std::string>(), "GPU-lost", 10, 1u << 20, 1};
  const AgentSender agent{"10.0.0.1", 900};
  for (int i = 0; i < PoolEngine::kRecoveriesPerMinute + 5; ++i) {
    ASSERT_TRUE(engine_->Heartbeat("g1", {}, {report}, agent).ok());
  }
  EXPECT_EQ(engine_->counters().recovered, static_cast<uint64_t>(PoolEngine::kRecoveriesPerMinute));
  EXPECT_EQ(engine_->counters().recoveries_dropped, 5u);
  EventFilter f;
  f.job_id = 1;
  json last = engine_->ListEvents(admin_, f).value()["events"].back();
  EXPECT_EQ(last["type"], "recovered");
  EXPECT_NE(last["detail"].get<std::string>().find("reported by the agent of g1 at 10.0.0.1 (uid 900)"),
            std::string::npos)
      << last.dump();
  now_ += 60;  // the next minute: recorded again
  ASSERT_TRUE(engine_->Heartbeat("g1", {}, {report}, agent).ok());
  EXPECT_EQ(engine_->counters().recovered, static_cast<uint64_t>(PoolEngine::kRecoveriesPerMinute) + 1);
}

// Issue 36: a session that ended through its own input is an event of its lease, never a
// change of its GPU; only the GPU's own agent may say so, and only of the lease holding it.
TEST_F(EngineTest, TenantFaultsAreEventsAndNeverChangeTheGpu) {
  AddHost("g1", "r1", 1);
  AddHost("g2", "r1", 1);
  auto l = Acquire(1, "a100", 1);
  ASSERT_TRUE(l.ok());
  std::string uuid = l.value()["gpus"][0]["uuid"], host = l.value()["gpus"][0]["host"];
  std::string gpu = l.value()["gpus"][0]["id"];
  std::string other = host == "g1" ? "g2" : "g1";
  TenantFaultReport report{uuid, l.value()["id"], "killed by signal 11 (Segmentation fault)"};
  ASSERT_TRUE(engine_->RecordTenantFaults(other, {report}).ok());  // not its GPU
  TenantFaultReport wrong = report;
  wrong.lease = "L999";
  ASSERT_TRUE(engine_->RecordTenantFaults(host, {wrong}).ok());  // not its lease
  EXPECT_EQ(engine_->counters().tenant_faults, 0u);
  EXPECT_FALSE(engine_->RecordTenantFaults("nohost", {report}).ok());
  ASSERT_TRUE(engine_->RecordTenantFaults(host, {report}).ok());
  EXPECT_EQ(engine_->counters().tenant_faults, 1u);
  EventFilter f;
  f.job_id = 1;
  json last = engine_->ListEvents(admin_, f).value()["events"].back();
  EXPECT_EQ(last["type"], "tenant_fault");
  EXPECT_NE(last["detail"].get<std::string>().find("killed by signal 11 (Segmentation fault)"), std::string::npos);
  json shown = engine_->ListGpus(gpu, "").value()["gpus"][0];
  EXPECT_EQ(shown["state"], "LEASED") << shown.dump();
  EXPECT_EQ(engine_->counters().failed, 0u);
  // Bounded like recovered events.
  for (int i = 0; i < PoolEngine::kRecoveriesPerMinute + 3; ++i) {
    ASSERT_TRUE(engine_->RecordTenantFaults(host, {report}).ok());
  }
  EXPECT_EQ(engine_->counters().tenant_faults, static_cast<uint64_t>(PoolEngine::kRecoveriesPerMinute));
}

TEST_F(EngineTest, RecoveriesReportedByTheGpusAgentAreRecorded) {
  AddHost("g1", "r1", 2);
  AddHost("g2", "r1", 2);
  auto l = Acquire(1, "a100", 1);
  std::string uuid = l.value()["gpus"][0]["uuid"];
  std::string host = l.value()["gpus"][0]["host"];
  std::string other = host == "g1" ? "g2" : "g1";
  std::string lease = l.value()["id"];
  RecoveryReport report{uuid, lease, "GPU-lost", 3719, 36u << 20, 30};
  ASSERT_TRUE(engine_->Heartbeat(other, {}, {report}).ok());  // not its GPU
  RecoveryReport wrong_lease = report;
  wrong_lease.lease = "L999";
  ASSERT_TRUE(engine_->Heartbeat(host, {}, {wrong_lease}).ok());  // not its lease
  EXPECT_EQ(engine_->counters().recovered, 0u);
  ASSERT_TRUE(engine_->Heartbeat(host, {}, {report}).ok());
  EXPECT_EQ(engine_->counters().recovered, 1u);
  EventFilter f;
  f.job_id = 1;
  json events = engine_->ListEvents(admin_, f).value()["events"];
  ASSERT_FALSE(events.empty());
  json last = events.back();
  EXPECT_EQ(last["type"], "recovered");
  EXPECT_EQ(last["lease"], lease);
  EXPECT_NE(last["detail"].get<std::string>().find(
                "recovered here from GPU-lost: paused 3719 ms, restored 36.0 MiB, replayed 30"),
            std::string::npos)
      << last.dump();
  // A planned move whose memory went agent to agent says so.
  RecoveryReport moved = report;
  moved.restored_bytes = 0;
  moved.copied_bytes = uint64_t{40} << 20;
  ASSERT_TRUE(engine_->Heartbeat(host, {}, {moved}).ok());
  EXPECT_EQ(engine_->counters().recovered, 2u);
  last = engine_->ListEvents(admin_, f).value()["events"].back();
  EXPECT_NE(last["detail"].get<std::string>().find(
                "moved here from GPU-lost, its memory copied agent to agent: paused 3719 ms, "
                "copied 40.0 MiB, replayed 30"),
            std::string::npos)
      << last.dump();
}

// An admin moves a lease's GPU: to a named IDLE GPU of its pool, or where placement says;
// the old GPU is free again (or DRAINED), the generation goes up, a "migrated" event.
TEST_F(EngineTest, MigrateMovesALeaseGpuAndFreesTheOld) {
  AddHost("g1", "r1", 3);
  auto l = Acquire(1, "a100", 1);
  std::string lease = l.value()["id"];
  std::string old = l.value()["gpus"][0]["id"];
  std::string target = old == "g1:2" ? "g1:1" : "g1:2";
  auto moved = engine_->Migrate(lease, "", target, "maintenance");
  ASSERT_TRUE(moved.ok()) << moved.status().message();
  EXPECT_EQ(moved.value()["lease"]["gpus"][0]["id"], target);
  EXPECT_EQ(moved.value()["lease"]["generation"], 2);
  EXPECT_EQ(Gpu(old)["state"], "IDLE");
  EXPECT_EQ(Gpu(target)["state"], "LEASED");
  EXPECT_EQ(EventTypes(1).back(), "migrated");
  EXPECT_EQ(engine_->counters().migrated, 1u);
  EXPECT_EQ(engine_->counters().swapped, 0u);
  // The new GPU's agent hears where the lease moved from (the one agent a handoff may
  // pull from); the GPU moved from has no lease, so nothing about it.
  json answer = engine_->Heartbeat("g1", {}).value();
  ASSERT_EQ(answer["leases"].size(), 1u);
  EXPECT_EQ(answer["leases"][0]["gpu"], Gpu(target)["uuid"]);
  EXPECT_EQ(answer["leases"][0]["moved_from"], "127.0.0.1:7000");
  // Placement's choice, from a drained GPU: that one ends DRAINED.
  ASSERT_TRUE(engine_->UpdateGpu(target, "drain", "").ok());
  auto again = engine_->Migrate(lease, target, "", "");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_NE(again.value()["lease"]["gpus"][0]["id"], target);
  EXPECT_EQ(Gpu(target)["state"], "DRAINED");
  // Bad requests change nothing.
  std::string now = again.value()["lease"]["gpus"][0]["id"];
  EXPECT_EQ(engine_->Migrate("L999", "", "", "").status().code(), Status::Code::kNotFound);
  EXPECT_EQ(engine_->Migrate(lease, "g9:9", "", "").status().code(), Status::Code::kNotFound);
  EXPECT_EQ(engine_->Migrate(lease, "", target, "").status().code(), Status::Code::kConflict);  // DRAINED
  std::string other;  // the third GPU: in no lease
  for (std::string id : {"g1:0", "g1:1", "g1:2"}) {
    if (id != now && id != target) other = id;
  }
  EXPECT_EQ(engine_->Migrate(lease, other, "", "").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(engine_->ListLeases(admin_, lease, 0).value()["leases"][0]["gpus"][0]["id"], now);
  EXPECT_EQ(engine_->ListLeases(admin_, lease, 0).value()["leases"][0]["generation"], 3);
}

// A drain moves a movable lease (its processes follow) to another GPU of the pool at once:
// the lease's generation goes up, a migrated event, the GPU is DRAINED. One with nowhere to
// go moves when a GPU is free; a lease that is not movable keeps the GPU DRAINING until it
// ends. `movable`, and the wait, survive a restart.
TEST_F(EngineTest, DrainMovesMovableLeasesAndWaitsForTheRest) {
  AddHost("g1", "r1", 3);
  auto movable = Acquire(1, "a100", 1, "pack", 0, true);
  auto fixed = Acquire(2, "a100", 1);
  ASSERT_TRUE(movable.ok() && fixed.ok());
  EXPECT_EQ(movable.value()["movable"], true);
  EXPECT_EQ(fixed.value()["movable"], false);
  std::string moved_from = movable.value()["gpus"][0]["id"];
  std::string kept = fixed.value()["gpus"][0]["id"];
  ASSERT_TRUE(store_->WaitDurable(store_->last_ticket()).ok());
  Open();  // what a restarted gpupoold knows
  auto drained = engine_->UpdateGpu(moved_from, "drain", "maintenance");
  ASSERT_TRUE(drained.ok()) << drained.status().message();
  EXPECT_EQ(drained.value()["gpu"]["state"], "DRAINED");
  json lease = engine_->ListLeases(admin_, "", 1).value()["leases"][0];
  EXPECT_NE(lease["gpus"][0]["id"], moved_from);
  EXPECT_NE(lease["gpus"][0]["id"], kept);
  EXPECT_EQ(lease["generation"], 2);
  EXPECT_EQ(EventTypes(1).back(), "migrated");
  EXPECT_EQ(engine_->counters().migrated, 1u);
  // Not movable: the GPU waits for the lease.
  ASSERT_TRUE(engine_->UpdateGpu(kept, "drain", "maintenance").ok());
  EXPECT_EQ(Gpu(kept)["state"], "DRAINING");
  EXPECT_EQ(engine_->ListLeases(admin_, "", 2).value()["leases"][0]["gpus"][0]["id"], kept);
  // Movable with no IDLE GPU left: it stays, DRAINING, and says why.
  std::string now = lease["gpus"][0]["id"];
  ASSERT_TRUE(engine_->UpdateGpu(now, "drain", "").ok());
  EXPECT_EQ(Gpu(now)["state"], "DRAINING");
  EXPECT_EQ(engine_->ListLeases(admin_, "", 1).value()["leases"][0]["generation"], 2);
  EventFilter all;
  json events = engine_->ListEvents(admin_, all).value()["events"];
  EXPECT_NE(events.back()["detail"].get<std::string>().find("no IDLE GPU to move lease"), std::string::npos)
      << events.back().dump();
  // It moves as soon as a GPU is free, after a restart too.
  ASSERT_TRUE(store_->WaitDurable(store_->last_ticket()).ok());
  Open();
  ASSERT_TRUE(engine_->UpdateGpu(moved_from, "resume", "").ok());
  lease = engine_->ListLeases(admin_, "", 1).value()["leases"][0];
  EXPECT_EQ(lease["gpus"][0]["id"], moved_from);
  EXPECT_EQ(lease["generation"], 3);
  EXPECT_EQ(Gpu(now)["state"], "DRAINED");
  EXPECT_EQ(Gpu(kept)["state"], "DRAINING");  // not movable: still waits
  EXPECT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(EngineTest, LeasesExpireWithoutRenewal) {
  AddHost("g1", "r1", 2);
  ASSERT_TRUE(Acquire(1, "a100", 1).ok());
  ASSERT_TRUE(Acquire(2, "a100", 1).ok());
  now_ += 60;
  ASSERT_TRUE(engine_->Renew(admin_, "", 2).ok());
  now_ += 60;  // job 1: 120 s > ttl 100; job 2 renewed 60 s ago
  engine_->Tick();
  EXPECT_TRUE(engine_->ListLeases(admin_, "", 1).value()["leases"].empty());
  EXPECT_EQ(engine_->ListLeases(admin_, "", 2).value()["leases"].size(), 1u);
  auto types = EventTypes(1);
  EXPECT_EQ(types.back(), "expired");
}

TEST_F(EngineTest, UsersSeeAndReleaseOnlyTheirOwn) {
  AddHost("g1", "r1", 2);
  Caller alice{1001, auth::Role::kUser}, bob{1002, auth::Role::kUser};
  engine_->SetJobOwnerLookup([](int64_t job) -> Result<SlurmJobOwner> {
    return SlurmJobOwner{job == 9 ? uid_t{1001} : uid_t{1002}, true, "gpupool_a100:1"};
  });
  AcquireRequest req;
  req.job_id = 9;
  req.request = {PoolRequest{"a100", 1}};
  bool created = false;
  ASSERT_TRUE(engine_->Acquire(alice, req, &created).ok());
  EXPECT_EQ(engine_->ListLeases(bob, "", 0).value()["leases"].size(), 0u);
  EXPECT_EQ(engine_->ListLeases(alice, "", 0).value()["leases"].size(), 1u);
  EXPECT_EQ(engine_->Release(bob, "", 9, "").status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(engine_->Acquire(bob, req, &created).status().code(), Status::Code::kPermissionDenied);
  req.has_owner = true;
  req.uid = 1002;
  req.job_id = 10;
  EXPECT_EQ(engine_->Acquire(alice, req, &created).status().code(), Status::Code::kPermissionDenied);
  EXPECT_TRUE(engine_->Release(alice, "", 9, "").ok());
  // After the lease is gone its owner still sees its history (accounting); others do not.
  EventFilter f;
  f.job_id = 9;
  json mine = engine_->ListEvents(alice, f).value()["events"];
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(mine[0]["type"], "leased");
  EXPECT_EQ(mine[1]["type"], "released");
  EXPECT_NE(mine[1]["detail"].get<std::string>().find("g1:"), std::string::npos);
  EXPECT_NE(mine[1]["detail"].get<std::string>().find(" held "), std::string::npos);
  EXPECT_TRUE(engine_->ListEvents(bob, f).value()["events"].empty());
}

TEST_F(EngineTest, StateSurvivesReopen) {
  AddHost("g1", "r1", 4);
  auto l = Acquire(5, "a100", 2);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(engine_->UpdateGpu("g1:3", "drain", "x").ok());
  ASSERT_TRUE(store_->WaitDurable(store_->last_ticket()).ok());
  Open();
  json again = engine_->ListLeases(admin_, "", 5).value()["leases"][0];
  EXPECT_EQ(again["id"], l.value()["id"]);
  EXPECT_EQ(again["gpus"], l.value()["gpus"]);
  EXPECT_EQ(again["token"], l.value()["token"]);
  EXPECT_EQ(Gpu("g1:3")["state"], "DRAINED");
  EXPECT_TRUE(engine_->CheckInvariants().ok());
  auto next = Acquire(6, "a100", 1);  // lease numbers are never reused
  ASSERT_TRUE(next.ok());
  EXPECT_NE(next.value()["id"], l.value()["id"]);
}

TEST_F(EngineTest, ConcurrentAcquireReleaseNeverDoubleLeases) {
  for (int h = 0; h < 8; ++h) AddHost("g" + std::to_string(h), "r" + std::to_string(h % 3), 4);
  std::atomic<bool> violation{false};
  std::atomic<int> acquired{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 200; ++i) {
        int64_t job = t * 1000 + i + 1;
        int count = 1 + static_cast<int>(rng() % 4);
        auto l = Acquire(job, "a100", count, rng() % 2 ? "pack" : "spread");
        if (l.ok()) {
          ++acquired;
          if (rng() % 8 == 0 && !engine_->UpdateGpu(l.value()["gpus"][0]["id"], "fail", "chaos").ok()) {
            violation = true;
          }
          if (!engine_->CheckInvariants().ok()) violation = true;
          if (!engine_->Release(admin_, "", job, "").ok()) violation = true;
        }
        if (rng() % 16 == 0) {
          json gpus = engine_->ListGpus("", "a100").value()["gpus"];
          for (const json& g : gpus) {
            // Another thread may resume the same GPU first; either outcome is fine here.
            if (g["state"] == "FAILED") (void)engine_->UpdateGpu(g["id"], "resume", "");
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(violation);
  EXPECT_GT(acquired.load(), 100);
  Status inv = engine_->CheckInvariants();
  EXPECT_TRUE(inv.ok()) << inv.message();
  EXPECT_EQ(engine_->lease_count(), 0u);
}

// ---------------------------------------------------------------- a client's lost agent

// A lease on host g1 (two hosts of one GPU each, so that a swap has a spare) and a probe
// whose verdict the test sets; probes_ counts the probes gpupoold made.
class AgentLostTest : public EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    engine_->SetAgentProbe([this](const std::string& endpoint) {
      ++probes_;
      probed_ = endpoint;
      if (during_probe_) during_probe_();
      return probe_answer_;
    });
    AddHost("g1", "r1", 1);
    AddHost("g2", "r1", 1);
    auto l = Acquire(1, "a100", 1);
    ASSERT_TRUE(l.ok());
    lease_ = l.value()["id"];
    token_ = l.value()["token"];
    uuid_ = l.value()["gpus"][0]["uuid"];
  }
  Status probe_answer_ = Status::OK();
  std::function<void()> during_probe_;
  int probes_ = 0;
  std::string probed_;
  std::string lease_, token_, uuid_;
};

TEST_F(AgentLostTest, AnAgentThatAnswersTheProbeKeepsItsGpus) {
  auto answer = engine_->AgentLost(lease_, token_, uuid_);
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  EXPECT_EQ(probes_, 1);
  EXPECT_EQ(probed_, "127.0.0.1:7000");  // the endpoint its agent registered
  EXPECT_EQ(answer.value()["agent_lost"], false);
  EXPECT_EQ(answer.value()["lease"]["generation"], 1);
  EXPECT_FALSE(answer.value()["lease"].contains("token"));
  EXPECT_EQ(Gpu(uuid_)["state"], "LEASED");
  // Within a second of that answer the agent is not probed again for anyone.
  ASSERT_TRUE(engine_->AgentLost(lease_, token_, uuid_).ok());
  EXPECT_EQ(probes_, 1);
  EXPECT_EQ(Gpu(uuid_)["state"], "LEASED");
  EXPECT_EQ(engine_->counters().agent_lost_refuted, 2u);
  EXPECT_EQ(engine_->counters().agent_lost_confirmed, 0u);
}

TEST_F(AgentLostTest, AnAgentThatDoesNotAnswerHasItsHostUnreachableAndItsGpusSwapped) {
  probe_answer_ = Status::Unavailable("Connection refused");
  auto answer = engine_->AgentLost(lease_, token_, uuid_);
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  EXPECT_EQ(answer.value()["agent_lost"], true);
  EXPECT_EQ(Gpu(uuid_)["state"], "UNREACHABLE");
  // The answer already names the replacement, before any renewal.
  const json& lease = answer.value()["lease"];
  EXPECT_EQ(lease["generation"], 2);
  EXPECT_NE(lease["gpus"][0]["uuid"], uuid_);
  EXPECT_EQ(lease["gpus"][0]["endpoint"], "127.0.0.1:7000");
  EXPECT_EQ(engine_->counters().agent_lost_confirmed, 1u);
  EventFilter f;
  json events = engine_->ListEvents(admin_, f).value()["events"];
  bool said = false;
  for (const json& e : events) {
    said |= e["type"] == "unreachable" && e["detail"].get<std::string>().find(
                                              "did not answer gpupoold's probe (Connection refused) after a "
                                              "process of lease " +
                                              lease_) != std::string::npos;
  }
  EXPECT_TRUE(said);
  EXPECT_TRUE(engine_->CheckInvariants().ok());
  // The agent comes back: its GPU is IDLE again.
  ASSERT_TRUE(engine_->Heartbeat("g1", {}).ok());
  EXPECT_EQ(Gpu(uuid_)["state"], "IDLE");
  // A report on the GPU the lease no longer holds probes nothing and says where it is now.
  auto late = engine_->AgentLost(lease_, token_, uuid_);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(probes_, 1);
  EXPECT_EQ(late.value()["lease"]["gpus"][0]["uuid"], lease["gpus"][0]["uuid"]);
}

TEST_F(AgentLostTest, AHeartbeatDuringTheProbeOutweighsIt) {
  probe_answer_ = Status::Unavailable("no answer within 1000 ms");
  during_probe_ = [this] {
    now_ += 1;
    ASSERT_TRUE(engine_->Heartbeat("g1", {}).ok());
  };
  auto answer = engine_->AgentLost(lease_, token_, uuid_);
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  EXPECT_EQ(answer.value()["agent_lost"], false);
  EXPECT_EQ(Gpu(uuid_)["state"], "LEASED");
  EXPECT_EQ(answer.value()["lease"]["generation"], 1);
}

// A client lying, or holding another lease's token, or none, fails no GPU and costs no probe.
TEST_F(AgentLostTest, OnlyTheLeasesOwnTokenIsHeard) {
  probe_answer_ = Status::Unavailable("Connection refused");
  AddHost("g3", "r2", 1);
  auto other = Acquire(3, "a100", 1);
  ASSERT_TRUE(other.ok());
  const std::string other_token = other.value()["token"];
  EXPECT_EQ(engine_->AgentLost(lease_, other_token, uuid_).status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(engine_->AgentLost(lease_, "", uuid_).status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(engine_->AgentLost(lease_, token_ + "0", uuid_).status().code(), Status::Code::kPermissionDenied);
  // An unknown lease answers in the same words as a wrong token.
  auto unknown = engine_->AgentLost("L999", token_, uuid_);
  EXPECT_EQ(unknown.status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(unknown.status().message(),
            "the token is not lease 'L999''s: only the lease's own processes may report its agents");
  EXPECT_EQ(engine_->AgentLost("1", token_, uuid_).status().code(), Status::Code::kInvalidArgument);
  // Another lease's GPU, with this lease's token: not this lease's to report.
  const std::string their_gpu = other.value()["gpus"][0]["uuid"];
  auto theirs = engine_->AgentLost(lease_, token_, their_gpu);
  ASSERT_TRUE(theirs.ok());
  EXPECT_EQ(theirs.value()["agent_lost"], false);
  EXPECT_EQ(probes_, 0);
  EXPECT_EQ(Gpu(uuid_)["state"], "LEASED");
  EXPECT_EQ(Gpu(their_gpu)["state"], "LEASED");
}

TEST_F(AgentLostTest, AFloodOfReportsIsRateLimitedAndFailsNothing) {
  for (int i = 0; i < PoolEngine::kLostReportsPerMinute; ++i) {
    auto answer = engine_->AgentLost(lease_, token_, uuid_);
    ASSERT_TRUE(answer.ok()) << i << ": " << answer.status().message();
  }
  auto refused = engine_->AgentLost(lease_, token_, uuid_);
  EXPECT_EQ(refused.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(refused.status().message().find("wait for the next minute"), std::string::npos);
  EXPECT_EQ(engine_->counters().agent_lost_dropped, 1u);
  EXPECT_EQ(probes_, 1);  // the agent answered: the other reports found that answer fresh
  EXPECT_EQ(Gpu(uuid_)["state"], "LEASED");
  // Even a probe that would fail is not made while the limit holds.
  probe_answer_ = Status::Unavailable("Connection refused");
  EXPECT_FALSE(engine_->AgentLost(lease_, token_, uuid_).ok());
  EXPECT_EQ(Gpu(uuid_)["state"], "LEASED");
  now_ += 60;  // the next minute
  ASSERT_TRUE(engine_->AgentLost(lease_, token_, uuid_).ok());
}

// An agent that reads the probe and closes answers; a port whose process never accepts (the
// kernel completes the connection for a stopped or hung agent) does not, nor a closed port.
TEST(AgentProbeTest, OnlyAnAgentThatReadsTheProbeAnswers) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof(at);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len), 0);
  const std::string endpoint = "127.0.0.1:" + std::to_string(ntohs(at.sin_port));

  // Nobody accepts: as a SIGSTOPped agent.
  Status stopped = ProbeAgentEndpoint(endpoint, std::chrono::milliseconds(300));
  EXPECT_EQ(stopped.code(), Status::Code::kUnavailable);
  EXPECT_NE(stopped.message().find("did not answer"), std::string::npos) << stopped.message();

  // An agent's acceptor: reads the bad magic and closes (the stopped probe's connection first).
  std::thread agent([listener] {
    for (int i = 0; i < 2; ++i) {
      int fd = accept(listener, nullptr, nullptr);
      if (fd < 0) return;
      char buf[64];
      (void)recv(fd, buf, sizeof(buf), 0);
      close(fd);
    }
  });
  EXPECT_TRUE(ProbeAgentEndpoint(endpoint, std::chrono::milliseconds(1000)).ok());
  agent.join();
  close(listener);
  Status closed = ProbeAgentEndpoint(endpoint, std::chrono::milliseconds(1000));
  EXPECT_EQ(closed.code(), Status::Code::kUnavailable);
  EXPECT_NE(closed.message().find("refused"), std::string::npos) << closed.message();
  EXPECT_EQ(ProbeAgentEndpoint("no-port", std::chrono::milliseconds(10)).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ProbeAgentEndpoint("host:", std::chrono::milliseconds(10)).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool::poold

// Agent against a stand-in gpupoold (an in-process HTTP server that checks the MUNGE
// credential and records what it is sent): registration, retry while unreachable,
// immediate heartbeat on a health change, re-registration after a 404, leases.
#include "remote/agentd/agent.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "remote/devices/sim/sim_backend.h"
#include "test_env.h"

namespace gpupool::agentd {
namespace {

using testing_env::Eventually;

class FakePoold {
 public:
  explicit FakePoold(int port) : port_(port) {}
  ~FakePoold() { Stop(); }

  void Start() {
    // ApiClient authenticates once with MUNGE for a session token, then sends the token.
    http_.Post("/v1/session", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authenticated(req, res)) return;
      std::lock_guard<std::mutex> l(mu_);
      std::string token = "session-" + std::to_string(tokens_.size() + 1);
      tokens_.insert(token);
      res.set_content(nlohmann::json{{"token", token}, {"ttl", 3600}}.dump(), "application/json");
    });
    http_.Post("/v1/agents/register", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authenticated(req, res)) return;
      std::lock_guard<std::mutex> l(mu_);
      registers_.push_back(nlohmann::json::parse(req.body));
      known_ = true;
      res.set_content(R"({"gpus":[]})", "application/json");
    });
    http_.Post("/v1/agents/heartbeat", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authenticated(req, res)) return;
      std::lock_guard<std::mutex> l(mu_);
      if (!known_) {
        res.status = 404;
        res.set_content(R"({"error":"no such host 'gpuhost1'"})", "application/json");
        return;
      }
      heartbeats_.push_back(nlohmann::json::parse(req.body));
      res.set_content(nlohmann::json{{"ok", true}, {"leases", leases_}}.dump(), "application/json");
    });
    ASSERT_TRUE(http_.bind_to_port("127.0.0.1", port_));
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  void Stop() {
    http_.stop();
    if (thread_.joinable()) thread_.join();
  }
  // gpupoold restarted with an empty inventory: heartbeats get 404 until re-registration.
  void Forget() {
    std::lock_guard<std::mutex> l(mu_);
    known_ = false;
  }
  void SetLeases(nlohmann::json leases) {
    std::lock_guard<std::mutex> l(mu_);
    leases_ = std::move(leases);
  }
  std::vector<nlohmann::json> registers() {
    std::lock_guard<std::mutex> l(mu_);
    return registers_;
  }
  std::vector<nlohmann::json> heartbeats() {
    std::lock_guard<std::mutex> l(mu_);
    return heartbeats_;
  }
  int unauthenticated() const { return unauthenticated_.load(); }

 private:
  bool Authenticated(const httplib::Request& req, httplib::Response& res) {
    std::string h = req.get_header_value("Authorization");
    bool ok = false;
    if (h.rfind("MUNGE ", 0) == 0) {
      ok = auth::DecodeCredential(h.substr(6), auth::ResolveMungeSocket("")).ok();
    } else if (h.rfind("Bearer ", 0) == 0) {
      std::lock_guard<std::mutex> l(mu_);
      ok = tokens_.count(h.substr(7)) > 0;
    }
    if (!ok) {
      ++unauthenticated_;
      res.status = 401;
      res.set_content(R"({"error":"authentication required"})", "application/json");
    }
    return ok;
  }

  const int port_;
  httplib::Server http_;
  std::thread thread_;
  std::mutex mu_;
  bool known_ = false;
  std::set<std::string> tokens_;  // session tokens handed out
  nlohmann::json leases_ = nlohmann::json::array();
  std::vector<nlohmann::json> registers_, heartbeats_;
  std::atomic<int> unauthenticated_{0};
};

class AgentTest : public testing::Test {
 protected:
  void SetUp() override {
    port_ = testing_env::FreePort();
    ASSERT_GT(port_, 0);
    auto sim = devices::SimBackend::Create("gpuhost1", {{"A100-SXM4-80GB", 81920, 2}}, 1);
    ASSERT_TRUE(sim.ok());
    sim_ = std::move(sim.value());
    options_.config.server = "http://127.0.0.1:" + std::to_string(port_);
    options_.config.host = "gpuhost1";
    options_.config.rack = "rack7";
    options_.config.listen = "127.0.0.1:21999";
    options_.config.heartbeat_interval = 1;
    options_.initial_backoff_ms = 50;
    options_.max_backoff_ms = 200;
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
    sim_->Stop();
  }
  // The fake gpupoold on port_, answering with `leases` where given, started.
  FakePoold& StartFakePoold(const nlohmann::json& leases = nullptr) {
    poold_ = std::make_unique<FakePoold>(port_);
    if (!leases.is_null()) poold_->SetLeases(leases);
    poold_->Start();
    return *poold_;
  }

  void StartAgent() {
    agent_ = std::make_unique<Agent>(options_, sim_.get(), &leases_);
    agent_->Start();
  }

  int port_ = 0;
  // Declared before agent_ so that it outlives the agent: stopping the agent closes its
  // keep-alive connection, which the server would otherwise wait for.
  std::unique_ptr<FakePoold> poold_;
  std::unique_ptr<devices::SimBackend> sim_;
  LeaseTable leases_;
  AgentOptions options_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(AgentTest, RegistersThenHeartbeatsWithHealth) {
  FakePoold& poold = StartFakePoold();
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return poold.heartbeats().size() >= 2; }));
  EXPECT_EQ(poold.unauthenticated(), 0);
  auto regs = poold.registers();
  ASSERT_EQ(regs.size(), 1u);
  const nlohmann::json& r = regs[0];
  EXPECT_EQ(r["host"], "gpuhost1");
  EXPECT_EQ(r["rack"], "rack7");
  EXPECT_EQ(r["endpoint"], "127.0.0.1:21999");
  ASSERT_EQ(r["gpus"].size(), 2u);
  EXPECT_EQ(r["gpus"][1]["uuid"], sim_->Discover()[1].uuid);
  EXPECT_EQ(r["gpus"][1]["index"], 1);
  EXPECT_EQ(r["gpus"][1]["model"], "A100-SXM4-80GB");
  EXPECT_EQ(r["gpus"][1]["memory_mib"], 81920);
  EXPECT_EQ(r["gpus"][1]["pci_bus_id"], sim_->Discover()[1].pci_bus_id);
  EXPECT_EQ(r["gpus"][1]["health"], "OK");
  EXPECT_TRUE(r["gpus"][1].contains("numa_node"));
  nlohmann::json hb = poold.heartbeats().back();
  EXPECT_EQ(hb["host"], "gpuhost1");
  ASSERT_EQ(hb["gpus"].size(), 2u);
  EXPECT_EQ(hb["gpus"][0]["health"], "OK");
  EXPECT_TRUE(agent_->registered());
}

TEST_F(AgentTest, HealthChangeHeartbeatsAtOnce) {
  options_.config.heartbeat_interval = 60;  // only an immediate heartbeat can arrive in time
  FakePoold& poold = StartFakePoold();
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return poold.heartbeats().size() == 1; }));  // right after registering
  ASSERT_TRUE(sim_->InjectFault(1, device::Fault{device::FaultMode::kFail, 0, "Xid 79"}).ok());
  ASSERT_TRUE(Eventually([&] { return poold.heartbeats().size() >= 2; }, 3000));
  nlohmann::json hb = poold.heartbeats().back();
  EXPECT_EQ(hb["gpus"][0]["health"], "OK");
  EXPECT_EQ(hb["gpus"][1]["health"], "FAILED");
  EXPECT_EQ(hb["gpus"][1]["reason"], "Xid 79");
}

TEST_F(AgentTest, RetriesUntilGpupooldIsUp) {
  StartAgent();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // several refused attempts
  EXPECT_FALSE(agent_->registered());
  FakePoold& poold = StartFakePoold();
  ASSERT_TRUE(Eventually([&] { return agent_->registered(); }));
  EXPECT_EQ(poold.registers().size(), 1u);
  EXPECT_EQ(agent_->registrations(), 1u);
}

TEST_F(AgentTest, RegistersAgainAfter404) {
  FakePoold& poold = StartFakePoold();
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return poold.heartbeats().size() >= 1; }));
  poold.Forget();
  ASSERT_TRUE(Eventually([&] { return poold.registers().size() == 2; }, 4000));
  ASSERT_TRUE(Eventually([&] { return agent_->registrations() == 2u; }));
  size_t after = poold.heartbeats().size();
  ASSERT_TRUE(Eventually([&] { return poold.heartbeats().size() > after; }, 3000));
}

TEST_F(AgentTest, KeepsLeasesFromHeartbeats) {
  std::string uuid0 = sim_->Discover()[0].uuid;
  FakePoold& poold = StartFakePoold({{{"gpu", uuid0}, {"lease", "L3"}, {"token", "feedbeef"}, {"generation", 2}}});
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return leases_.size() == 1; }));
  uint64_t gen = 0;
  EXPECT_TRUE(leases_.Authorize("L3", "feedbeef", uuid0, &gen));
  EXPECT_EQ(gen, 2u);
  poold.SetLeases(nlohmann::json::array());  // released
  ASSERT_TRUE(Eventually([&] { return leases_.size() == 0; }, 4000));
  EXPECT_FALSE(leases_.Authorize("L3", "feedbeef", uuid0, nullptr));
}

// The data path asks for a lease it does not know yet (a job's first CUDA call can come
// before the next periodic heartbeat): RefreshLeases() fetches it at once.
TEST_F(AgentTest, RefreshLeasesFetchesANewLeaseAtOnce) {
  options_.config.heartbeat_interval = 60;  // no periodic heartbeat during the test
  FakePoold& poold = StartFakePoold();
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return poold.heartbeats().size() == 1; }));  // right after registering
  std::string uuid0 = sim_->Discover()[0].uuid;
  poold.SetLeases({{{"gpu", uuid0}, {"lease", "L9"}, {"token", "c0ffee"}, {"generation", 1}}});
  EXPECT_FALSE(leases_.Authorize("L9", "c0ffee", uuid0, nullptr));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(agent_->RefreshLeases(2000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  EXPECT_TRUE(leases_.Authorize("L9", "c0ffee", uuid0, nullptr));
  EXPECT_EQ(poold.heartbeats().size(), 2u);
  agent_->Stop();
  EXPECT_FALSE(agent_->RefreshLeases(2000));  // a stopped agent answers at once
}

// While data-path clients are attached, leases are fetched every lease_refresh_ms (not
// every heartbeat interval), so a released lease reaches the data path within a second;
// with no client attached the heartbeat interval holds again.
TEST_F(AgentTest, FetchesLeasesOftenWhileClientsAreAttached) {
  options_.config.heartbeat_interval = 60;
  std::atomic<bool> in_use{false};
  options_.leases_in_use = [&in_use] { return in_use.load(); };
  std::string uuid0 = sim_->Discover()[0].uuid;
  FakePoold& poold = StartFakePoold({{{"gpu", uuid0}, {"lease", "L4"}, {"token", "abcd"}, {"generation", 1}}});
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return leases_.size() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(poold.heartbeats().size(), 1u);  // idle: the 60 s interval
  in_use = true;                             // a client attaches in the middle of the long wait
  uint64_t version = leases_.version();
  poold.SetLeases(nlohmann::json::array());  // released
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return leases_.size() == 0; }, 2000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(800));
  EXPECT_GT(leases_.version(), version);
  size_t before = poold.heartbeats().size();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_GE(poold.heartbeats().size(), before + 2);  // every 400 ms
  in_use = false;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  before = poold.heartbeats().size();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(poold.heartbeats().size(), before);
}

TEST_F(AgentTest, StopsPromptlyWhileRetrying) {
  options_.max_backoff_ms = 5000;
  StartAgent();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto t0 = std::chrono::steady_clock::now();
  agent_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
}

}  // namespace
}  // namespace gpupool::agentd

// The agent's control API over real HTTP with real MUNGE credentials (private munged).
#include "remote/agentd/control_server.h"

#include <gtest/gtest.h>

#include <future>

#include "remote/devices/sim/sim_backend.h"
#include "test_env.h"

namespace gpupool::agentd {
namespace {

using testing_env::Call;

class ControlServerTest : public testing::Test {
 protected:
  void SetUp() override {
    auto sim = devices::SimBackend::Create("gpuhost1", {{"A100-SXM4-80GB", 81920, 4}}, 1);
    ASSERT_TRUE(sim.ok());
    sim_ = std::move(sim.value());
    leases_.Replace({{sim_->Discover()[2].uuid, "L7", "secret-token", 3}});
    Config config;  // default policy: root, the agent's own uid, SlurmUser
    ControlServerOptions o;
    o.listen = "127.0.0.1:0";
    o.host = "gpuhost1";
    o.backend = sim_.get();
    o.leases = &leases_;
    o.authorize = MakeMungeAuthorizer(config);
    auto server = ControlServer::Start(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server.value());
    port_ = server_->port();
  }
  void TearDown() override {
    server_.reset();
    if (sim_) sim_->Stop();
  }

  // Every GPU healthy and without fault: what a rejected request must leave behind.
  void ExpectUntouched() {
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(sim_->Health(i).health, device::Health::kOk) << "GPU " << i;
      EXPECT_EQ(sim_->CurrentFault(i).mode, device::FaultMode::kNone) << "GPU " << i;
    }
  }

  testing_env::Answer PostFault(const std::string& body) { return Call(port_, "POST", "/v1/faults", body); }

  std::unique_ptr<devices::SimBackend> sim_;
  LeaseTable leases_;
  std::unique_ptr<ControlServer> server_;
  int port_ = 0;
};

TEST_F(ControlServerTest, ListsGpusWithLeaseButNotToken) {
  auto a = Call(port_, "GET", "/v1/gpus");
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["host"], "gpuhost1");
  EXPECT_EQ(a.body["backend"], "sim");
  ASSERT_EQ(a.body["gpus"].size(), 4u);
  const auto& g2 = a.body["gpus"][2];
  EXPECT_EQ(g2["index"], 2);
  EXPECT_EQ(g2["uuid"], sim_->Discover()[2].uuid);
  EXPECT_EQ(g2["memory_mib"], 81920);
  EXPECT_EQ(g2["health"], "OK");
  EXPECT_EQ(g2["fault"]["mode"], "none");
  EXPECT_EQ(g2["lease"], "L7");
  EXPECT_EQ(g2["generation"], 3);
  EXPECT_EQ(a.body.dump().find("secret-token"), std::string::npos);
  EXPECT_EQ(a.body["gpus"][0]["lease"], "");
}

TEST_F(ControlServerTest, FailThenClear) {
  auto a = PostFault(R"({"index":1,"mode":"fail","reason":"Xid 79"})");
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["gpu"]["health"], "FAILED");
  EXPECT_EQ(a.body["gpu"]["reason"], "Xid 79");
  EXPECT_EQ(sim_->Health(1).health, device::Health::kFailed);
  auto list = Call(port_, "GET", "/v1/gpus");
  EXPECT_EQ(list.body["gpus"][1]["health"], "FAILED");
  EXPECT_EQ(list.body["gpus"][1]["fault"]["mode"], "fail");
  a = PostFault(R"({"index":1,"mode":"clear"})");
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["gpu"]["health"], "OK");
  ExpectUntouched();
}

TEST_F(ControlServerTest, FailAfterCountsOperations) {
  auto a = PostFault(R"({"index":0,"mode":"fail_after","ops":2})");
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["gpu"]["fault"]["ops"], 2);
  EXPECT_TRUE(sim_->BeforeOperation(0).ok());
  EXPECT_TRUE(sim_->BeforeOperation(0).ok());
  EXPECT_FALSE(sim_->BeforeOperation(0).ok());
  auto list = Call(port_, "GET", "/v1/gpus");
  EXPECT_EQ(list.body["gpus"][0]["operations"], 3);
  EXPECT_EQ(list.body["gpus"][0]["health"], "FAILED");
}

TEST_F(ControlServerTest, HangIsReleasedByClear) {
  ASSERT_EQ(PostFault(R"({"index":3,"mode":"hang"})").status, 200);
  auto op = std::async(std::launch::async, [&] { return sim_->BeforeOperation(3); });
  ASSERT_TRUE(testing_env::Eventually([&] { return sim_->HungCalls(3) == 1; }));
  // The control API keeps answering while a data-path call hangs.
  EXPECT_EQ(Call(port_, "GET", "/v1/gpus").body["gpus"][3]["fault"]["mode"], "hang");
  ASSERT_EQ(PostFault(R"({"index":3,"mode":"clear"})").status, 200);
  ASSERT_EQ(op.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  EXPECT_TRUE(op.get().ok());
}

TEST_F(ControlServerTest, BadRequestsChangeNothing) {
  struct Case {
    const char* body;
    int status;
    const char* error;
  } cases[] = {
      {"{not json", 400, "malformed JSON"},
      {R"([1,2])", 400, ""},
      {R"({"index":0,"mode":"fail","colour":"red"})", 400, "colour"},
      {R"({"mode":"fail"})", 400, "index"},
      {R"({"index":0})", 400, "mode"},
      {R"({"index":"0","mode":"fail"})", 400, "index"},
      {R"({"index":-1,"mode":"fail"})", 400, "index"},
      {R"({"index":0,"mode":"explode"})", 400, "explode"},
      {R"({"index":0,"mode":"fail_after"})", 400, "ops"},
      {R"({"index":0,"mode":"fail_after","ops":-3})", 400, "ops"},
      {R"({"index":0,"mode":"hang","ops":3})", 400, "ops"},
      {R"({"index":0,"mode":"hang","reason":"x"})", 400, "reason"},
      {R"({"index":0,"mode":"fail","reason":7})", 400, "reason"},
      {R"({"index":4,"mode":"fail"})", 404, "no GPU with index 4"},
  };
  for (const Case& c : cases) {
    auto a = PostFault(c.body);
    EXPECT_EQ(a.status, c.status) << c.body << " → " << a.body.dump();
    ASSERT_TRUE(a.body.is_object() && a.body["error"].is_string()) << c.body;
    EXPECT_NE(a.body["error"].get<std::string>().find(c.error), std::string::npos) << a.body.dump();
    EXPECT_EQ(a.body["error"].get<std::string>().find('\n'), std::string::npos);
  }
  ExpectUntouched();
  auto big = PostFault(R"({"index":0,"mode":"fail","reason":")" + std::string(70000, 'x') + "\"}");
  EXPECT_EQ(big.status, 413);
  auto unknown = Call(port_, "GET", "/v1/nothing");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_TRUE(unknown.body["error"].is_string());
  ExpectUntouched();
}

TEST_F(ControlServerTest, CredentialsAreRequired) {
  const std::string body = R"({"index":0,"mode":"fail"})";
  auto none = Call(port_, "POST", "/v1/faults", body, "");
  EXPECT_EQ(none.status, 401);
  EXPECT_NE(none.body["error"].get<std::string>().find("authentication required"), std::string::npos);
  EXPECT_EQ(Call(port_, "GET", "/v1/gpus", "", "").status, 401);
  EXPECT_EQ(Call(port_, "POST", "/v1/faults", body, "Bearer abc").status, 401);
  EXPECT_EQ(Call(port_, "POST", "/v1/faults", body, "MUNGE forged:credential:").status, 401);
  // A credential is good for one request: munged refuses a replay.
  std::string cred = "MUNGE " + testing_env::Credential();
  EXPECT_EQ(Call(port_, "GET", "/v1/gpus", "", cred).status, 200);
  EXPECT_EQ(Call(port_, "POST", "/v1/faults", body, cred).status, 401);
  // An ordinary user (nobody) is authenticated but not allowed.
  std::string nobody = testing_env::CredentialAs(65534);
  ASSERT_FALSE(nobody.empty());
  auto denied = Call(port_, "POST", "/v1/faults", body, "MUNGE " + nobody);
  EXPECT_EQ(denied.status, 403) << denied.body.dump();
  ExpectUntouched();
}

TEST(ControlPolicy, WhoMayControl) {
  std::vector<std::string> warnings;
  auth::RolePolicy policy = auth::RolePolicy::FromNames("root", {}, {"65533"}, &warnings);
  EXPECT_TRUE(MayControl(0, 0, policy));
  EXPECT_TRUE(MayControl(1234, 1234, policy));  // the agent's own user
  EXPECT_TRUE(MayControl(65533, 0, policy));    // in agent_users
  EXPECT_FALSE(MayControl(65534, 0, policy));
}

TEST(ControlServerStart, RefusesNonLoopbackAddresses) {
  auto sim = devices::SimBackend::Create("h", {}, 1);
  ASSERT_TRUE(sim.ok());
  ControlServerOptions o;
  o.listen = "0.0.0.0:0";
  o.backend = sim.value().get();
  o.authorize = [](const std::string&) { return Status::OK(); };
  auto server = ControlServer::Start(o);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("not a loopback address"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::agentd

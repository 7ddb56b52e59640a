// gpupoold + two gpupool-agentd processes, all real binaries, with a private munged:
// registration, heartbeat-driven health (a fault injected over the control API makes
// gpupoold show the GPU FAILED), recovery, and UNREACHABLE after an agent is killed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <map>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/api_client.h"
#include "remote/dataplane/protocol.h"
#include "remote/transport/rpc_client.h"
#include "test_env.h"

namespace gpupool::agentd {
namespace {

using testing_env::Call;
using testing_env::Eventually;

class IntegrationTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-agentd-it.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    poold_port_ = testing_env::FreePort();
    conf_ = dir_ + "/gpupool.conf";
    std::ofstream(conf_) << "gpupoold = {\n"
                         << "  listen = \"127.0.0.1:" << poold_port_ << "\";\n"
                         << "  state_dir = \"" << dir_ << "/state\";\n"
                         << "  slurm_reap = false;\n"
                         << "  enforce_licenses = false;\n"  // no Slurm here: root leases made-up jobs
                         << "  unreachable_timeout = 2;\n"
                         << "  reap_interval = 1;\n"
                         << "};\n"
                         << "pools = ( { name = \"a100\"; models = [ \"A100*\" ]; } );\n"
                         << "agent = {\n"
                         << "  server = \"http://127.0.0.1:" << poold_port_ << "\";\n"
                         << "  heartbeat_interval = 1;\n"
                         << "  sim = { gpus = ( { model = \"A100-SXM4-80GB\"; memory = \"80G\"; count = 2; } ); };\n"
                         << "};\n";
    mkdir((dir_ + "/state").c_str(), 0700);
    pids_["gpupoold"] = testing_env::Spawn({GPUPOOL_POOLD_BIN, "-D", "-f", conf_}, dir_ + "/gpupoold.log");
    ApiClientOptions o;
    o.server = "127.0.0.1:" + std::to_string(poold_port_);
    client_ = std::make_unique<ApiClient>(o);
    ASSERT_TRUE(Eventually([&] { return client_->Get("/v1/ping").ok(); })) << Logs();
  }

  void TearDown() override {
    for (auto& [name, pid] : pids_) {
      if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, nullptr, 0);
      }
    }
    if (HasFailure() || getenv("AGENTD_TEST_LOGS") != nullptr) std::cerr << Logs();
    testing_env::Run("rm -rf " + dir_);
  }

  // Starts an agent for `host` in `rack`; returns its control port.
  int StartAgent(const std::string& host, const std::string& rack) {
    int control = testing_env::FreePort();
    int data = testing_env::FreePort();
    data_ports_[host] = data;
    pids_[host] = testing_env::Spawn(
        {GPUPOOL_AGENTD_BIN, "-D", "-f", conf_, "--host", host, "--rack", rack, "--listen",
         "127.0.0.1:" + std::to_string(data), "--control", "127.0.0.1:" + std::to_string(control)},
        dir_ + "/" + host + ".log");
    return control;
  }

  // gpupoold's view of one GPU ("host:index"); a null json when unknown.
  nlohmann::json Gpu(const std::string& id) {
    Result<nlohmann::json> r = client_->Get("/v1/gpus?id=" + id);
    if (!r.ok() || !r->contains("gpus") || (*r)["gpus"].empty()) return nullptr;
    return (*r)["gpus"][0];
  }
  std::string State(const std::string& id) {
    nlohmann::json g = Gpu(id);
    return g.is_null() ? "" : g["state"].get<std::string>();
  }

  std::string Logs() {
    std::string out;
    for (const char* name : {"gpupoold", "gpuhost1", "gpuhost2"}) {
      out += std::string("---- ") + name + ".log\n" + testing_env::ReadFile(dir_ + "/" + name + ".log");
    }
    return out;
  }

  std::string dir_, conf_;
  int poold_port_ = 0;
  std::map<std::string, pid_t> pids_;
  std::map<std::string, int> data_ports_;
  std::unique_ptr<ApiClient> client_;
};

TEST_F(IntegrationTest, RegisterFailRecoverLeaseAndUnreachable) {
  int control1 = StartAgent("gpuhost1", "rack1");
  StartAgent("gpuhost2", "rack2");

  // Both hosts' GPUs are registered, idle and healthy, with the identities the agents report.
  ASSERT_TRUE(Eventually([&] {
    Result<nlohmann::json> r = client_->Get("/v1/gpus");
    return r.ok() && (*r)["gpus"].size() == 4;
  })) << Logs();
  for (const char* id : {"gpuhost1:0", "gpuhost1:1", "gpuhost2:0", "gpuhost2:1"}) {
    nlohmann::json g = Gpu(id);
    ASSERT_FALSE(g.is_null()) << id;
    EXPECT_EQ(g["state"], "IDLE") << g.dump();
    EXPECT_EQ(g["pool"], "a100") << g.dump();
    EXPECT_EQ(g["model"], "A100-SXM4-80GB");
    EXPECT_EQ(g["memory_mib"], 81920);
  }
  EXPECT_EQ(Gpu("gpuhost2:1")["rack"], "rack2");
  auto local = Call(control1, "GET", "/v1/gpus");
  ASSERT_EQ(local.status, 200) << Logs();
  EXPECT_EQ(Gpu("gpuhost1:0")["uuid"], local.body["gpus"][0]["uuid"]);
  ASSERT_TRUE(Eventually([&] { return Call(control1, "GET", "/v1/gpus").body["registered"] == true; }));

  // A fault injected on gpuhost1:0 reaches gpupoold through an immediate heartbeat.
  auto f = Call(control1, "POST", "/v1/faults", R"({"index":0,"mode":"fail","reason":"Xid 79"})");
  ASSERT_EQ(f.status, 200) << f.body.dump();
  ASSERT_TRUE(Eventually([&] { return State("gpuhost1:0") == "FAILED"; }, 3000)) << Gpu("gpuhost1:0").dump();
  EXPECT_NE(Gpu("gpuhost1:0")["reason"].get<std::string>().find("Xid 79"), std::string::npos)
      << Gpu("gpuhost1:0").dump();
  EXPECT_EQ(State("gpuhost1:1"), "IDLE");

  // Cleared on the agent and resumed by the admin, it is IDLE again.
  ASSERT_EQ(Call(control1, "POST", "/v1/faults", R"({"index":0,"mode":"clear"})").status, 200);
  ASSERT_TRUE(Eventually([&] {
    Result<nlohmann::json> r = client_->Post("/v1/gpus/update", {{"gpu", "gpuhost1:0"}, {"state", "resume"}});
    return r.ok() && State("gpuhost1:0") == "IDLE";
  }, 4000)) << Gpu("gpuhost1:0").dump();

  // A lease on rack1 reaches the agent's lease table with the next heartbeat.
  Result<nlohmann::json> lease = client_->Post(
      "/v1/leases", {{"job_id", 42}, {"request", {{{"pool", "a100"}, {"count", 1}}}}, {"place", "rack:rack1"}});
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  std::string lease_id = (*lease)["lease"]["id"];
  int leased_index = (*lease)["lease"]["gpus"][0]["index"];
  ASSERT_TRUE(Eventually([&] {
    return Call(control1, "GET", "/v1/gpus").body["gpus"][leased_index]["lease"] == lease_id;
  }, 4000)) << Call(control1, "GET", "/v1/gpus").body.dump();

  // gpuhost2's agent dies: its GPUs become UNREACHABLE after unreachable_timeout (2 s).
  kill(pids_["gpuhost2"], SIGKILL);
  waitpid(pids_["gpuhost2"], nullptr, 0);
  pids_["gpuhost2"] = -1;
  ASSERT_TRUE(Eventually([&] { return State("gpuhost2:0") == "UNREACHABLE" && State("gpuhost2:1") == "UNREACHABLE"; },
                         8000))
      << Gpu("gpuhost2:0").dump();
  EXPECT_EQ(State("gpuhost1:1"), "IDLE");  // the live agent keeps its GPUs reachable
}

// A data-path client of a lease, as the remoting library is one: hello with the lease's
// credential, then requests.
class DataClient {
 public:
  DataClient(int port, const std::string& lease, const std::string& token,
             const std::string& uuid) {
    auto client = transport::RpcClient::Connect("127.0.0.1:" + std::to_string(port), uuid);
    EXPECT_TRUE(client.ok()) << client.status().message();
    if (!client.ok()) return;
    client_ = std::move(client.value());
    dataplane::HelloArgs hello;
    std::snprintf(hello.lease_id, sizeof(hello.lease_id), "%s", lease.c_str());
    std::snprintf(hello.token, sizeof(hello.token), "%s", token.c_str());
    std::snprintf(hello.gpu_uuid, sizeof(hello.gpu_uuid), "%s", uuid.c_str());
    transport::Reply reply;
    Status status = client_->Call({dataplane::kOpHello, &hello, sizeof(hello), nullptr, 0, nullptr, 0}, &reply);
    hello_status_ = status.ok() ? reply.status : -1;
    hello_answer_ = reply.out;
  }
  int32_t hello_status() const { return hello_status_; }
  const std::string& hello_answer() const { return hello_answer_; }
  // A request's status; -1 once the connection is closed.
  int32_t Alloc(uint64_t size) {
    dataplane::MemAllocArgs args{size};
    transport::Reply reply;
    Status status = client_->Call({dataplane::kOpMemAlloc, &args, sizeof(args), nullptr, 0, nullptr, 0}, &reply);
    return status.ok() ? reply.status : -1;
  }
  // Milliseconds until the session is gone (closed, or its requests not permitted),
  // probing every 20 ms; -1 if still usable after `limit_ms`.
  double MillisecondsUntilRevoked(int limit_ms) {
    auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(limit_ms)) {
      int32_t status = Alloc(4096);
      if (status == -1 || status == dataplane::kCuNotPermitted) {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  std::unique_ptr<transport::RpcClient> client_;
  int32_t hello_status_ = -1;
  std::string hello_answer_;
};

// Issue 8: a lease's token is good on the data path only while the lease holds the GPU.
// Released, expired, or moved away by a swap: the open session is closed within a second
// of gpupoold's change, and the old token is refused from then on.
TEST_F(IntegrationTest, DataPathSessionsEndWithTheirLease) {
  setenv("UCX_TLS", "tcp", 1);  // the agents inherit it
  setenv("UCX_NET_DEVICES", "lo", 1);
  int control = StartAgent("gpuhost1", "rack1");
  ASSERT_TRUE(Eventually([&] { return State("gpuhost1:0") == "IDLE" && State("gpuhost1:1") == "IDLE"; }))
      << Logs();
  int port = data_ports_["gpuhost1"];
  auto acquire = [&](int job, int ttl) {
    Result<nlohmann::json> lease = client_->Post(
        "/v1/leases", {{"job_id", job}, {"request", {{{"pool", "a100"}, {"count", 1}}}}, {"ttl", ttl}});
    EXPECT_TRUE(lease.ok()) << lease.status().message();
    return lease.ok() ? (*lease)["lease"] : nlohmann::json();
  };
  auto lease_gone = [&](const std::string& id) {
    Result<nlohmann::json> r = client_->Get("/v1/leases?id=" + id);
    return r.ok() && (*r)["leases"].empty();
  };

  // Released.
  nlohmann::json lease = acquire(42, 600);
  ASSERT_FALSE(lease.is_null());
  std::string id = lease["id"], token = lease["token"], uuid = lease["gpus"][0]["uuid"];
  DataClient released(port, id, token, uuid);
  ASSERT_EQ(released.hello_status(), dataplane::kCuSuccess) << released.hello_answer() << Logs();
  ASSERT_EQ(released.Alloc(1 << 20), dataplane::kCuSuccess);
  ASSERT_TRUE(client_->Post("/v1/leases/release", {{"id", id}}).ok());
  double ms = released.MillisecondsUntilRevoked(3000);
  std::printf("session closed %.0f ms after the release\n", ms);
  EXPECT_GE(ms, 0) << Logs();
  EXPECT_LT(ms, 1000);
  EXPECT_EQ(DataClient(port, id, token, uuid).hello_status(), dataplane::kCuNotPermitted);

  // Expired (a 2 s lease nobody renews).
  lease = acquire(43, 2);
  ASSERT_FALSE(lease.is_null());
  id = lease["id"], token = lease["token"], uuid = lease["gpus"][0]["uuid"];
  DataClient expired(port, id, token, uuid);
  ASSERT_EQ(expired.hello_status(), dataplane::kCuSuccess) << expired.hello_answer();
  ASSERT_TRUE(Eventually([&] { return lease_gone(id); }, 6000));
  ms = expired.MillisecondsUntilRevoked(3000);
  std::printf("session closed %.0f ms after the expiry was seen\n", ms);
  EXPECT_GE(ms, 0) << Logs();
  EXPECT_LT(ms, 1000);
  EXPECT_EQ(DataClient(port, id, token, uuid).hello_status(), dataplane::kCuNotPermitted);

  // Swapped: the leased GPU fails, gpupoold moves the lease to the other GPU.
  lease = acquire(44, 600);
  ASSERT_FALSE(lease.is_null());
  id = lease["id"], token = lease["token"], uuid = lease["gpus"][0]["uuid"];
  int index = lease["gpus"][0]["index"];
  DataClient swapped(port, id, token, uuid);
  ASSERT_EQ(swapped.hello_status(), dataplane::kCuSuccess) << swapped.hello_answer();
  auto f = Call(control, "POST", "/v1/faults",
                R"({"index":)" + std::to_string(index) + R"(,"mode":"fail","reason":"Xid 79"})");
  ASSERT_EQ(f.status, 200) << f.body.dump();
  std::string new_uuid;
  ASSERT_TRUE(Eventually([&] {
    Result<nlohmann::json> r = client_->Get("/v1/leases?id=" + id);
    if (!r.ok() || (*r)["leases"].empty()) return false;
    new_uuid = (*r)["leases"][0]["gpus"][0]["uuid"];
    return new_uuid != uuid;
  }, 5000)) << Logs();
  ms = swapped.MillisecondsUntilRevoked(3000);
  std::printf("session closed %.0f ms after the swap was seen\n", ms);
  EXPECT_GE(ms, 0) << Logs();
  EXPECT_LT(ms, 1000);
  EXPECT_EQ(DataClient(port, id, token, uuid).hello_status(), dataplane::kCuNotPermitted);
  DataClient moved(port, id, token, new_uuid);
  EXPECT_EQ(moved.hello_status(), dataplane::kCuSuccess) << moved.hello_answer();
}

TEST_F(IntegrationTest, AgentRegistersAgainWhenGpupooldLosesItsInventory) {
  int control = StartAgent("gpuhost1", "rack1");
  ASSERT_TRUE(Eventually([&] { return State("gpuhost1:0") == "IDLE"; })) << Logs();
  // Restart gpupoold on an empty state directory.
  kill(pids_["gpupoold"], SIGTERM);
  waitpid(pids_["gpupoold"], nullptr, 0);
  testing_env::Run("rm -rf " + dir_ + "/state && mkdir -m 700 " + dir_ + "/state");
  pids_["gpupoold"] = testing_env::Spawn({GPUPOOL_POOLD_BIN, "-D", "-f", conf_}, dir_ + "/gpupoold.log");
  ASSERT_TRUE(Eventually([&] { return State("gpuhost1:0") == "IDLE" && State("gpuhost1:1") == "IDLE"; }, 8000))
      << Logs();
  // gpupoold lists the GPUs as soon as it has handled the registration; the agent sets its flag
  // when the answer reaches it, a moment later.
  EXPECT_TRUE(
      Eventually([&] { return Call(control, "GET", "/v1/gpus").body["registered"] == true; }, 3000))
      << Logs();
}

}  // namespace
}  // namespace gpupool::agentd

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  testing::AddGlobalTestEnvironment(new gpupool::agentd::testing_env::PrivateMunged);
  return RUN_ALL_TESTS();
}

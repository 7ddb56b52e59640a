// gpupoold + two gpupool-agentd processes, all real binaries, with a private munged:
// registration, heartbeat-driven health (a fault injected over the control API makes
// gpupoold show the GPU FAILED), recovery, and UNREACHABLE after an agent is killed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/api_client.h"
#include "remote/protocol/protocol.h"
#include "remote/transport/bootstrap.h"
#include "remote/transport/rpc_client.h"
#include "test_env.h"

namespace gpupool::agentd {
namespace {

using testing_env::Call;
using testing_env::Eventually;

class IntegrationTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_env::MakeTempDir("gpupool-agentd-it");
    ASSERT_FALSE(dir_.empty());
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
                         << "  backend = \"sim\";\n"
                         << "  heartbeat_interval = 1;\n"
                         // Every worker as the unprivileged worker user (the clients here
                         // are on this host, and would get workers of their own uid).
                         << "  worker_same_user = false;\n"
                         << "  hang_timeout = 2;\n"
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

  // Adds `lines` to the agent's section of gpupool.conf (before an agent starts).
  void AddAgentSettings(const std::string& lines) {
    std::string text = testing_env::ReadFile(conf_);
    const std::string group = "agent = {\n";
    text.replace(text.find(group), group.size(), group + lines);
    std::ofstream(conf_) << text;
  }

  // Starts an agent for `host` in `rack`; returns its control port.
  int StartAgent(const std::string& host, const std::string& rack) {
    int control = testing_env::FreePort();
    int data = testing_env::FreePort();
    data_ports_[host] = data;
    pids_[host] =
        testing_env::Spawn({GPUPOOL_AGENTD_BIN, "-D", "-f", conf_, "--host", host, "--rack", rack, "--listen",
                            "127.0.0.1:" + std::to_string(data), "--control", "127.0.0.1:" + std::to_string(control)},
                           dir_ + "/" + host + ".log");
    return control;
  }

  // An agent for gpuhost1 over TCP, both its GPUs IDLE, and a lease of `count` of them for
  // job `job`: the lease's JSON (null on failure, with a test failure). The agent's control
  // port goes to control_port_.
  nlohmann::json AgentAndLease(int job, int count) {
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "lo", 1);
    control_port_ = StartAgent("gpuhost1", "rack1");
    bool idle = Eventually([&] { return State("gpuhost1:0") == "IDLE" && State("gpuhost1:1") == "IDLE"; });
    EXPECT_TRUE(idle) << Logs();
    if (!idle) return nullptr;
    Result<nlohmann::json> lease = client_->Post(
        "/v1/leases", {{"job_id", job}, {"request", {{{"pool", "a100"}, {"count", count}}}}, {"ttl", 600}});
    EXPECT_TRUE(lease.ok()) << lease.status().message();
    return lease.ok() ? (*lease)["lease"] : nlohmann::json();
  }
  int control_port_ = 0;

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
  ASSERT_TRUE(Eventually(
      [&] {
        Result<nlohmann::json> r = client_->Post("/v1/gpus/update", {{"gpu", "gpuhost1:0"}, {"state", "resume"}});
        return r.ok() && State("gpuhost1:0") == "IDLE";
      },
      4000))
      << Gpu("gpuhost1:0").dump();

  // A lease on rack1 reaches the agent's lease table with the next heartbeat.
  Result<nlohmann::json> lease = client_->Post(
      "/v1/leases", {{"job_id", 42}, {"request", {{{"pool", "a100"}, {"count", 1}}}}, {"place", "rack:rack1"}});
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  std::string lease_id = (*lease)["lease"]["id"];
  int leased_index = (*lease)["lease"]["gpus"][0]["index"];
  ASSERT_TRUE(Eventually(
      [&] { return Call(control1, "GET", "/v1/gpus").body["gpus"][leased_index]["lease"] == lease_id; }, 4000))
      << Call(control1, "GET", "/v1/gpus").body.dump();

  // gpuhost2's agent dies: its GPUs become UNREACHABLE after unreachable_timeout (2 s).
  kill(pids_["gpuhost2"], SIGKILL);
  waitpid(pids_["gpuhost2"], nullptr, 0);
  pids_["gpuhost2"] = -1;
  ASSERT_TRUE(
      Eventually([&] { return State("gpuhost2:0") == "UNREACHABLE" && State("gpuhost2:1") == "UNREACHABLE"; }, 8000))
      << Gpu("gpuhost2:0").dump();
  EXPECT_EQ(State("gpuhost1:1"), "IDLE");  // the live agent keeps its GPUs reachable
}

// A data-path client of a lease, as the remoting library is one: hello with the lease's
// credential, then requests.
class DataClient {
 public:
  DataClient(int port, const std::string& lease, const std::string& token, const std::string& uuid) {
    // The credential goes with the handshake: the agent checks it there, before the
    // connection reaches the session's worker, and refuses it there too.
    auto client = transport::RpcClient::Connect("127.0.0.1:" + std::to_string(port), uuid, {lease, token, ""});
    if (!client.ok() && client.status().code() == Status::Code::kPermissionDenied) {
      hello_status_ = dataplane::kCuNotPermitted;
      hello_answer_ = client.status().message();
      return;
    }
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
  // A module of PTX text (the sim runs it) with one kernel taking no parameters.
  int32_t LoadPtx(uint64_t module, const std::string& ptx, const std::string& kernel) {
    dataplane::ModuleLoadArgs args{module};
    const std::string payload = dataplane::ModuleLoadPayload({ptx.c_str(), ptx.size() + 1}, {{kernel, 0}});
    transport::Reply reply;
    Status status = client_->Call(
        {dataplane::kOpModuleLoad, &args, sizeof(args), payload.data(), payload.size(), nullptr, 0}, &reply);
    if (!status.ok()) return -1;
    dataplane::GetFunctionArgs get{module, module + 1, {}};
    std::snprintf(get.name, sizeof(get.name), "%s", kernel.c_str());
    status = client_->Call({dataplane::kOpGetFunction, &get, sizeof(get), nullptr, 0, nullptr, 0}, &reply);
    return status.ok() ? reply.status : -1;
  }
  // Launches function `module + 1` (LoadPtx's) on one thread, without waiting.
  bool StartKernel(uint64_t module) {
    dataplane::LaunchArgs launch{};
    launch.function = module + 1;
    launch.grid[0] = launch.grid[1] = launch.grid[2] = 1;
    launch.block[0] = launch.block[1] = launch.block[2] = 1;
    return client_->Post({dataplane::kOpLaunch, &launch, sizeof(launch), nullptr, 0, nullptr, 0}).ok();
  }
  transport::RpcClient* client() { return client_.get(); }
  int32_t hello_status() const { return hello_status_; }
  const std::string& hello_answer() const { return hello_answer_; }
  // A request's status; -1 once the connection is closed.
  int32_t Alloc(uint64_t size) {
    dataplane::MemAllocArgs args{size};
    transport::Reply reply;
    Status status = client_->Call({dataplane::kOpMemAlloc, &args, sizeof(args), nullptr, 0, nullptr, 0}, &reply);
    return status.ok() ? reply.status : -1;
  }
  // Allocates `size` bytes and writes all of them (so that they are held); the status.
  int32_t AllocAndFill(uint64_t size) {
    dataplane::MemAllocArgs args{size};
    transport::Reply reply;
    Status status = client_->Call({dataplane::kOpMemAlloc, &args, sizeof(args), nullptr, 0, nullptr, 0}, &reply);
    if (!status.ok()) return -1;
    if (reply.status != 0 || reply.out.size() < sizeof(dataplane::MemAllocResult)) return reply.status;
    dataplane::MemAllocResult result;
    std::memcpy(&result, reply.out.data(), sizeof(result));
    dataplane::MemsetArgs memset{result.dptr, size / 4, 0x01020304, 4, 0};
    status = client_->Call({dataplane::kOpMemset, &memset, sizeof(memset), nullptr, 0, nullptr, 0}, &reply);
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
  ASSERT_TRUE(Eventually([&] { return State("gpuhost1:0") == "IDLE" && State("gpuhost1:1") == "IDLE"; })) << Logs();
  int port = data_ports_["gpuhost1"];
  auto acquire = [&](int job, int ttl) {
    Result<nlohmann::json> lease =
        client_->Post("/v1/leases", {{"job_id", job}, {"request", {{{"pool", "a100"}, {"count", 1}}}}, {"ttl", ttl}});
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
  ASSERT_TRUE(Eventually(
      [&] {
        Result<nlohmann::json> r = client_->Get("/v1/leases?id=" + id);
        if (!r.ok() || (*r)["leases"].empty()) return false;
        new_uuid = (*r)["leases"][0]["gpus"][0]["uuid"];
        return new_uuid != uuid;
      },
      5000))
      << Logs();
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
  EXPECT_TRUE(Eventually([&] { return Call(control, "GET", "/v1/gpus").body["registered"] == true; }, 3000)) << Logs();
}

}  // namespace
}  // namespace gpupool::agentd

namespace gpupool::agentd {
namespace {

// The gpupool-worker processes whose parent is `agent`, with their uids.
std::map<pid_t, uid_t> WorkersOf(pid_t agent) {
  std::map<pid_t, uid_t> workers;
  std::string list = testing_env::Run("ps -o pid=,uid=,comm= --ppid " + std::to_string(agent));
  std::istringstream lines(list);
  long pid, uid;
  std::string comm;
  while (lines >> pid >> uid >> comm) {
    if (comm == "gpupool-worker") workers[static_cast<pid_t>(pid)] = static_cast<uid_t>(uid);
  }
  return workers;
}

// CPU seconds (user + system) `pid` has used.
double CpuSeconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);
    if (i == 15) break;
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Entries of the module that takes longer than hang_timeout (2 s here) to load.
constexpr int kSlowModuleEntries = 30000;

constexpr const char* kEndlessPtx = R"(.version 7.0
.target sm_80
.address_size 64
.visible .entry spin()
{
$Lforever:
  bra.uni $Lforever;
}
)";

// A session runs in a process of its own, as the unprivileged worker user, never in the
// agent: the agent (root here) parses none of the client's requests.
TEST_F(IntegrationTest, EachSessionRunsInAnUnprivilegedWorkerOfItsOwn) {
  nlohmann::json lease = AgentAndLease(50, 2);
  ASSERT_FALSE(lease.is_null());
  std::string id = lease["id"], token = lease["token"];
  std::string first = lease["gpus"][0]["uuid"], second = lease["gpus"][1]["uuid"];
  EXPECT_TRUE(WorkersOf(pids_["gpuhost1"]).empty());
  DataClient a(data_ports_["gpuhost1"], id, token, first);
  DataClient b(data_ports_["gpuhost1"], id, token, second);
  ASSERT_EQ(a.hello_status(), dataplane::kCuSuccess) << a.hello_answer() << Logs();
  ASSERT_EQ(b.hello_status(), dataplane::kCuSuccess) << b.hello_answer();
  ASSERT_EQ(a.Alloc(1 << 20), dataplane::kCuSuccess);
  auto workers = WorkersOf(pids_["gpuhost1"]);
  ASSERT_EQ(workers.size(), 2u) << Logs();  // one per GPU of the lease
  const uid_t nobody = static_cast<uid_t>(std::stoul(testing_env::Run("id -u nobody")));
  for (const auto& [pid, uid] : workers) EXPECT_EQ(uid, nobody) << "worker " << pid;
  // A second process of the same lease on the same GPU joins that GPU's worker.
  DataClient again(data_ports_["gpuhost1"], id, token, first);
  ASSERT_EQ(again.hello_status(), dataplane::kCuSuccess);
  EXPECT_EQ(WorkersOf(pids_["gpuhost1"]).size(), 2u);
  // The worker holds no capability and cannot be traced by its own uid.
  pid_t one = workers.begin()->first;
  std::string status =
      testing_env::Run("grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/" + std::to_string(one) + "/status");
  EXPECT_NE(status.find("CapEff:\t0000000000000000"), std::string::npos) << status;
  EXPECT_NE(status.find("NoNewPrivs:\t1"), std::string::npos) << status;
  EXPECT_NE(status.find("Seccomp:\t2"), std::string::npos) << status;
}

// A recovery's restore stream ("<uuid>#restore", protocol.h) joins the worker its lease
// already has on that GPU, and nothing else: none is started for it, and inside the
// worker (its sandbox) it writes the offering session's memory.
TEST_F(IntegrationTest, ARestoreStreamJoinsOnlyItsLeasesWorkerOnThatGpu) {
  nlohmann::json lease = AgentAndLease(56, 2);
  ASSERT_FALSE(lease.is_null());
  std::string id = lease["id"], token = lease["token"];
  std::string first = lease["gpus"][0]["uuid"], second = lease["gpus"][1]["uuid"];
  const std::string endpoint = "127.0.0.1:" + std::to_string(data_ports_["gpuhost1"]);
  DataClient session(data_ports_["gpuhost1"], id, token, first);
  ASSERT_EQ(session.hello_status(), dataplane::kCuSuccess) << session.hello_answer() << Logs();
  ASSERT_EQ(WorkersOf(pids_["gpuhost1"]).size(), 1u);

  auto elsewhere = transport::RpcClient::Connect(endpoint, second + dataplane::kRestoreLaneSuffix, {id, token, ""});
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_NE(elsewhere.status().message().find("has no session on GPU " + second + " to restore into"),
            std::string::npos)
      << elsewhere.status().message();
  auto forged = transport::RpcClient::Connect(endpoint, first + dataplane::kRestoreLaneSuffix, {id, "00", ""});
  ASSERT_FALSE(forged.ok());
  EXPECT_EQ(forged.status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(WorkersOf(pids_["gpuhost1"]).size(), 1u) << "a restore stream started a worker";

  transport::Reply reply;
  dataplane::MemAllocArgs alloc{1 << 20};
  ASSERT_TRUE(
      session.client()->Call({dataplane::kOpMemAlloc, &alloc, sizeof(alloc), nullptr, 0, nullptr, 0}, &reply).ok());
  dataplane::MemAllocResult allocated{};
  ASSERT_EQ(reply.out.size(), sizeof(allocated));
  std::memcpy(&allocated, reply.out.data(), sizeof(allocated));
  ASSERT_TRUE(session.client()->Call({dataplane::kOpRestoreOffer, nullptr, 0, nullptr, 0, nullptr, 0}, &reply).ok());
  ASSERT_EQ(reply.status, dataplane::kCuSuccess) << reply.out;
  dataplane::RestoreOfferResult offer{};
  ASSERT_EQ(reply.out.size(), sizeof(offer));
  std::memcpy(&offer, reply.out.data(), sizeof(offer));
  auto stream = transport::RpcClient::Connect(endpoint, first + dataplane::kRestoreLaneSuffix, {id, token, ""});
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  dataplane::RestoreAttachArgs attach;
  std::snprintf(attach.ticket, sizeof(attach.ticket), "%s", offer.ticket);
  ASSERT_TRUE(stream.value()
                  ->Call({dataplane::kOpRestoreAttach, &attach, sizeof(attach), nullptr, 0, nullptr, 0}, &reply)
                  .ok());
  ASSERT_EQ(reply.status, dataplane::kCuSuccess) << reply.out;
  std::vector<char> bytes(1 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 11 + 5);
  dataplane::MemcpyHtoDArgs copy{allocated.dptr, bytes.size(), 0};
  ASSERT_TRUE(
      stream.value()
          ->Call({dataplane::kOpMemcpyHtoD, &copy, sizeof(copy), bytes.data(), bytes.size(), nullptr, 0}, &reply)
          .ok());
  EXPECT_EQ(reply.status, dataplane::kCuSuccess) << reply.out;
  std::vector<char> back(bytes.size());
  dataplane::MemcpyDtoHArgs read{allocated.dptr, back.size(), 0};
  ASSERT_TRUE(session.client()
                  ->Call({dataplane::kOpMemcpyDtoH, &read, sizeof(read), nullptr, 0, back.data(), back.size()}, &reply)
                  .ok());
  EXPECT_EQ(reply.status, dataplane::kCuSuccess);
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(WorkersOf(pids_["gpuhost1"]).size(), 1u);
}

// A client that presents no lease at its handshake is refused there, with the reason, and
// no worker is started for it; so is one whose token is wrong.
TEST_F(IntegrationTest, AHandshakeWithoutAGoodCredentialIsRefusedBeforeAnyWorker) {
  setenv("UCX_TLS", "tcp", 1);
  setenv("UCX_NET_DEVICES", "lo", 1);
  StartAgent("gpuhost1", "rack1");
  ASSERT_TRUE(Eventually([&] { return State("gpuhost1:0") == "IDLE"; })) << Logs();
  std::string uuid = Gpu("gpuhost1:0")["uuid"];
  std::string endpoint = "127.0.0.1:" + std::to_string(data_ports_["gpuhost1"]);
  auto anonymous = transport::RpcClient::Connect(endpoint, uuid);
  ASSERT_FALSE(anonymous.ok());
  EXPECT_EQ(anonymous.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(anonymous.status().message().find("no lease credential"), std::string::npos)
      << anonymous.status().message();
  auto forged = transport::RpcClient::Connect(endpoint, uuid, {"L-nonexistent", "00", ""});
  ASSERT_FALSE(forged.ok());
  EXPECT_EQ(forged.status().code(), Status::Code::kPermissionDenied);
  auto ticket = transport::RpcClient::Connect(endpoint, uuid, {"", "", std::string(64, 'a')});
  ASSERT_FALSE(ticket.ok());
  EXPECT_NE(ticket.status().message().find("no such handoff ticket"), std::string::npos);
  EXPECT_TRUE(WorkersOf(pids_["gpuhost1"]).empty());
}

// 300 idle connections from one address (no credential, nothing sent) take at most 64
// handshake slots, each for at most 2 s: a real client of the same address still gets its
// session, the library trying again with backoff.
TEST_F(IntegrationTest, IdleConnectionsDoNotStarveAClientsHandshake) {
  nlohmann::json lease = AgentAndLease(55, 1);
  ASSERT_FALSE(lease.is_null());
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    auto fd = transport::ConnectTcp("127.0.0.1:" + std::to_string(data_ports_["gpuhost1"]), 1000);
    if (fd.ok()) idle.push_back(fd.value());
  }
  EXPECT_GE(idle.size(), 200u);
  auto started = std::chrono::steady_clock::now();
  DataClient client(data_ports_["gpuhost1"], lease["id"], lease["token"], lease["gpus"][0]["uuid"]);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (int fd : idle) close(fd);
  std::printf("a client's session started %.1f s into a crowd of %zu idle connections\n", seconds, idle.size());
  ASSERT_EQ(client.hello_status(), dataplane::kCuSuccess) << client.hello_answer() << Logs();
  EXPECT_EQ(client.Alloc(4096), dataplane::kCuSuccess);
  EXPECT_LT(seconds, 8.0);
}

// A worker that dies (a crash, a limit, SIGKILL) is its tenant's fault: its client loses the
// connection, the GPU stays healthy and leased, and the lease's next connection gets a new
// worker.
TEST_F(IntegrationTest, AWorkerThatDiesIsATenantFaultNotAGpuFault) {
  nlohmann::json lease = AgentAndLease(51, 1);
  ASSERT_FALSE(lease.is_null());
  std::string id = lease["id"], token = lease["token"];
  std::string uuid = lease["gpus"][0]["uuid"];
  std::string gpu_id = lease["gpus"][0]["id"];
  DataClient victim(data_ports_["gpuhost1"], id, token, uuid);
  ASSERT_EQ(victim.hello_status(), dataplane::kCuSuccess) << Logs();
  auto workers = WorkersOf(pids_["gpuhost1"]);
  ASSERT_EQ(workers.size(), 1u);
  kill(workers.begin()->first, SIGKILL);
  EXPECT_EQ(victim.Alloc(4096), -1);                     // the connection went with the process
  std::this_thread::sleep_for(std::chrono::seconds(3));  // a heartbeat or two
  EXPECT_EQ(State(gpu_id), "LEASED") << Gpu(gpu_id).dump();
  EXPECT_NE(Logs().find("the tenant's fault, the GPU stays healthy"), std::string::npos) << Logs();
  // gpupoold has it as an event of the lease, reported by the GPU's agent.
  EXPECT_TRUE(Eventually(
      [&] {
        Result<nlohmann::json> events = client_->Get("/v1/events?job=51");
        if (!events.ok()) return false;
        for (const auto& e : (*events)["events"]) {
          if (e["type"] == "tenant_fault") return true;
        }
        return false;
      },
      5000))
      << Logs();
  DataClient next(data_ports_["gpuhost1"], id, token, uuid);
  ASSERT_EQ(next.hello_status(), dataplane::kCuSuccess) << next.hello_answer();
  EXPECT_EQ(next.Alloc(4096), dataplane::kCuSuccess);
}

// An endless kernel is the tenant's: it fails no GPU. When the lease ends, its worker is
// ended within the grace, the agent spins no thread for it, and the GPU serves the next
// lease within seconds.
TEST_F(IntegrationTest, AnEndlessKernelEndsWithItsLeaseAndFailsNoGpu) {
  setenv("UCX_TLS", "tcp", 1);
  setenv("UCX_NET_DEVICES", "lo", 1);
  StartAgent("gpuhost1", "rack1");
  ASSERT_TRUE(Eventually([&] { return State("gpuhost1:0") == "IDLE" && State("gpuhost1:1") == "IDLE"; })) << Logs();
  auto acquire = [&](int job) {
    Result<nlohmann::json> lease =
        client_->Post("/v1/leases", {{"job_id", job}, {"request", {{{"pool", "a100"}, {"count", 2}}}}, {"ttl", 600}});
    EXPECT_TRUE(lease.ok());
    return lease.ok() ? (*lease)["lease"] : nlohmann::json();
  };
  nlohmann::json lease = acquire(52);
  ASSERT_FALSE(lease.is_null());
  std::string id = lease["id"], token = lease["token"], uuid = lease["gpus"][0]["uuid"];
  std::string gpu_id = lease["gpus"][0]["id"];
  DataClient spinner(data_ports_["gpuhost1"], id, token, uuid);
  ASSERT_EQ(spinner.hello_status(), dataplane::kCuSuccess) << Logs();
  ASSERT_EQ(spinner.LoadPtx(1, kEndlessPtx, "spin"), dataplane::kCuSuccess) << Logs();
  ASSERT_TRUE(spinner.StartKernel(1));
  // Longer than hang_timeout (2 s): a kernel that runs on is not a hung GPU.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  EXPECT_EQ(State(gpu_id), "LEASED");
  auto workers = WorkersOf(pids_["gpuhost1"]);
  ASSERT_EQ(workers.size(), 1u);
  const pid_t spinning = workers.begin()->first;

  ASSERT_TRUE(client_->Post("/v1/leases/release", {{"id", id}}).ok());
  auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return kill(spinning, 0) != 0; }, 8000)) << Logs();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - released).count();
  std::printf("the endless kernel's worker ended %.1f s after the release\n", seconds);
  EXPECT_LT(seconds, 5.0);
  // Nothing of it runs on in the agent.
  double before = CpuSeconds(pids_["gpuhost1"]);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LT(CpuSeconds(pids_["gpuhost1"]) - before, 0.5);
  EXPECT_NE(State(gpu_id), "FAILED");

  nlohmann::json next = acquire(53);
  ASSERT_FALSE(next.is_null());
  std::string next_uuid;
  for (const auto& gpu : next["gpus"]) {
    if (gpu["uuid"] == uuid) next_uuid = uuid;
  }
  ASSERT_EQ(next_uuid, uuid) << next.dump();
  DataClient successor(data_ports_["gpuhost1"], next["id"], next["token"], uuid);
  ASSERT_EQ(successor.hello_status(), dataplane::kCuSuccess) << successor.hello_answer() << Logs();
  EXPECT_EQ(successor.Alloc(1 << 20), dataplane::kCuSuccess);
}

// A module of tens of thousands of entries takes longer to load than hang_timeout, with no
// progress counted meanwhile: the watchdog's stall leads to a probe on a fresh session,
// which passes, so the GPU is not failed (issue 36: such a load once failed 3 GPUs).
TEST_F(IntegrationTest, ASlowModuleLoadIsNotAHungGpu) {
  nlohmann::json lease = AgentAndLease(56, 1);
  ASSERT_FALSE(lease.is_null());
  std::string gpu_id = lease["gpus"][0]["id"];
  DataClient client(data_ports_["gpuhost1"], lease["id"], lease["token"], lease["gpus"][0]["uuid"]);
  ASSERT_EQ(client.hello_status(), dataplane::kCuSuccess) << Logs();
  std::string ptx = ".version 7.0\n.target sm_80\n.address_size 64\n";
  for (int i = 0; i < kSlowModuleEntries; ++i) {
    ptx += ".visible .entry k" + std::to_string(i) + "()\n{\n  ret;\n}\n";
  }
  auto started = std::chrono::steady_clock::now();
  ASSERT_EQ(client.LoadPtx(1, ptx, "k0"), dataplane::kCuSuccess) << Logs();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("a module of %d entries loaded in %.1f s (hang_timeout 2 s)\n", kSlowModuleEntries, seconds);
  ASSERT_GT(seconds, 3.0) << "the load was too fast to stall the watchdog: raise kSlowModuleEntries";
  EXPECT_TRUE(Eventually([&] { return Logs().find("a probe on a fresh session passed") != std::string::npos; }, 5000))
      << Logs();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // a heartbeat or two
  EXPECT_EQ(State(gpu_id), "LEASED") << Gpu(gpu_id).dump();
  EXPECT_EQ(Logs().find("reported FAILED"), std::string::npos) << Logs();
}

// A GPU that truly hangs (the sim's injected hang) is still found: no progress, and the
// probe on a fresh session does not finish, so the GPU is reported FAILED.
TEST_F(IntegrationTest, AHungGpuFailsItsProbeAndIsReportedFailed) {
  nlohmann::json lease = AgentAndLease(54, 1);
  ASSERT_FALSE(lease.is_null());
  const int control = control_port_;
  std::string id = lease["id"], token = lease["token"];
  std::string uuid = lease["gpus"][0]["uuid"];
  std::string gpu_id = lease["gpus"][0]["id"];
  int index = lease["gpus"][0]["index"];
  DataClient client(data_ports_["gpuhost1"], id, token, uuid);
  ASSERT_EQ(client.hello_status(), dataplane::kCuSuccess) << Logs();
  auto f = Call(control, "POST", "/v1/faults", R"({"index":)" + std::to_string(index) + R"(,"mode":"hang"})");
  ASSERT_EQ(f.status, 200) << f.body.dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the workers see the fault
  std::thread blocked([&] { client.Alloc(4096); });             // waits on the hung GPU
  bool failed = Eventually([&] { return State(gpu_id) == "FAILED"; }, 15000);
  Call(control, "POST", "/v1/faults", R"({"index":)" + std::to_string(index) + R"(,"mode":"clear"})");
  blocked.join();
  ASSERT_TRUE(failed) << Gpu(gpu_id).dump() << Logs();
  EXPECT_NE(Logs().find("the health probe on a fresh session failed"), std::string::npos) << Logs();
}

}  // namespace
}  // namespace gpupool::agentd

namespace gpupool::agentd {
namespace {

// The cgroup directories of process `pid` that hold its memory and pids controllers (v1:
// one per hierarchy; v2: the one group), as /proc/PID/cgroup names them.
std::vector<std::string> CgroupDirsOf(pid_t pid) {
  std::vector<std::string> dirs;
  std::istringstream lines(testing_env::ReadFile("/proc/" + std::to_string(pid) + "/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (controllers == "memory" || controllers == "pids") dirs.push_back("/sys/fs/cgroup/" + controllers + path);
    if (controllers.empty() && path.find("/worker-") != std::string::npos) {
      dirs.push_back("/sys/fs/cgroup" + path);
    }
  }
  return dirs;
}

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Issue 36: each worker runs in a cgroup of its own below the agent's, with its memory limit
// and a cap on tasks, made before it reads a tenant byte and removed when it is reaped.
TEST_F(IntegrationTest, EachWorkerRunsInACgroupOfItsOwn) {
  AddAgentSettings("  worker_cgroup = \"required\";\n  worker_memory = \"512M\";\n");
  nlohmann::json lease = AgentAndLease(54, 1);
  ASSERT_FALSE(lease.is_null());
  std::string id = lease["id"], token = lease["token"], uuid = lease["gpus"][0]["uuid"];
  DataClient a(data_ports_["gpuhost1"], id, token, uuid);
  ASSERT_EQ(a.hello_status(), dataplane::kCuSuccess) << a.hello_answer() << Logs();
  auto workers = WorkersOf(pids_["gpuhost1"]);
  ASSERT_EQ(workers.size(), 1u);
  const pid_t worker = workers.begin()->first;
  const std::string name = "/worker-" + std::to_string(worker);
  std::vector<std::string> dirs = CgroupDirsOf(worker);
  ASSERT_FALSE(dirs.empty()) << testing_env::ReadFile("/proc/" + std::to_string(worker) + "/cgroup");
  bool memory_checked = false, pids_checked = false;
  for (const std::string& dir : dirs) {
    EXPECT_EQ(dir.substr(dir.size() - name.size()), name) << dir;
    for (const char* file : {"/memory.limit_in_bytes", "/memory.max"}) {
      std::string limit = Trimmed(testing_env::ReadFile(dir + file));
      if (limit.empty()) continue;
      EXPECT_EQ(limit, std::to_string(uint64_t{512} << 20)) << dir << file;
      memory_checked = true;
    }
    std::string tasks = Trimmed(testing_env::ReadFile(dir + "/pids.max"));
    if (!tasks.empty()) {
      EXPECT_EQ(tasks, "1024") << dir;
      pids_checked = true;
    }
  }
  EXPECT_TRUE(memory_checked && pids_checked);
  EXPECT_NE(Logs().find("session workers: cgroup v"), std::string::npos) << Logs();
  ASSERT_EQ(a.Alloc(1 << 20), dataplane::kCuSuccess);
  // The worker goes with its lease (after the handoff window of an idle session: a new
  // lease on its GPU ends it at once), and its groups with it.
  ASSERT_TRUE(client_->Post("/v1/leases/release", {{"id", id}}).ok());
  Result<nlohmann::json> next =
      client_->Post("/v1/leases", {{"job_id", 55}, {"request", {{{"pool", "a100"}, {"count", 2}}}}, {"ttl", 600}});
  ASSERT_TRUE(next.ok()) << next.status().message();
  DataClient successor(data_ports_["gpuhost1"], (*next)["lease"]["id"], (*next)["lease"]["token"], uuid);
  ASSERT_EQ(successor.hello_status(), dataplane::kCuSuccess) << successor.hello_answer() << Logs();
  ASSERT_TRUE(Eventually([&] { return kill(worker, 0) != 0; }, 5000));
  EXPECT_TRUE(Eventually(
      [&] {
        for (const std::string& dir : dirs) {
          if (access(dir.c_str(), F_OK) == 0) return false;
        }
        return true;
      },
      3000))
      << dirs.front();
}

// A worker past its memory limit (its cgroup's) or its CPU time (RLIMIT_CPU) is ended by
// the kernel: the tenant's fault, said so with the limit, and the GPU stays LEASED.
TEST_F(IntegrationTest, AWorkerPastItsLimitsIsATenantFault) {
  AddAgentSettings(
      "  worker_cgroup = \"required\";\n  worker_memory = \"256M\";\n"
      "  worker_cpu_seconds = 3;\n");
  nlohmann::json lease = AgentAndLease(56, 2);
  ASSERT_FALSE(lease.is_null());
  std::string id = lease["id"], token = lease["token"];
  std::string hog_uuid = lease["gpus"][0]["uuid"], spin_uuid = lease["gpus"][1]["uuid"];
  DataClient hog(data_ports_["gpuhost1"], id, token, hog_uuid);
  ASSERT_EQ(hog.hello_status(), dataplane::kCuSuccess) << hog.hello_answer() << Logs();
  EXPECT_EQ(hog.AllocAndFill(uint64_t{1} << 30), -1);  // its worker is killed under it
  DataClient spinner(data_ports_["gpuhost1"], id, token, spin_uuid);
  ASSERT_EQ(spinner.hello_status(), dataplane::kCuSuccess) << spinner.hello_answer() << Logs();
  ASSERT_EQ(spinner.LoadPtx(1, kEndlessPtx, "spin"), dataplane::kCuSuccess) << Logs();
  ASSERT_TRUE(spinner.StartKernel(1));
  EXPECT_TRUE(Eventually([&] { return Logs().find("its CPU time limit of 3 s") != std::string::npos; }, 15000))
      << Logs();
  EXPECT_NE(Logs().find("its cgroup's memory limit of 256 MiB"), std::string::npos) << Logs();
  EXPECT_EQ(State(lease["gpus"][0]["id"]), "LEASED");
  EXPECT_EQ(State(lease["gpus"][1]["id"]), "LEASED");
  DataClient next(data_ports_["gpuhost1"], id, token, hog_uuid);
  ASSERT_EQ(next.hello_status(), dataplane::kCuSuccess) << next.hello_answer();
  EXPECT_EQ(next.Alloc(1 << 20), dataplane::kCuSuccess);
}

}  // namespace
}  // namespace gpupool::agentd

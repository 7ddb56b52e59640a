// kOpGpuStatus (protocol.h), what the job's libnvidia-ml.so.1 asks a GPU's agent: its
// utilisation as the sim measures it (device::BusyMeter), its driver, and the processes
// of the asking session's own lease. Two leases share one data-path server (an agent with
// several GPUs): neither sees the other's sessions, also when one takes the other's GPU;
// a session that is not attached learns nothing; malformed requests are refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "remote/dataplane/server.h"
#include "remote/device/activity.h"
#include "remote/device/device_kind.h"
#include "remote/devices/sim/sim_kind.h"
#include "remote/protocol/protocol.h"
#include "remote/transport/rpc_client.h"
#include "tests/remote/test_backend.h"

namespace gpupool::dataplane {
namespace {

using device::BusyMeter;
using transport::Reply;
using transport::Request;
using transport::RpcClient;

constexpr int64_t kMs = 1'000'000;

TEST(BusyMeterTest, CountsOnlyThePartOfEachSpanInsideThePeriod) {
  const int64_t t0 = 100'000 * kMs;
  BusyMeter meter(t0);
  // Kernels 300 ms of the last second; a copy of 100 ms; a kernel that ran 1.5 s ago.
  meter.Add(BusyMeter::kKernels, t0 + 1000 * kMs, t0 + 1500 * kMs);  // outside the period
  meter.Add(BusyMeter::kKernels, t0 + 2000 * kMs, t0 + 2300 * kMs);
  meter.Add(BusyMeter::kCopies, t0 + 2500 * kMs, t0 + 2600 * kMs);
  BusyMeter::Reading reading = meter.Read(t0 + 3000 * kMs);
  EXPECT_EQ(reading.window_ns, 1000 * kMs);
  EXPECT_EQ(reading.kernels_percent, 30u);
  EXPECT_EQ(reading.copies_percent, 10u);
  // A kernel that began before the period counts only its part inside it: 400 of 1000 ms.
  meter.Add(BusyMeter::kKernels, t0 + 3000 * kMs, t0 + 4400 * kMs);
  reading = meter.Read(t0 + 5000 * kMs);
  EXPECT_EQ(reading.kernels_percent, 40u);
  EXPECT_EQ(reading.copies_percent, 0u);
  // Idle since: nothing.
  reading = meter.Read(t0 + 9000 * kMs);
  EXPECT_EQ(reading.kernels_percent, 0u);
  // Busy the whole period: 100, never more.
  meter.Add(BusyMeter::kKernels, t0 + 9000 * kMs, t0 + 20000 * kMs);
  EXPECT_EQ(meter.Read(t0 + 20000 * kMs).kernels_percent, 100u);
  // A young meter's window is its age.
  BusyMeter young(t0);
  young.Add(BusyMeter::kCopies, t0, t0 + 50 * kMs);
  reading = young.Read(t0 + 100 * kMs);
  EXPECT_EQ(reading.window_ns, 100 * kMs);
  EXPECT_EQ(reading.copies_percent, 50u);
  // Spans that end before they start, or at negative times, change nothing.
  young.Add(BusyMeter::kCopies, t0 + 90 * kMs, t0 + 10 * kMs);
  young.Add(BusyMeter::kCopies, -5, -1);
  EXPECT_EQ(young.Read(t0 + 100 * kMs).copies_percent, 50u);
}

// Spans read the coarse clock (a tick of 1-4 ms): launches far shorter than a tick, half
// of the wall time, still read as about half (each crossing of a tick counts a whole tick),
// and the coarse clock is steady_clock's, behind it by at most a tick.
TEST(BusyMeterTest, ShortSpansOnTheCoarseClockAddUpToTheirTime) {
  const int64_t exact = BusyMeter::NowNs();
  const int64_t coarse = BusyMeter::CoarseNowNs();
  EXPECT_LE(coarse, BusyMeter::NowNs());
  EXPECT_GT(coarse, exact - 50 * kMs);
  BusyMeter meter;
  auto spin = [](int64_t ns) {
    for (const int64_t until = BusyMeter::NowNs() + ns; BusyMeter::NowNs() < until;) {
    }
  };
  int spans = 0;
  for (const int64_t until = BusyMeter::NowNs() + 400 * kMs; BusyMeter::NowNs() < until; ++spans) {
    {
      BusyMeter::Span busy(&meter, BusyMeter::kKernels);
      spin(20'000);  // 20 us busy
    }
    spin(20'000);  // 20 us idle
  }
  const BusyMeter::Reading reading = meter.Read(BusyMeter::NowNs());
  EXPECT_GT(spans, 100);
  EXPECT_GE(reading.kernels_percent, 25u) << spans << " spans";
  EXPECT_LE(reading.kernels_percent, 75u) << spans << " spans";
  EXPECT_EQ(reading.copies_percent, 0u);
}

class GpuStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "lo", 1);
    device::RegisterDeviceKind(devices::MakeSimKind());
    Grant("lease-a", "token-a", 1);
    Grant("lease-b", "token-b", 2);
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.backend = &backend_;
    options.authorize = [this](const std::string& lease, const std::string& token, const std::string& uuid) {
      std::lock_guard<std::mutex> lock(mu_);
      auto found = grants_.find(uuid);
      return found != grants_.end() && found->second.first == lease && found->second.second == token;
    };
    options.authorization_epoch = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return epoch_;
    };
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server.value());
  }

  void Grant(const std::string& lease, const std::string& token, int gpu) {
    std::lock_guard<std::mutex> lock(mu_);
    grants_[testing::TestGpuUuid(gpu)] = {lease, token};
    ++epoch_;
  }

  std::unique_ptr<RpcClient> Connect(int gpu) {
    auto client = RpcClient::Connect("127.0.0.1:" + std::to_string(server_->port()), testing::TestGpuUuid(gpu));
    EXPECT_TRUE(client.ok()) << client.status().message();
    return client.ok() ? std::move(client.value()) : nullptr;
  }

  // An attached session of `lease` on `gpu` whose hello says it is process `pid` of `host`.
  std::unique_ptr<RpcClient> Attach(const char* lease, const char* token, int gpu, uint32_t pid, const char* host,
                                    uint32_t flags = 0) {
    auto client = Connect(gpu);
    if (!client) return nullptr;
    HelloArgs hello;
    EXPECT_EQ(hello.client_pid, static_cast<uint32_t>(getpid()));  // said without being told
    hello.client_pid = pid;
    hello.flags = flags;
    std::snprintf(hello.client_host, sizeof(hello.client_host), "%s", host);
    Reply reply = SayHello(client.get(), hello, lease, token, gpu);
    EXPECT_EQ(reply.status, kCuSuccess) << reply.out;
    return reply.status == kCuSuccess ? std::move(client) : nullptr;
  }

  // The answer to `hello` with the credential of `lease` (`token`) for `gpu`, on `client`.
  Reply SayHello(RpcClient* client, HelloArgs hello, const char* lease, const char* token, int gpu) {
    std::snprintf(hello.lease_id, sizeof(hello.lease_id), "%s", lease);
    std::snprintf(hello.token, sizeof(hello.token), "%s", token);
    std::snprintf(hello.gpu_uuid, sizeof(hello.gpu_uuid), "%s", testing::TestGpuUuid(gpu).c_str());
    Reply reply;
    EXPECT_TRUE(client->Call(Request{kOpHello, &hello, sizeof(hello), nullptr, 0, nullptr, 0}, &reply).ok());
    return reply;
  }

  uint64_t Alloc(RpcClient* client, uint64_t size) {
    MemAllocArgs args{size};
    Reply reply;
    EXPECT_TRUE(client->Call(Request{kOpMemAlloc, &args, sizeof(args), nullptr, 0, nullptr, 0}, &reply).ok());
    EXPECT_EQ(reply.status, kCuSuccess);
    MemAllocResult result{};
    if (reply.out.size() == sizeof(result)) std::memcpy(&result, reply.out.data(), sizeof(result));
    return result.dptr;
  }

  struct Status {
    int32_t cu = -1;
    std::string error;
    GpuStatusResult result;
    std::vector<GpuProcess> processes;
  };
  Status Ask(RpcClient* client, uint32_t max_processes) {
    GpuStatusArgs args;
    args.max_processes = max_processes;
    return AskRaw(client, &args, sizeof(args));
  }
  // `connection_may_close`: the server may close the connection instead of answering.
  Status AskRaw(RpcClient* client, const void* args, size_t size, bool connection_may_close = false) {
    Status status;
    Reply reply;
    const bool sent = client->Call(Request{kOpGpuStatus, args, size, nullptr, 0, nullptr, 0}, &reply).ok();
    if (!sent && connection_may_close) {
      status.error = "connection closed";
      return status;
    }
    EXPECT_TRUE(sent);
    status.cu = reply.status;
    if (reply.status != kCuSuccess) {
      status.error = reply.out;
      return status;
    }
    EXPECT_GE(reply.out.size(), sizeof(GpuStatusResult));
    if (reply.out.size() < sizeof(GpuStatusResult)) return status;
    std::memcpy(&status.result, reply.out.data(), sizeof(status.result));
    const size_t rest = reply.out.size() - sizeof(GpuStatusResult);
    EXPECT_EQ(rest % sizeof(GpuProcess), 0u);
    status.processes.resize(rest / sizeof(GpuProcess));
    std::memcpy(status.processes.data(), reply.out.data() + sizeof(GpuStatusResult),
                status.processes.size() * sizeof(GpuProcess));
    return status;
  }

  // pid -> bytes held, of the processes listed.
  static std::map<uint32_t, uint64_t> Held(const Status& status) {
    std::map<uint32_t, uint64_t> held;
    for (const GpuProcess& process : status.processes) held[process.pid] = process.used_bytes;
    return held;
  }

  testing::TestBackend backend_{3, uint64_t{4} << 30};
  std::mutex mu_;
  std::map<std::string, std::pair<std::string, std::string>> grants_;  // guarded by mu_
  uint64_t epoch_ = 1;                                                 // guarded by mu_
  std::unique_ptr<Server> server_;
};

TEST_F(GpuStatusTest, EachLeaseSeesOnlyItsOwnSessionsOnItsOwnGpu) {
  auto a1 = Attach("lease-a", "token-a", 1, 101, "node-a");
  auto a2 = Attach("lease-a", "token-a", 1, 102, "node-a");
  auto b = Attach("lease-b", "token-b", 2, 201, "node-b");
  // A session that only watches (the job's NVML) is not one of the GPU's processes.
  auto watcher = Attach("lease-a", "token-a", 1, 103, "node-a", kHelloMonitorOnly);
  ASSERT_TRUE(a1 && a2 && b && watcher);
  Alloc(a1.get(), 1 << 20);
  Alloc(a2.get(), 2 << 20);
  Alloc(b.get(), 3 << 20);

  Status seen_by_a = Ask(a1.get(), 16);
  ASSERT_EQ(seen_by_a.cu, kCuSuccess) << seen_by_a.error;
  EXPECT_EQ(seen_by_a.result.process_count, 2u);
  EXPECT_EQ(Held(seen_by_a), (std::map<uint32_t, uint64_t>{{101, 1 << 20}, {102, 2 << 20}}));
  for (const GpuProcess& process : seen_by_a.processes) EXPECT_STREQ(process.host, "node-a");
  // The sim's driver is gpupool's, and it measures utilisation; it has no temperature.
  EXPECT_TRUE(seen_by_a.result.reported & kGpuStatusUtilization);
  EXPECT_TRUE(seen_by_a.result.reported & kGpuStatusDriverVersion);
  EXPECT_FALSE(seen_by_a.result.reported & (kGpuStatusTemperature | kGpuStatusPower));
  EXPECT_EQ(std::string(seen_by_a.result.driver_version).rfind("gpupool-sim ", 0), 0u);
  EXPECT_NE(std::string(seen_by_a.result.why_not), "");

  Status seen_by_b = Ask(b.get(), 16);
  ASSERT_EQ(seen_by_b.cu, kCuSuccess) << seen_by_b.error;
  EXPECT_EQ(seen_by_b.result.process_count, 1u);
  EXPECT_EQ(Held(seen_by_b), (std::map<uint32_t, uint64_t>{{201, 3 << 20}}));

  // Fewer records than processes: the count still says how many there are.
  Status one = Ask(a2.get(), 1);
  ASSERT_EQ(one.cu, kCuSuccess);
  EXPECT_EQ(one.result.process_count, 2u);
  EXPECT_EQ(one.processes.size(), 1u);
  Status none = Ask(a2.get(), 0);
  EXPECT_EQ(none.result.process_count, 2u);
  EXPECT_TRUE(none.processes.empty());

  // A session that leaves is no longer listed.
  a2.reset();
  for (int i = 0; i < 100 && Ask(a1.get(), 16).result.process_count != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Held(Ask(a1.get(), 16)), (std::map<uint32_t, uint64_t>{{101, 1 << 20}}));
}

TEST_F(GpuStatusTest, ALeaseThatTakesAnotherLeasesGpuDoesNotSeeItsSessions) {
  auto a = Attach("lease-a", "token-a", 1, 101, "node-a");
  ASSERT_TRUE(a);
  Alloc(a.get(), 1 << 20);
  Grant("lease-b", "token-b", 1);  // gpupoold gave GPU 1 to lease B
  auto b = Attach("lease-b", "token-b", 1, 201, "node-b");
  ASSERT_TRUE(b);
  Status seen_by_b = Ask(b.get(), 16);
  ASSERT_EQ(seen_by_b.cu, kCuSuccess) << seen_by_b.error;
  EXPECT_EQ(Held(seen_by_b), (std::map<uint32_t, uint64_t>{{201, 0}}));
  // A's session was revoked (and its connection closed): it learns nothing more.
  GpuStatusArgs args;
  args.max_processes = 16;
  Status seen_by_a = AskRaw(a.get(), &args, sizeof(args), /*connection_may_close=*/true);
  EXPECT_NE(seen_by_a.cu, kCuSuccess);
  EXPECT_TRUE(seen_by_a.processes.empty());
}

TEST_F(GpuStatusTest, OnlyAnAttachedSessionMayAsk) {
  auto b = Attach("lease-b", "token-b", 2, 201, "node-b");
  ASSERT_TRUE(b);
  // A connection to GPU 2 that never said hello.
  auto stranger = Connect(2);
  ASSERT_TRUE(stranger);
  Status refused = Ask(stranger.get(), 16);
  EXPECT_EQ(refused.cu, kCuNotPermitted);
  EXPECT_NE(refused.error.find("only a session attached"), std::string::npos) << refused.error;
  // Lease A's credential presented for lease B's GPU is refused at hello; its connection
  // learns nothing either.
  auto forged = Connect(2);
  ASSERT_TRUE(forged);
  EXPECT_EQ(SayHello(forged.get(), HelloArgs{}, "lease-a", "token-a", 2).status, kCuNotPermitted);
}

TEST_F(GpuStatusTest, MalformedRequestsAreRefusedByName) {
  auto a = Attach("lease-a", "token-a", 1, 101, "node-a");
  ASSERT_TRUE(a);
  uint32_t short_args = 4;
  Status status = AskRaw(a.get(), &short_args, sizeof(short_args));
  EXPECT_EQ(status.cu, kCuInvalidValue);
  EXPECT_NE(status.error.find("malformed GPU status request: 4 bytes"), std::string::npos) << status.error;
  GpuStatusArgs args;
  args.reserved = 1;
  status = AskRaw(a.get(), &args, sizeof(args));
  EXPECT_EQ(status.cu, kCuInvalidValue);
  EXPECT_NE(status.error.find("reserved"), std::string::npos) << status.error;
  status = Ask(a.get(), kMaxGpuProcesses + 1);
  EXPECT_EQ(status.cu, kCuInvalidValue);
  EXPECT_NE(status.error.find("at most 1024"), std::string::npos) << status.error;
  status = Ask(a.get(), UINT32_MAX);
  EXPECT_EQ(status.cu, kCuInvalidValue);
  // A hello with flags this server does not know is refused, naming them.
  auto odd = Connect(1);
  ASSERT_TRUE(odd);
  HelloArgs unknown_flags;
  unknown_flags.flags = 0x80;
  Reply reply = SayHello(odd.get(), unknown_flags, "lease-a", "token-a", 1);
  EXPECT_EQ(reply.status, kCuInvalidValue);
  EXPECT_NE(reply.out.find("unknown flags"), std::string::npos) << reply.out;
  // The session goes on.
  EXPECT_EQ(Ask(a.get(), kMaxGpuProcesses).cu, kCuSuccess);
}

TEST_F(GpuStatusTest, MemsetsShowAsMemoryUtilisationAndIdleAsNone) {
  auto a = Attach("lease-a", "token-a", 1, 101, "node-a");
  ASSERT_TRUE(a);
  const uint64_t bytes = uint64_t{256} << 20;
  uint64_t dptr = Alloc(a.get(), bytes);
  // Memsets for about half a second of wall time.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < until) {
    MemsetArgs args{dptr, bytes, 0x11, 1, 0};
    Reply reply;
    ASSERT_TRUE(a->Call(Request{kOpMemset, &args, sizeof(args), nullptr, 0, nullptr, 0}, &reply).ok());
    ASSERT_EQ(reply.status, kCuSuccess);
  }
  Status busy = Ask(a.get(), 0);
  ASSERT_EQ(busy.cu, kCuSuccess);
  EXPECT_GT(busy.result.memory_percent, 10u);
  EXPECT_EQ(busy.result.gpu_percent, 0u);  // no kernel ran
  EXPECT_GE(busy.result.sample_period_ms, 400u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  Status idle = Ask(a.get(), 0);
  ASSERT_EQ(idle.cu, kCuSuccess);
  EXPECT_EQ(idle.result.memory_percent, 0u);
  EXPECT_EQ(idle.result.gpu_percent, 0u);
}

}  // namespace
}  // namespace gpupool::dataplane

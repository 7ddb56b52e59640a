// SimBackend: inventory, stable identities, and every fault mode.
#include "remote/devices/sim/sim_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "common/gpu_models.h"
#include "remote/device/device_kind.h"
#include "remote/device/topology.h"
#include "remote/devices/sim/gpu_identity.h"
#include "remote/devices/sim/sim_kind.h"
#include "remote/worker/device_kinds.h"

namespace gpupool::devices {
namespace {

std::unique_ptr<SimBackend> MakeSim(const std::string& host, std::vector<SimGpuConfig> gpus, int numa = 1) {
  auto r = SimBackend::Create(host, gpus, numa);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r.value());
}

// Waits up to 2 s for `pred`; hang tests must not depend on scheduling luck.
template <typename Pred>
bool Eventually(Pred pred) {
  for (int i = 0; i < 200; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

TEST(SimBackend, DiscoversConfiguredInventoryInOrder) {
  auto sim = MakeSim("gpuhost1", {{"A100-SXM4-80GB", 81920, 2}, {"H100-SXM5-80GB", 81920, 1}, {"L4", 23034, 1}});
  std::vector<device::GpuInfo> gpus = sim->Discover();
  ASSERT_EQ(gpus.size(), 4u);
  EXPECT_EQ(gpus[0].model, "A100-SXM4-80GB");
  EXPECT_EQ(gpus[1].model, "A100-SXM4-80GB");
  EXPECT_EQ(gpus[2].model, "H100-SXM5-80GB");
  EXPECT_EQ(gpus[3].model, "L4");
  EXPECT_EQ(gpus[3].memory_bytes, 23034ULL * 1024 * 1024);
  std::set<std::string> uuids, buses;
  for (size_t i = 0; i < gpus.size(); ++i) {
    EXPECT_EQ(gpus[i].index, static_cast<int>(i));
    EXPECT_TRUE(LooksLikeGpuUuid(gpus[i].uuid)) << gpus[i].uuid;
    uuids.insert(gpus[i].uuid);
    buses.insert(gpus[i].pci_bus_id);
    EXPECT_EQ(sim->Health(i).health, device::Health::kOk);
  }
  EXPECT_EQ(uuids.size(), 4u);
  EXPECT_EQ(buses.size(), 4u);
  EXPECT_EQ(gpus[0].pci_bus_id, "0000:07:00.0");
}

// A known model's compute capability and SM count (common/gpu_models.h) go with the GPU,
// so the sim runs the PTX such a GPU would (an H100 takes compute_90 PTX) and the client
// reports the same figures; an unknown model is an A100 to the sim.
TEST(SimBackend, KnownModelsSimulateTheirComputeCapability) {
  auto sim = MakeSim("h", {{"A100-SXM4-80GB", 81920, 1},
                           {"H100-SXM5-80GB", 81920, 1},
                           {"RTX PRO 6000 Blackwell Server Edition", 97887, 1},
                           {"Mystery-GPU", 1024, 1}});
  std::vector<device::GpuInfo> gpus = sim->Discover();
  ASSERT_EQ(gpus.size(), 4u);
  const int want[4][3] = {{8, 0, 108}, {9, 0, 132}, {12, 0, 188}, {8, 0, 108}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(gpus[i].cc_major, want[i][0]) << gpus[i].model;
    EXPECT_EQ(gpus[i].cc_minor, want[i][1]) << gpus[i].model;
    EXPECT_EQ(gpus[i].multiprocessor_count, want[i][2]) << gpus[i].model;
  }
}

// An H200 is not an H100 to the figures programs read (the client answers device attributes
// from the table): its L2, memory clock and bus width as its driver (580.159) answered them.
TEST(SimBackend, AnH200HasItsOwnMemoryAndL2) {
  const GpuModel* h200 = FindGpuModel("NVIDIA H200");
  const GpuModel* h100 = FindGpuModel("NVIDIA H100 80GB HBM3");
  ASSERT_NE(h200, nullptr);
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(h200->l2_cache_bytes, 62914560);
  EXPECT_EQ(h200->memory_clock_khz, 3201000);
  EXPECT_EQ(h200->memory_bus_width, 6016);
  EXPECT_EQ(h100->l2_cache_bytes, 52428800);
  EXPECT_EQ(h200->multiprocessors, h100->multiprocessors);
}

TEST(SimBackend, EmptyInventoryMeansFourA100) {
  auto sim = MakeSim("h", {});
  std::vector<device::GpuInfo> gpus = sim->Discover();
  ASSERT_EQ(gpus.size(), 4u);
  EXPECT_EQ(gpus[0].model, "A100-SXM4-80GB");
  EXPECT_EQ(gpus[0].memory_bytes, 81920ULL * 1024 * 1024);
}

TEST(SimBackend, UuidsAreStableAcrossRestartsAndDifferBetweenHosts) {
  auto a1 = MakeSim("gpuhost1", {{"A100", 1024, 3}});
  auto a2 = MakeSim("gpuhost1", {{"A100", 1024, 3}});
  auto b = MakeSim("gpuhost2", {{"A100", 1024, 3}});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a1->Discover()[i].uuid, a2->Discover()[i].uuid);
    EXPECT_NE(a1->Discover()[i].uuid, b->Discover()[i].uuid);
  }
  EXPECT_NE(DeterministicGpuUuid("gpuhost1", 0), DeterministicGpuUuid("gpuhost1", 1));
  EXPECT_NE(DeterministicGpuUuid("gpuhost1", 10), DeterministicGpuUuid("gpuhost11", 0));
  std::string u = DeterministicGpuUuid("x", 0);
  EXPECT_EQ(u[4 + 9 + 5], '4');  // version nibble
}

TEST(SimBackend, RejectsBadInventory) {
  EXPECT_FALSE(SimBackend::Create("h", {{"A100", 1024, 0}}, 1).ok());
  EXPECT_FALSE(SimBackend::Create("h", {{"", 1024, 1}}, 1).ok());
  EXPECT_FALSE(SimBackend::Create("h", {{"A100", 0, 1}}, 1).ok());
  auto r = SimBackend::Create("h", {{"A100", 1024, 1}, {"B", 1024, -2}}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sim_gpus[1]"), std::string::npos) << r.status().message();
}

TEST(SimBackend, SpreadsGpusOverNumaNodes) {
  auto sim = MakeSim("h", {{"A100", 1024, 8}}, /*numa=*/2);
  std::vector<device::GpuInfo> gpus = sim->Discover();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(gpus[i].numa_node, 0);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(gpus[i].numa_node, 1);
  EXPECT_EQ(device::SimNumaNode(3, 4, 1), 0);
  EXPECT_GE(device::Topology::Load(false)->NumaNodeCount(), 1);
}

TEST(SimBackend, FailNowMarksFailedAndNotifiesOnce) {
  auto sim = MakeSim("h", {{"A100", 1024, 2}});
  std::atomic<int> notified{0};
  std::atomic<int> last{-1};
  sim->SetHealthListener([&](int i) {
    ++notified;
    last = i;
  });
  ASSERT_TRUE(sim->InjectFault(1, device::Fault{device::FaultMode::kFail, 0, "Xid 79"}).ok());
  EXPECT_EQ(sim->Health(1).health, device::Health::kFailed);
  EXPECT_EQ(sim->Health(1).reason, "Xid 79");
  EXPECT_EQ(sim->Health(0).health, device::Health::kOk);
  EXPECT_EQ(notified.load(), 1);
  EXPECT_EQ(last.load(), 1);
  Status s = sim->BeforeOperation(1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Xid 79"), std::string::npos);
  EXPECT_TRUE(sim->BeforeOperation(0).ok());
  // Failing an already failed GPU is not a new health change.
  ASSERT_TRUE(sim->InjectFault(1, device::Fault{device::FaultMode::kFail, 0, "again"}).ok());
  EXPECT_EQ(notified.load(), 1);
}

TEST(SimBackend, FailAfterCountsExactlyN) {
  for (uint64_t n : {0ULL, 1ULL, 5ULL}) {
    auto sim = MakeSim("h", {{"A100", 1024, 1}});
    std::atomic<int> notified{0};
    sim->SetHealthListener([&](int) { ++notified; });
    ASSERT_TRUE(sim->InjectFault(0, device::Fault{device::FaultMode::kFailAfter, n, ""}).ok());
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(sim->BeforeOperation(0).ok()) << "operation " << i + 1 << " of " << n;
      EXPECT_EQ(sim->Health(0).health, device::Health::kOk);
    }
    EXPECT_EQ(notified.load(), 0);
    EXPECT_FALSE(sim->BeforeOperation(0).ok()) << "operation " << n + 1 << " should fail";
    EXPECT_EQ(sim->Health(0).health, device::Health::kFailed);
    EXPECT_NE(sim->Health(0).reason.find("after " + std::to_string(n)), std::string::npos);
    EXPECT_EQ(notified.load(), 1);
    EXPECT_FALSE(sim->BeforeOperation(0).ok());
    EXPECT_EQ(sim->OperationCount(0), n + 2);
  }
}

TEST(SimBackend, HangBlocksUntilCleared) {
  auto sim = MakeSim("h", {{"A100", 1024, 2}});
  ASSERT_TRUE(sim->InjectFault(0, device::Fault{device::FaultMode::kHang, 0, ""}).ok());
  auto op = std::async(std::launch::async, [&] { return sim->BeforeOperation(0); });
  ASSERT_TRUE(Eventually([&] { return sim->HungCalls(0) == 1; }));
  EXPECT_EQ(op.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  EXPECT_TRUE(sim->BeforeOperation(1).ok());  // other GPUs are not affected
  ASSERT_TRUE(sim->InjectFault(0, device::Fault{}).ok());
  ASSERT_EQ(op.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  EXPECT_TRUE(op.get().ok());
  EXPECT_EQ(sim->HungCalls(0), 0);
  EXPECT_EQ(sim->CurrentFault(0).mode, device::FaultMode::kNone);
}

TEST(SimBackend, HangThenFailReturnsTheFailure) {
  auto sim = MakeSim("h", {{"A100", 1024, 1}});
  ASSERT_TRUE(sim->InjectFault(0, device::Fault{device::FaultMode::kHang, 0, ""}).ok());
  auto op = std::async(std::launch::async, [&] { return sim->BeforeOperation(0); });
  ASSERT_TRUE(Eventually([&] { return sim->HungCalls(0) == 1; }));
  ASSERT_TRUE(sim->InjectFault(0, device::Fault{device::FaultMode::kFail, 0, "Xid 119"}).ok());
  ASSERT_EQ(op.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  Status s = op.get();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Xid 119"), std::string::npos);
}

TEST(SimBackend, StopReleasesHungCalls) {
  auto sim = MakeSim("h", {{"A100", 1024, 1}});
  ASSERT_TRUE(sim->InjectFault(0, device::Fault{device::FaultMode::kHang, 0, ""}).ok());
  auto op = std::async(std::launch::async, [&] { return sim->BeforeOperation(0); });
  ASSERT_TRUE(Eventually([&] { return sim->HungCalls(0) == 1; }));
  sim->Stop();
  ASSERT_EQ(op.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  Status s = op.get();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
}

TEST(SimBackend, ClearRecoversAFailedGpu) {
  auto sim = MakeSim("h", {{"A100", 1024, 1}});
  std::atomic<int> notified{0};
  sim->SetHealthListener([&](int) { ++notified; });
  sim->ReportFailure(0, "CUDA error 214");
  EXPECT_EQ(sim->Health(0).health, device::Health::kFailed);
  EXPECT_EQ(sim->Health(0).reason, "CUDA error 214");
  ASSERT_TRUE(sim->InjectFault(0, device::Fault{}).ok());
  EXPECT_EQ(sim->Health(0).health, device::Health::kOk);
  EXPECT_TRUE(sim->BeforeOperation(0).ok());
  EXPECT_EQ(notified.load(), 2);  // failed, then recovered
}

TEST(SimBackend, BadIndexIsAnError) {
  auto sim = MakeSim("h", {{"A100", 1024, 2}});
  EXPECT_EQ(sim->InjectFault(2, device::Fault{device::FaultMode::kFail, 0, ""}).code(), Status::Code::kNotFound);
  EXPECT_EQ(sim->InjectFault(-1, device::Fault{device::FaultMode::kFail, 0, ""}).code(), Status::Code::kNotFound);
  EXPECT_FALSE(sim->BeforeOperation(7).ok());
  EXPECT_EQ(sim->Health(0).health, device::Health::kOk);
  EXPECT_EQ(sim->Health(1).health, device::Health::kOk);
}

TEST(SimBackend, ConcurrentOperationsAreCountedExactly) {
  auto sim = MakeSim("h", {{"A100", 1024, 1}});
  ASSERT_TRUE(sim->InjectFault(0, device::Fault{device::FaultMode::kFailAfter, 1000, ""}).ok());
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 300; ++i) (sim->BeforeOperation(0).ok() ? ok : failed)++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 1000);
  EXPECT_EQ(failed.load(), 200);
}

TEST(Factory, MakesSimAndRejectsUnknownNames) {
  worker::RegisterDeviceKinds();  // as the agent's main does
  AgentConfig config;
  config.host = "gpuhost9";
  config.sim_gpus = {{"A100", 1024, 2}};
  auto sim = device::OpenBackend("sim", config);
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  EXPECT_EQ(sim.value()->name(), "sim");
  EXPECT_EQ(sim.value()->Discover()[0].uuid, DeterministicGpuUuid("gpuhost9", 0));
  auto bad = device::OpenBackend("tpu", config);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown backend 'tpu' (expected sim or cuda)");
}

TEST(Factory, CudaBackendFailsCleanlyWithoutADriver) {
  // This machine (and CI) has no NVIDIA driver: the cuda backend must say so in one line.
  worker::RegisterDeviceKinds();
  AgentConfig config;
  auto cuda = device::OpenBackend("cuda", config);
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().message().rfind("cannot load libnvidia-ml.so.1: ", 0), 0u) << cuda.status().message();
  EXPECT_EQ(cuda.status().message().find('\n'), std::string::npos);
}

TEST(Factory, AKindRegisteredTwiceKeepsTheFirst) {
  worker::RegisterDeviceKinds();
  const device::DeviceKind* sim = device::FindDeviceKind("sim");
  ASSERT_NE(sim, nullptr);
  EXPECT_FALSE(device::RegisterDeviceKind(MakeSimKind()));
  worker::RegisterDeviceKinds();
  EXPECT_EQ(device::FindDeviceKind("sim"), sim);  // what was handed out stays valid
  EXPECT_EQ(device::DeviceKindNames(), "sim or cuda");
}

TEST(FaultSpec, ParsesTheCommandLineForms) {
  auto f = device::ParseFaultSpec("fail");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->mode, device::FaultMode::kFail);
  EXPECT_EQ(f->reason, "injected");
  f = device::ParseFaultSpec("fail=Xid 79");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->reason, "Xid 79");
  f = device::ParseFaultSpec("fail-after=12");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->mode, device::FaultMode::kFailAfter);
  EXPECT_EQ(f->ops, 12u);
  EXPECT_EQ(device::ParseFaultSpec("hang")->mode, device::FaultMode::kHang);
  EXPECT_EQ(device::ParseFaultSpec("clear")->mode, device::FaultMode::kNone);
  for (const char* bad :
       {"", "boom", "fail-after", "fail-after=", "fail-after=-1", "fail-after=3x", "hang=5", "fail="}) {
    EXPECT_FALSE(device::ParseFaultSpec(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace gpupool::devices

// Failover (remote/client/failover/failover.h) against real dataplane servers on the sim
// executor: a process's state (allocations at its own addresses, a module with
// a variable, a stream, evolving memory) survives its GPU: the agent going
// away, the GPU failing in band, a failure after a checkpoint; with failover
// off, or over the memory cap, the error stays.
#include "remote/client/failover/failover.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "remote/dataplane/server.h"
#include "remote/device/device_kind.h"
#include "remote/devices/sim/sim_kind.h"
#include "remote/protocol/protocol.h"
#include "remote/transport/rpc_client.h"
#include "tests/remote/test_backend.h"

namespace gpupool::client {
namespace {

namespace dp = dataplane;
using transport::Reply;
using transport::Request;

// step(data, n, k): data[i] = data[i] * 3 + k + i (running it twice shows), and
// thread 0 counts the launch in the module variable `launches`.
const char kStepPtx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".global .align 4 .u32 launches;\n"
    ".visible .entry step(\n"
    "  .param .u64 step_param_0,\n"
    "  .param .u32 step_param_1,\n"
    "  .param .u32 step_param_2\n"
    ")\n"
    "{\n"
    "  .reg .pred %p<3>;\n"
    "  .reg .b32 %r<12>;\n"
    "  .reg .b64 %rd<6>;\n"
    "  ld.param.u64 %rd1, [step_param_0];\n"
    "  ld.param.u32 %r1, [step_param_1];\n"
    "  ld.param.u32 %r2, [step_param_2];\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n"
    "  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "  setp.ne.s32 %p2, %r6, 0;\n"
    "  @%p2 bra $L_skip;\n"
    "  mov.u64 %rd5, launches;\n"
    "  atom.global.add.u32 %r11, [%rd5], 1;\n"
    "$L_skip:\n"
    "  setp.ge.u32 %p1, %r6, %r1;\n"
    "  @%p1 bra $L_end;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.u32 %rd3, %r6, 4;\n"
    "  add.s64 %rd4, %rd2, %rd3;\n"
    "  ld.global.u32 %r7, [%rd4];\n"
    "  mul.lo.s32 %r8, %r7, 3;\n"
    "  add.s32 %r9, %r8, %r2;\n"
    "  add.s32 %r10, %r9, %r6;\n"
    "  st.global.u32 [%rd4], %r10;\n"
    "$L_end:\n"
    "  ret;\n"
    "}\n";

constexpr uint32_t kElements = 4096;
constexpr uint64_t kData = uint64_t{32} << 40;  // the process's own addresses
constexpr uint64_t kGlobals = (uint64_t{32} << 40) + (uint64_t{1} << 30);
constexpr uint64_t kModule = 7, kFunction = 8, kStream = 9;

// One agent: a dataplane server over a test backend whose GPU `gpu` it serves.
// The test backend with the sim's `hang` fault: operations block until Release (bounded,
// so that a broken test cannot hang ctest).
class HangingBackend : public testing::TestBackend {
 public:
  using TestBackend::TestBackend;
  Status BeforeOperation(int index) override {
    std::unique_lock<std::mutex> lock(mu_);
    released_.wait_for(lock, std::chrono::seconds(30), [this] { return !hung_; });
    lock.unlock();
    if (int left = fail_after_.load(); left > 0 && fail_after_.fetch_sub(1) == 1) Fail();
    return TestBackend::BeforeOperation(index);
  }
  // The next `ops` operations succeed; every one after fails (the sim's fail-after fault).
  void FailAfter(int ops) { fail_after_ = ops + 1; }
  void Hang() {
    std::lock_guard<std::mutex> lock(mu_);
    hung_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hung_ = false;
    }
    released_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable released_;
  bool hung_ = false;
  std::atomic<int> fail_after_{0};
};

struct Agent {
  explicit Agent(int gpu, std::chrono::milliseconds hang_timeout = std::chrono::milliseconds(0))
      : backend(gpu + 1, uint64_t{1} << 30), uuid(testing::TestGpuUuid(gpu)) {
    gpupool::device::RegisterDeviceKind(gpupool::devices::MakeSimKind());  // as the agent does
    dp::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.backend = &backend;
    options.hang_timeout = hang_timeout;
    options.on_recovered = [this](const std::string& gpu_uuid, const std::string& lease, const std::string& from,
                                  uint64_t pause_ms, uint64_t restored, uint64_t, uint64_t copied) {
      std::lock_guard<std::mutex> lock(reports_mu);
      reports.push_back(gpu_uuid + " " + lease + " " + from + " " + std::to_string(pause_ms) + " " +
                        std::to_string(restored) + (copied > 0 ? " copied " + std::to_string(copied) : ""));
    };
    options.gpu_failed = [this](const std::string&) { return admin_failed.load(); };
    options.handoff_source = [this](const std::string&) {
      std::lock_guard<std::mutex> lock(reports_mu);
      return handoff_from;
    };
    // Lease L1 holds this GPU until the test moves it (holds = false).
    options.authorize = [this](const std::string& lease, const std::string& token, const std::string&) {
      return lease == "L1" && token == "t1" && holds.load();
    };
    auto started = dp::Server::Start(options);
    EXPECT_TRUE(started.ok()) << started.status().message();
    server = std::move(started.value());
    endpoint = "127.0.0.1:" + std::to_string(server->port());
  }
  ~Agent() { backend.Release(); }
  std::vector<std::string> Reports() {
    std::lock_guard<std::mutex> lock(reports_mu);
    return reports;
  }
  std::mutex reports_mu;
  std::vector<std::string> reports;  // what clients reported with kOpRecovered
  std::atomic<bool> holds{true};
  std::atomic<bool> admin_failed{false};  // gpupoold holds the GPU FAILED (an admin's fail)
  std::string handoff_from;               // where gpupoold says the lease moved from; guarded by reports_mu
  void MovedFrom(const Agent& old) {
    std::lock_guard<std::mutex> lock(reports_mu);
    handoff_from = old.endpoint;
  }
  HangingBackend backend;
  std::string uuid;
  std::string endpoint;
  std::unique_ptr<dp::Server> server;
};

std::unique_ptr<transport::ClientConnection> OpenSession(const GpuLocation& location,
                                                         dp::DeviceDescription* description, std::string* why,
                                                         int32_t* refusal) {
  *refusal = 0;
  auto client = transport::RpcClient::Connect(location.endpoint, location.uuid);
  if (!client.ok()) {
    *why = client.status().message();
    return nullptr;
  }
  dp::HelloArgs hello;
  std::snprintf(hello.lease_id, sizeof(hello.lease_id), "L1");
  std::snprintf(hello.token, sizeof(hello.token), "t1");
  std::snprintf(hello.gpu_uuid, sizeof(hello.gpu_uuid), "%s", location.uuid.c_str());
  Reply reply;
  Status status = client.value()->Call({dp::kOpHello, &hello, sizeof(hello), nullptr, 0, nullptr, 0}, &reply);
  if (!status.ok() || reply.status != 0 || reply.out.size() != sizeof(*description)) {
    *why = status.ok() ? "refused: " + reply.out : status.message();
    *refusal = reply.status;
    return nullptr;
  }
  std::memcpy(description, reply.out.data(), sizeof(*description));
  return std::move(client.value());
}

// A restore stream to `location`'s GPU, as the runtime opens one (the lane key
// "<uuid>#restore"); g_refuse_restore_stream: the second opened fails.
std::atomic<int> g_restore_streams_opened{0};
std::atomic<bool> g_refuse_restore_stream{false};
std::unique_ptr<transport::ClientConnection> OpenRestoreStream(const GpuLocation& location, std::string* why) {
  if (++g_restore_streams_opened == 2 && g_refuse_restore_stream.load()) {
    *why = "no route to the agent (test)";
    return nullptr;
  }
  auto client = transport::RpcClient::Connect(location.endpoint, location.uuid + dp::kRestoreLaneSuffix);
  if (!client.ok()) {
    *why = client.status().message();
    return nullptr;
  }
  return std::move(client.value());
}

bool SnapshotsExpected();

class FailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "lo", 1);
    char dir[] = "/tmp/gpupool-failover-test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    lease_file_ = dir_ + "/lease.json";
    first_ = std::make_unique<Agent>(0);
    second_ = std::make_unique<Agent>(1);
    second_->MovedFrom(*first_);  // what gpupoold tells the second agent after a move
    NameInLease(*first_);
    reference_.assign(kElements, 0);
    for (uint32_t i = 0; i < kElements; ++i) reference_[i] = i * 7 + 1;
  }
  void TearDown() override {
    std::remove(lease_file_.c_str());
    rmdir(dir_.c_str());
  }

  // What spank_gpupool's lease watcher does at a swap: the lease file names the
  // new GPU.
  void NameInLease(const Agent& agent) {
    std::ofstream out(lease_file_ + ".tmp");
    out << R"({"generation": 1, "gpus": [{"uuid": ")" << agent.uuid << R"(", "endpoint": ")" << agent.endpoint
        << R"("}]})";
    out.close();
    ASSERT_EQ(std::rename((lease_file_ + ".tmp").c_str(), lease_file_.c_str()), 0);
  }

  // A session of its own with `agent`, as a client opens one (nullptr, with a failure, where
  // none opens).
  std::unique_ptr<transport::ClientConnection> SessionWith(const Agent& agent) {
    GpuLocation location{agent.uuid, agent.endpoint};
    dp::DeviceDescription description{};
    std::string why;
    int32_t refusal = 0;
    auto session = OpenSession(location, &description, &why, &refusal);
    EXPECT_NE(session, nullptr) << why;
    return session;
  }

  void Open(FailoverConfig config) {
    failover_ = std::make_unique<Failover>(config, 0, 0, lease_file_, OpenSession);
    channel_.location = {first_->uuid, first_->endpoint};
    std::string why;
    int32_t refusal = 0;
    channel_.connection = OpenSession(channel_.location, &channel_.description, &why, &refusal);
    ASSERT_NE(channel_.connection, nullptr) << why;
  }

  // As Open(Replay()), through sessions whose process dies at a poisoned request.
  void OpenDying();

  int32_t Call(uint32_t op, const void* args, size_t args_len, const void* payload = nullptr, size_t payload_len = 0,
               void* result = nullptr, size_t capacity = 0, std::string* out = nullptr) {
    Reply reply;
    Status transport_error;
    bool moved = false;
    int32_t status = failover_->Deliver(&channel_, Failover::Delivery::kCall,
                                        {op, args, args_len, payload, payload_len, result, capacity}, &reply,
                                        &transport_error, &moved);
    if (out != nullptr) *out = reply.out;
    return status;
  }
  int32_t Post(uint32_t op, const void* args, size_t args_len, const void* payload = nullptr, size_t payload_len = 0) {
    Reply reply;
    Status transport_error;
    bool moved = false;
    return failover_->Deliver(&channel_, Failover::Delivery::kPost,
                              {op, args, args_len, payload, payload_len, nullptr, 0}, &reply, &transport_error, &moved);
  }

  // Allocation, module, function, stream, and the initial data.
  void Prepare() {
    dp::MemAllocArgs alloc{kElements * 4, kData};
    std::string out;
    ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc), nullptr, 0, nullptr, 0, &out), 0);
    dp::MemAllocResult allocated{};
    std::memcpy(&allocated, out.data(), sizeof(allocated));
    ASSERT_EQ(allocated.dptr, kData);
    const std::string payload = dp::ModuleLoadPayload({kStepPtx, sizeof(kStepPtx)});
    dp::ModuleLoadArgs load{kModule, kGlobals};
    ASSERT_EQ(Call(dp::kOpModuleLoad, &load, sizeof(load), payload.data(), payload.size(), nullptr, 0, &out), 0);
    dp::ModuleLoadResult loaded{};
    std::memcpy(&loaded, out.data(), sizeof(loaded));
    ASSERT_EQ(loaded.globals_base, kGlobals);
    dp::GetFunctionArgs function{kModule, kFunction, "step"};
    ASSERT_EQ(Call(dp::kOpGetFunction, &function, sizeof(function)), 0);
    dp::StreamArgs stream{kStream, 0, 0};
    ASSERT_EQ(Post(dp::kOpStreamCreate, &stream, sizeof(stream)), 0);
    dp::MemcpyHtoDArgs copy{kData, kElements * 4, kStream};
    ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &copy, sizeof(copy), reference_.data(), kElements * 4), 0);
  }

  // One iteration: a launch on the stream, and a host value copied in (captured
  // now).
  void Step(uint32_t k) {
    struct {
      uint64_t data;
      uint32_t n, k;
    } params{kData, kElements, k};
    dp::LaunchArgs launch{kFunction, {kElements / 256, 1, 1}, {256, 1, 1}, 0, sizeof(params), kStream};
    ASSERT_EQ(Post(dp::kOpLaunch, &launch, sizeof(launch), &params, sizeof(params)), 0);
    for (uint32_t i = 0; i < kElements; ++i) reference_[i] = reference_[i] * 3 + k + i;
    ++launches_;
    uint32_t host_value = k * 1000;
    dp::MemcpyHtoDArgs copy{kData + 4 * (k % kElements), 4, kStream};
    ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &copy, sizeof(copy), &host_value, 4), 0);
    reference_[k % kElements] = host_value;
  }

  int32_t Synchronize() {
    dp::StreamArgs sync{kStream, 0, 0};
    return Call(dp::kOpStreamSynchronize, &sync, sizeof(sync));
  }

  // Page-locked memory of `bytes` as AllocPinned maps it (registered for snapshots), byte i
  // holding fill(i); null where it cannot be mapped. The test removes and unmaps it.
  template <typename Fill>
  static char* PinnedSource(size_t bytes, Fill fill) {
    void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) return nullptr;
    char* source = static_cast<char*>(mapped);
    PinnedSnapshots::Get().AddRegion(source, bytes);
    for (size_t i = 0; i < bytes; ++i) source[i] = fill(i);
    return source;
  }
  // Posts an upload of the whole `range` from `source`.
  int32_t UploadWhole(uint64_t range, const char* source, size_t bytes) {
    dp::MemcpyHtoDArgs copy{range, bytes, 0};
    return Post(dp::kOpMemcpyHtoD, &copy, sizeof(copy), source, bytes);
  }
  // Snapshots on where this process may take them (a failure if SnapshotsExpected says so).
  static bool EnableSnapshots() {
    std::string why;
    const bool on = PinnedSnapshots::Get().Enable(&why);
    EXPECT_TRUE(on || !SnapshotsExpected()) << why;
    return on;
  }
  // Where the snapshot tests put their 1 MiB ranges.
  static constexpr uint64_t kPinnedRanges[4] = {kData + (uint64_t{8} << 20), kData + (uint64_t{10} << 20),
                                                kData + (uint64_t{12} << 20), kData + (uint64_t{14} << 20)};
  // Bytes of `range` that differ from pattern(i, seed), read back through the failover (the
  // first read after a failure recovers); all of them when the read fails.
  template <typename Pattern>
  size_t WrongBytes(uint64_t range, size_t bytes, Pattern pattern, int seed) {
    std::vector<char> back(bytes);
    dp::MemcpyDtoHArgs read{range, bytes, 0};
    if (Call(dp::kOpMemcpyDtoH, &read, sizeof(read), nullptr, 0, back.data(), back.size()) != 0) return bytes;
    size_t wrong = 0;
    for (size_t i = 0; i < bytes; ++i) wrong += back[i] != pattern(i, seed);
    return wrong;
  }
  // Allocates ranges[0, count) of `bytes` each at their addresses, and page-locked sources
  // holding pattern(i, k) for the first `with_sources` of them (PinnedSource: the test
  // removes and unmaps them).
  template <typename Pattern>
  void AllocateWithPinnedSources(const uint64_t* ranges, int count, size_t bytes, Pattern pattern, char** sources,
                                 int with_sources) {
    for (int k = 0; k < count; ++k) {
      dp::MemAllocArgs alloc{bytes, ranges[k]};
      ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
    }
    for (int k = 0; k < with_sources; ++k) {
      sources[k] = PinnedSource(bytes, [&](size_t i) { return pattern(i, k); });
      ASSERT_NE(sources[k], nullptr);
    }
  }

  // The device's data and launch count against the CPU's.
  void ExpectMatchesReference() {
    std::vector<uint32_t> data(kElements);
    dp::MemcpyDtoHArgs read{kData, kElements * 4, 0};
    ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read, sizeof(read), nullptr, 0, data.data(), kElements * 4), 0);
    size_t wrong = 0;
    for (uint32_t i = 0; i < kElements; ++i) wrong += data[i] != reference_[i];
    EXPECT_EQ(wrong, 0u);
    uint32_t counted = 0;
    dp::MemcpyDtoHArgs count{kGlobals, 4, 0};
    ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &count, sizeof(count), nullptr, 0, &counted, 4), 0);
    EXPECT_EQ(counted, launches_);
  }

  std::string dir_, lease_file_;
  std::unique_ptr<Agent> first_, second_;
  std::unique_ptr<Failover> failover_;
  Failover::Channel channel_;
  std::vector<uint32_t> reference_;
  uint32_t launches_ = 0;
};

// As in pinned_snapshots_test.cc: root, or a user snapshots_unprivileged.sh gave a
// descriptor of /dev/userfaultfd.
bool SnapshotsExpected() {
  const char* expected = std::getenv("GPUPOOL_TEST_EXPECT_SNAPSHOTS");
  return geteuid() == 0 || (expected != nullptr && std::string(expected) == "1");
}

FailoverConfig Replay() {
  FailoverConfig config;
  config.checkpoint_interval = std::chrono::milliseconds(0);  // at every synchronisation
  config.recovery_deadline = std::chrono::seconds(20);
  return config;
}

TEST_F(FailoverTest, AGoneAgentIsReplacedAndTheStateGoesOn) {
  Open(Replay());
  Prepare();
  for (uint32_t k = 1; k <= 5; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);  // a checkpoint
  EXPECT_EQ(failover_->checkpoints(), 1u);
  for (uint32_t k = 6; k <= 9; ++k) Step(k);  // in the log only
  first_->server.reset();                     // the agent goes away
  NameInLease(*second_);
  for (uint32_t k = 10; k <= 12; ++k) Step(k);
  EXPECT_EQ(Synchronize(), 0);
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(failover_->recoveries()[0].to.uuid, second_->uuid);
  EXPECT_EQ(channel_.location.uuid, second_->uuid);
  EXPECT_STREQ(channel_.description.uuid, second_->uuid.c_str());
  EXPECT_GE(failover_->recoveries()[0].restored_bytes, kElements * 4u);
  // The new agent heard about it, with the session's own lease and GPU.
  std::vector<std::string> reports = second_->Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].rfind(second_->uuid + " L1 " + first_->uuid + " ", 0), 0u) << reports[0];
}

// The process tells gpupoold that its agent is gone (failover_report.h) and follows the GPU
// gpupoold's answer names, before the lease file (the job's watcher, seconds later) does.
TEST_F(FailoverTest, AGoneAgentIsToldToGpupooldWhoseAnswerIsFollowedBeforeTheLeaseFile) {
  Open(Replay());
  std::vector<std::string> told;
  failover_->SetLostReporter([&](const GpuLocation& lost, int slot, GpuLocation* named, std::string*) {
    told.push_back(lost.uuid + " slot " + std::to_string(slot));
    *named = {second_->uuid, second_->endpoint};
    return true;
  });
  Prepare();
  for (uint32_t k = 1; k <= 5; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  for (uint32_t k = 6; k <= 9; ++k) Step(k);
  first_->server.reset();  // the agent goes away; the lease file still names it
  EXPECT_EQ(Synchronize(), 0);
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(channel_.location.uuid, second_->uuid);
  // Told once, after the agent itself did not answer a new session.
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0], first_->uuid + " slot 0");
  GpuLocation in_file;
  ASSERT_TRUE(ReadLeaseFileSlot(lease_file_, 0, &in_file));
  EXPECT_EQ(in_file.uuid, first_->uuid);
}

// An agent that stops answering while its connections stay open (its host stopped, or cut
// off without a reset: here its GPU's lane hangs and no watchdog runs) leaves a call
// waiting. After a second the process asks gpupoold; while gpupoold's probe finds the agent
// answering (a long kernel) nothing changes, and once it names another GPU the wait ends
// and the process goes on there, without waiting for the lease file.
TEST_F(FailoverTest, ACallWaitingOnASilentAgentAsksGpupooldAndGoesOnWhereItNames) {
  Open(Replay());
  std::vector<std::chrono::steady_clock::time_point> asked;
  failover_->SetLostReporter([&](const GpuLocation& lost, int slot, GpuLocation* named, std::string*) {
    EXPECT_EQ(lost.uuid, first_->uuid);
    EXPECT_EQ(slot, 0);
    asked.push_back(std::chrono::steady_clock::now());
    // gpupoold's probe: the agent answered the first time, not the second.
    *named =
        asked.size() == 1 ? GpuLocation{first_->uuid, first_->endpoint} : GpuLocation{second_->uuid, second_->endpoint};
    return true;
  });
  Prepare();
  for (uint32_t k = 1; k <= 3; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  EXPECT_TRUE(asked.empty());  // quick answers ask nothing
  first_->backend.Hang();
  Step(4);
  const auto began = std::chrono::steady_clock::now();
  EXPECT_EQ(Synchronize(), 0);
  const auto waited = std::chrono::steady_clock::now() - began;
  first_->backend.Release();
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(channel_.location.uuid, second_->uuid);
  ASSERT_EQ(asked.size(), 2u);
  // The first question 0.4 s into the wait (all earlier calls were quick), the next a
  // second after its answer.
  EXPECT_GE(asked[0] - began, std::chrono::milliseconds(350));
  EXPECT_GE(asked[1] - asked[0], std::chrono::milliseconds(1000));
  EXPECT_LT(waited, std::chrono::seconds(10));
  GpuLocation in_file;
  ASSERT_TRUE(ReadLeaseFileSlot(lease_file_, 0, &in_file));
  EXPECT_EQ(in_file.uuid, first_->uuid);  // gpupoold's word, not the file's, moved it
}

// A program whose calls take long (a kernel of 0.8 s) is not suspected at every one of
// them: once such a call was answered, a wait asks gpupoold only after twice as long.
TEST_F(FailoverTest, AfterALongAnsweredCallASilentWaitAsksLater) {
  Open(Replay());
  std::vector<std::chrono::steady_clock::time_point> asked;
  failover_->SetLostReporter([&](const GpuLocation&, int, GpuLocation* named, std::string*) {
    asked.push_back(std::chrono::steady_clock::now());
    *named =
        asked.size() <= 1 ? GpuLocation{first_->uuid, first_->endpoint} : GpuLocation{second_->uuid, second_->endpoint};
    return true;
  });
  Prepare();
  Step(1);
  // A long call, answered: the agent is there (it answered the one question, at 0.4 s).
  first_->backend.Hang();
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    first_->backend.Release();
  });
  EXPECT_EQ(Synchronize(), 0);
  release.join();
  ASSERT_EQ(asked.size(), 1u);
  // Now a wait on an agent that never answers: the question comes after about 1.6 s.
  first_->backend.Hang();
  Step(2);
  const auto began = std::chrono::steady_clock::now();
  EXPECT_EQ(Synchronize(), 0);
  first_->backend.Release();
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_GE(asked[1] - began, std::chrono::milliseconds(1400));
  EXPECT_EQ(channel_.location.uuid, second_->uuid);
  ExpectMatchesReference();
}

// A connection whose session is gone: every request fails as a lost transport does.
class DeadConnection : public transport::ClientConnection {
 public:
  Status Call(const Request&, Reply*) override { return Gone(); }
  Status Post(const Request&) override { return Gone(); }
  Status PostOverlapped(const Request&, const std::function<bool()>&) override { return Gone(); }
  Status Start(const Request&) override { return Gone(); }
  Status Drain(int32_t*) override { return Gone(); }
  void SetAbandonCheck(std::function<std::string()>) override {}
  uint64_t next_sequence() override { return 1; }

 private:
  static Status Gone() { return Status::Unavailable("the session's process is gone"); }
};

// A session lost while its agent still answers (its worker ended, say) is not told to
// gpupoold: the agent opens a new session at once.
TEST_F(FailoverTest, ALostSessionWhoseAgentAnswersIsNotToldToGpupoold) {
  Open(Replay());
  int told = 0;
  failover_->SetLostReporter([&](const GpuLocation&, int, GpuLocation*, std::string*) {
    ++told;
    return false;
  });
  Prepare();
  for (uint32_t k = 1; k <= 3; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  channel_.connection.reset(new DeadConnection());
  EXPECT_EQ(Synchronize(), 0);
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(channel_.location.uuid, first_->uuid);
  EXPECT_EQ(told, 0);
}

// The journal's own copy of uploads (CopyBytes: glibc's memcpy or vector steps, streamed
// for uploads of 4 MiB or more) is exact for any length and any alignment of the source:
// uploads of uneven sizes from odd offsets, logged and then checkpointed or replayed, come
// back byte for byte on the replacement.
TEST_F(FailoverTest, UnevenUnalignedUploadsComeBackByteForByte) {
  Open(Replay());
  // A 1 MiB range (uploads copied in the caches) and a 5 MiB one (streamed: over
  // kStreamedCopy, whose last 64 KiB slice is 5 bytes).
  constexpr uint64_t kSmall = kData + (uint64_t{8} << 20), kSmallBytes = uint64_t{1} << 20;
  constexpr uint64_t kLarge = kData + (uint64_t{16} << 20), kLargeBytes = uint64_t{5} << 20;
  for (const auto [range, bytes] : {std::pair{kSmall, kSmallBytes}, std::pair{kLarge, kLargeBytes}}) {
    dp::MemAllocArgs alloc{bytes, range};
    ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
  }
  std::vector<char> source(kLargeBytes + 64);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<char>(i * 131 + (i >> 9));
  std::vector<char> want_small(kSmallBytes, 0), want_large(kLargeBytes, 0);
  // (range, offset in the range, bytes, offset in the source): over the overlapped-copy
  // threshold, not multiples of 64, sources at odd addresses; the later large upload leaves
  // the earlier one's last slice as it was.
  const std::vector<std::array<uint64_t, 4>> uploads = {
      {kSmall, 0, kSmallBytes, 0},
      {kSmall, 3, 65536 + 61, 5},
      {kLarge, kLargeBytes - (uint64_t{4} << 20) - 12, (uint64_t{4} << 20) + 5, 3},
      {kSmall, 100000, 300001, 33},
      {kSmall, kSmallBytes - 70001, 70001, 63},
      {kLarge, 1001, (uint64_t{4} << 20) + 70001, 61}};
  for (size_t u = 0; u < uploads.size(); ++u) {
    const auto [range, at, bytes, from] = uploads[u];
    dp::MemcpyHtoDArgs copy{range + at, bytes, 0};
    ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &copy, sizeof(copy), source.data() + from, bytes), 0);
    std::vector<char>& want = range == kSmall ? want_small : want_large;
    std::memcpy(want.data() + at, source.data() + from, bytes);
    if (u == 1) {
      dp::StreamArgs sync{0, 0, 0};
      ASSERT_EQ(Call(dp::kOpContextSynchronize, &sync, sizeof(sync)), 0);  // a checkpoint
    }
  }
  first_->server.reset();  // the last four uploads, both large ones, are in the log only
  NameInLease(*second_);
  for (const auto& [range, want] : {std::pair{kSmall, &want_small}, std::pair{kLarge, &want_large}}) {
    std::vector<char> back(want->size());
    dp::MemcpyDtoHArgs read{range, back.size(), 0};
    ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read, sizeof(read), nullptr, 0, back.data(), back.size()), 0);
    size_t wrong = 0;
    for (size_t i = 0; i < back.size(); ++i) wrong += back[i] != (*want)[i];
    EXPECT_EQ(wrong, 0u) << "range at " << range - kData;
  }
  ASSERT_EQ(failover_->recoveries().size(), 1u);
}

// CUDA's semantics of an upload: the GPU holds what the source held at the call. A
// synchronous upload's source may change as soon as the call returns, so the journal copies
// it then; an asynchronous one from page-locked memory the library allocated may change only
// once the program knows it is done (a synchronisation), so the journal holds a small one
// (under 64 KiB) by reference until the next two-way request, and copies a larger one while
// its bytes are in flight, as a synchronous one's. Either way a replay gives the bytes the
// GPU got, not what the program wrote into the source afterwards.
TEST_F(FailoverTest, AnUploadChangedAfterItsCallReplaysTheBytesTheGpuGot) {
  FailoverConfig config = Replay();
  config.checkpoint_interval = std::chrono::hours(1);  // the log alone carries the uploads
  Open(config);
  constexpr uint64_t kBytes = uint64_t{32} << 10;
  const uint64_t* ranges = kPinnedRanges;
  constexpr uint64_t kLarge = uint64_t{1} << 20;  // ranges[3]'s upload
  {
    dp::MemAllocArgs alloc{kLarge, ranges[3]};
    ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
  }
  for (uint64_t range : {ranges[0], ranges[1], ranges[2]}) {
    dp::MemAllocArgs alloc{kBytes, range};
    ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
  }
  auto fill = [](std::vector<char>* bytes, int seed) {
    for (size_t i = 0; i < bytes->size(); ++i) (*bytes)[i] = static_cast<char>(i * 31 + seed);
  };
  auto upload = [&](int which, const std::vector<char>& source, bool held) {
    Reply reply;
    Status transport_error;
    bool moved = false;
    dp::MemcpyHtoDArgs copy{ranges[which], source.size(), 0};
    Request request{dp::kOpMemcpyHtoD, &copy, sizeof(copy), source.data(), source.size(), nullptr, 0};
    request.payload_held_until_sync = held;
    return failover_->Deliver(&channel_, Failover::Delivery::kPost, request, &reply, &transport_error, &moved);
  };
  std::vector<std::vector<char>> sent(4, std::vector<char>(kBytes));
  std::vector<std::vector<char>> source(4, std::vector<char>(kBytes));
  source[3].resize(kLarge);
  for (int which = 0; which < 4; ++which) {
    fill(&source[which], which + 1);
    sent[which] = source[which];
  }
  // A synchronous upload: its source changed as soon as the call returned.
  ASSERT_EQ(upload(0, source[0], false), 0);
  EXPECT_EQ(failover_->held_uploads(), 0u);
  fill(&source[0], 100);
  // An asynchronous one: held until the synchronisation, then its source changed.
  ASSERT_EQ(upload(1, source[1], true), 0);
  EXPECT_EQ(failover_->held_uploads(), 1u);
  dp::StreamArgs sync{0, 0, 0};
  ASSERT_EQ(Call(dp::kOpContextSynchronize, &sync, sizeof(sync)), 0);
  EXPECT_EQ(failover_->held_uploads(), 0u);
  EXPECT_EQ(failover_->checkpoints(), 0u);
  fill(&source[1], 101);
  // A large asynchronous one: copied at its call, not held; its source changed before any
  // synchronisation (which CUDA does not allow) still does not reach the replay.
  ASSERT_EQ(upload(3, source[3], true), 0);
  EXPECT_EQ(failover_->held_uploads(), 0u);
  fill(&source[3], 103);
  // Another, still held when the agent goes away: the recovery copies it from the source,
  // which the program has had no leave to change.
  ASSERT_EQ(upload(2, source[2], true), 0);
  EXPECT_EQ(failover_->held_uploads(), 1u);
  first_->server.reset();
  NameInLease(*second_);
  for (int which = 0; which < 4; ++which) {
    std::vector<char> back(sent[which].size());
    dp::MemcpyDtoHArgs read{ranges[which], back.size(), 0};
    ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read, sizeof(read), nullptr, 0, back.data(), back.size()), 0);
    size_t wrong = 0;
    for (size_t i = 0; i < back.size(); ++i) wrong += back[i] != sent[which][i];
    EXPECT_EQ(wrong, 0u) << "upload " << which;
  }
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(failover_->held_uploads(), 0u);
  // A caller about to free page-locked memory has the held uploads copied first.
  ASSERT_EQ(upload(0, source[0], true), 0);
  EXPECT_EQ(failover_->held_uploads(), 1u);
  failover_->CaptureHeldUploads();
  EXPECT_EQ(failover_->held_uploads(), 0u);
}

// An upload of 64 KiB or more from page-locked memory the library allocated is kept as a
// copy-on-write snapshot of its source (pinned_snapshots.h), not copied at the call. A replay
// still gives the bytes the GPU got: of a source the program wrote afterwards (copied at that
// write), of one it freed (copied at the free), and of one left as it was (copied by the
// recovery itself). Where the process cannot take snapshots, the journal copies them at the
// call, and the replay gives the same bytes.
TEST_F(FailoverTest, UploadsKeptAsSnapshotsReplayTheBytesTheGpuGot) {
  FailoverConfig config = Replay();
  config.checkpoint_interval = std::chrono::hours(1);  // the log alone carries the uploads
  Open(config);
  const bool snapshots = EnableSnapshots();
  constexpr size_t kBytes = size_t{1} << 20;
  const uint64_t* ranges = kPinnedRanges;
  char* sources[3] = {};
  auto pattern = [](size_t i, int seed) { return static_cast<char>(i * 13 + seed * 71 + (i >> 12)); };
  ASSERT_NO_FATAL_FAILURE(AllocateWithPinnedSources(ranges, 3, kBytes, pattern, sources, 3));
  const uint64_t copied = PinnedSnapshots::Get().materialized();
  for (int k = 0; k < 3; ++k) ASSERT_EQ(UploadWhole(ranges[k], sources[k], kBytes), 0);
  EXPECT_EQ(PinnedSnapshots::Get().materialized(), copied) << "nothing copied while nothing was written";
  std::memset(sources[0], 0x6b, kBytes);            // the program's next batch
  PinnedSnapshots::Get().RemoveRegion(sources[1]);  // cuMemFreeHost
  munmap(sources[1], kBytes);
  if (snapshots) EXPECT_EQ(PinnedSnapshots::Get().materialized(), copied + 2);
  first_->server.reset();  // all three uploads are in the log only
  NameInLease(*second_);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(WrongBytes(ranges[k], kBytes, pattern, k), 0u) << "upload " << k;
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  // Upload 2's snapshot was replayed from the program's pages.
  if (snapshots) EXPECT_EQ(PinnedSnapshots::Get().materialized(), copied + 2) << "the replay copied a snapshot";
  EXPECT_EQ(failover_->snapshots_copied(), 0u) << "the replay copied a snapshot";
  for (int k : {0, 2}) {
    PinnedSnapshots::Get().RemoveRegion(sources[k]);
    munmap(sources[k], kBytes);
  }
}

// A checkpoint keeps a range whose last write was a whole upload kept as a snapshot as that
// snapshot: the program's pages are the image, and nothing is copied until they are written
// (then the fault copies them), a device copy reads them, or a recovery sends them.
TEST_F(FailoverTest, CheckpointsKeepWholeUploadSnapshotsAsImagesUncopied) {
  Open(Replay());  // a checkpoint at every synchronisation
  const bool snapshots = EnableSnapshots();
  constexpr size_t kBytes = size_t{1} << 20;
  // 0: written after its checkpoint; 1: left alone; 2: read by a device copy into 3.
  const uint64_t* ranges = kPinnedRanges;
  char* sources[3] = {};
  auto pattern = [](size_t i, int seed) { return static_cast<char>(i * 29 + seed * 53 + (i >> 13)); };
  ASSERT_NO_FATAL_FAILURE(AllocateWithPinnedSources(ranges, 4, kBytes, pattern, sources, 3));
  const uint64_t copied = PinnedSnapshots::Get().materialized();
  for (int k = 0; k < 3; ++k) ASSERT_EQ(UploadWhole(ranges[k], sources[k], kBytes), 0);
  ASSERT_EQ(Call(dp::kOpContextSynchronize, nullptr, 0), 0);
  ASSERT_EQ(failover_->checkpoints(), 1u);
  EXPECT_EQ(failover_->readback_bytes(), 0u);
  EXPECT_EQ(failover_->snapshot_images(), snapshots ? 3u : 0u);
  EXPECT_EQ(PinnedSnapshots::Get().materialized(), copied) << "the checkpoint copied a snapshot image";
  EXPECT_EQ(failover_->snapshots_copied(), 0u);
  EXPECT_EQ(failover_->checkpoint_bytes(), 3 * kBytes);

  std::memset(sources[0], 0x6b, kBytes);  // the program's next batch: the fault copies image 0
  if (snapshots) EXPECT_EQ(PinnedSnapshots::Get().materialized(), copied + 1);
  // A device copy from range 2 needs its image's bytes at the next checkpoint.
  dp::MemcpyDtoDArgs duplicate{ranges[3], ranges[2], kBytes, 0};
  ASSERT_EQ(Post(dp::kOpMemcpyDtoD, &duplicate, sizeof(duplicate)), 0);
  ASSERT_EQ(Call(dp::kOpContextSynchronize, nullptr, 0), 0);
  ASSERT_EQ(failover_->checkpoints(), 2u);
  EXPECT_EQ(failover_->readback_bytes(), 0u) << "the device copy was applied on the host";
  EXPECT_EQ(failover_->snapshot_images(), snapshots ? 2u : 0u);  // 0 (copied by its fault) and 1
  EXPECT_EQ(failover_->snapshots_copied(), snapshots ? 1u : 0u) << "image 2, for the device copy";

  first_->server.reset();  // the agent dies: the checkpoint alone carries every range
  NameInLease(*second_);
  const int seeds[4] = {0, 1, 2, 2};
  for (int k = 0; k < 4; ++k) EXPECT_EQ(WrongBytes(ranges[k], kBytes, pattern, seeds[k]), 0u) << "range " << k;
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(failover_->recoveries()[0].restored_bytes, 4 * kBytes);
  // Image 1 went from the program's pages and stays a snapshot; image 0, copied by its
  // write, went from that copy.
  EXPECT_EQ(failover_->snapshot_images(), snapshots ? 1u : 0u);
  if (snapshots) EXPECT_EQ(PinnedSnapshots::Get().materialized(), copied + 1) << "the recovery copied a snapshot";
  EXPECT_EQ(failover_->snapshots_copied(), snapshots ? 1u : 0u) << "the recovery copied a snapshot";
  for (char* source : sources) {
    PinnedSnapshots::Get().RemoveRegion(source);
    munmap(source, kBytes);
  }
}

// Snapshot images go over restore streams straight from the program's pages, too.
TEST_F(FailoverTest, RestoreStreamsSendSnapshotImagesFromThePages) {
  FailoverConfig config = Replay();
  config.restore_streams_from = 1;
  Open(config);
  g_restore_streams_opened = 0;
  g_refuse_restore_stream = false;
  failover_->SetRestoreStreamOpener(OpenRestoreStream);
  const bool snapshots = EnableSnapshots();
  constexpr size_t kBytes = size_t{1} << 20;
  const uint64_t* ranges = kPinnedRanges;
  char* sources[3] = {};
  auto pattern = [](size_t i, int seed) { return static_cast<char>(i * 31 + seed * 41 + (i >> 12)); };
  ASSERT_NO_FATAL_FAILURE(AllocateWithPinnedSources(ranges, 3, kBytes, pattern, sources, 3));
  for (int k = 0; k < 3; ++k) ASSERT_EQ(UploadWhole(ranges[k], sources[k], kBytes), 0);
  ASSERT_EQ(Call(dp::kOpContextSynchronize, nullptr, 0), 0);  // a checkpoint
  EXPECT_EQ(failover_->snapshot_images(), snapshots ? 3u : 0u);
  const uint64_t copied = PinnedSnapshots::Get().materialized();

  first_->server.reset();
  NameInLease(*second_);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(WrongBytes(ranges[k], kBytes, pattern, k), 0u) << "range " << k;
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(failover_->recoveries()[0].streams, 2u);
  EXPECT_EQ(g_restore_streams_opened.load(), 2);
  EXPECT_EQ(failover_->snapshot_images(), snapshots ? 3u : 0u);
  EXPECT_EQ(PinnedSnapshots::Get().materialized(), copied) << "the recovery copied a snapshot";
  EXPECT_EQ(failover_->snapshots_copied(), 0u);
  for (char* source : sources) {
    PinnedSnapshots::Get().RemoveRegion(source);
    munmap(source, kBytes);
  }
}

// kOpRecovered speaks for the sender's own session: before a hello it is refused, and its
// text is cleaned before it reaches logs and gpupoold.
TEST_F(FailoverTest, RecoveryReportsComeOnlyFromAttachedSessions) {
  auto stranger = transport::RpcClient::Connect(second_->endpoint, second_->uuid);
  ASSERT_TRUE(stranger.ok());
  dp::RecoveredArgs forged{1, 2, 3, "GPU-forged", 0};
  Reply reply;
  ASSERT_TRUE(stranger.value()->Call({dp::kOpRecovered, &forged, sizeof(forged), nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, dp::kCuNotPermitted);
  EXPECT_TRUE(second_->Reports().empty());
  auto attached = SessionWith(*second_);
  ASSERT_NE(attached, nullptr);
  dp::RecoveredArgs odd{5, 6, 7, "GPU-\x01\xff", 0};
  ASSERT_TRUE(attached->Call({dp::kOpRecovered, &odd, sizeof(odd), nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, 0);
  std::vector<std::string> reports = second_->Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0], second_->uuid + " L1 GPU-?? 5 6");
}

TEST_F(FailoverTest, AGpuFailingInBandIsReplacedOnceTheLeaseNamesAnother) {
  Open(Replay());
  Prepare();
  for (uint32_t k = 1; k <= 3; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  for (uint32_t k = 4; k <= 6; ++k) Step(k);
  first_->backend.Fail();  // every later operation answers CUDA_ERROR_ECC_UNCORRECTABLE
  // The lease names the failed GPU a while longer (gpupoold has not swapped
  // yet): the process waits for the swap instead of going back to it.
  std::thread swap([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    NameInLease(*second_);
  });
  EXPECT_EQ(Synchronize(), 0);
  swap.join();
  for (uint32_t k = 7; k <= 8; ++k) Step(k);
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_GE(failover_->recoveries()[0].pause, std::chrono::milliseconds(500));
}

TEST_F(FailoverTest, TwoFailuresInARowWithoutACheckpointBetween) {
  Open(Replay());
  Prepare();
  Step(1);
  first_->server.reset();
  NameInLease(*second_);
  Step(2);
  EXPECT_EQ(Synchronize(),
            0);  // on the second GPU (the log since the start replayed)
  auto third = std::make_unique<Agent>(2);
  second_->backend.Fail();
  NameInLease(*third);
  Step(3);
  EXPECT_EQ(Synchronize(), 0);
  ExpectMatchesReference();
  EXPECT_EQ(failover_->recoveries().size(), 2u);
  EXPECT_EQ(channel_.location.uuid, third->uuid);
}

// The GPU fails in the middle of a checkpoint (after the device went idle, while the first
// range is read back): the previous checkpoint and its log stay whole, and the recovery
// from them is exact.
TEST_F(FailoverTest, AFailureDuringACheckpointKeepsThePreviousOne) {
  Open(Replay());
  Prepare();
  for (uint32_t k = 1; k <= 3; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  ASSERT_EQ(failover_->checkpoints(), 1u);
  // The launches and copies below (6 operations), the application's synchronisation and
  // the checkpoint's own synchronisation succeed; its first read fails. Set before the
  // launches are posted: set after, it missed those the agent had already run (a batch
  // sent while a loaded CI machine held this thread back), and the checkpoint succeeded.
  first_->backend.FailAfter(8);
  for (uint32_t k = 4; k <= 6; ++k) Step(k);
  NameInLease(*second_);
  EXPECT_EQ(Synchronize(), 0);
  EXPECT_EQ(failover_->checkpoints(), 1u);       // the failed one did not count
  EXPECT_TRUE(failover_->recoveries().empty());  // the application's call had succeeded
  for (uint32_t k = 7; k <= 8; ++k) Step(k);
  EXPECT_EQ(Synchronize(), 0);
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_GE(failover_->recoveries()[0].replayed, 6u);
}

// A checkpoint takes what copies from the host, memsets and copies between known ranges
// wrote from the log, on the host; only what a kernel may have written, or a range written
// on two streams, is read back from the GPU. A recovery from such checkpoints is exact.
TEST_F(FailoverTest, CopiesAreCheckpointedFromTheLogAndKernelOutputFromTheGpu) {
  Open(Replay());
  Prepare();  // the data uploaded whole
  ASSERT_EQ(Synchronize(), 0);
  ASSERT_EQ(failover_->checkpoints(), 1u);
  EXPECT_EQ(failover_->readback_bytes(), 0u);
  // A second range: a device copy of the data, then memsets and a host copy into parts.
  constexpr uint64_t kCopy = kData + (uint64_t{1} << 20);
  dp::MemAllocArgs alloc{kElements * 4, kCopy};
  ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
  dp::MemcpyDtoDArgs device_copy{kCopy, kData, kElements * 4, kStream};
  ASSERT_EQ(Post(dp::kOpMemcpyDtoD, &device_copy, sizeof(device_copy)), 0);
  std::vector<uint32_t> copy = reference_;
  dp::MemsetArgs words{kCopy + 64, 100, 0xabcd1234u, 4, kStream};
  ASSERT_EQ(Post(dp::kOpMemset, &words, sizeof(words)), 0);
  for (int i = 16; i < 116; ++i) copy[i] = 0xabcd1234u;
  dp::MemsetArgs halves{kCopy + 1002, 7, 0xbeefu, 2, kStream};
  ASSERT_EQ(Post(dp::kOpMemset, &halves, sizeof(halves)), 0);
  for (int i = 0; i < 7; ++i) std::memcpy(reinterpret_cast<char*>(copy.data()) + 1002 + 2 * i, "\xef\xbe", 2);
  const uint32_t host[3] = {11, 22, 33};
  dp::MemcpyHtoDArgs upload{kCopy + 4 * 300, sizeof(host), kStream};
  ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &upload, sizeof(upload), host, sizeof(host)), 0);
  std::memcpy(&copy[300], host, sizeof(host));
  dp::MemcpyDtoDArgs within{kCopy + 4 * 1000, kCopy + 4 * 290, 4 * 20, kStream};  // within the range
  ASSERT_EQ(Post(dp::kOpMemcpyDtoD, &within, sizeof(within)), 0);
  std::memmove(&copy[1000], &copy[290], 4 * 20);
  ASSERT_EQ(Synchronize(), 0);
  ASSERT_EQ(failover_->checkpoints(), 2u);
  EXPECT_EQ(failover_->readback_bytes(), 0u);  // all of it known from the log
  // A kernel writes the data and the module variable: those are read back, the copy not.
  Step(1);
  ASSERT_EQ(Synchronize(), 0);
  const uint64_t after_kernel = failover_->readback_bytes();
  EXPECT_GE(after_kernel, kElements * 4u);
  EXPECT_LT(after_kernel, 2 * kElements * 4u);
  // The GPU goes: the copy comes back from the images the log made.
  first_->server.reset();
  NameInLease(*second_);
  Step(2);
  EXPECT_EQ(Synchronize(), 0);
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  ExpectMatchesReference();
  std::vector<uint32_t> got(kElements);
  dp::MemcpyDtoHArgs read{kCopy, kElements * 4, 0};
  ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read, sizeof(read), nullptr, 0, got.data(), kElements * 4), 0);
  EXPECT_EQ(got, copy);
  // Two streams write the copy: the order on the GPU is its own, so it is read back.
  const uint64_t before = failover_->readback_bytes();
  const uint32_t first = 5, second = 6;
  dp::MemcpyHtoDArgs on_stream{kCopy + 4 * 500, 4, kStream};
  ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &on_stream, sizeof(on_stream), &first, 4), 0);
  dp::MemcpyHtoDArgs on_default{kCopy + 4 * 501, 4, 0};
  ASSERT_EQ(Call(dp::kOpMemcpyHtoD, &on_default, sizeof(on_default), &second, 4), 0);
  ASSERT_EQ(Synchronize(), 0);
  EXPECT_EQ(failover_->readback_bytes(), before + kElements * 4u);
  ASSERT_EQ(failover_->recoveries().size(), 1u);
}

// Large uploads: their journal copies are made while the bytes are in flight. An
// upload that a later one overwrites before anything may read it leaves the log;
// one that a kernel ran after stays in the log (the kernel may read it on replay)
// but a checkpoint skips it when a later upload overwrote it before a device copy
// read it on the host.
TEST_F(FailoverTest, UploadsOverwrittenBeforeAnyReadAreDroppedOrNotCheckpointed) {
  Open(Replay());
  Prepare();
  constexpr uint64_t kBig = 256 << 10;  // over the overlapped-copy threshold
  constexpr uint64_t kA = kData + (uint64_t{4} << 20), kB = kA + (uint64_t{1} << 20);
  for (uint64_t address : {kA, kB}) {
    dp::MemAllocArgs alloc{kBig, address};
    ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
  }
  std::vector<std::vector<char>> uploads(4, std::vector<char>(kBig));
  for (size_t u = 0; u < uploads.size(); ++u) {
    for (size_t i = 0; i < kBig; ++i) uploads[u][i] = static_cast<char>(i * (u + 3) + u);
  }
  dp::MemcpyHtoDArgs whole_a{kA, kBig, kStream};
  auto upload = [&](int u) {
    ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &whole_a, sizeof(whole_a), uploads[u].data(), kBig), 0);
  };
  upload(0);
  dp::MemcpyDtoDArgs a_to_b{kB, kA, kBig, kStream};  // reads upload 0
  ASSERT_EQ(Post(dp::kOpMemcpyDtoD, &a_to_b, sizeof(a_to_b)), 0);
  upload(1);
  const size_t entries = failover_->log_entries();
  upload(2);  // upload 1 leaves the log
  EXPECT_EQ(failover_->dropped_bytes(), kBig);
  Step(1);    // may read upload 2 on the GPU
  upload(3);  // upload 2 stays in the log
  EXPECT_EQ(failover_->dropped_bytes(), kBig);
  EXPECT_EQ(failover_->log_entries(), entries + 4);  // upload 2, the step (2), upload 3
  dp::MemsetArgs part{kA + 100, 50, 0x77, 1, kStream};
  ASSERT_EQ(Post(dp::kOpMemset, &part, sizeof(part)), 0);
  std::vector<char> expect_a = uploads[3];
  std::memset(expect_a.data() + 100, 0x77, 50);
  const std::vector<char> expect_b = uploads[0];
  // The caller's buffers change once the calls returned: the journal has its own copies.
  for (auto& bytes : uploads) std::fill(bytes.begin(), bytes.end(), 0);
  ASSERT_EQ(Synchronize(), 0);
  ASSERT_EQ(failover_->checkpoints(), 1u);
  EXPECT_EQ(failover_->overwritten_bytes(), kBig);         // upload 2, which the kernel kept
  EXPECT_LT(failover_->readback_bytes(), uint64_t{kBig});  // the kernel's range alone
  // A later upload after the checkpoint, then the GPU goes.
  std::vector<char> last(kBig, 0x5a);
  dp::MemcpyHtoDArgs whole_b{kB, kBig, kStream};
  ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &whole_b, sizeof(whole_b), last.data(), kBig), 0);
  first_->server.reset();
  NameInLease(*second_);
  std::vector<char> got(kBig);
  dp::MemcpyDtoHArgs read_a{kA, kBig, 0};
  ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read_a, sizeof(read_a), nullptr, 0, got.data(), kBig), 0);
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_TRUE(got == expect_a);
  dp::MemcpyDtoHArgs read_b{kB, kBig, 0};
  ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read_b, sizeof(read_b), nullptr, 0, got.data(), kBig), 0);
  EXPECT_TRUE(got == last);
  ExpectMatchesReference();
  // Recovered again from the next checkpoint: B's image is the last upload's buffer.
  ASSERT_EQ(Synchronize(), 0);
  first_ = std::make_unique<Agent>(0);
  NameInLease(*first_);
  second_->server.reset();
  ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read_b, sizeof(read_b), nullptr, 0, got.data(), kBig), 0);
  ASSERT_EQ(failover_->recoveries().size(), 2u);
  EXPECT_TRUE(got == last);
  ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read_a, sizeof(read_a), nullptr, 0, got.data(), kBig), 0);
  EXPECT_TRUE(got == expect_a);
  (void)expect_b;
}

// A device copy from a range between two uploads of it: the first upload stays, and
// the copy's destination recovers with it.
TEST_F(FailoverTest, AnUploadADeviceCopyReadKeepsItsPlace) {
  Open(Replay());
  constexpr uint64_t kBig = 128 << 10;
  constexpr uint64_t kA = kData + (uint64_t{4} << 20), kB = kA + (uint64_t{1} << 20);
  for (uint64_t address : {kA, kB}) {
    dp::MemAllocArgs alloc{kBig, address};
    ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
  }
  std::vector<char> first(kBig, 0x11), second(kBig, 0x22);
  dp::MemcpyHtoDArgs whole_a{kA, kBig, 0};
  ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &whole_a, sizeof(whole_a), first.data(), kBig), 0);
  dp::MemcpyDtoDArgs a_to_b{kB, kA, kBig, 0};
  ASSERT_EQ(Post(dp::kOpMemcpyDtoD, &a_to_b, sizeof(a_to_b)), 0);
  ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &whole_a, sizeof(whole_a), second.data(), kBig), 0);
  EXPECT_EQ(failover_->dropped_bytes(), 0u);
  first_->server.reset();  // before any checkpoint: the log alone rebuilds it
  NameInLease(*second_);
  std::vector<char> got(kBig);
  dp::MemcpyDtoHArgs read_b{kB, kBig, 0};
  ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read_b, sizeof(read_b), nullptr, 0, got.data(), kBig), 0);
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_TRUE(got == first);
  dp::StreamArgs sync{0, 0, 0};
  ASSERT_EQ(Call(dp::kOpStreamSynchronize, &sync, sizeof(sync)), 0);  // a checkpoint
  EXPECT_EQ(failover_->overwritten_bytes(), 0u);
  dp::MemcpyDtoHArgs read_a{kA, kBig, 0};
  ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read_a, sizeof(read_a), nullptr, 0, got.data(), kBig), 0);
  EXPECT_TRUE(got == second);
}

TEST_F(FailoverTest, WithFailoverOffTheErrorReachesTheProcess) {
  FailoverConfig config = Replay();
  config.mode = FailoverConfig::Mode::kOff;
  Open(config);
  Prepare();
  Step(1);
  first_->backend.Fail();
  NameInLease(*second_);
  EXPECT_EQ(Synchronize(), dp::kCuEccUncorrectable);
  EXPECT_TRUE(failover_->recoveries().empty());
  EXPECT_EQ(channel_.location.uuid, first_->uuid);
}

TEST_F(FailoverTest, OverTheMemoryCapTheProcessIsToldItIsNotProtected) {
  FailoverConfig config = Replay();
  config.checkpoint_mem = 1024;  // less than the 16 KiB the process holds
  Open(config);
  ::testing::internal::CaptureStderr();
  Prepare();
  Step(1);
  ASSERT_EQ(Synchronize(), 0);
  std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(failover_->protecting());
  EXPECT_NE(logged.find("not protected"), std::string::npos) << logged;
  EXPECT_NE(logged.find("its device memory (16.0 KiB) is over checkpoint_mem (1.0 KiB)"), std::string::npos) << logged;
  first_->server.reset();
  NameInLease(*second_);
  EXPECT_EQ(Synchronize(), dp::kCuDeviceUnavailable);
}

TEST_F(FailoverTest, NoReplacementWithinTheDeadlineGivesTheOriginalError) {
  FailoverConfig config = Replay();
  config.recovery_deadline = std::chrono::milliseconds(800);
  Open(config);
  Prepare();
  Step(1);
  first_->backend.Fail();  // and the lease never moves
  EXPECT_EQ(Synchronize(), dp::kCuEccUncorrectable);
}

// Recovering together (failover.h): a second GPU of the process (slot 1) on the same agent
// as the first. When the agent goes away, the recovery of the GPU whose call found it starts
// the other's at once, on a thread of its own; the program's next call to the other GPU
// waits for it and takes the recovered session up.
class TogetherTest : public FailoverTest {
 protected:
  static constexpr uint64_t kOtherData = kData + (uint64_t{1} << 20);

  // A background recovery's thread reads other_channel_ (declared after other_, so
  // destroyed first): it is joined before.
  ~TogetherTest() override { other_.reset(); }

  // The lease file naming `slot0` and `slot1`.
  void NameBoth(const Agent& slot0, const Agent& slot1) {
    std::ofstream out(lease_file_ + ".tmp");
    out << R"({"generation": 2, "gpus": [{"uuid": ")" << slot0.uuid << R"(", "endpoint": ")" << slot0.endpoint
        << R"("}, {"uuid": ")" << slot1.uuid << R"(", "endpoint": ")" << slot1.endpoint << R"("}]})";
    out.close();
    ASSERT_EQ(std::rename((lease_file_ + ".tmp").c_str(), lease_file_.c_str()), 0);
  }

  // The first GPU on the first agent and the other on `other_agent` (the first agent too,
  // by default); the first one's lost agent starts the other's recovery, as the runtime
  // wires them.
  void OpenBoth(FailoverConfig config, FailoverConfig other_config, const Agent* other_agent = nullptr) {
    const Agent& other = other_agent != nullptr ? *other_agent : *first_;
    NameBoth(*first_, other);
    Open(config);
    other_ = std::make_unique<Failover>(other_config, 1, 1, lease_file_, OpenSession);
    other_channel_.location = {other.uuid, other.endpoint};
    std::string why;
    int32_t refusal = 0;
    other_channel_.connection = OpenSession(other_channel_.location, &other_channel_.description, &why, &refusal);
    ASSERT_NE(other_channel_.connection, nullptr) << why;
    failover_->SetAgentLostHook([this](const GpuLocation& lost, bool confirmed) {
      other_->RecoverInBackground(&other_channel_, lost, confirmed);
    });
  }

  int32_t OtherCall(uint32_t op, const void* args, size_t args_len, const void* payload = nullptr,
                    size_t payload_len = 0, void* result = nullptr, size_t capacity = 0) {
    Reply reply;
    Status transport_error;
    other_moved_ = false;
    return other_->Deliver(&other_channel_, Failover::Delivery::kCall,
                           {op, args, args_len, payload, payload_len, result, capacity}, &reply, &transport_error,
                           &other_moved_);
  }

  // The other GPU's state: a range, uploaded and checkpointed, then written again (in the
  // log only).
  void PrepareOther() {
    other_reference_.assign(kElements, 0);
    for (uint32_t i = 0; i < kElements; ++i) other_reference_[i] = i * 11 + 5;
    dp::MemAllocArgs alloc{kElements * 4, kOtherData};
    ASSERT_EQ(OtherCall(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
    dp::MemcpyHtoDArgs copy{kOtherData, kElements * 4, 0};
    ASSERT_EQ(OtherCall(dp::kOpMemcpyHtoD, &copy, sizeof(copy), other_reference_.data(), kElements * 4), 0);
    ASSERT_EQ(OtherCall(dp::kOpContextSynchronize, nullptr, 0), 0);  // a checkpoint
    other_reference_[3] = 12345;
    dp::MemcpyHtoDArgs one{kOtherData + 12, 4, 0};
    ASSERT_EQ(OtherCall(dp::kOpMemcpyHtoD, &one, sizeof(one), &other_reference_[3], 4), 0);
  }

  void ExpectOtherMatches() {
    std::vector<uint32_t> data(kElements);
    dp::MemcpyDtoHArgs read{kOtherData, kElements * 4, 0};
    ASSERT_EQ(OtherCall(dp::kOpMemcpyDtoH, &read, sizeof(read), nullptr, 0, data.data(), kElements * 4), 0);
    EXPECT_EQ(data, other_reference_);
  }

  size_t BackgroundRecoveries() {
    std::lock_guard<std::mutex> wire(other_->mu());  // waits for one under way
    return other_->background_recoveries();
  }

  std::unique_ptr<Failover> other_;
  Failover::Channel other_channel_;
  std::vector<uint32_t> other_reference_;
  bool other_moved_ = false;
};

TEST_F(TogetherTest, TheOtherGpuOfALostAgentRecoversBeforeTheProgramCallsIt) {
  OpenBoth(Replay(), Replay());
  Prepare();
  PrepareOther();
  for (uint32_t k = 1; k <= 3; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  Step(4);
  first_->server.reset();  // the agent of both goes away
  NameBoth(*second_, *second_);
  EXPECT_EQ(Synchronize(), 0);  // the first GPU's recovery, which starts the other's
  // The other GPU recovered with no call of its own.
  EXPECT_EQ(BackgroundRecoveries(), 1u);
  ASSERT_EQ(other_->recoveries().size(), 1u);
  EXPECT_EQ(other_->recoveries()[0].to.uuid, second_->uuid);
  EXPECT_EQ(other_channel_.location.uuid, first_->uuid);  // taken up at its next call
  ExpectOtherMatches();
  EXPECT_TRUE(other_moved_);
  EXPECT_EQ(other_channel_.location.uuid, second_->uuid);
  EXPECT_STREQ(other_channel_.description.uuid, second_->uuid.c_str());
  EXPECT_EQ(other_->recoveries().size(), 1u);  // not a second time
  ExpectMatchesReference();
  EXPECT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(second_->Reports().size(), 2u);
}

TEST_F(TogetherTest, WithRecoverTogetherOffEachGpuRecoversAtItsOwnCall) {
  FailoverConfig off = Replay();
  off.recover_together = false;
  OpenBoth(off, off);
  Prepare();
  PrepareOther();
  first_->server.reset();
  NameBoth(*second_, *second_);
  EXPECT_EQ(Synchronize(), 0);
  EXPECT_EQ(BackgroundRecoveries(), 0u);
  EXPECT_TRUE(other_->recoveries().empty());
  ExpectOtherMatches();  // recovers now, at its own call
  EXPECT_EQ(other_->recoveries().size(), 1u);
}

// The other GPU's background recovery finds no replacement: its next call gets the error a
// recovery of its own would have given, logged once, without waiting the deadline again.
TEST_F(TogetherTest, AFailedBackgroundRecoveryGivesTheNextCallItsError) {
  FailoverConfig other_config = Replay();
  other_config.recovery_deadline = std::chrono::milliseconds(800);
  OpenBoth(Replay(), other_config);
  Prepare();
  PrepareOther();
  ::testing::internal::CaptureStderr();
  first_->server.reset();
  NameBoth(*second_, *first_);  // the other GPU's slot never moves
  EXPECT_EQ(Synchronize(), 0);
  EXPECT_EQ(BackgroundRecoveries(), 1u);
  const auto before = std::chrono::steady_clock::now();
  EXPECT_EQ(OtherCall(dp::kOpContextSynchronize, nullptr, 0), dp::kCuDeviceUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::milliseconds(700));
  std::string logged = ::testing::internal::GetCapturedStderr();
  const std::string deadline = "GPU 1: no replacement within the recovery deadline";
  const size_t at = logged.find(deadline);
  EXPECT_NE(at, std::string::npos) << logged;
  EXPECT_EQ(logged.find(deadline, at + 1), std::string::npos) << logged;
  EXPECT_TRUE(other_->recoveries().empty());
  // A later call tries again, as after a failed recovery of its own (the lease moves now).
  NameBoth(*second_, *second_);
  EXPECT_EQ(OtherCall(dp::kOpContextSynchronize, nullptr, 0), 0);
  EXPECT_EQ(other_->recoveries().size(), 1u);
}

// The process exits while the other GPU's background recovery waits for the lease: the
// wait ends at once and the thread is joined (no hang until the deadline).
TEST_F(TogetherTest, StoppingABackgroundRecoveryEndsItsWait) {
  OpenBoth(Replay(), Replay());  // a deadline of 20 s
  Prepare();
  PrepareOther();
  ::testing::internal::CaptureStderr();
  first_->server.reset();
  NameBoth(*second_, *first_);
  EXPECT_EQ(Synchronize(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // waiting for the lease now
  const auto before = std::chrono::steady_clock::now();
  other_->StopBackground();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(2));
  std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(logged.find("GPU 1: recovery stopped: the process is shutting down"), std::string::npos) << logged;
  EXPECT_TRUE(other_->recoveries().empty());
  other_.reset();
}

// The agent of both falls silent (its host stopped: its connections stay open, and nothing
// on the other GPU's fails, so PeerGone never says it is gone). gpupoold's word, which ended
// the first GPU's waiting call, starts the other's recovery too: it asks gpupoold about its
// own slot and recovers there before the program calls it, which then waits on nothing.
TEST_F(TogetherTest, TheOtherGpuOfASilentAgentRecoversOnGpupooldsWord) {
  OpenBoth(Replay(), Replay());
  std::mutex told_mu;
  std::vector<std::string> told;
  auto gpupoold = [&](const GpuLocation& lost, int slot, GpuLocation* named, std::string*) {
    std::lock_guard<std::mutex> lock(told_mu);
    told.push_back(lost.uuid + " slot " + std::to_string(slot));
    *named = {second_->uuid, second_->endpoint};  // its probe got no answer
    return true;
  };
  failover_->SetLostReporter(gpupoold);
  other_->SetLostReporter(gpupoold);
  Prepare();
  PrepareOther();
  for (uint32_t k = 1; k <= 3; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  first_->backend.Hang();  // silent: nothing answers, nothing closes
  Step(4);
  EXPECT_EQ(Synchronize(), 0);  // asks gpupoold, recovers, starts the other's recovery
  // No ASSERT before Release and the last report: gpupoold's stand-in holds this frame's
  // variables.
  EXPECT_EQ(BackgroundRecoveries(), 1u);
  EXPECT_EQ(other_->recoveries().size(), 1u);
  if (!other_->recoveries().empty()) {
    EXPECT_EQ(other_->recoveries()[0].to.uuid, second_->uuid);
  }
  EXPECT_EQ(other_channel_.location.uuid, first_->uuid);  // taken up at its next call
  const auto before = std::chrono::steady_clock::now();
  ExpectOtherMatches();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::milliseconds(300))
      << "the call waited on the silent agent";
  EXPECT_TRUE(other_moved_);
  EXPECT_EQ(other_channel_.location.uuid, second_->uuid);
  EXPECT_EQ(other_->recoveries().size(), 1u);
  first_->backend.Release();
  ExpectMatchesReference();
  std::lock_guard<std::mutex> lock(told_mu);
  EXPECT_EQ(told, (std::vector<std::string>{first_->uuid + " slot 0", first_->uuid + " slot 1"}));
  failover_->SetLostReporter(nullptr);
  other_->SetLostReporter(nullptr);
}

// The agent of both is silent only to the first GPU's waiting call (its GPU's lane hangs),
// and gpupoold's probe finds the agent answering for the other's slot: the other GPU is not
// touched. A client's own view never fails a GPU.
TEST_F(TogetherTest, AnAgentGpupooldFindsAnsweringIsNotLeftByTheOtherGpu) {
  OpenBoth(Replay(), Replay());
  failover_->SetLostReporter([&](const GpuLocation&, int, GpuLocation* named, std::string*) {
    *named = {second_->uuid, second_->endpoint};
    return true;
  });
  other_->SetLostReporter([&](const GpuLocation&, int, GpuLocation* named, std::string*) {
    *named = {first_->uuid, first_->endpoint};  // the agent answered gpupoold's probe
    return true;
  });
  Prepare();
  PrepareOther();
  const transport::ClientConnection* session = other_channel_.connection.get();
  first_->backend.Hang();
  Step(1);
  EXPECT_EQ(Synchronize(), 0);
  first_->backend.Release();
  EXPECT_EQ(BackgroundRecoveries(), 0u);
  ExpectOtherMatches();
  EXPECT_FALSE(other_moved_);
  EXPECT_EQ(other_channel_.connection.get(), session);
  EXPECT_TRUE(other_->recoveries().empty());
}

// The other GPU is on an agent that stays: it is not touched.
TEST_F(TogetherTest, AGpuWhoseAgentIsHealthyIsNotTouched) {
  OpenBoth(Replay(), Replay(), second_.get());
  Prepare();
  PrepareOther();
  const transport::ClientConnection* session = other_channel_.connection.get();
  Agent third(2);
  first_->server.reset();
  NameBoth(third, *second_);
  EXPECT_EQ(Synchronize(), 0);
  EXPECT_EQ(BackgroundRecoveries(), 0u);
  ExpectOtherMatches();
  EXPECT_FALSE(other_moved_);
  EXPECT_EQ(other_channel_.connection.get(), session);
  EXPECT_TRUE(other_->recoveries().empty());
  other_.reset();  // before `third`, which its session does not reach
}

TEST_F(FailoverTest, AHungGpuIsReportedByTheWatchdogAndTheWaitingCallGoesOnElsewhere) {
  first_ = std::make_unique<Agent>(0, std::chrono::milliseconds(500));
  NameInLease(*first_);
  Open(Replay());
  Prepare();
  for (uint32_t k = 1; k <= 3; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  first_->backend.Hang();
  Step(4);
  // What gpupoold and spank_gpupool's watcher do when the agent reports the GPU FAILED.
  std::thread swap([this] {
    for (int i = 0; i < 100 && first_->backend.reported_failures() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    NameInLease(*second_);
  });
  EXPECT_EQ(Synchronize(), 0);  // waits on the hung GPU, then recovers on the second
  swap.join();
  EXPECT_GE(first_->backend.reported_failures(), 1);
  Step(5);
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(failover_->recoveries()[0].to.uuid, second_->uuid);
}

// spin(n): every thread counts to n; long enough to outlast the watchdog's timeout, while
// it finishes block after block.
const char kSpinPtx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry spin(\n"
    "  .param .u32 spin_param_0\n"
    ")\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<4>;\n"
    "  ld.param.u32 %r1, [spin_param_0];\n"
    "  mov.u32 %r2, 0;\n"
    "$L_loop:\n"
    "  add.s32 %r2, %r2, 1;\n"
    "  setp.lt.u32 %p1, %r2, %r1;\n"
    "  @%p1 bra $L_loop;\n"
    "  ret;\n"
    "}\n";

TEST_F(FailoverTest, ALongKernelIsNotAHang) {
  first_ = std::make_unique<Agent>(0, std::chrono::milliseconds(300));
  NameInLease(*first_);
  Open(Replay());
  const std::string payload = dp::ModuleLoadPayload({kSpinPtx, sizeof(kSpinPtx)});
  dp::ModuleLoadArgs load{kModule, kGlobals};
  ASSERT_EQ(Call(dp::kOpModuleLoad, &load, sizeof(load), payload.data(), payload.size()), 0);
  dp::GetFunctionArgs function{kModule, kFunction, "spin"};
  ASSERT_EQ(Call(dp::kOpGetFunction, &function, sizeof(function)), 0);
  // One block: the watchdog must see progress inside a CTA (a grid-stride loop over a big
  // array runs like this), not only between CTAs.
  uint32_t count = 3'000'000;
  dp::LaunchArgs launch{kFunction, {1, 1, 1}, {256, 1, 1}, 0, sizeof(count), 0};
  auto began = std::chrono::steady_clock::now();
  ASSERT_EQ(Post(dp::kOpLaunch, &launch, sizeof(launch), &count, sizeof(count)), 0);
  dp::StreamArgs sync{0, 0, 0};
  EXPECT_EQ(Call(dp::kOpContextSynchronize, &sync, 0), 0);
  auto took = std::chrono::steady_clock::now() - began;
  EXPECT_GT(took, std::chrono::milliseconds(600));  // twice the timeout, or it shows nothing
  EXPECT_EQ(first_->backend.reported_failures(), 0);
  // Big memsets and copies count as progress too.
  dp::MemAllocArgs alloc{uint64_t{768} << 20, kData};
  ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
  dp::MemsetArgs fill{kData, uint64_t{768} << 20, 7, 1, 0};
  ASSERT_EQ(Post(dp::kOpMemset, &fill, sizeof(fill)), 0);
  dp::MemcpyDtoDArgs move{kData, kData + (uint64_t{384} << 20), uint64_t{384} << 20, 0};
  ASSERT_EQ(Post(dp::kOpMemcpyDtoD, &move, sizeof(move)), 0);
  EXPECT_EQ(Call(dp::kOpContextSynchronize, &sync, 0), 0);
  EXPECT_EQ(first_->backend.reported_failures(), 0);
  EXPECT_TRUE(failover_->recoveries().empty());
}

// A planned move (the lease moved off a healthy GPU): the old agent keeps the session's
// memory, the new agent copies it from there, and only the requests the old GPU refused are
// replayed; nothing comes from the checkpoint.
TEST_F(FailoverTest, APlannedMoveHandsTheMemoryOverAgentToAgent) {
  FailoverConfig config = Replay();
  config.checkpoint_interval = std::chrono::hours(1);  // the log holds everything since
  Open(config);
  Prepare();
  for (uint32_t k = 1; k <= 5; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  for (uint32_t k = 6; k <= 9; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);  // run on the first GPU (no checkpoint: the interval is long)
  first_->holds = false;        // the lease moves (a drain)
  NameInLease(*second_);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the agent's tick revokes
  for (uint32_t k = 10; k <= 12; ++k) Step(k);                  // refused there: six requests
  EXPECT_EQ(Synchronize(), 0);
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  const Failover::Recovery& moved = failover_->recoveries()[0];
  EXPECT_EQ(moved.to.uuid, second_->uuid);
  EXPECT_EQ(moved.restored_bytes, 0u);
  EXPECT_GE(moved.copied_bytes, kElements * 4u + 4u);  // the data and the module's counter
  EXPECT_EQ(moved.replayed, 6u);
  std::vector<std::string> reports = second_->Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find(" copied "), std::string::npos) << reports[0];
  // The process goes on there.
  for (uint32_t k = 13; k <= 14; ++k) Step(k);
  ExpectMatchesReference();
}

// A planned move of a range larger than one handoff read (16 MiB, over the size the sim
// makes ready on helper threads): the new agent pulls it in several reads, each into its
// place, and the process reads back every byte it wrote, none of them from the log.
TEST_F(FailoverTest, APlannedMoveHandsALargeRangeOverInSeveralReadsByteForByte) {
  FailoverConfig config = Replay();
  config.checkpoint_interval = std::chrono::hours(1);
  Open(config);
  constexpr uint64_t kRange = kData + (uint64_t{64} << 20), kBytes = (uint64_t{40} << 20) + 4097;
  dp::MemAllocArgs alloc{kBytes, kRange};
  ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
  std::vector<char> wrote(kBytes);
  for (size_t i = 0; i < wrote.size(); ++i) wrote[i] = static_cast<char>(i * 7 + (i >> 12));
  dp::MemcpyHtoDArgs copy{kRange, kBytes, 0};
  ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &copy, sizeof(copy), wrote.data(), kBytes), 0);
  dp::StreamArgs sync{0, 0, 0};
  ASSERT_EQ(Call(dp::kOpContextSynchronize, &sync, sizeof(sync)), 0);
  first_->holds = false;  // the lease moves (a drain)
  NameInLease(*second_);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the agent's tick revokes
  std::vector<char> back(kBytes);
  dp::MemcpyDtoHArgs read{kRange, kBytes, 0};
  ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read, sizeof(read), nullptr, 0, back.data(), kBytes), 0);
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  const Failover::Recovery& moved = failover_->recoveries()[0];
  EXPECT_EQ(moved.to.uuid, second_->uuid);
  EXPECT_EQ(moved.restored_bytes, 0u);
  EXPECT_GE(moved.copied_bytes, kBytes);
  size_t wrong = 0;
  for (size_t i = 0; i < kBytes; ++i) wrong += back[i] != wrote[i];
  EXPECT_EQ(wrong, 0u);
}

// A long log is cut at a synchronisation before the interval when its checkpoint is cheap
// (little device memory written since the last one), and only then.
TEST_F(FailoverTest, ALongLogIsCheckpointedEarlyOnlyWhenThatIsCheap) {
  FailoverConfig config = Replay();
  config.checkpoint_interval = std::chrono::hours(1);
  Open(config);
  Prepare();
  // Each step logs two requests and writes the 16 KiB data range.
  uint32_t k = 0;
  while (failover_->log_entries() + 2 < Failover::kLongLog) Step(++k);
  ASSERT_EQ(Synchronize(), 0);
  EXPECT_EQ(failover_->checkpoints(), 0u);  // shorter than kLongLog: the interval rules
  EXPECT_GE(failover_->log_entries(), Failover::kLongLog - 2);
  Step(++k);
  ASSERT_EQ(Synchronize(), 0);
  EXPECT_EQ(failover_->checkpoints(), 1u);
  EXPECT_EQ(failover_->log_entries(), 0u);
  ExpectMatchesReference();

  // Writes to 2 MiB since the checkpoint: reading them back is not cheap, so the log waits
  // for the interval however long it is.
  constexpr uint64_t kLarge = kData + (uint64_t{1} << 24), kLargeBytes = uint64_t{2} << 20;
  dp::MemAllocArgs alloc{kLargeBytes, kLarge};
  ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
  for (uint32_t i = 0; i < Failover::kLongLog; ++i) {
    dp::MemsetArgs memset{kLarge + 4 * i, 1, i, 4, kStream};
    ASSERT_EQ(Post(dp::kOpMemset, &memset, sizeof(memset)), 0);
  }
  ASSERT_EQ(Synchronize(), 0);
  EXPECT_EQ(failover_->checkpoints(), 1u);
  EXPECT_GT(failover_->log_entries(), Failover::kLongLog);
}

// Moved while requests are in flight: whichever of them the old GPU ran are not run again.
TEST_F(FailoverTest, APlannedMoveRunsNothingTwice) {
  FailoverConfig config = Replay();
  config.checkpoint_interval = std::chrono::hours(1);
  Open(config);
  Prepare();
  for (uint32_t k = 1; k <= 3; ++k) Step(k);
  std::thread move([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    first_->holds = false;
    NameInLease(*second_);
  });
  for (uint32_t k = 4; k <= 200; ++k) Step(k);
  move.join();
  EXPECT_EQ(Synchronize(), 0);
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_GT(failover_->recoveries()[0].copied_bytes, 0u);
}

// Who may take part in a handoff: only a session whose lease moved off a healthy GPU
// offers, once; only a connection with its ticket reads, once, and only that memory.
TEST_F(FailoverTest, AHandoffIsOnlyForTheOfferedMemoryAndItsTicketOnlyOnce) {
  auto owner = SessionWith(*first_);
  ASSERT_NE(owner, nullptr);
  Reply reply;
  dp::MemAllocArgs alloc{4096, kData};
  ASSERT_TRUE(owner->Call({dp::kOpMemAlloc, &alloc, sizeof(alloc), nullptr, 0, nullptr, 0}, &reply).ok());
  ASSERT_EQ(reply.status, 0);
  std::vector<char> secret(4096, 's');
  dp::MemcpyHtoDArgs write{kData, secret.size(), 0};
  ASSERT_TRUE(
      owner->Call({dp::kOpMemcpyHtoD, &write, sizeof(write), secret.data(), secret.size(), nullptr, 0}, &reply).ok());
  Request offer{dp::kOpHandoffOffer, nullptr, 0, nullptr, 0, nullptr, 0};
  // Its lease still holds the GPU: nothing to hand off.
  ASSERT_TRUE(owner->Call(offer, &reply).ok());
  EXPECT_EQ(reply.status, dp::kCuNotPermitted);
  // A connection without a hello offers nothing, and pulls nothing.
  auto stranger = transport::RpcClient::Connect(first_->endpoint, first_->uuid);
  ASSERT_TRUE(stranger.ok());
  ASSERT_TRUE(stranger.value()->Call(offer, &reply).ok());
  EXPECT_EQ(reply.status, dp::kCuNotPermitted);
  // Nor does it read or end a handoff without attaching with a ticket.
  dp::HandoffReadArgs unattached{kData, 4096};
  std::vector<char> stolen(4096);
  ASSERT_TRUE(
      stranger.value()
          ->Call({dp::kOpHandoffRead, &unattached, sizeof(unattached), nullptr, 0, stolen.data(), stolen.size()},
                 &reply)
          .ok());
  EXPECT_EQ(reply.status, dp::kCuNotPermitted);
  EXPECT_EQ(reply.bulk_received, 0u);
  auto puller = transport::RpcClient::Connect(second_->endpoint, second_->uuid);
  ASSERT_TRUE(puller.ok());
  dp::HandoffPullArgs pull{};
  ASSERT_TRUE(puller.value()->Call({dp::kOpHandoffPull, &pull, sizeof(pull), nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, dp::kCuNotPermitted);

  first_->holds = false;  // the lease moves
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  dp::MemAllocArgs more{4096, kData + (1 << 20)};
  ASSERT_TRUE(owner->Call({dp::kOpMemAlloc, &more, sizeof(more), nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, dp::kCuNotPermitted);  // revoked, but kept for a handoff
  ASSERT_TRUE(owner->Call(offer, &reply).ok());
  ASSERT_EQ(reply.status, 0) << reply.out;
  dp::HandoffOfferResult offered{};
  ASSERT_GE(reply.out.size(), sizeof(offered));
  std::memcpy(&offered, reply.out.data(), sizeof(offered));
  EXPECT_EQ(std::strlen(offered.ticket), 64u);
  ASSERT_TRUE(owner->Call(offer, &reply).ok());  // once only
  EXPECT_EQ(reply.status, dp::kCuNotPermitted);

  auto attach_with = [&](const char* ticket) {
    auto reader = transport::RpcClient::Connect(first_->endpoint, first_->uuid);
    EXPECT_TRUE(reader.ok());
    dp::HandoffAttachArgs attach;
    std::snprintf(attach.gpu_uuid, sizeof(attach.gpu_uuid), "%s", first_->uuid.c_str());
    std::snprintf(attach.ticket, sizeof(attach.ticket), "%s", ticket);
    Reply answer;
    EXPECT_TRUE(
        reader.value()->Call({dp::kOpHandoffAttach, &attach, sizeof(attach), nullptr, 0, nullptr, 0}, &answer).ok());
    return std::make_pair(std::move(reader.value()), answer.status);
  };
  std::string wrong = offered.ticket;
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  EXPECT_EQ(attach_with(wrong.c_str()).second, dp::kCuNotPermitted);
  auto [reader, attached] = attach_with(offered.ticket);
  ASSERT_EQ(attached, 0);
  EXPECT_EQ(attach_with(offered.ticket).second, dp::kCuNotPermitted);  // used up
  std::vector<char> read(4096);
  dp::HandoffReadArgs inside{kData, read.size()};
  ASSERT_TRUE(
      reader->Call({dp::kOpHandoffRead, &inside, sizeof(inside), nullptr, 0, read.data(), read.size()}, &reply).ok());
  ASSERT_EQ(reply.status, 0);
  EXPECT_EQ(read, secret);
  dp::HandoffReadArgs outside{kData + (uint64_t{1} << 30), 4096};
  ASSERT_TRUE(
      reader->Call({dp::kOpHandoffRead, &outside, sizeof(outside), nullptr, 0, read.data(), read.size()}, &reply).ok());
  EXPECT_NE(reply.status, 0);
  // Anything but reading and ending closes the reader.
  ASSERT_TRUE(reader->Call({dp::kOpMemAlloc, &more, sizeof(more), nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, dp::kCuNotPermitted);
  EXPECT_FALSE(
      reader->Call({dp::kOpHandoffRead, &inside, sizeof(inside), nullptr, 0, read.data(), read.size()}, &reply).ok());
}

// The new agent connects only to the agent gpupoold says the lease moved from: a client
// naming another endpoint (or any, when gpupoold names none) is refused, and the process
// recovers from its checkpoint instead.
TEST_F(FailoverTest, AHandoffPullsOnlyFromWhereGpupooldSaysTheLeaseMoved) {
  {
    std::lock_guard<std::mutex> lock(second_->reports_mu);
    second_->handoff_from = "127.0.0.1:1";
  }
  Open(Replay());
  Prepare();
  for (uint32_t k = 1; k <= 3; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  first_->holds = false;
  NameInLease(*second_);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  Step(4);
  EXPECT_EQ(Synchronize(), 0);
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(failover_->recoveries()[0].copied_bytes, 0u);
  EXPECT_GT(failover_->recoveries()[0].restored_bytes, 0u);
}

// GPUPOOL_FAILOVER=migrate: planned moves are followed with no memory image kept; a
// failure gives the CUDA error.
TEST_F(FailoverTest, MigrateFollowsAPlannedMoveButNotAFailure) {
  FailoverConfig config = Replay();
  config.mode = FailoverConfig::Mode::kMigrate;
  Open(config);
  Prepare();
  for (uint32_t k = 1; k <= 4; ++k) Step(k);
  ASSERT_EQ(Synchronize(), 0);
  EXPECT_EQ(failover_->checkpoints(), 1u);  // the log cut, nothing saved
  EXPECT_EQ(failover_->checkpoint_bytes(), 0u);
  EXPECT_EQ(failover_->readback_bytes(), 0u);
  EXPECT_EQ(failover_->log_entries(), 0u);
  for (uint32_t k = 5; k <= 6; ++k) Step(k);
  first_->holds = false;
  NameInLease(*second_);
  for (uint32_t k = 7; k <= 8; ++k) Step(k);
  EXPECT_EQ(Synchronize(), 0);
  ExpectMatchesReference();
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_GT(failover_->recoveries()[0].copied_bytes, 0u);
  EXPECT_EQ(failover_->checkpoint_bytes(), 0u);
  second_->server.reset();  // the agent goes away: not followed
  auto third = std::make_unique<Agent>(2);
  NameInLease(*third);
  EXPECT_EQ(Synchronize(), dp::kCuDeviceUnavailable);
  EXPECT_EQ(failover_->recoveries().size(), 1u);
}

// A GPU that failed keeps nothing for a handoff, whether its backend saw the failure or
// gpupoold holds it FAILED (an admin's state=fail): its process recovers from its
// checkpoint.
TEST_F(FailoverTest, AFailedGpuOffersNoHandoff) {
  for (bool by_admin : {false, true}) {
    SCOPED_TRACE(by_admin ? "failed by an admin" : "failed in its backend");
    first_ = std::make_unique<Agent>(0);
    second_ = std::make_unique<Agent>(1);
    NameInLease(*first_);
    reference_.assign(kElements, 0);
    for (uint32_t i = 0; i < kElements; ++i) reference_[i] = i * 7 + 1;
    launches_ = 0;
    Open(Replay());
    Prepare();
    for (uint32_t k = 1; k <= 3; ++k) Step(k);
    ASSERT_EQ(Synchronize(), 0);
    if (by_admin) {
      first_->admin_failed = true;
    } else {
      first_->backend.Fail();
    }
    first_->holds = false;
    NameInLease(*second_);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    for (uint32_t k = 4; k <= 5; ++k) Step(k);
    EXPECT_EQ(Synchronize(), 0);
    ExpectMatchesReference();
    ASSERT_EQ(failover_->recoveries().size(), 1u);
    EXPECT_EQ(failover_->recoveries()[0].copied_bytes, 0u);
    EXPECT_GT(failover_->recoveries()[0].restored_bytes, 0u);
  }
}

// A session whose process dies at one request, as a worker does whose tenant's input ends
// it (a crash, a limit): the request, and everything after it, loses the connection.
constexpr uint32_t kPoison = 0xDEAD;
class DyingSession : public transport::ClientConnection {
 public:
  explicit DyingSession(std::unique_ptr<transport::ClientConnection> real) : real_(std::move(real)) {}
  Status Call(const Request& request, Reply* reply) override {
    return Dies(request) ? Gone() : real_->Call(request, reply);
  }
  Status Post(const Request& request) override { return Dies(request) ? Gone() : real_->Post(request); }
  Status PostOverlapped(const Request& request, const std::function<bool()>& step) override {
    return Dies(request) ? Gone() : real_->PostOverlapped(request, step);
  }
  Status Start(const Request& request) override { return Dies(request) ? Gone() : real_->Start(request); }
  Status Drain(int32_t* first_error) override { return dead_ ? Gone() : real_->Drain(first_error); }
  void SetAbandonCheck(std::function<std::string()> check) override { real_->SetAbandonCheck(std::move(check)); }
  uint64_t next_sequence() override { return real_->next_sequence(); }

 private:
  bool Dies(const Request& request) {
    if (request.op == dp::kOpMemset && request.args_len == sizeof(dp::MemsetArgs)) {
      dp::MemsetArgs args;
      std::memcpy(&args, request.args, sizeof(args));
      if (args.value == kPoison) dead_ = true;
    }
    return dead_;
  }
  static Status Gone() { return Status::Unavailable("the session's process is gone"); }
  std::unique_ptr<transport::ClientConnection> real_;
  bool dead_ = false;
};

std::atomic<int> g_sessions_opened{0};
std::unique_ptr<transport::ClientConnection> OpenDyingSession(const GpuLocation& location,
                                                              dp::DeviceDescription* description, std::string* why,
                                                              int32_t* refusal) {
  ++g_sessions_opened;
  auto real = OpenSession(location, description, why, refusal);
  if (real == nullptr) return nullptr;
  return std::make_unique<DyingSession>(std::move(real));
}

void FailoverTest::OpenDying() {
  g_sessions_opened = 0;
  failover_ = std::make_unique<Failover>(Replay(), 0, 0, lease_file_, OpenDyingSession);
  channel_.location = {first_->uuid, first_->endpoint};
  std::string why;
  int32_t refusal = 0;
  channel_.connection = OpenDyingSession(channel_.location, &channel_.description, &why, &refusal);
  ASSERT_NE(channel_.connection, nullptr) << why;
}

// A request that ends the session's process is the program's own fault: the library
// recovers once (the agent might have died), and when the request ends the new session
// too, it stops there with the error: no third session, no other GPU, long before the
// recovery deadline.
TEST_F(FailoverTest, ARequestThatEndsTwoSessionsIsNotCarriedToAThird) {
  OpenDying();
  Prepare();
  Step(1);
  ASSERT_EQ(Synchronize(), 0);
  auto started = std::chrono::steady_clock::now();
  dp::MemsetArgs poison{kData, 1, kPoison, 4, kStream};
  EXPECT_EQ(Call(dp::kOpMemset, &poison, sizeof(poison)), dp::kCuDeviceUnavailable);
  EXPECT_EQ(g_sessions_opened.load(), 2);  // the first, and one recovery
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
}

// A one-way request is in the log before it is sent: when it ends the session, the
// recovery's replay sends it again and ends the new session too. The replay stops there:
// no further session is opened, and the process gets the error.
TEST_F(FailoverTest, AReplayThatEndsTheNewSessionStopsThere) {
  OpenDying();
  Prepare();
  ASSERT_EQ(Synchronize(), 0);
  auto started = std::chrono::steady_clock::now();
  dp::MemsetArgs poison{kData, 1, kPoison, 4, kStream};
  EXPECT_NE(Post(dp::kOpMemset, &poison, sizeof(poison)), 0);
  EXPECT_EQ(g_sessions_opened.load(), 2);
  EXPECT_TRUE(failover_->recoveries().empty());
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
}

// Large ranges of a checkpoint: uploaded whole, checkpointed from the log, and restored on
// the new agent, which faults their pages in on helper threads while the bytes arrive
// (SimDeviceMemory::PopulateForWrite; these are over its kPopulateMin).
class LargeRestoreTest : public FailoverTest {
 protected:
  static constexpr uint64_t kBig = kData + (uint64_t{64} << 20);
  static constexpr uint32_t kKernelElements = 65536;

  // Two ranges of odd sizes (neither end on a page), uploaded and checkpointed; then, in
  // the log only, `step` over the head of the first and the tail of the second (kernels
  // that read what the restore brings back).
  void PrepareLarge() {
    Prepare();
    for (int r = 0; r < 2; ++r) {
      dp::MemAllocArgs alloc{sizes_[r], starts_[r]};
      ASSERT_EQ(Call(dp::kOpMemAlloc, &alloc, sizeof(alloc)), 0);
      want_[r].resize(sizes_[r]);
      for (uint64_t i = 0; i < sizes_[r]; ++i) want_[r][i] = static_cast<char>(i * (r ? 37 : 131) + (i >> 13));
      dp::MemcpyHtoDArgs copy{starts_[r], sizes_[r], kStream};
      ASSERT_EQ(Post(dp::kOpMemcpyHtoD, &copy, sizeof(copy), want_[r].data(), sizes_[r]), 0);
    }
    ASSERT_EQ(Synchronize(), 0);  // a checkpoint
    StepOver(0, 0, 21);
    StepOver(1, (sizes_[1] - uint64_t{4} * kKernelElements) / 4 * 4, 22);
  }
  // `step` with k over kKernelElements words at `offset` in range r, on the device and here.
  void StepOver(int r, uint64_t offset, uint32_t k) {
    struct {
      uint64_t data;
      uint32_t n, k;
    } params{starts_[r] + offset, kKernelElements, k};
    dp::LaunchArgs launch{kFunction, {kKernelElements / 256, 1, 1}, {256, 1, 1}, 0, sizeof(params), kStream};
    ASSERT_EQ(Post(dp::kOpLaunch, &launch, sizeof(launch), &params, sizeof(params)), 0);
    for (uint32_t i = 0; i < kKernelElements; ++i) {
      uint32_t word = 0;
      std::memcpy(&word, want_[r].data() + offset + 4 * uint64_t{i}, 4);
      word = word * 3 + k + i;
      std::memcpy(want_[r].data() + offset + 4 * uint64_t{i}, &word, 4);
    }
    ++launches_;
  }
  // Reads both ranges back (the first read recovers) and counts the bytes that differ.
  void ExpectLargeRangesMatch() {
    for (int r = 0; r < 2; ++r) {
      std::vector<char> back(sizes_[r]);
      dp::MemcpyDtoHArgs read{starts_[r], sizes_[r], 0};
      ASSERT_EQ(Call(dp::kOpMemcpyDtoH, &read, sizeof(read), nullptr, 0, back.data(), sizes_[r]), 0);
      size_t wrong = 0;
      for (uint64_t i = 0; i < sizes_[r]; ++i) wrong += back[i] != want_[r][i];
      EXPECT_EQ(wrong, 0u) << "range " << r;
    }
    ExpectMatchesReference();
  }

  // PrepareLarge, the agent killed, and the recovery at the first read, checked whole
  // (ExpectLargeRangesMatch): with `streams`, restore streams from 64 MiB (the default, 256
  // MiB, would take more memory than the test needs) opened by OpenRestoreStream, the
  // second of them refused with `refuse_second`.
  void RecoverLarge(bool streams, bool refuse_second = false) {
    g_restore_streams_opened = 0;
    g_refuse_restore_stream = refuse_second;
    FailoverConfig config = Replay();
    config.restore_streams_from = uint64_t{64} << 20;
    Open(config);
    if (streams) failover_->SetRestoreStreamOpener(OpenRestoreStream);
    ASSERT_NO_FATAL_FAILURE(PrepareLarge());
    first_->server.reset();  // the kernels are in the log only
    NameInLease(*second_);
    ExpectLargeRangesMatch();
    g_refuse_restore_stream = false;
    ASSERT_EQ(failover_->recoveries().size(), 1u);
    EXPECT_EQ(failover_->recoveries()[0].replayed, 2u);
  }

  const std::array<uint64_t, 2> sizes_ = {(uint64_t{40} << 20) + 13, (uint64_t{33} << 20) + 4097};
  const std::array<uint64_t, 2> starts_ = {kBig, kBig + (uint64_t{128} << 20)};
  std::array<std::vector<char>, 2> want_;
};

TEST_F(LargeRestoreTest, OddRangesComeBackByteForByteAndReplayedKernelsReadThemRestored) {
  ASSERT_NO_FATAL_FAILURE(RecoverLarge(/*streams=*/false));
  EXPECT_EQ(failover_->recoveries()[0].streams, 1u);
  EXPECT_GE(failover_->recoveries()[0].restored_bytes, sizes_[0] + sizes_[1]);
}

// The checkpoint comes back over two restore streams at once, each a share that ends
// inside a range of odd size; the replayed kernels then read it restored.
TEST_F(LargeRestoreTest, ALargeCheckpointComesBackOverRestoreStreams) {
  ASSERT_NO_FATAL_FAILURE(RecoverLarge(/*streams=*/true));
  EXPECT_EQ(failover_->recoveries()[0].streams, 2u);
  EXPECT_EQ(g_restore_streams_opened.load(), 2);
  EXPECT_GE(failover_->recoveries()[0].restored_bytes, sizes_[0] + sizes_[1]);
}

// A stream that does not open leaves the whole restore to the session (the other stream's
// bytes are written again), and the recovery holds.
TEST_F(LargeRestoreTest, ARestoreStreamThatFailsLeavesTheRestoreToTheSession) {
  ASSERT_NO_FATAL_FAILURE(RecoverLarge(/*streams=*/true, /*refuse_second=*/true));
  EXPECT_EQ(failover_->recoveries()[0].streams, 1u);
  EXPECT_EQ(g_restore_streams_opened.load(), 2);
}

// A session whose connection breaks at the second large upload it is given, when it was
// opened armed (g_break_restore): a new agent lost in the middle of a restore.
std::atomic<bool> g_break_restore{false};
class BreaksMidRestore : public transport::ClientConnection {
 public:
  explicit BreaksMidRestore(std::unique_ptr<transport::ClientConnection> real) : real_(std::move(real)) {}
  Status Call(const Request& request, Reply* reply) override {
    return Breaks(request) ? Gone() : real_->Call(request, reply);
  }
  Status Post(const Request& request) override { return Breaks(request) ? Gone() : real_->Post(request); }
  Status PostOverlapped(const Request& request, const std::function<bool()>& step) override {
    return Breaks(request) ? Gone() : real_->PostOverlapped(request, step);
  }
  Status Start(const Request& request) override { return Breaks(request) ? Gone() : real_->Start(request); }
  Status Drain(int32_t* first_error) override { return broken_ ? Gone() : real_->Drain(first_error); }
  void SetAbandonCheck(std::function<std::string()> check) override { real_->SetAbandonCheck(std::move(check)); }
  uint64_t next_sequence() override { return real_->next_sequence(); }
  bool PeerGone() override { return broken_; }

 private:
  bool Breaks(const Request& request) {
    if (armed_ && request.op == dp::kOpMemcpyHtoD && request.payload_len >= (uint64_t{32} << 20) &&
        ++large_uploads_ == 2) {
      broken_ = true;
    }
    return broken_;
  }
  static Status Gone() { return Status::Unavailable("the new agent went away mid-restore"); }
  std::unique_ptr<transport::ClientConnection> real_;
  const bool armed_ = g_break_restore.exchange(false);
  int large_uploads_ = 0;
  bool broken_ = false;
};

std::unique_ptr<transport::ClientConnection> OpenBreakingSession(const GpuLocation& location,
                                                                 dp::DeviceDescription* description, std::string* why,
                                                                 int32_t* refusal) {
  ++g_sessions_opened;
  auto real = OpenSession(location, description, why, refusal);
  if (real == nullptr) return nullptr;
  return std::make_unique<BreaksMidRestore>(std::move(real));
}

// The first recovery's session breaks after one range was restored and before the other
// was: that recovery fails as a whole (its session, and what it restored, are dropped) and
// the next one, on a fresh session, restores everything again. No byte comes from the
// broken one.
TEST_F(LargeRestoreTest, ARestoreBrokenMidwayIsRetriedWholeOnAFreshSession) {
  g_sessions_opened = 0;
  g_break_restore = false;
  failover_ = std::make_unique<Failover>(Replay(), 0, 0, lease_file_, OpenBreakingSession);
  channel_.location = {first_->uuid, first_->endpoint};
  std::string why;
  int32_t refusal = 0;
  channel_.connection = OpenBreakingSession(channel_.location, &channel_.description, &why, &refusal);
  ASSERT_NE(channel_.connection, nullptr) << why;
  PrepareLarge();
  first_->server.reset();
  NameInLease(*second_);
  g_break_restore = true;  // the next session opened: the recovery's first
  ExpectLargeRangesMatch();
  EXPECT_FALSE(g_break_restore.load());
  EXPECT_EQ(g_sessions_opened.load(), 3);  // the first, the broken recovery, the one that held
  ASSERT_EQ(failover_->recoveries().size(), 1u);
  EXPECT_EQ(failover_->recoveries()[0].to.uuid, second_->uuid);
}

TEST(FailoverConfig, BadValuesAreNamedAndDefaultsKept) {
  setenv("GPUPOOL_FAILOVER", "sometimes", 1);
  setenv("GPUPOOL_CHECKPOINT_MEM", "lots", 1);
  setenv("GPUPOOL_CHECKPOINT_INTERVAL", "2.5", 1);
  setenv("GPUPOOL_RECOVERY_DEADLINE", "-1", 1);
  setenv("GPUPOOL_CHECKPOINT_SCOPE", "all", 1);
  std::vector<std::string> errors;
  FailoverConfig config = FailoverConfig::FromEnvironment(&errors);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[0].find("GPUPOOL_FAILOVER='sometimes'"), std::string::npos);
  EXPECT_NE(errors[1].find("GPUPOOL_CHECKPOINT_MEM='lots'"), std::string::npos);
  EXPECT_NE(errors[2].find("GPUPOOL_RECOVERY_DEADLINE='-1'"), std::string::npos);
  EXPECT_EQ(config.mode, FailoverConfig::Mode::kReplay);
  EXPECT_EQ(config.checkpoint_mem, uint64_t{4} << 30);
  EXPECT_EQ(config.checkpoint_interval, std::chrono::milliseconds(2500));
  EXPECT_TRUE(config.scope_all);
  for (const char* name : {"GPUPOOL_FAILOVER", "GPUPOOL_CHECKPOINT_MEM", "GPUPOOL_CHECKPOINT_INTERVAL",
                           "GPUPOOL_RECOVERY_DEADLINE", "GPUPOOL_CHECKPOINT_SCOPE"}) {
    unsetenv(name);
  }
  uint64_t bytes = 0;
  EXPECT_TRUE(ParseByteSize("512M", &bytes));
  EXPECT_EQ(bytes, uint64_t{512} << 20);
  EXPECT_FALSE(ParseByteSize("12Q", &bytes));
  setenv("GPUPOOL_FAILOVER", "migrate", 1);
  errors.clear();
  EXPECT_EQ(FailoverConfig::FromEnvironment(&errors).mode, FailoverConfig::Mode::kMigrate);
  EXPECT_TRUE(errors.empty());
  unsetenv("GPUPOOL_FAILOVER");
  EXPECT_FALSE(ParseByteSize("", &bytes));
  EXPECT_TRUE(FailoverConfig::FromEnvironment(&errors).recover_together);
  setenv("GPUPOOL_RECOVER_TOGETHER", "off", 1);
  EXPECT_FALSE(FailoverConfig::FromEnvironment(&errors).recover_together);
  setenv("GPUPOOL_RECOVER_TOGETHER", "maybe", 1);
  EXPECT_TRUE(FailoverConfig::FromEnvironment(&errors).recover_together);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("GPUPOOL_RECOVER_TOGETHER='maybe'"), std::string::npos);
  unsetenv("GPUPOOL_RECOVER_TOGETHER");
  errors.clear();
  EXPECT_TRUE(FailoverConfig::FromEnvironment(&errors).copy_on_write);
  setenv("GPUPOOL_COPY_ON_WRITE", "off", 1);
  EXPECT_FALSE(FailoverConfig::FromEnvironment(&errors).copy_on_write);
  setenv("GPUPOOL_COPY_ON_WRITE", "1", 1);
  EXPECT_TRUE(FailoverConfig::FromEnvironment(&errors).copy_on_write);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("GPUPOOL_COPY_ON_WRITE='1'"), std::string::npos);
  unsetenv("GPUPOOL_COPY_ON_WRITE");
  errors.clear();
  EXPECT_EQ(FailoverConfig::FromEnvironment(&errors).restore_streams, 2u);
  setenv("GPUPOOL_RESTORE_STREAMS", "4", 1);
  EXPECT_EQ(FailoverConfig::FromEnvironment(&errors).restore_streams, 4u);
  for (const char* bad : {"0", "9", "two", "-1", "3x"}) {
    setenv("GPUPOOL_RESTORE_STREAMS", bad, 1);
    EXPECT_EQ(FailoverConfig::FromEnvironment(&errors).restore_streams, 2u) << bad;
  }
  ASSERT_EQ(errors.size(), 5u);
  EXPECT_NE(errors[0].find("GPUPOOL_RESTORE_STREAMS='0' is not a number from 1 to 8"), std::string::npos) << errors[0];
  unsetenv("GPUPOOL_RESTORE_STREAMS");
}

}  // namespace
}  // namespace gpupool::client

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "remote/dataplane/server.h"
#include "remote/device/device_kind.h"
#include "remote/devices/sim/sim_kind.h"
#include "remote/protocol/protocol.h"
#include "remote/transport/rpc_client.h"
#include "tests/remote/test_backend.h"

namespace gpupool::dataplane {
namespace {

using transport::Reply;
using transport::Request;
using transport::RpcClient;
using Clock = std::chrono::steady_clock;

// The test backend, plus what the threading tests need: a delay per operation,
// a `hang` like the sim backend's fault (BeforeOperation of that GPU blocks
// until cleared), and how many operations ran inside BeforeOperation at once.
class RecordingBackend : public testing::TestBackend {
 public:
  using TestBackend::TestBackend;

  Status BeforeOperation(int index) override {
    int inside = ++inside_;
    int most = max_inside_.load();
    while (inside > most && !max_inside_.compare_exchange_weak(most, inside)) {
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (hung_ == index) {
        ++hung_calls_;
        // Bounded, so that a broken test cannot hang ctest: far longer than any
        // assertion.
        released_.wait_for(lock, std::chrono::seconds(30), [&] { return hung_ != index; });
        --hung_calls_;
      }
    }
    // After the hang's check: an operation already delayed is not caught by a later hang.
    if (int delay = delay_ms_.load(); delay > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    }
    --inside_;
    return TestBackend::BeforeOperation(index);
  }

  void Hang(int index) {
    std::lock_guard<std::mutex> lock(mu_);
    hung_ = index;
  }
  void Clear() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hung_ = -1;
    }
    released_.notify_all();
  }
  int hung_calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return hung_calls_;
  }
  void set_delay_ms(int ms) { delay_ms_ = ms; }
  int max_inside() const { return max_inside_.load(); }
  int inside() const { return inside_.load(); }

 private:
  std::atomic<int> delay_ms_{0};
  std::atomic<int> inside_{0};
  std::atomic<int> max_inside_{0};
  std::mutex mu_;
  std::condition_variable released_;
  int hung_ = -1;       // guarded by mu_
  int hung_calls_ = 0;  // guarded by mu_
};

class DataplaneServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "lo", 1);
    device::RegisterDeviceKind(devices::MakeSimKind());  // as the agent's main does
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.backend = &backend_;
    Grant("L7", "secret", 1);
    options.authorize = [this](const std::string& lease, const std::string& token, const std::string& uuid) {
      if (lease == "slow") {  // an authorizer waiting for gpupoold, then refusing
        slow_hellos_started_++;
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        return false;
      }
      std::lock_guard<std::mutex> lock(mu_);
      auto found = grants_.find(uuid);
      return found != grants_.end() && found->second.first == lease && found->second.second == token;
    };
    options.authorization_epoch = [this] { return epoch_.load(); };
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server.value());
  }

  void TearDown() override { backend_.Clear(); }  // the server's GPU threads must end

  // A connection for GPU `gpu` (the lane key the client names at the
  // handshake).
  std::unique_ptr<RpcClient> Connect(int gpu = 1) {
    auto client = RpcClient::Connect("127.0.0.1:" + std::to_string(server_->port()), testing::TestGpuUuid(gpu));
    EXPECT_TRUE(client.ok()) << client.status().message();
    return client.ok() ? std::move(client.value()) : nullptr;
  }

  Reply Hello(RpcClient* client, const char* lease, const char* token, const std::string& uuid) {
    HelloArgs hello;
    std::snprintf(hello.lease_id, sizeof(hello.lease_id), "%s", lease);
    std::snprintf(hello.token, sizeof(hello.token), "%s", token);
    std::snprintf(hello.gpu_uuid, sizeof(hello.gpu_uuid), "%s", uuid.c_str());
    Reply reply;
    EXPECT_TRUE(client->Call(Request{kOpHello, &hello, sizeof(hello), nullptr, 0, nullptr, 0}, &reply).ok());
    return reply;
  }

  MemInfoResult MemoryInfo(RpcClient* client) {
    Reply reply;
    MemInfoResult info{};
    EXPECT_TRUE(client->Call(Request{kOpMemGetInfo, nullptr, 0, nullptr, 0, nullptr, 0}, &reply).ok());
    EXPECT_EQ(reply.out.size(), sizeof(info));
    std::memcpy(&info, reply.out.data(), std::min(reply.out.size(), sizeof(info)));
    return info;
  }

  // Like the agent's lease table: which lease (and token) holds which GPU. `bump`: tell
  // the server the table changed (as the agent's heartbeat does).
  void Grant(const std::string& lease, const std::string& token, int gpu, bool bump = true) {
    std::lock_guard<std::mutex> lock(mu_);
    grants_[testing::TestGpuUuid(gpu)] = {lease, token};
    if (bump) ++epoch_;
  }
  void Ungrant(int gpu) {
    std::lock_guard<std::mutex> lock(mu_);
    grants_.erase(testing::TestGpuUuid(gpu));
    ++epoch_;
  }

  // An attached client; nullptr (and a test failure) when the hello is refused.
  std::unique_ptr<RpcClient> Attach(const char* lease, const char* token, int gpu) {
    auto client = Connect(gpu);
    if (!client) return nullptr;
    Reply reply = Hello(client.get(), lease, token, testing::TestGpuUuid(gpu));
    EXPECT_EQ(reply.status, kCuSuccess) << reply.out;
    return reply.status == kCuSuccess ? std::move(client) : nullptr;
  }

  int32_t Alloc(RpcClient* client, uint64_t size, uint64_t* dptr) {
    MemAllocArgs args{size};
    Reply reply;
    EXPECT_TRUE(client->Call(Request{kOpMemAlloc, &args, sizeof(args), nullptr, 0, nullptr, 0}, &reply).ok());
    MemAllocResult result{};
    if (reply.out.size() == sizeof(result)) std::memcpy(&result, reply.out.data(), sizeof(result));
    *dptr = result.dptr;
    return reply.status;
  }
  int32_t Write(RpcClient* client, uint64_t dptr, const std::vector<char>& data) {
    MemcpyHtoDArgs args{dptr, data.size(), 0};
    Reply reply;
    EXPECT_TRUE(
        client->Call(Request{kOpMemcpyHtoD, &args, sizeof(args), data.data(), data.size(), nullptr, 0}, &reply).ok());
    return reply.status;
  }
  int32_t Read(RpcClient* client, uint64_t dptr, std::vector<char>* data) {
    MemcpyDtoHArgs args{dptr, data->size(), 0};
    Reply reply;
    EXPECT_TRUE(
        client->Call(Request{kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0, data->data(), data->size()}, &reply).ok());
    return reply.status;
  }

  std::mutex mu_;
  std::map<std::string, std::pair<std::string, std::string>> grants_;  // uuid -> lease, token
  std::atomic<uint64_t> epoch_{1};
  std::atomic<int> slow_hellos_started_{0};
  RecordingBackend backend_{2, uint64_t{4} << 30};
  std::unique_ptr<Server> server_;
};

TEST_F(DataplaneServerTest, RefusesAClientWhoseLeaseDoesNotHoldTheGpu) {
  auto client = Connect();
  Reply reply = Hello(client.get(), "L7", "wrong", testing::TestGpuUuid(1));
  EXPECT_EQ(reply.status, kCuNotPermitted);
  EXPECT_NE(reply.out.find("does not hold GPU"), std::string::npos) << reply.out;
  // GPU 0 is not this lease's, even with the right token.
  client = Connect(0);
  reply = Hello(client.get(), "L7", "secret", testing::TestGpuUuid(0));
  EXPECT_EQ(reply.status, kCuNotPermitted);
  client = Connect();
  reply = Hello(client.get(), "L7", "secret", "GPU-nonexistent");
  EXPECT_EQ(reply.status, kCuNoDevice);
}

TEST_F(DataplaneServerTest, RequestsBeforeHelloAreRefused) {
  auto client = Connect();
  Reply reply;
  MemAllocArgs alloc{1024};
  ASSERT_TRUE(client->Call(Request{kOpMemAlloc, &alloc, sizeof(alloc), nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, kCuNotPermitted);
}

// A launch whose flags hold a bit the protocol does not define, or whose cluster shape is
// not one a driver takes, is refused before anything else is looked at.
TEST_F(DataplaneServerTest, ALaunchWithUnknownFlagsIsRefused) {
  auto client = Connect();
  ASSERT_EQ(Hello(client.get(), "L7", "secret", testing::TestGpuUuid(1)).status, kCuSuccess);
  auto launch = [&](uint32_t flags, uint8_t reserved, std::array<uint8_t, 3> cluster = {0, 0, 0},
                    std::array<uint32_t, 3> grid = {1, 1, 1}) {
    LaunchArgs args{};
    args.function = 12345;  // no such function
    std::copy(grid.begin(), grid.end(), args.grid);
    args.block[0] = args.block[1] = args.block[2] = 1;
    args.flags = flags;
    std::copy(cluster.begin(), cluster.end(), args.cluster);
    args.reserved = reserved;
    Reply reply;
    EXPECT_TRUE(client->Call(Request{kOpLaunch, &args, sizeof(args), nullptr, 0, nullptr, 0}, &reply).ok());
    return reply.status;
  };
  EXPECT_EQ(launch(4, 0), kCuInvalidValue);
  EXPECT_EQ(launch(kLaunchCooperative | 8, 0), kCuInvalidValue);
  EXPECT_EQ(launch(0, 1), kCuInvalidValue);
  EXPECT_EQ(launch(0, 0, {2, 1, 1}, {2, 1, 1}), kCuInvalidValue);  // a cluster's shape without the flag
  // A cluster's shape as a driver checks it: every dimension at least 1 and dividing the
  // grid's, at most 16 blocks.
  EXPECT_EQ(launch(kLaunchCluster, 0), kCuInvalidClusterSize);
  EXPECT_EQ(launch(kLaunchCluster, 0, {2, 1, 1}, {3, 1, 1}), kCuInvalidClusterSize);
  EXPECT_EQ(launch(kLaunchCluster, 0, {4, 1, 0}, {4, 1, 1}), kCuInvalidClusterSize);
  EXPECT_EQ(launch(kLaunchCluster, 0, {16, 2, 1}, {16, 2, 1}), kCuInvalidClusterSize);
  // Well-formed, it gets as far as the function lookup.
  EXPECT_EQ(launch(0, 0), kCuInvalidHandle);
  EXPECT_EQ(launch(kLaunchCooperative, 0), kCuInvalidHandle);
  EXPECT_EQ(launch(kLaunchCluster, 0, {2, 2, 1}, {4, 2, 1}), kCuInvalidHandle);
  EXPECT_EQ(launch(kLaunchCluster | kLaunchCooperative, 0, {16, 1, 1}, {32, 1, 1}), kCuInvalidHandle);
}

// A texture object's fields are checked as a driver checks them before an executor sees
// them; the sim makes none itself (the library writes its descriptors into device memory).
TEST_F(DataplaneServerTest, TextureObjectRequestsAreCheckedAndTheSimMakesNone) {
  auto client = Connect();
  ASSERT_EQ(Hello(client.get(), "L7", "secret", testing::TestGpuUuid(1)).status, kCuSuccess);
  auto create = [&](const TexObjectCreateArgs& args) {
    Reply reply;
    EXPECT_TRUE(client->Call(Request{kOpTexObjectCreate, &args, sizeof(args), nullptr, 0, nullptr, 0}, &reply).ok());
    EXPECT_TRUE(reply.status != kCuSuccess || reply.out.size() == sizeof(uint64_t));
    return reply.status;
  };
  TexObjectCreateArgs linear;
  linear.device_ptr = 1 << 20;
  linear.size_bytes = 4096;
  linear.resource_type = kResourceTypeLinear;
  linear.format = 0x20;
  linear.channels = 4;
  EXPECT_EQ(create(linear), kCuNotSupported);
  TexObjectCreateArgs bad = linear;
  bad.resource_type = kResourceTypeArray;  // an array's texture names no format of its own
  EXPECT_EQ(create(bad), kCuInvalidValue);
  TexObjectCreateArgs over_array;
  over_array.resource_type = kResourceTypeArray;
  over_array.device_ptr = 5;
  EXPECT_EQ(create(over_array), kCuNotSupported);
  bad = linear;
  bad.format = 0x50;  // not a texel format
  EXPECT_EQ(create(bad), kCuInvalidValue);
  bad = linear;
  bad.channels = 3;
  EXPECT_EQ(create(bad), kCuInvalidValue);
  bad = linear;
  bad.size_bytes = 8;  // under one element of 16 bytes
  EXPECT_EQ(create(bad), kCuInvalidValue);
  bad = linear;
  bad.address_mode[2] = 4;
  EXPECT_EQ(create(bad), kCuInvalidValue);
  bad = linear;
  bad.flags = 0x80;
  EXPECT_EQ(create(bad), kCuInvalidValue);
  bad = linear;
  bad.reserved = 1;
  EXPECT_EQ(create(bad), kCuInvalidValue);
  TexObjectCreateArgs pitched = linear;
  pitched.resource_type = kResourceTypePitch2D;
  pitched.size_bytes = 0;
  pitched.width = 64;
  pitched.height = 4;
  pitched.pitch = 1024;
  EXPECT_EQ(create(pitched), kCuNotSupported);
  bad = pitched;
  bad.pitch = 512;  // under a row of 64 * 16 bytes
  EXPECT_EQ(create(bad), kCuInvalidValue);
  bad = pitched;
  bad.pitch = UINT64_MAX;  // the rows' extent overflows
  EXPECT_EQ(create(bad), kCuInvalidValue);
  bad = pitched;
  bad.pitch = uint64_t{1} << 62;  // 4 rows of it wrap to 0 exactly
  bad.height = 5;
  EXPECT_EQ(create(bad), kCuInvalidValue);
  bad = pitched;
  bad.width = uint64_t{1} << 62;
  bad.pitch = UINT64_MAX;
  EXPECT_EQ(create(bad), kCuInvalidValue);
  TexObjectDestroyArgs destroy{12345};
  Reply reply;
  ASSERT_TRUE(
      client->Call(Request{kOpTexObjectDestroy, &destroy, sizeof(destroy), nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, kCuNotSupported);
}

// CUDA arrays' requests are checked before an executor sees them (a copy's payload is the
// size of its region); the sim makes none (the library lays its arrays out in memory).
TEST_F(DataplaneServerTest, ArrayRequestsAreCheckedAndTheSimMakesNone) {
  auto client = Connect();
  ASSERT_EQ(Hello(client.get(), "L7", "secret", testing::TestGpuUuid(1)).status, kCuSuccess);
  auto send = [&](uint32_t op, const void* args, size_t size, const void* payload = nullptr, size_t payload_len = 0) {
    Reply reply;
    EXPECT_TRUE(client->Call(Request{op, args, size, payload, payload_len, nullptr, 0}, &reply).ok());
    return reply.status;
  };
  ArrayCreateArgs create;
  create.array = 5;
  create.width = 16;
  create.format = 0x20;
  create.channels = 1;
  EXPECT_EQ(send(kOpArrayCreate, &create, sizeof(create)), kCuNotSupported);
  ArrayCreateArgs bad = create;
  bad.array = 0;
  EXPECT_EQ(send(kOpArrayCreate, &bad, sizeof(bad)), kCuInvalidValue);
  bad = create;
  bad.channels = 3;
  EXPECT_EQ(send(kOpArrayCreate, &bad, sizeof(bad)), kCuInvalidValue);
  bad = create;
  bad.flags = 0x10;
  EXPECT_EQ(send(kOpArrayCreate, &bad, sizeof(bad)), kCuInvalidValue);
  bad = create;
  bad.format = 0x50;
  EXPECT_EQ(send(kOpArrayCreate, &bad, sizeof(bad)), kCuInvalidValue);

  ArrayCopyArgs copy;
  copy.array = 5;
  copy.width_bytes = 64;
  copy.height = 2;
  copy.depth = 1;
  copy.to_array = 1;
  std::vector<char> payload(128);
  EXPECT_EQ(send(kOpArrayCopy, &copy, sizeof(copy), payload.data(), payload.size()), kCuNotSupported);
  EXPECT_EQ(send(kOpArrayCopy, &copy, sizeof(copy), payload.data(), 127), kCuInvalidValue);
  ArrayCopyArgs bad_copy = copy;
  bad_copy.depth = 0;
  EXPECT_EQ(send(kOpArrayCopy, &bad_copy, sizeof(bad_copy), payload.data(), 0), kCuInvalidValue);
  bad_copy = copy;
  bad_copy.other_kind = 3;
  EXPECT_EQ(send(kOpArrayCopy, &bad_copy, sizeof(bad_copy), payload.data(), payload.size()), kCuInvalidValue);
  bad_copy = copy;
  bad_copy.width_bytes = uint64_t{1} << 40;  // the region's bytes overflow
  bad_copy.height = uint64_t{1} << 30;
  EXPECT_EQ(send(kOpArrayCopy, &bad_copy, sizeof(bad_copy), payload.data(), payload.size()), kCuInvalidValue);
  bad_copy = copy;
  bad_copy.other_kind = kArrayCopyDevice;  // device memory: no payload
  EXPECT_EQ(send(kOpArrayCopy, &bad_copy, sizeof(bad_copy), payload.data(), payload.size()), kCuInvalidValue);
  bad_copy.to_array = 0;
  EXPECT_EQ(send(kOpArrayCopy, &bad_copy, sizeof(bad_copy)), kCuNotSupported);

  ArrayDestroyArgs destroy{5};
  EXPECT_EQ(send(kOpArrayDestroy, &destroy, sizeof(destroy)), kCuNotSupported);
  SurfObjectCreateArgs surface{5};
  EXPECT_EQ(send(kOpSurfObjectCreate, &surface, sizeof(surface)), kCuNotSupported);
  TexObjectDestroyArgs gone{7};
  EXPECT_EQ(send(kOpSurfObjectDestroy, &gone, sizeof(gone)), kCuNotSupported);

  // Mipmapped arrays: the descriptor as an array's, 1 to 18 levels, the levels' ids nonzero,
  // not wrapping, and not the mipmapped array's own.
  MipmappedArrayCreateArgs mipmapped;
  mipmapped.descriptor = create;
  mipmapped.first_level = 6;
  mipmapped.levels = 4;
  EXPECT_EQ(send(kOpMipmappedArrayCreate, &mipmapped, sizeof(mipmapped)), kCuNotSupported);
  EXPECT_EQ(send(kOpMipmappedArrayCreate, &mipmapped, sizeof(mipmapped) - 8), kCuInvalidValue);
  auto refused = [&](auto change) {
    MipmappedArrayCreateArgs bad_mipmapped = mipmapped;
    change(&bad_mipmapped);
    return send(kOpMipmappedArrayCreate, &bad_mipmapped, sizeof(bad_mipmapped)) == kCuInvalidValue;
  };
  EXPECT_TRUE(refused([](MipmappedArrayCreateArgs* a) { a->levels = 0; }));
  EXPECT_TRUE(refused([](MipmappedArrayCreateArgs* a) { a->levels = kMaxMipmapLevels + 1; }));
  EXPECT_TRUE(refused([](MipmappedArrayCreateArgs* a) { a->first_level = 0; }));
  EXPECT_TRUE(refused([](MipmappedArrayCreateArgs* a) { a->first_level = ~uint64_t{0} - 2; }));  // wraps
  EXPECT_TRUE(refused([](MipmappedArrayCreateArgs* a) { a->first_level = 3; }));  // 3-6 holds its own id, 5
  EXPECT_TRUE(refused([](MipmappedArrayCreateArgs* a) { a->reserved = 1; }));
  EXPECT_TRUE(refused([](MipmappedArrayCreateArgs* a) { a->descriptor.channels = 3; }));
  EXPECT_TRUE(refused([](MipmappedArrayCreateArgs* a) { a->descriptor.array = 0; }));
  EXPECT_EQ(send(kOpMipmappedArrayDestroy, &destroy, sizeof(destroy)), kCuNotSupported);
  // A texture over one names only its id.
  TexObjectCreateArgs texture;
  texture.resource_type = kResourceTypeMipmappedArray;
  texture.device_ptr = 5;
  EXPECT_EQ(send(kOpTexObjectCreate, &texture, sizeof(texture)), kCuNotSupported);
  texture.format = 0x20;
  EXPECT_EQ(send(kOpTexObjectCreate, &texture, sizeof(texture)), kCuInvalidValue);
}

// Tensor maps of the GPU's driver (kOpTensorMap): a request of another size, an unknown kind
// or an encoding of no rank 1 to 5 is refused (INVALID_VALUE) before any executor sees it;
// the sim, whose maps the library writes itself, makes none (NOT_SUPPORTED).
TEST_F(DataplaneServerTest, TensorMapRequestsAreCheckedAndTheSimMakesNone) {
  auto client = Connect();
  ASSERT_EQ(Hello(client.get(), "L7", "secret", testing::TestGpuUuid(1)).status, kCuSuccess);
  auto send = [&](const void* args, size_t len) {
    Reply reply;
    EXPECT_TRUE(client->Call(Request{kOpTensorMap, args, len, nullptr, 0, nullptr, 0}, &reply).ok());
    EXPECT_TRUE(reply.status != kCuSuccess || reply.out.size() == 128);
    return reply.status;
  };
  TensorMapArgs map;
  map.rank = 2;
  map.address = 4096;
  EXPECT_EQ(send(&map, sizeof(map)), kCuNotSupported);
  EXPECT_EQ(send(&map, sizeof(map) - 1), kCuInvalidValue);
  for (uint32_t rank : {0u, 6u}) {
    TensorMapArgs bad = map;
    bad.rank = rank;
    EXPECT_EQ(send(&bad, sizeof(bad)), kCuInvalidValue) << rank;
  }
  TensorMapArgs bad = map;
  bad.kind = 2;
  EXPECT_EQ(send(&bad, sizeof(bad)), kCuInvalidValue);
  bad = map;
  bad.kind = kTensorMapReplaceAddress;  // no rank needed
  bad.rank = 0;
  EXPECT_EQ(send(&bad, sizeof(bad)), kCuNotSupported);
}

TEST_F(DataplaneServerTest, DescribesTheGpuAndFreesMemoryWhenTheClientGoes) {
  auto client = Connect();
  Reply reply = Hello(client.get(), "L7", "secret", testing::TestGpuUuid(1));
  ASSERT_EQ(reply.status, kCuSuccess) << reply.out;
  DeviceDescription description;
  ASSERT_EQ(reply.out.size(), sizeof(description));
  std::memcpy(&description, reply.out.data(), sizeof(description));
  EXPECT_STREQ(description.uuid, testing::TestGpuUuid(1).c_str());
  EXPECT_EQ(description.total_memory, uint64_t{4} << 30);
  EXPECT_STREQ(description.executor, "sim");

  MemAllocArgs alloc{uint64_t{1} << 30};
  ASSERT_TRUE(client->Call(Request{kOpMemAlloc, &alloc, sizeof(alloc), nullptr, 0, nullptr, 0}, &reply).ok());
  ASSERT_EQ(reply.status, kCuSuccess);
  EXPECT_EQ(MemoryInfo(client.get()).free, uint64_t{3} << 30);
  client.reset();  // the client goes away without freeing

  auto other = Connect();
  ASSERT_EQ(Hello(other.get(), "L7", "secret", testing::TestGpuUuid(1)).status, kCuSuccess);
  uint64_t free_bytes = 0;
  for (int i = 0; i < 100; ++i) {
    free_bytes = MemoryInfo(other.get()).free;
    if (free_bytes == uint64_t{4} << 30) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(free_bytes, uint64_t{4} << 30);
}

TEST_F(DataplaneServerTest, AFailedGpuFailsOperationsAndStaysFailed) {
  auto client = Connect();
  ASSERT_EQ(Hello(client.get(), "L7", "secret", testing::TestGpuUuid(1)).status, kCuSuccess);
  backend_.Fail();
  Reply reply;
  MemAllocArgs alloc{1024};
  ASSERT_TRUE(client->Call(Request{kOpMemAlloc, &alloc, sizeof(alloc), nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, kCuEccUncorrectable);
  EXPECT_GT(backend_.operations(), 0);
  StreamArgs sync{0, 0, 0};
  ASSERT_TRUE(client->Call(Request{kOpContextSynchronize, &sync, sizeof(sync), nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, kCuEccUncorrectable);
}

}  // namespace
}  // namespace gpupool::dataplane

namespace gpupool::dataplane {
namespace {

// A second client, with its own lease on another GPU or a second process of the same
// lease on the same GPU, cannot read or write the first one's memory by address.
TEST_F(DataplaneServerTest, AClientReachesOnlyItsOwnMemory) {
  Grant("L8", "other", 0);
  auto owner = Attach("L7", "secret", 1);
  ASSERT_NE(owner, nullptr);
  uint64_t secret = 0;
  ASSERT_EQ(Alloc(owner.get(), 4096, &secret), kCuSuccess);
  std::vector<char> data(4096, 's');
  ASSERT_EQ(Write(owner.get(), secret, data), kCuSuccess);

  auto other_lease = Attach("L8", "other", 0);
  auto same_lease = Attach("L7", "secret", 1);
  ASSERT_NE(other_lease, nullptr);
  ASSERT_NE(same_lease, nullptr);
  for (RpcClient* intruder : {other_lease.get(), same_lease.get()}) {
    std::vector<char> stolen(4096, 0);
    EXPECT_EQ(Read(intruder, secret, &stolen), kCuInvalidValue);
    EXPECT_EQ(stolen, std::vector<char>(4096, 0));
    std::vector<char> small(16, 0);
    EXPECT_EQ(Read(intruder, secret + 1024, &small), kCuInvalidValue);
    EXPECT_EQ(Write(intruder, secret, std::vector<char>(4096, 'x')), kCuInvalidValue);
    MemsetArgs memset{secret, 4096, 0, 1, 0};
    Reply reply;
    ASSERT_TRUE(intruder->Call(Request{kOpMemset, &memset, sizeof(memset), nullptr, 0, nullptr, 0}, &reply).ok());
    EXPECT_EQ(reply.status, kCuInvalidValue);
    MemFreeArgs free_args{secret};
    ASSERT_TRUE(
        intruder->Call(Request{kOpMemFree, &free_args, sizeof(free_args), nullptr, 0, nullptr, 0}, &reply).ok());
    EXPECT_EQ(reply.status, kCuInvalidValue);
  }
  std::vector<char> back(4096, 0);
  ASSERT_EQ(Read(owner.get(), secret, &back), kCuSuccess);
  EXPECT_EQ(back, data);
}

// Restore streams (protocol.h, kOpRestoreOffer): a connection on a GPU's restore lane that
// attached with the offering session's ticket writes that session's memory, and only that,
// until the session runs a request again; no one else's ticket, GPU or memory will do.
class RestoreStreamsTest : public DataplaneServerTest {
 protected:
  std::unique_ptr<RpcClient> ConnectRestore(int gpu = 1) {
    auto client = RpcClient::Connect("127.0.0.1:" + std::to_string(server_->port()),
                                     testing::TestGpuUuid(gpu) + kRestoreLaneSuffix);
    EXPECT_TRUE(client.ok()) << client.status().message();
    return client.ok() ? std::move(client.value()) : nullptr;
  }
  RestoreOfferResult Offer(RpcClient* session) {
    Reply reply;
    EXPECT_TRUE(session->Call(Request{kOpRestoreOffer, nullptr, 0, nullptr, 0, nullptr, 0}, &reply).ok());
    EXPECT_EQ(reply.status, kCuSuccess) << reply.out;
    RestoreOfferResult offer{};
    EXPECT_EQ(reply.out.size(), sizeof(offer));
    std::memcpy(&offer, reply.out.data(), std::min(reply.out.size(), sizeof(offer)));
    return offer;
  }
  Reply AttachStream(RpcClient* stream, const char* ticket) {
    RestoreAttachArgs attach;
    std::snprintf(attach.ticket, sizeof(attach.ticket), "%s", ticket);
    Reply reply;
    EXPECT_TRUE(stream->Call(Request{kOpRestoreAttach, &attach, sizeof(attach), nullptr, 0, nullptr, 0}, &reply).ok());
    return reply;
  }
  // A server of its own whose watchdog reports a GPU hung after `hang_timeout`; a session on
  // GPU 1 holding `bytes` at `memory`, and `streams` restore streams attached to its offer.
  struct WatchedOffer {
    std::unique_ptr<Server> server;
    std::unique_ptr<RpcClient> session;
    std::vector<std::unique_ptr<RpcClient>> streams;
    uint64_t memory = 0;
  };
  void StartWatchedOffer(std::chrono::milliseconds hang_timeout, uint64_t bytes, size_t streams,
                         WatchedOffer* watched) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.backend = &backend_;
    options.authorize = [](const std::string&, const std::string&, const std::string&) { return true; };
    options.hang_timeout = hang_timeout;
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status().message();
    watched->server = std::move(server.value());
    const std::string endpoint = "127.0.0.1:" + std::to_string(watched->server->port());
    auto session = RpcClient::Connect(endpoint, testing::TestGpuUuid(1));
    ASSERT_TRUE(session.ok());
    watched->session = std::move(session.value());
    ASSERT_EQ(Hello(watched->session.get(), "any", "any", testing::TestGpuUuid(1)).status, kCuSuccess);
    ASSERT_EQ(Alloc(watched->session.get(), bytes, &watched->memory), kCuSuccess);
    const RestoreOfferResult offer = Offer(watched->session.get());
    for (size_t i = 0; i < streams; ++i) {
      auto stream = RpcClient::Connect(endpoint, testing::TestGpuUuid(1) + kRestoreLaneSuffix);
      ASSERT_TRUE(stream.ok());
      ASSERT_EQ(AttachStream(stream.value().get(), offer.ticket).status, kCuSuccess);
      watched->streams.push_back(std::move(stream.value()));
    }
  }
  // A one-way copy of `data` to `dptr`.
  Status PostCopy(RpcClient* stream, uint64_t dptr, const std::vector<char>& data) {
    MemcpyHtoDArgs args{dptr, data.size(), 0};
    return stream->Post(Request{kOpMemcpyHtoD, &args, sizeof(args), data.data(), data.size(), nullptr, 0});
  }
  // Whether the backend hears of one more GPU failure than `before` within 3 s.
  bool ReportedOnceMore(int before) {
    const auto deadline = Clock::now() + std::chrono::seconds(3);
    while (backend_.reported_failures() == before && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return backend_.reported_failures() == before + 1;
  }
  Reply WriteReply(RpcClient* client, uint64_t dptr, const std::vector<char>& data, uint64_t stream = 0) {
    MemcpyHtoDArgs args{dptr, data.size(), stream};
    Reply reply;
    EXPECT_TRUE(
        client->Call(Request{kOpMemcpyHtoD, &args, sizeof(args), data.data(), data.size(), nullptr, 0}, &reply).ok());
    return reply;
  }
};

TEST_F(RestoreStreamsTest, AStreamWritesOnlyTheOfferingSessionsMemoryUntilItRunsAgain) {
  constexpr uint64_t kSize = uint64_t{4} << 20;
  auto session = Attach("L7", "secret", 1);
  auto neighbour = Attach("L7", "secret", 1);  // the same lease's other process
  ASSERT_NE(session, nullptr);
  ASSERT_NE(neighbour, nullptr);
  uint64_t mine = 0, theirs = 0;
  ASSERT_EQ(Alloc(session.get(), kSize, &mine), kCuSuccess);
  ASSERT_EQ(Alloc(neighbour.get(), 4096, &theirs), kCuSuccess);
  ASSERT_EQ(Write(neighbour.get(), theirs, std::vector<char>(4096, 'n')), kCuSuccess);

  // Nothing before an attach, and no hello on a restore lane.
  auto unattached = ConnectRestore();
  Reply reply = WriteReply(unattached.get(), mine, std::vector<char>(4096, 'x'));
  EXPECT_EQ(reply.status, kCuNotPermitted);
  EXPECT_NE(reply.out.find("first request attaches it"), std::string::npos) << reply.out;
  auto hello = ConnectRestore();
  EXPECT_EQ(Hello(hello.get(), "L7", "secret", testing::TestGpuUuid(1)).status, kCuNotPermitted);

  // An offer takes no arguments; a good one gives a ticket and the lane count.
  char junk[8] = {};
  ASSERT_TRUE(session->Call(Request{kOpRestoreOffer, junk, sizeof(junk), nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, kCuInvalidValue);
  EXPECT_NE(reply.out.find("takes no arguments"), std::string::npos) << reply.out;
  const RestoreOfferResult offer = Offer(session.get());
  EXPECT_EQ(std::string(offer.ticket).size(), 64u);
  EXPECT_EQ(offer.streams, 2u);

  auto guesser = ConnectRestore();
  reply = AttachStream(guesser.get(), std::string(64, '0').c_str());
  EXPECT_EQ(reply.status, kCuNotPermitted);
  EXPECT_NE(reply.out.find("no such restore ticket"), std::string::npos) << reply.out;
  auto other_gpu = ConnectRestore(0);  // GPU 0's lane, GPU 1's ticket
  reply = AttachStream(other_gpu.get(), offer.ticket);
  EXPECT_EQ(reply.status, kCuNotPermitted);
  EXPECT_NE(reply.out.find("no such restore ticket for this GPU"), std::string::npos) << reply.out;

  auto first = ConnectRestore();
  auto second = ConnectRestore();
  auto third = ConnectRestore();
  ASSERT_EQ(AttachStream(first.get(), offer.ticket).status, kCuSuccess);
  ASSERT_EQ(AttachStream(second.get(), offer.ticket).status, kCuSuccess);
  reply = AttachStream(third.get(), offer.ticket);
  EXPECT_EQ(reply.status, kCuNotPermitted);
  EXPECT_NE(reply.out.find("all its 2 streams"), std::string::npos) << reply.out;
  EXPECT_EQ(AttachStream(first.get(), offer.ticket).status, kCuInvalidValue);  // once: and closed
  first = ConnectRestore();
  EXPECT_EQ(AttachStream(first.get(), offer.ticket).status, kCuNotPermitted);  // a slot is a slot

  // Half each: one posted (its error would come with the next reply), one called.
  std::vector<char> low(kSize / 2), high(kSize / 2);
  for (size_t i = 0; i < low.size(); ++i) {
    low[i] = static_cast<char>(i * 7);
    high[i] = static_cast<char>(i * 13 + 1);
  }
  MemcpyHtoDArgs posted{mine, low.size(), 0};
  ASSERT_TRUE(second->Post(Request{kOpMemcpyHtoD, &posted, sizeof(posted), low.data(), low.size(), nullptr, 0}).ok());
  reply = WriteReply(second.get(), mine + kSize / 2, high);
  EXPECT_EQ(reply.status, kCuSuccess);
  EXPECT_EQ(reply.async_status, kCuSuccess);
  // The neighbour's memory, and memory past the session's, are not the session's.
  EXPECT_EQ(WriteReply(second.get(), theirs, std::vector<char>(4096, 'x')).status, kCuInvalidValue);
  EXPECT_EQ(WriteReply(second.get(), mine + kSize - 16, std::vector<char>(32, 'x')).status, kCuInvalidValue);
  // A one-way copy that fails says so in the next reply.
  MemcpyHtoDArgs bad{theirs, 16, 0};
  std::vector<char> sixteen(16, 'x');
  ASSERT_TRUE(second->Post(Request{kOpMemcpyHtoD, &bad, sizeof(bad), sixteen.data(), 16, nullptr, 0}).ok());
  reply = WriteReply(second.get(), mine, std::vector<char>(0));
  EXPECT_EQ(reply.async_status, kCuInvalidValue);

  // The session's next request ends the offer: it reads what the stream wrote, and the
  // stream writes no more.
  std::vector<char> back(kSize);
  ASSERT_EQ(Read(session.get(), mine, &back), kCuSuccess);
  EXPECT_TRUE(std::equal(low.begin(), low.end(), back.begin()));
  EXPECT_TRUE(std::equal(high.begin(), high.end(), back.begin() + kSize / 2));
  reply = WriteReply(second.get(), mine, std::vector<char>(4096, 'x'));
  EXPECT_EQ(reply.status, kCuNotPermitted);
  EXPECT_NE(reply.out.find("the restore offer ended"), std::string::npos) << reply.out;
  auto late = ConnectRestore();
  EXPECT_EQ(AttachStream(late.get(), offer.ticket).status, kCuNotPermitted);
  std::vector<char> neighbours(4096);
  ASSERT_EQ(Read(neighbour.get(), theirs, &neighbours), kCuSuccess);
  EXPECT_EQ(neighbours, std::vector<char>(4096, 'n'));
  ASSERT_EQ(Read(session.get(), mine, &back), kCuSuccess);
  EXPECT_EQ(back[0], low[0]);

  // Only on its own stream 0; other requests close the stream.
  const RestoreOfferResult again = Offer(session.get());
  auto streamer = ConnectRestore();
  ASSERT_EQ(AttachStream(streamer.get(), again.ticket).status, kCuSuccess);
  reply = WriteReply(streamer.get(), mine, std::vector<char>(4096, 'x'), /*stream=*/7);
  EXPECT_EQ(reply.status, kCuNotPermitted);
  EXPECT_NE(reply.out.find("only copies to the device, on stream 0"), std::string::npos) << reply.out;
  auto allocator = ConnectRestore();
  ASSERT_EQ(AttachStream(allocator.get(), again.ticket).status, kCuSuccess);
  uint64_t more = 0;
  EXPECT_EQ(Alloc(allocator.get(), 4096, &more), kCuNotPermitted);

  // A session that closes ends its offer before its memory goes.
  const RestoreOfferResult last = Offer(session.get());
  auto orphan = ConnectRestore();
  ASSERT_EQ(AttachStream(orphan.get(), last.ticket).status, kCuSuccess);
  session.reset();
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  do {
    reply = WriteReply(orphan.get(), mine, std::vector<char>(4096, 'x'));
  } while (reply.status == kCuSuccess && Clock::now() < deadline);
  EXPECT_EQ(reply.status, kCuNotPermitted);
}

TEST_F(RestoreStreamsTest, ARevokedSessionsOfferEndsAndAServerWithoutLanesOffersNone) {
  auto session = Attach("L7", "secret", 1);
  ASSERT_NE(session, nullptr);
  uint64_t mine = 0;
  ASSERT_EQ(Alloc(session.get(), 4096, &mine), kCuSuccess);
  const RestoreOfferResult offer = Offer(session.get());
  auto stream = ConnectRestore();
  ASSERT_EQ(AttachStream(stream.get(), offer.ticket).status, kCuSuccess);
  Ungrant(1);  // the lease lost the GPU: the server's tick revokes the session
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  Reply reply;
  do {
    reply = WriteReply(stream.get(), mine, std::vector<char>(4096, 'x'));
  } while (reply.status == kCuSuccess && Clock::now() < deadline);
  EXPECT_EQ(reply.status, kCuNotPermitted);
  EXPECT_NE(reply.out.find("the restore offer ended"), std::string::npos) << reply.out;

  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.backend = &backend_;
  options.authorize = [](const std::string&, const std::string&, const std::string&) { return true; };
  options.restore_streams = 0;
  auto plain = Server::Start(options);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  auto client = RpcClient::Connect("127.0.0.1:" + std::to_string(plain.value()->port()), testing::TestGpuUuid(1));
  ASSERT_TRUE(client.ok());
  ASSERT_EQ(Hello(client.value().get(), "any", "any", testing::TestGpuUuid(1)).status, kCuSuccess);
  ASSERT_TRUE(client.value()->Call(Request{kOpRestoreOffer, nullptr, 0, nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, kCuNotSupported);
  EXPECT_NE(reply.out.find("takes no restore streams"), std::string::npos) << reply.out;
  options.restore_streams = kMaxRestoreStreams + 1;
  auto too_many = Server::Start(options);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("restore streams"), std::string::npos);
}

// A copy a restore stream runs is watched as the session's own operations are: a GPU that
// hangs in it is reported, though the session itself runs nothing meanwhile.
TEST_F(RestoreStreamsTest, AGpuThatHangsInARestoreCopyIsFoundHung) {
  WatchedOffer watched;
  ASSERT_NO_FATAL_FAILURE(StartWatchedOffer(std::chrono::milliseconds(300), 4096, 1, &watched));
  const int reported = backend_.reported_failures();
  backend_.Hang(1);
  std::vector<char> bytes(4096, 'h');
  ASSERT_TRUE(PostCopy(watched.streams[0].get(), watched.memory, bytes).ok());
  EXPECT_TRUE(ReportedOnceMore(reported)) << "the watchdog did not see the restore copy";
  backend_.Clear();
}

// Two restore lanes copy at once: the GPU hangs in the second copy just after the first one
// ended. The watchdog's mark stays while any copy runs, so the hang is still seen.
TEST_F(RestoreStreamsTest, AGpuThatHangsInOneStreamsCopyIsFoundHungAfterTheOthersCopyEnds) {
  WatchedOffer watched;
  ASSERT_NO_FATAL_FAILURE(StartWatchedOffer(std::chrono::milliseconds(400), 8192, 2, &watched));
  const int reported = backend_.reported_failures();
  std::vector<char> bytes(4096, 'h');
  // The first copy runs 250 ms (under hang_timeout), past the hang's check.
  backend_.set_delay_ms(250);
  ASSERT_TRUE(PostCopy(watched.streams[0].get(), watched.memory, bytes).ok());
  for (int i = 0; i < 200 && backend_.inside() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(backend_.inside(), 1) << "the first copy never reached the GPU";
  backend_.set_delay_ms(0);
  backend_.Hang(1);
  ASSERT_TRUE(PostCopy(watched.streams[1].get(), watched.memory + 4096, bytes).ok());
  for (int i = 0; i < 200 && backend_.hung_calls() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(backend_.hung_calls(), 1) << "the second copy never reached the hung GPU";
  // The first copy ends now; the second stays hung.
  for (int i = 0; i < 500 && backend_.inside() > 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(backend_.inside(), 1) << "the first copy did not end";
  EXPECT_TRUE(ReportedOnceMore(reported))
      << "the watchdog stopped watching when the first copy ended, with the second hung";
  backend_.Clear();
}

// A request that names the owner's connection but comes from another client's endpoint
// (replayed id), or names a guessed id, reaches nothing.
TEST_F(DataplaneServerTest, GuessedAndReplayedConnectionIdsReachNothing) {
  auto owner = Attach("L7", "secret", 1);
  ASSERT_NE(owner, nullptr);
  uint64_t secret = 0;
  ASSERT_EQ(Alloc(owner.get(), 1 << 20, &secret), kCuSuccess);
  std::vector<char> data(1 << 20, 'o');
  ASSERT_EQ(Write(owner.get(), secret, data), kCuSuccess);
  const uint64_t owner_id = owner->connection_id_for_testing();

  auto attacker = Connect();  // no lease at all
  ASSERT_NE(attacker, nullptr);
  const uint64_t own_id = attacker->connection_id_for_testing();
  MemsetArgs memset{secret, 1 << 20, 0x41, 1, 0};
  MemFreeArgs free_args{secret};
  std::vector<char> junk(1 << 20, 'j');
  MemcpyHtoDArgs copy{secret, junk.size(), 0};
  for (uint64_t forged : {owner_id, owner_id ^ 1, owner_id + 1}) {
    attacker->set_connection_id_for_testing(forged);
    ASSERT_TRUE(attacker->Post(Request{kOpMemset, &memset, sizeof(memset), nullptr, 0, nullptr, 0}).ok());
    ASSERT_TRUE(attacker->Post(Request{kOpMemcpyHtoD, &copy, sizeof(copy), junk.data(), junk.size(), nullptr, 0}).ok());
    ASSERT_TRUE(attacker->Post(Request{kOpMemFree, &free_args, sizeof(free_args), nullptr, 0, nullptr, 0}).ok());
  }
  // On its own id the attacker is what it is: not attached.
  attacker->set_connection_id_for_testing(own_id);
  Reply reply;
  ASSERT_TRUE(attacker->Call(Request{kOpMemGetInfo, nullptr, 0, nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, kCuNotPermitted);

  std::vector<char> back(1 << 20, 0);
  ASSERT_EQ(Read(owner.get(), secret, &back), kCuSuccess);
  EXPECT_TRUE(back == data);
  // Nothing failed on the owner's connection either (no async error from a forgery).
  ASSERT_TRUE(owner->Call(Request{kOpMemGetInfo, nullptr, 0, nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.status, kCuSuccess);
  EXPECT_EQ(reply.async_status, kCuSuccess);
}

// The lease is released while the client is idle: within a second its session is closed
// and its memory freed, without any request from it.
TEST_F(DataplaneServerTest, ARevokedSessionIsClosedWithinASecond) {
  auto client = Attach("L7", "secret", 1);
  ASSERT_NE(client, nullptr);
  uint64_t big = 0;
  ASSERT_EQ(Alloc(client.get(), uint64_t{2} << 30, &big), kCuSuccess);
  ASSERT_EQ(server_->attached_sessions(), 1u);

  Ungrant(1);
  auto start = std::chrono::steady_clock::now();
  while (server_->attached_sessions() != 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(3)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(server_->attached_sessions(), 0u);
  EXPECT_LT(took, std::chrono::seconds(1));
  std::printf("revoked session closed after %.0f ms\n", std::chrono::duration<double, std::milli>(took).count());

  // The connection is gone: the client's next call fails (or, had it raced the close,
  // would be refused as revoked).
  Reply reply;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Status status = client->Call(Request{kOpMemGetInfo, nullptr, 0, nullptr, 0, nullptr, 0}, &reply);
  EXPECT_TRUE(!status.ok() || reply.status == kCuNotPermitted);

  // Its memory is free for the GPU's next lease; the old token no longer attaches.
  auto old = Connect();
  EXPECT_EQ(Hello(old.get(), "L7", "secret", testing::TestGpuUuid(1)).status, kCuNotPermitted);
  Grant("L9", "next", 1);
  auto next = Attach("L9", "next", 1);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(MemoryInfo(next.get()).free, uint64_t{4} << 30);
}

// Revoked while large device-to-host replies are sending from the session's memory: the
// memory outlives the send (it goes when the connection closes), and the server lives on.
TEST_F(DataplaneServerTest, RevokingASessionWhileItsRepliesAreSendingIsSafe) {
  auto client = Attach("L7", "secret", 1);
  ASSERT_NE(client, nullptr);
  const uint64_t size = 32 << 20;  // rendezvous
  uint64_t dptr = 0;
  ASSERT_EQ(Alloc(client.get(), size, &dptr), kCuSuccess);
  std::vector<char> buffer(size);
  int reads = 0;
  std::thread reader([&] {
    MemcpyDtoHArgs args{dptr, size, 0};
    Reply reply;
    while (client->Call(Request{kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0, buffer.data(), size}, &reply).ok() &&
           reply.status == kCuSuccess) {
      ++reads;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  Ungrant(1);
  reader.join();
  EXPECT_GT(reads, 0);
  Grant("L9", "next", 1);
  auto next = Attach("L9", "next", 1);
  ASSERT_NE(next, nullptr);
  for (int i = 0; i < 100 && MemoryInfo(next.get()).free != uint64_t{4} << 30; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(MemoryInfo(next.get()).free, uint64_t{4} << 30);
}

// A request that comes right after the revocation is refused as such, by name.
TEST_F(DataplaneServerTest, RequestsOfARevokedSessionAreNotPermitted) {
  auto client = Attach("L7", "secret", 1);
  ASSERT_NE(client, nullptr);
  Grant("L7", "secret", 0);  // the lease moved to GPU 0 (a swap): GPU 1 is no longer its
  Ungrant(1);
  Reply reply;
  Status status = client->Call(Request{kOpMemGetInfo, nullptr, 0, nullptr, 0, nullptr, 0}, &reply);
  if (status.ok()) {  // (unless the server's tick closed the connection first)
    EXPECT_EQ(reply.status, kCuNotPermitted);
    EXPECT_NE(reply.out.find("revoked"), std::string::npos) << reply.out;
  }
  // After the swap the old GPU refuses the token; the new one takes it.
  auto old = Connect();
  EXPECT_EQ(Hello(old.get(), "L7", "secret", testing::TestGpuUuid(1)).status, kCuNotPermitted);
  EXPECT_NE(Attach("L7", "secret", 0), nullptr);
}

// A GPU handed to another lease: that lease's hello revokes the old lease's sessions at
// once, before its own session starts, even if the old lease has not been seen to go.
TEST_F(DataplaneServerTest, ANewLeasesHelloRevokesTheOldLeasesSessionsOnThatGpu) {
  auto old = Attach("L7", "secret", 1);
  ASSERT_NE(old, nullptr);
  uint64_t dptr = 0;
  ASSERT_EQ(Alloc(old.get(), uint64_t{1} << 30, &dptr), kCuSuccess);
  Grant("L8", "new", 1, /*bump=*/false);
  auto next = Attach("L8", "new", 1);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(MemoryInfo(next.get()).free, uint64_t{4} << 30);  // the old memory is gone
  Reply reply;
  Status status = old->Call(Request{kOpMemGetInfo, nullptr, 0, nullptr, 0, nullptr, 0}, &reply);
  EXPECT_TRUE(!status.ok() || reply.status == kCuNotPermitted);
}

}  // namespace
}  // namespace gpupool::dataplane

namespace gpupool::dataplane {
namespace {

// A connection runs on the thread of the GPU it named at the handshake; a hello
// naming another GPU (whose revocations that thread does not see) is refused,
// even with a lease that holds that other GPU.
TEST_F(DataplaneServerTest, AHelloForAnotherGpuThanTheConnectionsIsRefused) {
  auto client = Connect(0);
  Reply reply = Hello(client.get(), "L7", "secret", testing::TestGpuUuid(1));
  EXPECT_EQ(reply.status, kCuInvalidValue);
  EXPECT_NE(reply.out.find("connection was opened for GPU " + testing::TestGpuUuid(0)), std::string::npos) << reply.out;
  EXPECT_EQ(server_->attached_sessions(), 0u);
}

// What one client's program did, and when.
struct ProgramRun {
  Clock::time_point start, end;
  bool ok = false;
};

// alloc, write, read back, compare, free: `rounds` times.
ProgramRun RunProgram(RpcClient* client, int rounds) {
  ProgramRun run;
  run.start = Clock::now();
  run.ok = true;
  for (int i = 0; i < rounds && run.ok; ++i) {
    MemAllocArgs alloc{1 << 16};
    Reply reply;
    run.ok = client->Call(Request{kOpMemAlloc, &alloc, sizeof(alloc), nullptr, 0, nullptr, 0}, &reply).ok() &&
             reply.status == kCuSuccess;
    MemAllocResult result{};
    if (!run.ok || reply.out.size() != sizeof(result)) break;
    std::memcpy(&result, reply.out.data(), sizeof(result));
    std::vector<char> data(1 << 16, static_cast<char>('a' + i));
    MemcpyHtoDArgs put{result.dptr, data.size(), 0};
    run.ok =
        client->Call(Request{kOpMemcpyHtoD, &put, sizeof(put), data.data(), data.size(), nullptr, 0}, &reply).ok() &&
        reply.status == kCuSuccess;
    std::vector<char> back(data.size());
    MemcpyDtoHArgs get{result.dptr, back.size(), 0};
    run.ok =
        run.ok &&
        client->Call(Request{kOpMemcpyDtoH, &get, sizeof(get), nullptr, 0, back.data(), back.size()}, &reply).ok() &&
        reply.status == kCuSuccess && back == data;
    MemFreeArgs free_args{result.dptr};
    run.ok = run.ok &&
             client->Call(Request{kOpMemFree, &free_args, sizeof(free_args), nullptr, 0, nullptr, 0}, &reply).ok() &&
             reply.status == kCuSuccess;
  }
  run.end = Clock::now();
  return run;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Each GPU has its own thread: two clients of two GPUs run at once. Every
// operation takes 50 ms on the GPU (backend delay), so one thread for both
// would run them one after the other (at least 2 x 3 x 4 x 50 ms = 1200 ms,
// never two operations at once); in parallel they take 600 ms plus the
// transport's share.
TEST_F(DataplaneServerTest, TwoClientsOnTwoGpusRunAtTheSameTime) {
  Grant("L8", "eight", 0);
  auto a = Attach("L8", "eight", 0);
  auto b = Attach("L7", "secret", 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  backend_.set_delay_ms(50);
  ProgramRun run_a, run_b;
  auto started = Clock::now();
  std::thread thread_a([&] { run_a = RunProgram(a.get(), 3); });
  std::thread thread_b([&] { run_b = RunProgram(b.get(), 3); });
  thread_a.join();
  thread_b.join();
  auto elapsed = Clock::now() - started;
  backend_.set_delay_ms(0);
  EXPECT_TRUE(run_a.ok);
  EXPECT_TRUE(run_b.ok);
  // Their runs overlap in time, and their operations ran on the GPUs at the
  // same moment.
  std::printf("client A %.0f..%.0f ms, client B %.0f..%.0f ms, together %.0f ms\n", Ms(run_a.start - started),
              Ms(run_a.end - started), Ms(run_b.start - started), Ms(run_b.end - started), Ms(elapsed));
  EXPECT_LT(run_a.start, run_b.end);
  EXPECT_LT(run_b.start, run_a.end);
  EXPECT_EQ(backend_.max_inside(), 2);
  EXPECT_LT(Ms(elapsed), 1150.0) << "the two clients' operations ran one after the other";
}

// A GPU that hangs holds its own clients only: a client of the other GPU of the
// same agent runs its whole program in normal time meanwhile.
TEST_F(DataplaneServerTest, AHungGpuDelaysOnlyItsOwnClients) {
  Grant("L8", "eight", 0);
  auto stuck = Attach("L8", "eight", 0);
  auto fine = Attach("L7", "secret", 1);
  ASSERT_NE(stuck, nullptr);
  ASSERT_NE(fine, nullptr);
  ProgramRun quick = RunProgram(fine.get(), 20);  // the normal time of the program
  ASSERT_TRUE(quick.ok);

  backend_.Hang(0);
  std::atomic<bool> stuck_returned{false};
  int32_t stuck_status = -1;
  std::thread stuck_thread([&] {
    MemAllocArgs alloc{1 << 20};
    Reply reply;
    if (stuck->Call(Request{kOpMemAlloc, &alloc, sizeof(alloc), nullptr, 0, nullptr, 0}, &reply).ok()) {
      stuck_status = reply.status;
    }
    stuck_returned = true;
  });
  for (int i = 0; i < 200 && backend_.hung_calls() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(backend_.hung_calls(), 1) << "GPU 0's client never reached the hung GPU";

  ProgramRun during = RunProgram(fine.get(), 20);
  EXPECT_TRUE(during.ok);
  std::printf("program on GPU 1: %.1f ms alone, %.1f ms while GPU 0 hangs\n", Ms(quick.end - quick.start),
              Ms(during.end - during.start));
  EXPECT_LT(Ms(during.end - during.start), 5 * Ms(quick.end - quick.start) + 200.0);
  EXPECT_FALSE(stuck_returned.load()) << "GPU 0's client should still wait for its GPU";

  backend_.Clear();  // the GPU recovers: its client goes on
  stuck_thread.join();
  EXPECT_EQ(stuck_status, kCuSuccess);
}

// A hello whose lease check is slow (the authorizer waiting for gpupoold) is
// checked off the GPU's thread: an attached client of that same GPU keeps its
// normal call latency.
TEST_F(DataplaneServerTest, ASlowHandshakeDoesNotDelayDataCalls) {
  auto attached = Attach("L7", "secret", 1);
  ASSERT_NE(attached, nullptr);
  std::atomic<bool> slow_done{false};
  int32_t slow_status = -1;
  std::thread slow([&] {
    auto client = Connect(1);
    if (client) slow_status = Hello(client.get(), "slow", "x", testing::TestGpuUuid(1)).status;
    slow_done = true;
  });
  for (int i = 0; i < 400 && slow_hellos_started_.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(slow_hellos_started_.load(), 1);

  double slowest_ms = 0;
  auto started = Clock::now();
  for (int i = 0; i < 50; ++i) {
    auto call_start = Clock::now();
    MemoryInfo(attached.get());
    slowest_ms = std::max(slowest_ms, Ms(Clock::now() - call_start));
  }
  double total_ms = Ms(Clock::now() - started);
  bool finished_during_calls = slow_done.load();
  std::printf("50 calls during a 1.5 s hello: %.1f ms, slowest %.1f ms\n", total_ms, slowest_ms);
  EXPECT_FALSE(finished_during_calls) << "the slow hello was not slow: the test proves nothing";
  EXPECT_LT(slowest_ms, 250.0);
  EXPECT_LT(total_ms, 1000.0);
  slow.join();
  EXPECT_EQ(slow_status, kCuNotPermitted);  // the slow authorizer refused it
}

}  // namespace
}  // namespace gpupool::dataplane

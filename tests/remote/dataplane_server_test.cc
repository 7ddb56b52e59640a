#include "remote/dataplane/server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "remote/dataplane/protocol.h"
#include "remote/transport/rpc_client.h"
#include "tests/remote/test_backend.h"

namespace gpupool::dataplane {
namespace {

using transport::Reply;
using transport::Request;
using transport::RpcClient;

class DataplaneServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "lo", 1);
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.backend = &backend_;
    Grant("L7", "secret", 1);
    options.authorize = [this](const std::string& lease, const std::string& token,
                               const std::string& uuid) {
      std::lock_guard<std::mutex> lock(mu_);
      auto found = grants_.find(uuid);
      return found != grants_.end() && found->second.first == lease &&
             found->second.second == token;
    };
    options.authorization_epoch = [this] { return epoch_.load(); };
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server.value());
  }

  std::unique_ptr<RpcClient> Connect() {
    auto client = RpcClient::Connect("127.0.0.1:" + std::to_string(server_->port()));
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
    auto client = Connect();
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
    EXPECT_TRUE(client->Call(Request{kOpMemcpyHtoD, &args, sizeof(args), data.data(), data.size(), nullptr, 0}, &reply).ok());
    return reply.status;
  }
  int32_t Read(RpcClient* client, uint64_t dptr, std::vector<char>* data) {
    MemcpyDtoHArgs args{dptr, data->size(), 0};
    Reply reply;
    EXPECT_TRUE(client->Call(Request{kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0, data->data(), data->size()}, &reply).ok());
    return reply.status;
  }

  std::mutex mu_;
  std::map<std::string, std::pair<std::string, std::string>> grants_;  // uuid -> lease, token
  std::atomic<uint64_t> epoch_{1};
  testing::TestBackend backend_{2, uint64_t{4} << 30};
  std::unique_ptr<Server> server_;
};

TEST_F(DataplaneServerTest, RefusesAClientWhoseLeaseDoesNotHoldTheGpu) {
  auto client = Connect();
  Reply reply = Hello(client.get(), "L7", "wrong", testing::TestGpuUuid(1));
  EXPECT_EQ(reply.status, kCuNotPermitted);
  EXPECT_NE(reply.out.find("does not hold GPU"), std::string::npos) << reply.out;
  // GPU 0 is not this lease's, even with the right token.
  client = Connect();
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
    ASSERT_TRUE(intruder->Call(Request{kOpMemFree, &free_args, sizeof(free_args), nullptr, 0, nullptr, 0}, &reply).ok());
    EXPECT_EQ(reply.status, kCuInvalidValue);
  }
  std::vector<char> back(4096, 0);
  ASSERT_EQ(Read(owner.get(), secret, &back), kCuSuccess);
  EXPECT_EQ(back, data);
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
  while (server_->attached_sessions() != 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(3)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(server_->attached_sessions(), 0u);
  EXPECT_LT(took, std::chrono::seconds(1));
  std::printf("revoked session closed after %.0f ms\n",
              std::chrono::duration<double, std::milli>(took).count());

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

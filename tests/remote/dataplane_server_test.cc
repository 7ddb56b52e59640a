#include "remote/dataplane/server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

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
    options.authorize = [](const std::string& lease, const std::string& token,
                           const std::string& uuid) {
      return lease == "L7" && token == "secret" && uuid == testing::TestGpuUuid(1);
    };
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

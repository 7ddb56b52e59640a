#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include "remote/transport/bootstrap.h"
#include "remote/transport/rpc_client.h"
#include "remote/transport/rpc_server.h"

namespace gpupool::transport {
namespace {

enum TestOp : uint32_t { kEchoArgs = 1, kEchoPayload, kFail, kCloseAfter, kIntoBuffer };

// Echoes what it gets; kFail fails with status 7; kIntoBuffer receives bulk data in place.
class EchoHandler : public RpcHandler {
 public:
  void OnConnect(ConnectionId id, const std::string&) override {
    ++connects;
    std::lock_guard<std::mutex> lock(mu);
    ids.push_back(id);
  }
  void* BulkDestination(ConnectionId, const RequestHeader& header, std::string_view,
                        size_t len) override {
    if (header.op != kIntoBuffer) return nullptr;
    in_place.resize(len);
    return in_place.data();
  }
  void OnRequest(ConnectionId id, const RequestHeader& header, std::string_view args,
                 const void* payload, size_t payload_len, ServerReply* reply) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      requests_of[id].emplace_back(args);
    }
    switch (header.op) {
      case kEchoArgs:
        reply->out.assign(args.data(), args.size());
        break;
      case kEchoPayload:
        echoed.assign(static_cast<const char*>(payload), static_cast<const char*>(payload) + payload_len);
        reply->bulk = echoed.data();
        reply->bulk_len = echoed.size();
        break;
      case kFail:
        reply->status = 7;
        break;
      case kCloseAfter:
        reply->close_after = true;
        break;
      case kIntoBuffer:
        reply->status = (payload == in_place.data()) ? 0 : 9;
        break;
    }
    // The transport leaves async error bookkeeping to the handler (the dataplane does it).
    if ((header.flags & kFlagOneWay) && reply->status != 0) pending_async = reply->status;
    if (!(header.flags & kFlagOneWay)) {
      reply->async_status = pending_async;
      pending_async = 0;
    }
  }
  void OnDisconnect(ConnectionId, const std::string& reason) override {
    ++disconnects;
    std::lock_guard<std::mutex> lock(mu);
    disconnect_reasons.push_back(reason);
  }
  void OnTick(std::vector<std::pair<ConnectionId, std::string>>* close) override {
    ++ticks;
    std::lock_guard<std::mutex> lock(mu);
    for (ConnectionId id : to_close) close->emplace_back(id, "closed by the test");
    to_close.clear();
  }
  std::vector<std::string> RequestsOf(ConnectionId id) {
    std::lock_guard<std::mutex> lock(mu);
    auto found = requests_of.find(id);
    return found == requests_of.end() ? std::vector<std::string>{} : found->second;
  }

  std::atomic<int> connects{0}, disconnects{0}, ticks{0};
  std::mutex mu;
  std::vector<ConnectionId> ids;                                 // guarded by mu
  std::map<ConnectionId, std::vector<std::string>> requests_of;  // args; guarded by mu
  std::vector<std::string> disconnect_reasons;                   // guarded by mu
  std::vector<ConnectionId> to_close;                            // guarded by mu
  std::vector<char> echoed, in_place;
  int32_t pending_async = 0;
};

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "lo", 1);
    auto server = RpcServer::Start("127.0.0.1:0", &handler_);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server.value());
    auto client = RpcClient::Connect("127.0.0.1:" + std::to_string(server_->port()));
    ASSERT_TRUE(client.ok()) << client.status().message();
    client_ = std::move(client.value());
  }

  EchoHandler handler_;
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<RpcClient> client_;
};

TEST_F(TransportTest, ArgumentsComeBackInline) {
  const char args[] = "hello, server";
  Request request{kEchoArgs, args, sizeof(args), nullptr, 0, nullptr, 0};
  Reply reply;
  ASSERT_TRUE(client_->Call(request, &reply).ok());
  EXPECT_EQ(reply.status, 0);
  EXPECT_EQ(reply.out, std::string(args, sizeof(args)));
}

TEST_F(TransportTest, BulkDataOfEverySizeRoundTrips) {
  for (size_t size : {size_t{0}, size_t{64}, size_t{65536}, size_t{4} << 20, size_t{64} << 20}) {
    std::vector<char> out(size), back(size, 0);
    for (size_t i = 0; i < size; ++i) out[i] = static_cast<char>(i * 31 + size);
    Request request{kEchoPayload, nullptr, 0, out.data(), size, back.data(), size};
    Reply reply;
    ASSERT_TRUE(client_->Call(request, &reply).ok()) << size;
    EXPECT_EQ(reply.bulk_received, size);
    EXPECT_TRUE(out == back) << "size " << size;
  }
}

TEST_F(TransportTest, BulkDataLandsWhereTheHandlerSays) {
  std::vector<char> out(8 << 20, 'x');  // large enough for rendezvous
  Request request{kIntoBuffer, nullptr, 0, out.data(), out.size(), nullptr, 0};
  Reply reply;
  ASSERT_TRUE(client_->Call(request, &reply).ok());
  EXPECT_EQ(reply.status, 0);
  EXPECT_TRUE(handler_.in_place == out);
}

TEST_F(TransportTest, OneWayErrorsArriveWithTheNextReply) {
  Request fail{kFail, nullptr, 0, nullptr, 0, nullptr, 0};
  ASSERT_TRUE(client_->Post(fail).ok());
  Request echo{kEchoArgs, "x", 1, nullptr, 0, nullptr, 0};
  Reply reply;
  ASSERT_TRUE(client_->Call(echo, &reply).ok());
  EXPECT_EQ(reply.status, 0);
  EXPECT_EQ(reply.async_status, 7);
  ASSERT_TRUE(client_->Call(echo, &reply).ok());
  EXPECT_EQ(reply.async_status, 0);  // reported once
}

TEST_F(TransportTest, StartedRequestsCompleteByDrain) {
  std::vector<std::vector<char>> outs, backs;
  for (int i = 0; i < 3; ++i) {
    outs.emplace_back(1 << 20, static_cast<char>('a' + i));
    backs.emplace_back(1 << 20, 0);
  }
  for (int i = 0; i < 3; ++i) {
    Request request{kEchoPayload, nullptr, 0, outs[i].data(), outs[i].size(), backs[i].data(),
                    backs[i].size()};
    ASSERT_TRUE(client_->Start(request).ok());
  }
  int32_t first_error = -1;
  ASSERT_TRUE(client_->Drain(&first_error).ok());
  EXPECT_EQ(first_error, 0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(outs[i] == backs[i]) << i;
}

TEST_F(TransportTest, ServerClosingAfterAReplyBreaksTheConnection) {
  Request close_request{kCloseAfter, nullptr, 0, nullptr, 0, nullptr, 0};
  Reply reply;
  ASSERT_TRUE(client_->Call(close_request, &reply).ok());
  Request echo{kEchoArgs, "x", 1, nullptr, 0, nullptr, 0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  Status status;
  while (std::chrono::steady_clock::now() < deadline) {
    status = client_->Call(echo, &reply);
    if (!status.ok()) break;
  }
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), Status::Code::kUnavailable);
  for (int i = 0; i < 100 && handler_.disconnects == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(handler_.disconnects, 1);
}

TEST_F(TransportTest, ServerDeathIsNoticed) {
  server_.reset();
  Request echo{kEchoArgs, "x", 1, nullptr, 0, nullptr, 0};
  Reply reply;
  auto start = std::chrono::steady_clock::now();
  Status status = client_->Call(echo, &reply);
  EXPECT_FALSE(status.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Who may send on a connection: only the client at the end of its endpoint. Another
// client that replays the victim's connection id, or guesses one, reaches nothing.
TEST_F(TransportTest, AnotherEndpointCannotUseAConnectionsId) {
  Request echo{kEchoArgs, "victim", 6, nullptr, 0, nullptr, 0};
  Reply reply;
  ASSERT_TRUE(client_->Call(echo, &reply).ok());
  const uint64_t victim = client_->connection_id_for_testing();
  ASSERT_EQ(handler_.RequestsOf(victim).size(), 1u);

  auto attacker = RpcClient::Connect("127.0.0.1:" + std::to_string(server_->port()));
  ASSERT_TRUE(attacker.ok()) << attacker.status().message();
  const uint64_t own = attacker.value()->connection_id_for_testing();
  ASSERT_NE(own, victim);
  attacker.value()->set_connection_id_for_testing(victim);  // replayed
  ASSERT_TRUE(attacker.value()->Post(Request{kEchoArgs, "replayed", 8, nullptr, 0, nullptr, 0}).ok());
  attacker.value()->set_connection_id_for_testing(victim + 1);  // guessed
  ASSERT_TRUE(attacker.value()->Post(Request{kEchoArgs, "guessed", 7, nullptr, 0, nullptr, 0}).ok());
  // Its own id still works (and, being ordered after them, shows the forgeries were read).
  attacker.value()->set_connection_id_for_testing(own);
  ASSERT_TRUE(attacker.value()->Call(Request{kEchoArgs, "own", 3, nullptr, 0, nullptr, 0}, &reply).ok());
  EXPECT_EQ(reply.out, "own");
  ASSERT_TRUE(client_->Call(echo, &reply).ok());

  EXPECT_EQ(handler_.RequestsOf(victim), (std::vector<std::string>{"victim", "victim"}));
  EXPECT_EQ(handler_.RequestsOf(own), (std::vector<std::string>{"own"}));
  EXPECT_TRUE(handler_.RequestsOf(victim + 1).empty());
  std::lock_guard<std::mutex> lock(handler_.mu);
  EXPECT_EQ(handler_.requests_of.size(), 2u);  // nothing reached any other connection
}

// Connection ids come from the kernel's random source: distinct, and spread over all
// 64 bits (a counter or a small generator would not set the high bits).
TEST_F(TransportTest, ConnectionIdsAreRandom) {
  std::set<uint64_t> ids{client_->connection_id_for_testing()};
  std::vector<std::unique_ptr<RpcClient>> clients;
  for (int i = 0; i < 8; ++i) {
    auto client = RpcClient::Connect("127.0.0.1:" + std::to_string(server_->port()));
    ASSERT_TRUE(client.ok()) << client.status().message();
    ids.insert(client.value()->connection_id_for_testing());
    clients.push_back(std::move(client.value()));
  }
  EXPECT_EQ(ids.size(), 9u);
  int high_bits = 0;
  for (uint64_t id : ids) high_bits += (id >> 56) != 0 ? 1 : 0;
  EXPECT_GE(high_bits, 6);  // P(fail) for random ids: under 1e-9
}

TEST_F(TransportTest, TheHandlerClosesConnectionsFromItsTick) {
  int ticks = handler_.ticks;
  std::this_thread::sleep_for(std::chrono::milliseconds(5 * kTickIntervalMs));
  EXPECT_GE(handler_.ticks - ticks, 2);  // ticks come while idle too
  {
    std::lock_guard<std::mutex> lock(handler_.mu);
    handler_.to_close.push_back(client_->connection_id_for_testing());
  }
  auto start = std::chrono::steady_clock::now();
  while (handler_.disconnects == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(2)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  std::lock_guard<std::mutex> lock(handler_.mu);
  EXPECT_EQ(handler_.disconnect_reasons, std::vector<std::string>{"closed by the test"});
}

// A client that exits cleanly is reported as such, not as a transport failure.
TEST_F(TransportTest, AClientsCleanExitIsReportedAsSuch) {
  client_.reset();
  for (int i = 0; i < 100 && handler_.disconnects == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::lock_guard<std::mutex> lock(handler_.mu);
  EXPECT_EQ(handler_.disconnect_reasons, std::vector<std::string>{"the client closed its connection"});
}

// A client of the previous wire version (whose requests carry no reply endpoint, and
// would be dropped) is refused at the handshake instead of left waiting.
TEST_F(TransportTest, AClientOfAnotherWireVersionIsRefusedAtTheHandshake) {
  auto fd = ConnectTcp("127.0.0.1:" + std::to_string(server_->port()), 2000);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  SetTimeouts(fd.value(), 2000);
  const uint32_t old_magic = 0x67706232;  // "gpb2": no handshake flags
  ASSERT_TRUE(SendAll(fd.value(), &old_magic, sizeof(old_magic)).ok());
  uint32_t answer = 0;
  EXPECT_FALSE(ReceiveAll(fd.value(), &answer, sizeof(answer)).ok());
  close(fd.value());
  EXPECT_EQ(handler_.connects, 1);  // only the fixture's own client
}

// Handshakes are read without blocking: a client that connects and says nothing delays
// neither another client's connection nor its calls, and is dropped after 2 s.
TEST_F(TransportTest, ASilentClientDelaysNoOtherHandshake) {
  auto silent = ConnectTcp("127.0.0.1:" + std::to_string(server_->port()), 2000);
  ASSERT_TRUE(silent.ok()) << silent.status().message();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the acceptor has it
  auto started = std::chrono::steady_clock::now();
  auto other = RpcClient::Connect("127.0.0.1:" + std::to_string(server_->port()));
  ASSERT_TRUE(other.ok()) << other.status().message();
  const char args[] = "x";
  Reply reply;
  ASSERT_TRUE(other.value()
                  ->Call(Request{kEchoArgs, args, sizeof(args), nullptr, 0, nullptr, 0}, &reply)
                  .ok());
  auto took = std::chrono::steady_clock::now() - started;
  EXPECT_LT(took, std::chrono::milliseconds(1000)) << "waited behind the silent client";
  // The silent one is dropped once its 2 s are over: its socket reads end-of-file.
  SetTimeouts(silent.value(), 5000);
  char byte;
  auto wait_started = std::chrono::steady_clock::now();
  EXPECT_EQ(recv(silent.value(), &byte, 1, 0), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - wait_started, std::chrono::milliseconds(4000));
  close(silent.value());
}

// The non-blocking reader: incomplete until the last byte, then complete with its length;
// a bad magic is an error as soon as it is in.
TEST(TransportHandshake, PartialHellosAreIncompleteUntilTheirLastByte) {
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  std::string good = u32(kBootstrapMagic) + u32(0) + u32(3) + "abc" + u32(2) + "G1";
  for (size_t n = 0; n < good.size(); ++n) {
    ClientHello hello;
    size_t used = 0;
    Result<bool> parsed = ParseClientHello(std::string_view(good).substr(0, n), &hello, &used);
    ASSERT_TRUE(parsed.ok()) << n << ": " << parsed.status().message();
    EXPECT_FALSE(parsed.value()) << n;
  }
  ClientHello hello;
  size_t used = 0;
  Result<bool> parsed = ParseClientHello(good + "extra", &hello, &used);
  ASSERT_TRUE(parsed.ok() && parsed.value());
  EXPECT_EQ(used, good.size());
  EXPECT_EQ(hello.worker_address, "abc");
  EXPECT_EQ(hello.lane_key, "G1");
  Result<bool> bad = ParseClientHello(u32(0x67706232), &hello, &used);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad magic"), std::string::npos);
  Result<bool> huge =
      ParseClientHello(u32(kBootstrapMagic) + u32(0) + u32(kMaxWorkerAddress + 1), &hello, &used);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("too large"), std::string::npos);
}

// The handshake readers name what is wrong, and an unknown flag is refused rather than
// ignored (the two ends would create endpoints that do not pair).
TEST(TransportHandshake, BadHellosAreNamed) {
  auto hello_from = [](const std::string& bytes) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    EXPECT_TRUE(SendAll(fds[1], bytes.data(), bytes.size()).ok());
    shutdown(fds[1], SHUT_WR);
    Result<ClientHello> hello = ReceiveClientHello(fds[0]);
    close(fds[0]);
    close(fds[1]);
    return hello;
  };
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto good = hello_from(u32(kBootstrapMagic) + u32(kDetectsPeerFailure) + u32(3) + "abc" + u32(4) +
                         "GPU1");
  ASSERT_TRUE(good.ok()) << good.status().message();
  EXPECT_EQ(good->flags, kDetectsPeerFailure);
  EXPECT_EQ(good->worker_address, "abc");
  EXPECT_EQ(good->lane_key, "GPU1");
  auto huge_key = hello_from(u32(kBootstrapMagic) + u32(0) + u32(3) + "abc" + u32(kMaxLaneKey + 1) +
                             std::string(kMaxLaneKey + 1, 'k'));
  ASSERT_FALSE(huge_key.ok());
  EXPECT_NE(huge_key.status().message().find("too large"), std::string::npos);
  auto bad_magic = hello_from(u32(0x67706232) + u32(0) + u32(3) + "abc");
  ASSERT_FALSE(bad_magic.ok());
  EXPECT_NE(bad_magic.status().message().find("bad magic 0x67706232"), std::string::npos);
  auto bad_flags = hello_from(u32(kBootstrapMagic) + u32(6) + u32(3) + "abc");
  ASSERT_FALSE(bad_flags.ok());
  EXPECT_NE(bad_flags.status().message().find("unknown handshake flags 0x6"), std::string::npos);
  auto empty = hello_from(u32(kBootstrapMagic) + u32(0) + u32(0));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty worker address"), std::string::npos);
  auto huge = hello_from(u32(kBootstrapMagic) + u32(0) + u32(kMaxWorkerAddress + 1));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("too large"), std::string::npos);
}

TEST(TransportErrors, BadEndpointsAreNamed) {
  auto client = RpcClient::Connect("no-port-here");
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("no-port-here"), std::string::npos);
  client = RpcClient::Connect("127.0.0.1:1");  // nobody listens on port 1
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), Status::Code::kUnavailable);
}

}  // namespace
}  // namespace gpupool::transport

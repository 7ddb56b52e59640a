// HttpServer's held answers (issue 37): an answer that waits for its change to be durable
// holds no worker, is sent when NotifyDurable reports its ticket, in request order on its
// connection, becomes 500 when the state cannot be saved, and reaches a slow reader (or
// times out) without blocking anyone.
#include <gtest/gtest.h>
#include <httplib.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <chrono>
#include <condition_variable>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "poold/http_server.h"

namespace gpupool::poold {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class HeldAnswerTest : public ::testing::Test {
 protected:
  void Start(HttpLimits limits) {
    server_ = std::make_unique<HttpServer>(limits);
    // POST /hold?ticket=N: holds its answer until N is durable. ?bytes=K: a body of K bytes.
    server_->Handle("POST", "/hold", [this](const httplib::Request& req, httplib::Response& res) {
      uint64_t ticket = std::stoull(req.get_param_value("ticket"));
      held_ok_ = HttpServer::HoldAnswerUntil(ticket);
      size_t bytes = req.has_param("bytes") ? std::stoull(req.get_param_value("bytes")) : 0;
      res.set_content(bytes > 0 ? std::string(bytes, 'x') : "held " + std::to_string(ticket), "text/plain");
      ++handled_;
    });
    server_->Handle("GET", "/now",
                    [](const httplib::Request&, httplib::Response& res) { res.set_content("now", "text/plain"); });
    // GET /spin?us=N: keeps its worker busy on the CPU for N microseconds.
    server_->Handle("GET", "/spin", [](const httplib::Request& req, httplib::Response& res) {
      const Clock::time_point until = Clock::now() + std::chrono::microseconds(std::stoll(req.get_param_value("us")));
      while (Clock::now() < until) {
      }
      res.set_content("spun", "text/plain");
    });
    // GET /block: holds its worker until Unblock() (as a handler waiting on MUNGE or Slurm).
    server_->Handle("GET", "/block", [this](const httplib::Request&, httplib::Response& res) {
      ++blocked_;
      std::unique_lock<std::mutex> lock(block_mu_);
      block_cv_.wait_for(lock, 20s, [this] { return unblocked_; });
      res.set_content("unblocked", "text/plain");
    });
    ASSERT_TRUE(server_->Bind("127.0.0.1", 0).ok());
    thread_ = std::thread([this] { server_->Serve(); });
  }
  void TearDown() override {
    Unblock();
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  std::future<httplib::Result> PostAsync(const std::string& target) {
    return std::async(std::launch::async, [this, target] {
      httplib::Client http("127.0.0.1", server_->port());
      http.set_read_timeout(10, 0);
      return http.Post(target.c_str(), "", "text/plain");
    });
  }
  void WaitHandled(int n) {
    for (int i = 0; i < 500 && handled_ < n; ++i) std::this_thread::sleep_for(10ms);
    ASSERT_EQ(handled_, n);
  }
  // A raw loopback connection to the server.
  int Connect() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(server_->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  }
  // Reads what arrives on fd within `wait`.
  static std::string ReadFor(int fd, std::chrono::milliseconds wait) {
    std::string got;
    Clock::time_point until = Clock::now() + wait;
    char buf[65536];
    while (Clock::now() < until) {
      ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        got.append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        break;
      } else {
        std::this_thread::sleep_for(5ms);
      }
    }
    return got;
  }

  void Unblock() {
    std::lock_guard<std::mutex> lock(block_mu_);
    unblocked_ = true;
    block_cv_.notify_all();
  }

  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::mutex block_mu_;
  std::condition_variable block_cv_;
  bool unblocked_ = false;  // GUARDED_BY(block_mu_)
  std::atomic<int> blocked_{0};
  std::atomic<int> handled_{0};
  std::atomic<bool> held_ok_{false};
};

TEST_F(HeldAnswerTest, AnAnswerWaitsForItsTicketWithoutHoldingAWorker) {
  HttpLimits limits;
  limits.workers = 1;
  Start(limits);
  // Before the server knows what is durable, a handler cannot hold: it must wait itself.
  auto early = PostAsync("/hold?ticket=1");
  ASSERT_TRUE(early.get());
  EXPECT_FALSE(held_ok_);

  server_->NotifyDurable(0, "");
  auto held = PostAsync("/hold?ticket=5");
  WaitHandled(2);
  EXPECT_TRUE(held_ok_);
  // The one worker is free: another request is answered while ticket 5 is not durable.
  httplib::Client http("127.0.0.1", server_->port());
  auto now = http.Get("/now");
  ASSERT_TRUE(now);
  EXPECT_EQ(now->body, "now");
  server_->NotifyDurable(4, "");
  EXPECT_EQ(held.wait_for(300ms), std::future_status::timeout) << "answered before its ticket was durable";
  server_->NotifyDurable(5, "");
  ASSERT_EQ(held.wait_for(5s), std::future_status::ready);
  httplib::Result r = held.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "held 5");
  // A ticket already durable is answered at once; a report out of order changes nothing.
  server_->NotifyDurable(3, "");
  auto done = PostAsync("/hold?ticket=5");
  ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(done.get()->body, "held 5");
}

TEST_F(HeldAnswerTest, AStateThatCannotBeSavedAnswersEveryLaterHold500) {
  Start(HttpLimits{});
  server_->NotifyDurable(0, "");
  auto held = PostAsync("/hold?ticket=7");
  WaitHandled(1);
  server_->NotifyDurable(6, R"({"error":"state not saved: disk gone"})");
  ASSERT_EQ(held.wait_for(5s), std::future_status::ready);
  httplib::Result r = held.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(r->body, R"({"error":"state not saved: disk gone"})");
  // Held after the failure: 500 at once. Durable before it (6): answered as made.
  auto later = PostAsync("/hold?ticket=8");
  ASSERT_EQ(later.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(later.get()->status, 500);
  auto before = PostAsync("/hold?ticket=6");
  ASSERT_EQ(before.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(before.get()->status, 200);
}

TEST_F(HeldAnswerTest, PipelinedRequestsAreAnsweredInOrder) {
  Start(HttpLimits{});
  server_->NotifyDurable(0, "");
  int fd = Connect();
  const std::string two =
      "POST /hold?ticket=9 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
      "GET /now HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, two.data(), two.size(), MSG_NOSIGNAL), static_cast<ssize_t>(two.size()));
  WaitHandled(1);
  // The second request is not answered ahead of the first, which waits for ticket 9.
  EXPECT_EQ(ReadFor(fd, 300ms), "");
  server_->NotifyDurable(9, "");
  std::string got;
  for (int i = 0; i < 50 && got.find("now") == std::string::npos; ++i) got += ReadFor(fd, 100ms);
  size_t first = got.find("held 9"), second = got.find("\r\n\r\nnow");
  ASSERT_NE(first, std::string::npos) << got;
  ASSERT_NE(second, std::string::npos) << got;
  EXPECT_LT(first, second) << got;
  close(fd);
}

// A served connection goes back to the event loop from the thread that sent its answer (a
// worker, or whoever reports durability), re-armed there: the loop is not woken for it.
TEST_F(HeldAnswerTest, AnsweredConnectionsGoBackToTheLoopWithoutWakingIt) {
  Start(HttpLimits{});
  server_->NotifyDurable(0, "");
  httplib::Client http("127.0.0.1", server_->port());
  http.set_keep_alive(true);
  ASSERT_TRUE(http.Get("/now"));  // connected, and the first request served
  const uint64_t wakes = server_->counters().loop_wakes;
  for (int i = 0; i < 20; ++i) {
    auto now = http.Get("/now");  // answered by the worker itself
    ASSERT_TRUE(now);
    EXPECT_EQ(now->body, "now");
  }
  for (uint64_t ticket = 1; ticket <= 10; ++ticket) {
    // Held: answered by this thread's NotifyDurable, on the same connection.
    auto held = std::async(std::launch::async, [&http, ticket] {
      return http.Post(("/hold?ticket=" + std::to_string(ticket)).c_str(), "", "text/plain");
    });
    WaitHandled(static_cast<int>(ticket));
    server_->NotifyDurable(ticket, "");
    ASSERT_EQ(held.wait_for(5s), std::future_status::ready);
    httplib::Result r = held.get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "held " + std::to_string(ticket));
  }
  EXPECT_EQ(server_->counters().loop_wakes, wakes) << "the loop was woken to take served connections back";
}

// While requests queue, the workers already awake take them as they finish: a busy server
// does not put a worker to sleep and wake another for every request (each costs two context
// switches; at 64 lease clients they were a third of gpupoold's CPU). Before, every request
// woke a sleeping worker.
TEST_F(HeldAnswerTest, BusyWorkersTakeQueuedRequestsWithoutWakingSleepingOnes) {
  HttpLimits limits;
  limits.workers = 16;
  limits.awake_workers = 2;
  Start(limits);
  constexpr int kClients = 8, kEach = 40;
  const uint64_t wakes_before = server_->counters().worker_wakes;
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&] {
      httplib::Client http("127.0.0.1", server_->port());
      http.set_keep_alive(true);
      for (int i = 0; i < kEach; ++i) {
        auto r = http.Get("/spin?us=300");
        if (r && r->status == 200 && r->body == "spun") ++answered;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(answered, kClients * kEach);
  const uint64_t wakes = server_->counters().worker_wakes - wakes_before;
  EXPECT_LT(wakes, uint64_t{kClients * kEach / 2}) << "a sleeping worker was woken for most requests";
}

// The bound on QueueWork's economy: when the awake workers are all held (here in a handler
// that blocks, as one waiting on MUNGE or Slurm does), a sleeping worker is woken for the
// next request within about a millisecond, not when one of them is free again.
TEST_F(HeldAnswerTest, ARequestIsServedWhileTheAwakeWorkersAreBlocked) {
  HttpLimits limits;
  limits.workers = 6;
  limits.awake_workers = 2;
  Start(limits);
  std::vector<std::future<httplib::Result>> blocked;
  for (int i = 0; i < 2; ++i) {
    blocked.push_back(std::async(std::launch::async, [this] {
      httplib::Client http("127.0.0.1", server_->port());
      http.set_read_timeout(30, 0);
      return http.Get("/block");
    }));
  }
  for (int i = 0; i < 500 && blocked_ < 2; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(blocked_, 2);
  httplib::Client http("127.0.0.1", server_->port());
  for (int i = 0; i < 5; ++i) {
    const Clock::time_point start = Clock::now();
    auto now = http.Get("/now");
    ASSERT_TRUE(now);
    EXPECT_EQ(now->body, "now");
    EXPECT_LT(Clock::now() - start, 2s) << "the request waited for a blocked worker";
  }
  Unblock();
  for (auto& b : blocked) {
    httplib::Result r = b.get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "unblocked");
  }
}

// A client that hangs up while a worker holds its connection: the hang-up is reported to the
// loop once (ignored while the worker holds the connection), and the connection is closed
// when it comes back. The server goes on serving, its source's share freed.
TEST_F(HeldAnswerTest, AClientThatHangsUpWhileServedIsClosedWhenItsAnswerIsSent) {
  HttpLimits limits;
  limits.per_source = 2;
  Start(limits);
  server_->NotifyDurable(0, "");
  for (int round = 0; round < 4; ++round) {
    const uint64_t ticket = 100 + static_cast<uint64_t>(round);
    int fd = Connect();
    const std::string hold =
        "POST /hold?ticket=" + std::to_string(ticket) + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";
    ASSERT_EQ(send(fd, hold.data(), hold.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hold.size()));
    WaitHandled(round + 1);
    close(fd);  // gone while its answer is held
    std::this_thread::sleep_for(50ms);
    server_->NotifyDurable(ticket, "");
  }
  // With per_source = 2, four connections that were never closed would leave this source
  // refused (503).
  httplib::Client http("127.0.0.1", server_->port());
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    if (i > 0) std::this_thread::sleep_for(20ms);
    httplib::Result now = http.Get("/now");
    status = now ? now->status : -1;
  }
  EXPECT_EQ(status, 200);
  EXPECT_EQ(server_->counters().refused_per_source, 0u);
}

TEST_F(HeldAnswerTest, ASlowReaderGetsItsWholeAnswerAndOneThatNeverReadsTimesOut) {
  HttpLimits limits;
  limits.write_timeout_ms = 1000;
  limits.max_connections = 64;
  Start(limits);
  server_->NotifyDurable(0, "");
  constexpr size_t kBytes = 32 << 20;  // more than loopback's socket buffers take
  const std::string req =
      "POST /hold?ticket=2&bytes=" + std::to_string(kBytes) + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";
  int slow = Connect(), never = Connect();
  ASSERT_GT(send(slow, req.data(), req.size(), MSG_NOSIGNAL), 0);
  ASSERT_GT(send(never, req.data(), req.size(), MSG_NOSIGNAL), 0);
  WaitHandled(2);
  server_->NotifyDurable(2, "");
  // The server is not blocked by either: another client is answered at once.
  httplib::Client http("127.0.0.1", server_->port());
  auto now = http.Get("/now");
  ASSERT_TRUE(now);
  // The slow reader reads, a little late, all of it, and its connection serves another.
  std::this_thread::sleep_for(200ms);
  std::string got;
  for (int i = 0; i < 100 && got.size() < kBytes; ++i) got += ReadFor(slow, 50ms);
  EXPECT_GT(got.size(), kBytes);
  EXPECT_EQ(got.substr(got.size() - 3), "xxx");
  const std::string get = "GET /now HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(send(slow, get.data(), get.size(), MSG_NOSIGNAL), 0);
  std::string again = ReadFor(slow, 500ms);
  EXPECT_NE(again.find("\r\n\r\nnow"), std::string::npos) << again;
  close(slow);
  // The one that never read was closed at the write timeout (1 s), and counted.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(server_->counters().timed_out, 1u);
  close(never);
}

// Admins tell gpupoold's threads apart in `top -H` and `ps -L` by name. The loop keeps its
// thread's (in gpupoold, the main thread's: the process's own name).
TEST_F(HeldAnswerTest, TheWorkerThreadsAreNamedAndTheLoopKeepsItsName) {
  HttpLimits limits;
  limits.workers = 3;
  limits.priority_workers = 2;
  Start(limits);
  httplib::Client http("127.0.0.1", server_->port());
  ASSERT_TRUE(http.Get("/now"));  // the loop runs (and named itself) once it answers
  std::map<std::string, int> named;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    ++named[name];
  }
  EXPECT_EQ(named["gpupoold-loop"], 0);
  EXPECT_EQ(named["gpupoold-work"], 3);
  EXPECT_EQ(named["gpupoold-prio"], 2);
}

}  // namespace
}  // namespace gpupool::poold

// HttpConnection (common/http_connection.h) against a raw loopback server that answers as
// each test scripts it: what goes on the wire, keep-alive, and answers that are late, cut,
// oversized or not what gpupoold sends.
#include "common/http_connection.h"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

// Listens on an ephemeral loopback port; runs `serve` for each accepted connection, one
// after another, on its own thread, until destroyed.
class RawServer {
 public:
  explicit RawServer(std::function<void(int fd)> serve) : serve_(std::move(serve)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        pollfd p{listen_fd_, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) {
          if (stop_) return;
          continue;
        }
        int fd = accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) continue;
        ++accepted_;
        serve_(fd);
        close(fd);
      }
    });
  }
  ~RawServer() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  int accepted() const { return accepted_; }

 private:
  std::function<void(int)> serve_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

void SendText(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = send(fd, text.data() + off, text.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Reads one request (header and Content-Length body) from fd; empty at EOF.
std::string ReadRequest(int fd) {
  std::string in;
  char buf[4096];
  for (;;) {
    size_t end = in.find("\r\n\r\n");
    if (end != std::string::npos) {
      size_t length = 0;
      size_t cl = in.find("Content-Length: ");
      if (cl != std::string::npos && cl < end) length = std::stoul(in.substr(cl + 16));
      if (in.size() >= end + 4 + length) return in;
    }
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return "";
    in.append(buf, static_cast<size_t>(n));
  }
}

std::string Ok(const std::string& body, const std::string& extra = "") {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(HttpConnectionTest, ARequestGoesOutAsOneSegmentWithItsBody) {
  std::string request;
  uint32_t data_segments = 0;
  RawServer server([&](int fd) {
    request = ReadRequest(fd);
    // Header and body were written together: one data segment on loopback, so gpupoold
    // has the whole request at its first read. (httplib's client sent two.)
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0) data_segments = info.tcpi_data_segs_in;
    SendText(fd, Ok("{\"a\":1}"));
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  const std::string body = "{\"job_id\":7}";
  HttpReply reply = http.Exchange("POST", "/v1/leases", "Bearer tok", &body);
  ASSERT_TRUE(reply.ok()) << reply.detail;
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "{\"a\":1}");
  EXPECT_EQ(request.rfind("POST /v1/leases HTTP/1.1\r\n", 0), 0u) << request;
  EXPECT_NE(request.find("\r\nAuthorization: Bearer tok\r\n"), std::string::npos);
  EXPECT_NE(request.find("\r\nContent-Length: 12\r\n"), std::string::npos);
  EXPECT_EQ(request.substr(request.size() - body.size()), body);
  EXPECT_EQ(data_segments, 1u) << "the request came in more than one segment";
}

TEST(HttpConnectionTest, KeepAliveUsesOneConnectionForManyRequests) {
  RawServer server([](int fd) {
    for (int i = 0; i < 5; ++i) {
      if (ReadRequest(fd).empty()) return;
      SendText(fd, Ok("{\"n\":" + std::to_string(i) + "}"));
    }
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  for (int i = 0; i < 5; ++i) {
    HttpReply reply = http.Exchange("GET", "/v1/pools", "", nullptr);
    ASSERT_TRUE(reply.ok()) << reply.detail;
    EXPECT_EQ(reply.body, "{\"n\":" + std::to_string(i) + "}");
  }
  EXPECT_EQ(http.connections_opened(), 1);
  EXPECT_EQ(server.accepted(), 1);
}

TEST(HttpConnectionTest, AKeptConnectionTheServerClosedIsReplacedBeforeTheNextRequest) {
  RawServer server([](int fd) {
    if (ReadRequest(fd).empty()) return;
    SendText(fd, Ok("{}"));  // then closes, as gpupoold does at its idle timeout
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  ASSERT_TRUE(http.Exchange("GET", "/v1/pools", "", nullptr).ok());
  usleep(50 * 1000);  // the close has arrived
  HttpReply second = http.Exchange("GET", "/v1/pools", "", nullptr);
  ASSERT_TRUE(second.ok()) << second.detail;
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(http.connections_opened(), 2);
}

TEST(HttpConnectionTest, AnAnswerArrivingInPiecesIsReadWhole) {
  const std::string body(40000, 'x');
  RawServer server([&](int fd) {
    if (ReadRequest(fd).empty()) return;
    std::string answer = Ok(body);
    for (size_t off = 0; off < answer.size(); off += 7001) {
      SendText(fd, answer.substr(off, 7001));
      usleep(2000);
    }
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  HttpReply reply = http.Exchange("GET", "/v1/events", "", nullptr);
  ASSERT_TRUE(reply.ok()) << reply.detail;
  EXPECT_EQ(reply.body, body);
}

TEST(HttpConnectionTest, AnInterimContinueIsSkipped) {
  RawServer server([](int fd) {
    if (ReadRequest(fd).empty()) return;
    SendText(fd, "HTTP/1.1 100 Continue\r\n\r\n" + Ok("{\"after\":true}"));
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  HttpReply reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  ASSERT_TRUE(reply.ok()) << reply.detail;
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "{\"after\":true}");
}

TEST(HttpConnectionTest, EndlessInterimAnswersAreRefused) {
  RawServer server([](int fd) {
    if (ReadRequest(fd).empty()) return;
    std::string flood;
    for (int i = 0; i < 50; ++i) flood += "HTTP/1.1 100 Continue\r\n\r\n";
    SendText(fd, flood);
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  HttpReply reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  EXPECT_EQ(reply.failure, HttpFailure::kBadAnswer);
  EXPECT_NE(reply.detail.find("interim answers"), std::string::npos) << reply.detail;
}

TEST(HttpConnectionTest, ANoContentAnswerEndsAtItsHeadAndKeepsTheConnection) {
  RawServer server([](int fd) {
    for (int i = 0; i < 2; ++i) {
      if (ReadRequest(fd).empty()) return;
      SendText(fd, i == 0 ? "HTTP/1.1 204 No Content\r\n\r\n" : Ok("{}"));
    }
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  HttpReply reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  ASSERT_TRUE(reply.ok()) << reply.detail;
  EXPECT_EQ(reply.status, 204);
  EXPECT_TRUE(reply.body.empty());
  reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  ASSERT_TRUE(reply.ok()) << reply.detail;
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(http.connections_opened(), 1);
}

TEST(HttpConnectionTest, AnAnswerWithoutLengthEndsAtCloseAndTheConnectionIsNotKept) {
  RawServer server([](int fd) {
    if (ReadRequest(fd).empty()) return;
    SendText(fd, "HTTP/1.0 200 OK\r\n\r\n{\"old\":1}");
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  HttpReply reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  ASSERT_TRUE(reply.ok()) << reply.detail;
  EXPECT_EQ(reply.body, "{\"old\":1}");
  ASSERT_TRUE(http.Exchange("GET", "/v1/pools", "", nullptr).ok());
  EXPECT_EQ(http.connections_opened(), 2);
}

TEST(HttpConnectionTest, AChunkedAnswerIsRefusedByName) {
  RawServer server([](int fd) {
    if (ReadRequest(fd).empty()) return;
    SendText(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  HttpReply reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  EXPECT_EQ(reply.failure, HttpFailure::kBadAnswer);
  EXPECT_NE(reply.detail.find("Transfer-Encoding"), std::string::npos) << reply.detail;
}

TEST(HttpConnectionTest, AnOversizedAnswerIsRefusedBeforeItsBodyIsRead) {
  RawServer server([](int fd) {
    if (ReadRequest(fd).empty()) return;
    // Announces more than the limit and then sends nothing: refused at once, not after the
    // timeout (the client does not wait for a body it will not take).
    SendText(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n");
    usleep(1500 * 1000);
  });
  HttpConnection http("127.0.0.1", server.port(), 5000, HttpAnswerLimits{1024, 1000});
  auto start = std::chrono::steady_clock::now();
  HttpReply reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  EXPECT_EQ(reply.failure, HttpFailure::kBadAnswer);
  EXPECT_NE(reply.detail.find("Content-Length '5000'"), std::string::npos) << reply.detail;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
}

TEST(HttpConnectionTest, AnEndlessHeaderIsRefusedAtTheLimit) {
  RawServer server([](int fd) {
    if (ReadRequest(fd).empty()) return;
    std::string junk = "HTTP/1.1 200 OK\r\n";
    for (int i = 0; i < 200; ++i) junk += "X-Filler: " + std::string(100, 'y') + "\r\n";
    SendText(fd, junk);
    usleep(1500 * 1000);
  });
  HttpConnection http("127.0.0.1", server.port(), 5000, HttpAnswerLimits{4096, 1000});
  HttpReply reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  EXPECT_EQ(reply.failure, HttpFailure::kBadAnswer);
  EXPECT_NE(reply.detail.find("longer than 4096"), std::string::npos) << reply.detail;
}

TEST(HttpConnectionTest, NotAStatusLineIsABadAnswer) {
  RawServer server([](int fd) {
    if (ReadRequest(fd).empty()) return;
    SendText(fd, "SSH-2.0-OpenSSH\r\n\r\n");
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  HttpReply reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  EXPECT_EQ(reply.failure, HttpFailure::kBadAnswer);
  EXPECT_NE(reply.detail.find("not an HTTP/1.x status line"), std::string::npos) << reply.detail;
}

TEST(HttpConnectionTest, ASilentServerTimesOutAndACutAnswerIsAReadFailure) {
  RawServer silent([](int fd) {
    ReadRequest(fd);
    usleep(800 * 1000);
  });
  HttpConnection late("127.0.0.1", silent.port(), 300);
  HttpReply reply = late.Exchange("GET", "/v1/pools", "", nullptr);
  EXPECT_EQ(reply.failure, HttpFailure::kRead);
  EXPECT_NE(reply.detail.find("timed out after 300 ms"), std::string::npos) << reply.detail;

  RawServer cut([](int fd) {
    if (ReadRequest(fd).empty()) return;
    SendText(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"half");
  });
  HttpConnection http("127.0.0.1", cut.port(), 2000);
  reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  EXPECT_EQ(reply.failure, HttpFailure::kRead);
  EXPECT_NE(reply.detail.find("closed before the whole answer"), std::string::npos) << reply.detail;
}

TEST(HttpConnectionTest, AHostNameAndABracketedAddressResolve) {
  RawServer server([](int fd) {
    if (ReadRequest(fd).empty()) return;
    SendText(fd, Ok("{}"));
  });
  HttpConnection by_name("localhost", server.port(), 2000);
  HttpReply reply = by_name.Exchange("GET", "/v1/pools", "", nullptr);
  EXPECT_TRUE(reply.ok()) << reply.detail;
  HttpConnection bracketed("[127.0.0.1]", server.port(), 2000);
  reply = bracketed.Exchange("GET", "/v1/pools", "", nullptr);
  EXPECT_TRUE(reply.ok()) << reply.detail;
}

TEST(HttpConnectionTest, NobodyListeningIsAConnectionFailure) {
  int port;
  {
    RawServer gone([](int) {});
    port = gone.port();
  }
  HttpConnection http("127.0.0.1", port, 1000);
  HttpReply reply = http.Exchange("GET", "/v1/pools", "", nullptr);
  EXPECT_EQ(reply.failure, HttpFailure::kConnection);
  EXPECT_NE(reply.detail.find("refused"), std::string::npos) << reply.detail;
}

TEST(HttpConnectionTest, TextThatWouldAddHeadersOrRequestsNeverReachesTheWire) {
  RawServer server([](int fd) {
    for (int i = 0; i < 2; ++i) {
      if (ReadRequest(fd).empty()) return;
      SendText(fd, Ok("{}"));
    }
  });
  HttpConnection http("127.0.0.1", server.port(), 2000);
  EXPECT_EQ(http.Exchange("GET", "/v1/pools HTTP/1.1\r\nX-Evil: 1", "", nullptr).failure, HttpFailure::kBadRequest);
  EXPECT_EQ(http.Exchange("GET", "v1/pools", "", nullptr).failure, HttpFailure::kBadRequest);
  EXPECT_EQ(http.Exchange("GET\r\n", "/v1/pools", "", nullptr).failure, HttpFailure::kBadRequest);
  EXPECT_EQ(http.Exchange("GET", "/v1/pools", "Bearer x\r\nX-Evil: 1", nullptr).failure, HttpFailure::kBadRequest);
  EXPECT_EQ(http.connections_opened(), 0);
  EXPECT_EQ(server.accepted(), 0);
  // A refused request leaves the kept connection in use.
  ASSERT_TRUE(http.Exchange("GET", "/v1/pools", "", nullptr).ok());
  EXPECT_EQ(http.Exchange("GET", "v1/pools", "", nullptr).failure, HttpFailure::kBadRequest);
  ASSERT_TRUE(http.Exchange("GET", "/v1/pools", "", nullptr).ok());
  EXPECT_EQ(http.connections_opened(), 1);
}

}  // namespace
}  // namespace gpupool

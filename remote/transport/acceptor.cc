#include "remote/transport/acceptor.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "common/agent_probe_bytes.h"

namespace gpupool::transport {
namespace {

// The acceptor looks at its stop flag at least this often.
constexpr int kAcceptorPollMs = 100;

class AcceptorImpl : public HandshakeAcceptor {
 public:
  AcceptorImpl(Sink sink, ServerLog log) : sink_(std::move(sink)), log_(std::move(log)) {}
  ~AcceptorImpl() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
  }

  Status Listen(const std::string& listen) {
    auto fd = ListenTcp(listen, &port_);
    if (!fd.ok()) return fd.status();
    listen_fd_ = fd.value();
    thread_ = std::thread([this] { Loop(); });
    return Status::OK();
  }

  int port() const override { return port_; }

 private:
  struct Handshaking {
    int fd;
    std::string peer;
    std::string host;
    std::string bytes;  // received so far
    std::chrono::steady_clock::time_point deadline;
  };

  void Loop() {
    std::vector<Handshaking> handshaking;
    std::map<std::string, size_t> per_source;
    auto forget = [&](size_t i) {
      auto found = per_source.find(handshaking[i].host);
      if (found != per_source.end() && --found->second == 0) per_source.erase(found);
      handshaking.erase(handshaking.begin() + static_cast<std::ptrdiff_t>(i));
    };
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (const Handshaking& h : handshaking) fds.push_back({h.fd, POLLIN, 0});
      if (poll(fds.data(), fds.size(), kAcceptorPollMs) < 0 && errno != EINTR) continue;
      auto now = std::chrono::steady_clock::now();
      // Newest first, so that erasing does not move entries not yet looked at.
      for (size_t i = handshaking.size(); i-- > 0;) {
        Handshaking& h = handshaking[i];
        std::string failure;
        bool done = false;
        if (fds[i + 1].revents != 0) {
          char buffer[4096];
          ssize_t n = recv(h.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
          if (n > 0) {
            h.bytes.append(buffer, static_cast<size_t>(n));
            ClientHello hello;
            size_t used = 0;
            Result<bool> parsed = ParseClientHello(h.bytes, &hello, &used);
            if (!parsed.ok()) {
              failure = parsed.status().message();
            } else if (parsed.value()) {
              Handshaken client;
              client.fd = h.fd;
              client.peer = h.peer;
              client.hello = std::move(hello);
              sink_(std::move(client));
              done = true;
            }
          } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            failure = "the client closed the connection during the handshake";
          }
        }
        if (!done && failure.empty() && now >= h.deadline) {
          failure = "no complete handshake within " + std::to_string(kHandshakeTimeoutMs) + " ms";
        }
        if (!failure.empty()) {
          // gpupoold's look at this agent (poold/agent_probe.cc): closing is the answer.
          const std::string_view probe = kAgentProbeBytes;
          const bool probed = !h.bytes.empty() && (probe.starts_with(h.bytes) || h.bytes.starts_with(probe));
          if (!probed) log_("handshake " + h.host + " " + failure, "handshake with " + h.peer + " failed: " + failure);
          close(h.fd);
        }
        if (done || !failure.empty()) forget(i);
      }
      if ((fds[0].revents & POLLIN) != 0) {
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        std::string peer = PeerAddress(fd);
        std::string host = HostOf(peer);
        if (handshaking.size() >= kMaxHandshaking) {
          log_("handshake busy",
               "refusing " + peer + ": " + std::to_string(kMaxHandshaking) + " handshakes already in progress");
          close(fd);
          continue;
        }
        if (per_source[host] >= kMaxHandshakingPerSource) {
          log_("handshake busy " + host, "refusing " + peer + ": " + std::to_string(kMaxHandshakingPerSource) +
                                             " handshakes from " + host + " already in progress");
          close(fd);
          continue;
        }
        ++per_source[host];
        // The lane answers with blocking sends, bounded by the socket's timeouts.
        SetTimeouts(fd, kHandshakeTimeoutMs);
        handshaking.push_back(
            Handshaking{fd, peer, host, std::string(), now + std::chrono::milliseconds(kHandshakeTimeoutMs)});
      }
    }
    for (const Handshaking& h : handshaking) close(h.fd);
  }

  Sink sink_;
  ServerLog log_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

std::string HostOf(const std::string& peer) {
  size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

Result<std::unique_ptr<HandshakeAcceptor>> HandshakeAcceptor::Start(const std::string& listen, Sink sink,
                                                                    ServerLog log) {
  auto acceptor = std::make_unique<AcceptorImpl>(std::move(sink), std::move(log));
  GPUPOOL_RETURN_IF_ERROR(acceptor->Listen(listen));
  return std::unique_ptr<HandshakeAcceptor>(std::move(acceptor));
}

}  // namespace gpupool::transport

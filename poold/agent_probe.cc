#include "poold/agent_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/agent_probe_bytes.h"

namespace gpupool::poold {
namespace {

// One address: OK when the agent itself answered within `timeout`: it closed the connection
// after reading the probe (or said anything). A connection the kernel completed for a
// process that does not run (stopped, or hung) is not an answer.
Status ConnectOnce(const addrinfo& a, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left_ms = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return static_cast<int>(std::max<int64_t>(0, left.count()));
  };
  int fd = socket(a.ai_family, a.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a.ai_protocol);
  if (fd < 0) return Status::Unavailable(std::string("socket: ") + std::strerror(errno));
  int rc = connect(fd, a.ai_addr, a.ai_addrlen);
  int error = rc == 0 ? 0 : errno;
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int ready = poll(&p, 1, left_ms());
    if (ready == 0) {
      close(fd);
      return Status::Unavailable("no answer within " + std::to_string(timeout.count()) + " ms");
    }
    socklen_t len = sizeof(error);
    if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
  }
  if (error != 0) {
    close(fd);
    return Status::Unavailable(std::strerror(error));
  }
  // The probe fits any socket buffer: a short or failed send means the connection is gone.
  ssize_t sent = send(fd, kAgentProbeBytes.data(), kAgentProbeBytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent != static_cast<ssize_t>(kAgentProbeBytes.size())) {
    close(fd);
    return Status::Unavailable("connected, but the connection failed at once");
  }
  pollfd p{fd, POLLIN, 0};
  int ready = poll(&p, 1, left_ms());
  close(fd);
  if (ready <= 0) {
    return Status::Unavailable("connected, but the agent did not answer within " + std::to_string(timeout.count()) +
                               " ms (its process stopped or hung)");
  }
  return Status::OK();  // closed, reset or said something: a process read the probe
}

}  // namespace

Status ProbeAgentEndpoint(const std::string& endpoint, std::chrono::milliseconds timeout) {
  size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) {
    return Status::InvalidArgument("agent endpoint '" + endpoint + "' is not HOST:PORT");
  }
  std::string host = endpoint.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Status::Unavailable("cannot resolve " + endpoint + ": " + gai_strerror(rc));
  }
  Status last = Status::Unavailable("no address for " + endpoint);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    last = ConnectOnce(*a, timeout);
    if (last.ok()) break;
  }
  freeaddrinfo(found);
  return last;
}

}  // namespace gpupool::poold

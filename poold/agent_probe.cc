#include "poold/agent_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpupool::poold {
namespace {

// One address: OK when connected within `timeout`.
Status ConnectOnce(const addrinfo& a, std::chrono::milliseconds timeout) {
  int fd = socket(a.ai_family, a.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a.ai_protocol);
  if (fd < 0) return Status::Unavailable(std::string("socket: ") + std::strerror(errno));
  int rc = connect(fd, a.ai_addr, a.ai_addrlen);
  int error = rc == 0 ? 0 : errno;
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int ready = poll(&p, 1, static_cast<int>(timeout.count()));
    if (ready == 0) {
      close(fd);
      return Status::Unavailable("no answer within " + std::to_string(timeout.count()) + " ms");
    }
    socklen_t len = sizeof(error);
    if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
  }
  close(fd);
  if (error != 0) return Status::Unavailable(std::strerror(error));
  return Status::OK();
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

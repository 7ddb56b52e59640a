#include "remote/client/failover/failover_report.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gpupool::client {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxAnswer = size_t{1} << 20;  // a lease's JSON is a few KiB

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits until `fd` is ready for `events`; false on timeout or error.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int ready = poll(&p, 1, RemainingMs(deadline));
    if (ready > 0) return true;
    if (ready == 0 || errno != EINTR) return false;
  }
}

// A connected non-blocking socket to HOST:PORT, or -1 with *why.
int Connect(const std::string& host, const std::string& port, Clock::time_point deadline, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    *why = std::string("cannot resolve: ") + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    int error = errno;
    if (error == EINPROGRESS && WaitFor(fd, POLLOUT, deadline)) {
      socklen_t len = sizeof(error);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
      if (error == 0) break;
    } else if (error == EINPROGRESS) {
      error = ETIMEDOUT;
    }
    *why = std::strerror(error);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  return fd;
}

// One POST to one server; 200 with a JSON object: true.
bool PostOnce(const std::string& server, const std::string& request_line_and_headers, const std::string& body,
              std::chrono::milliseconds timeout, nlohmann::json* answer, std::string* why) {
  std::string address = server;
  if (address.rfind("http://", 0) == 0) address = address.substr(7);
  if (address.find("://") != std::string::npos) {
    *why = "only http:// is supported";
    return false;
  }
  while (!address.empty() && address.back() == '/') address.pop_back();
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    *why = "not HOST:PORT";
    return false;
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const auto deadline = Clock::now() + timeout;
  int fd = Connect(host, address.substr(colon + 1), deadline, why);
  if (fd < 0) return false;
  const std::string request = request_line_and_headers + "Host: " + address + "\r\n" +
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(fd, POLLOUT, deadline)) break;
    } else {
      break;
    }
  }
  std::string got;
  while (sent == request.size() && got.size() < kMaxAnswer) {
    char buffer[4096];
    ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      got.append(buffer, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(fd, POLLIN, deadline)) break;
    } else {
      break;  // closed: the whole answer is in (Connection: close)
    }
  }
  close(fd);
  if (sent < request.size()) {
    *why = "could not send the report within " + std::to_string(timeout.count()) + " ms";
    return false;
  }
  int code = 0;
  const size_t header_end = got.find("\r\n\r\n");
  if (header_end == std::string::npos || std::sscanf(got.c_str(), "HTTP/1.%*d %d", &code) != 1) {
    *why = got.empty() ? "no answer within " + std::to_string(timeout.count()) + " ms" : "a malformed answer";
    return false;
  }
  nlohmann::json parsed = nlohmann::json::parse(got.substr(header_end + 4), nullptr, /*allow_exceptions=*/false);
  if (code != 200) {
    *why = "HTTP " + std::to_string(code);
    if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_string()) {
      *why += ": " + parsed["error"].get<std::string>();
    }
    return false;
  }
  if (!parsed.is_object()) {
    *why = "an answer that is not a JSON object";
    return false;
  }
  *answer = std::move(parsed);
  return true;
}

}  // namespace

bool LostAgentReporter::FromEnvironment(LostAgentReporter* reporter) {
  const char* servers = std::getenv("GPUPOOL_SERVER");
  const char* lease = std::getenv("GPUPOOL_LEASE_ID");
  const char* token = std::getenv("GPUPOOL_LEASE_TOKEN");
  if (servers == nullptr || *servers == '\0' || lease == nullptr || *lease == '\0' || token == nullptr ||
      *token == '\0') {
    return false;
  }
  reporter->servers = servers;
  reporter->lease_id = lease;
  reporter->token = token;
  return true;
}

bool LostAgentReporter::Report(const GpuLocation& lost, nlohmann::json* answer, std::string* why) const {
  const std::string body = nlohmann::json{{"id", lease_id}, {"gpu", lost.uuid}}.dump();
  const std::string head = "POST /v1/leases/agent-lost HTTP/1.1\r\nAuthorization: Lease " + token +
                           "\r\nContent-Type: application/json\r\nConnection: close\r\n";
  why->clear();
  size_t start = 0;
  while (start <= servers.size()) {
    size_t comma = servers.find(',', start);
    if (comma == std::string::npos) comma = servers.size();
    std::string server = servers.substr(start, comma - start);
    start = comma + 1;
    if (server.empty()) continue;
    std::string failed;
    if (PostOnce(server, head, body, timeout, answer, &failed)) return true;
    *why += (why->empty() ? "" : "; ") + server + ": " + failed;
  }
  if (why->empty()) *why = "no gpupoold address in GPUPOOL_SERVER";
  return false;
}

bool LeaseSlot(const nlohmann::json& lease, int slot, GpuLocation* location) {
  if (!lease.is_object() || !lease.contains("gpus") || !lease["gpus"].is_array()) return false;
  const nlohmann::json& gpus = lease["gpus"];
  if (slot < 0 || static_cast<size_t>(slot) >= gpus.size()) return false;
  const nlohmann::json& gpu = gpus[static_cast<size_t>(slot)];
  if (!gpu.is_object() || !gpu.contains("uuid") || !gpu["uuid"].is_string() || !gpu.contains("endpoint") ||
      !gpu["endpoint"].is_string()) {
    return false;
  }
  location->uuid = gpu["uuid"].get<std::string>();
  location->endpoint = gpu["endpoint"].get<std::string>();
  return !location->uuid.empty() && !location->endpoint.empty();
}

}  // namespace gpupool::client

#include "remote/transport/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "remote/transport/ucx_worker.h"

namespace gpupool::transport {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

socklen_t AddressLength(const sockaddr_storage& address) {
  return address.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

}  // namespace

Result<int> ListenTcp(const std::string& host_port, int* port) {
  auto address = ParseEndpoint(host_port);
  if (!address.ok()) return address.status();
  int fd = socket(address->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::Unavailable(Errno("socket"));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&address.value()), AddressLength(*address)) != 0 || listen(fd, 64) != 0) {
    std::string error = Errno("cannot listen on " + host_port);
    close(fd);
    return Status::Unavailable(error);
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

Result<int> ConnectTcp(const std::string& host_port, int timeout_ms) {
  auto address = ParseEndpoint(host_port);
  if (!address.ok()) return address.status();
  int fd = socket(address->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::Unavailable(Errno("socket"));
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&address.value()), AddressLength(*address));
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd waiting{fd, POLLOUT, 0};
    rc = poll(&waiting, 1, timeout_ms) == 1 ? 0 : -1;
    int error = 0;
    socklen_t length = sizeof(error);
    if (rc == 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (rc != 0) error = ETIMEDOUT;
    if (error != 0) {
      errno = error;
      rc = -1;
    }
  }
  if (rc != 0) {
    std::string error = Errno("cannot connect to " + host_port);
    close(fd);
    return Status::Unavailable(error);
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SetTimeouts(fd, timeout_ms);
  return fd;
}

void SetTimeouts(int fd, int timeout_ms) {
  timeval timeout{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
}

Status SendAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Unavailable(Errno("bootstrap send"));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status ReceiveAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = recv(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return Status::Unavailable("bootstrap: peer closed the connection");
    if (n < 0) return Status::Unavailable(Errno("bootstrap receive"));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status SendBlob(int fd, const std::string& blob) {
  uint32_t length = static_cast<uint32_t>(blob.size());
  GPUPOOL_RETURN_IF_ERROR(SendAll(fd, &length, sizeof(length)));
  return SendAll(fd, blob.data(), blob.size());
}

Result<std::string> ReceiveBlob(int fd, size_t max_size) {
  uint32_t length = 0;
  GPUPOOL_RETURN_IF_ERROR(ReceiveAll(fd, &length, sizeof(length)));
  if (length > max_size) return Status::InvalidArgument("bootstrap: message too large");
  std::string blob(length, '\0');
  GPUPOOL_RETURN_IF_ERROR(ReceiveAll(fd, blob.data(), length));
  return blob;
}

namespace {

Status CheckMagic(uint32_t magic) {
  if (magic == kBootstrapMagic) return Status::OK();
  char text[96];
  std::snprintf(text, sizeof(text), "bad magic 0x%08x (not gpupool, or another version of its wire)", magic);
  return Status::InvalidArgument(text);
}

Status CheckFlags(uint32_t flags) {
  if ((flags & ~kKnownHelloFlags) == 0) return Status::OK();
  char text[64];
  std::snprintf(text, sizeof(text), "unknown handshake flags 0x%x", flags & ~kKnownHelloFlags);
  return Status::InvalidArgument(text);
}

Result<std::string> ReceiveWorkerAddress(int fd) {
  auto address = ReceiveBlob(fd, kMaxWorkerAddress);
  if (!address.ok()) return address.status();
  if (address->empty()) return Status::InvalidArgument("bootstrap: empty worker address");
  return address;
}

}  // namespace

Status SendClientHello(int fd, const ClientHello& hello) {
  GPUPOOL_RETURN_IF_ERROR(SendAll(fd, &kBootstrapMagic, sizeof(kBootstrapMagic)));
  GPUPOOL_RETURN_IF_ERROR(SendAll(fd, &hello.flags, sizeof(hello.flags)));
  GPUPOOL_RETURN_IF_ERROR(SendBlob(fd, hello.worker_address));
  GPUPOOL_RETURN_IF_ERROR(SendBlob(fd, hello.lane_key));
  GPUPOOL_RETURN_IF_ERROR(SendBlob(fd, hello.lease_id));
  GPUPOOL_RETURN_IF_ERROR(SendBlob(fd, hello.token));
  return SendBlob(fd, hello.ticket);
}

Result<ClientHello> ReceiveClientHello(int fd) {
  uint32_t magic = 0;
  ClientHello hello;
  GPUPOOL_RETURN_IF_ERROR(ReceiveAll(fd, &magic, sizeof(magic)));
  // The flags are read only after a good magic: an old client sends its address next.
  GPUPOOL_RETURN_IF_ERROR(CheckMagic(magic));
  GPUPOOL_RETURN_IF_ERROR(ReceiveAll(fd, &hello.flags, sizeof(hello.flags)));
  GPUPOOL_RETURN_IF_ERROR(CheckFlags(hello.flags));
  auto address = ReceiveWorkerAddress(fd);
  if (!address.ok()) return address.status();
  hello.worker_address = std::move(address.value());
  auto lane_key = ReceiveBlob(fd, kMaxLaneKey);
  if (!lane_key.ok()) return lane_key.status();
  hello.lane_key = std::move(lane_key.value());
  auto lease_id = ReceiveBlob(fd, kMaxLeaseId);
  if (!lease_id.ok()) return lease_id.status();
  hello.lease_id = std::move(lease_id.value());
  auto token = ReceiveBlob(fd, kMaxLeaseToken);
  if (!token.ok()) return token.status();
  hello.token = std::move(token.value());
  auto ticket = ReceiveBlob(fd, kMaxHandoffTicket);
  if (!ticket.ok()) return ticket.status();
  hello.ticket = std::move(ticket.value());
  return hello;
}

Result<bool> ParseClientHello(std::string_view bytes, ClientHello* hello, size_t* used) {
  size_t at = 0;
  // Reads a u32 at `at`; false when the bytes end first.
  auto u32 = [&](uint32_t* value) {
    if (bytes.size() - at < sizeof(*value)) return false;
    std::memcpy(value, bytes.data() + at, sizeof(*value));
    at += sizeof(*value);
    return true;
  };
  // A length-prefixed blob of at most `max` bytes; false when the bytes end first.
  auto blob = [&](size_t max, std::string* out) -> Result<bool> {
    uint32_t length = 0;
    if (!u32(&length)) return false;
    if (length > max) return Status::InvalidArgument("bootstrap: message too large");
    if (bytes.size() - at < length) return false;
    out->assign(bytes.data() + at, length);
    at += length;
    return true;
  };
  uint32_t magic = 0;
  if (!u32(&magic)) return false;
  GPUPOOL_RETURN_IF_ERROR(CheckMagic(magic));
  if (!u32(&hello->flags)) return false;
  GPUPOOL_RETURN_IF_ERROR(CheckFlags(hello->flags));
  Result<bool> address = blob(kMaxWorkerAddress, &hello->worker_address);
  if (!address.ok() || !address.value()) return address;
  if (hello->worker_address.empty()) {
    return Status::InvalidArgument("bootstrap: empty worker address");
  }
  Result<bool> key = blob(kMaxLaneKey, &hello->lane_key);
  if (!key.ok() || !key.value()) return key;
  Result<bool> lease = blob(kMaxLeaseId, &hello->lease_id);
  if (!lease.ok() || !lease.value()) return lease;
  Result<bool> token = blob(kMaxLeaseToken, &hello->token);
  if (!token.ok() || !token.value()) return token;
  Result<bool> ticket = blob(kMaxHandoffTicket, &hello->ticket);
  if (!ticket.ok() || !ticket.value()) return ticket;
  *used = at;
  return true;
}

Status SendServerHello(int fd, const ServerHello& hello) {
  GPUPOOL_RETURN_IF_ERROR(SendAll(fd, &kBootstrapMagic, sizeof(kBootstrapMagic)));
  GPUPOOL_RETURN_IF_ERROR(SendAll(fd, &hello.connection, sizeof(hello.connection)));
  GPUPOOL_RETURN_IF_ERROR(SendAll(fd, &hello.flags, sizeof(hello.flags)));
  return SendBlob(fd, hello.connection == 0 ? hello.refusal : hello.worker_address);
}

Status SendRefusal(int fd, const std::string& why) {
  ServerHello refusal;
  refusal.refusal = why.substr(0, kMaxRefusal);
  return SendServerHello(fd, refusal);
}

Result<ServerHello> ReceiveServerHello(int fd) {
  uint32_t magic = 0;
  ServerHello hello;
  GPUPOOL_RETURN_IF_ERROR(ReceiveAll(fd, &magic, sizeof(magic)));
  GPUPOOL_RETURN_IF_ERROR(CheckMagic(magic));
  GPUPOOL_RETURN_IF_ERROR(ReceiveAll(fd, &hello.connection, sizeof(hello.connection)));
  GPUPOOL_RETURN_IF_ERROR(ReceiveAll(fd, &hello.flags, sizeof(hello.flags)));
  GPUPOOL_RETURN_IF_ERROR(CheckFlags(hello.flags));
  if (hello.connection == 0) {
    auto why = ReceiveBlob(fd, kMaxRefusal);
    if (!why.ok()) return why.status();
    return Status::PermissionDenied(why->empty() ? "refused at the handshake" : why.value());
  }
  auto address = ReceiveWorkerAddress(fd);
  if (!address.ok()) return address.status();
  hello.worker_address = std::move(address.value());
  return hello;
}

std::string PeerAddress(int fd) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (peer.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&peer);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    port = ntohs(in->sin_port);
  } else if (peer.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&peer);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    port = ntohs(in6->sin6_port);
  }
  return std::string(text) + ":" + std::to_string(port);
}

bool PeerClosed(int fd) {
  char byte;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace gpupool::transport

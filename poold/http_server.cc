#include "poold/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gpupool::poold {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* Reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX-decodes `s` (and '+' to a space in a query).
std::string Decode(const std::string& s, bool query) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else if (query && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool EqualsNoCase(const std::string& a, const char* b) { return strcasecmp(a.c_str(), b) == 0; }

// The uid that owns the other end of loopback TCP connection `fd` (peer `peer`, our end
// `local`), asked of the kernel (sock_diag); -1 when it cannot tell. Local users all come
// from 127.0.0.1: the uid tells them (and the agents beside them) apart.
int64_t LoopbackPeerUid(const sockaddr_storage& peer, const sockaddr_storage& local) {
  if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) return -1;
  int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return -1;
  struct {
    nlmsghdr h;
    inet_diag_req_v2 r;
  } req{};
  req.h.nlmsg_len = sizeof(req);
  req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.h.nlmsg_flags = NLM_F_REQUEST;
  req.r.sdiag_family = static_cast<uint8_t>(peer.ss_family);
  req.r.sdiag_protocol = IPPROTO_TCP;
  req.r.idiag_states = ~0u;
  req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  // The peer's socket: its source is our peer, its destination is us.
  if (peer.ss_family == AF_INET) {
    auto* p = reinterpret_cast<const sockaddr_in*>(&peer);
    auto* l = reinterpret_cast<const sockaddr_in*>(&local);
    req.r.id.idiag_sport = p->sin_port;
    req.r.id.idiag_dport = l->sin_port;
    std::memcpy(req.r.id.idiag_src, &p->sin_addr, 4);
    std::memcpy(req.r.id.idiag_dst, &l->sin_addr, 4);
  } else {
    auto* p = reinterpret_cast<const sockaddr_in6*>(&peer);
    auto* l = reinterpret_cast<const sockaddr_in6*>(&local);
    req.r.id.idiag_sport = p->sin6_port;
    req.r.id.idiag_dport = l->sin6_port;
    std::memcpy(req.r.id.idiag_src, &p->sin6_addr, 16);
    std::memcpy(req.r.id.idiag_dst, &l->sin6_addr, 16);
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  int64_t uid = -1;
  timeval tv{0, 200000};
  setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (sendto(nl, &req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) == sizeof(req)) {
    alignas(nlmsghdr) char buf[8192];
    ssize_t n = recv(nl, buf, sizeof(buf), 0);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); n > 0 && NLMSG_OK(h, static_cast<size_t>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) break;
      uid = reinterpret_cast<inet_diag_msg*>(NLMSG_DATA(h))->idiag_uid;
      break;
    }
  }
  close(nl);
  return uid;
}

bool IsLoopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

}  // namespace

struct HttpServer::Conn {
  // kWriting: the loop sends a released held answer (out) as the socket takes it.
  enum class Phase { kIdle, kHeaders, kBody, kWriting };
  int fd = -1;
  std::string source;   // what the per-source cap counts: address (and uid on loopback)
  std::string address;  // the peer's address
  int source_port = 0;
  std::string buf;  // read, not yet consumed
  Phase phase = Phase::kIdle;
  Clock::time_point deadline;
  size_t header_end = 0;  // kBody: where the body starts in buf
  size_t body_len = 0;
  // The request a worker serves: parsed by the loop.
  httplib::Request req;
  bool keep_alive = true;
  bool priority = false;
  int error_status = 0;  // the server answers this itself, then closes
  bool closing = false;  // handed back by a worker to be closed
  // Registration with the loop's epoll set. Every connection is registered EPOLLONESHOT: an
  // event disarms it, so a connection a worker or the committer holds (in_service) is never
  // read by the loop meanwhile, and whoever finishes its answer re-arms it (HandBack).
  bool registered = false;  // loop only; constant while in service
  bool armed = false;       // loop only
  bool in_service = false;  // loop only: handed to a worker, not yet known to be back
  // Set by the thread that finished the answer, just before it re-armed the connection: the
  // loop takes it back as idle at its next event or tick (without being woken for it).
  std::atomic<bool> handed_back{false};
  // Held by HandBack from setting handed_back until its epoll_ctl has returned, and taken by
  // the loop when it takes the connection back: so nothing the loop does with the
  // connection next (a close, say) can come before that epoll_ctl.
  std::mutex handback_mu;
  // A held answer (HttpServer::HoldAnswerUntil): sent once held_ticket is durable.
  uint64_t held_ticket = 0;
  std::string out;
  size_t out_sent = 0;

  ~Conn() {
    if (fd >= 0) close(fd);
  }
};

HttpServer::HttpServer(HttpLimits limits)
    : limits_(limits),
      busy_enough_(std::clamp(
          limits.awake_workers > 0 ? limits.awake_workers : static_cast<int>(std::thread::hardware_concurrency()), 2,
          std::max(2, limits.workers))) {}

HttpServer::~HttpServer() {
  Stop();
  conns_.clear();  // closes them
  if (listen_fd_ >= 0) close(listen_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void HttpServer::Handle(const std::string& method, const std::string& path, Handler handler, bool priority) {
  routes_[path][method] = Route{std::move(handler), priority};
}

Status HttpServer::Bind(const std::string& host, int port) {
  std::string where = host + ":" + std::to_string(port);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) {
    return Status::InvalidArgument("cannot resolve listen address '" + where + "'");
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  // SO_REUSEPORT as well: a replica elected leader binds the port its standby server
  // (httplib, which sets both) has just closed, and may find that socket not gone yet.
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  }
  bool ok = fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, 1024) == 0;
  freeaddrinfo(res);
  if (!ok) {
    std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    return Status::Unavailable("cannot listen on " + where + ": " + why);
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  listen_fd_ = fd;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return Status::Internal(std::string("epoll/eventfd: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  return Status::OK();
}

Status HttpServer::Bind(const std::string& listen) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("bad listen address '" + listen + "'");
  int port = -1;
  const std::string digits = listen.substr(colon + 1);
  if (!digits.empty() && digits.size() <= 5 && digits.find_first_not_of("0123456789") == std::string::npos) {
    port = std::stoi(digits);
  }
  if (port < 0 || port > 65535) return Status::InvalidArgument("bad port in listen address '" + listen + "'");
  return Bind(listen.substr(0, colon), port);
}

void HttpServer::Serve() {
  if (serving_.exchange(true) || stop_ || listen_fd_ < 0) return;
  // Named here, by the thread that starts them, so that each has its name by the time the
  // server answers (`top -H` and `ps -L` tell gpupoold's threads apart). Not the event loop:
  // it runs on the main thread, whose name is the process's (`killall gpupoold`).
  {
    std::lock_guard<std::mutex> lock(mu_);
    awake_ = limits_.workers;  // each counts itself asleep at its first wait
  }
  for (int i = 0; i < limits_.workers; ++i) {
    workers_.emplace_back(&HttpServer::Worker, this, false);
    pthread_setname_np(workers_.back().native_handle(), "gpupoold-work");
  }
  for (int i = 0; i < limits_.priority_workers; ++i) {
    workers_.emplace_back(&HttpServer::Worker, this, true);
    pthread_setname_np(workers_.back().native_handle(), "gpupoold-prio");
  }
  Loop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_cv_.notify_all();
    priority_cv_.notify_all();
  }
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  // Stopped for good: the port and every connection go now, not when the object does. A
  // follower's server stops when its replica is elected, and the leader's binds the same
  // port (SO_REUSEPORT): a socket left listening here would be handed connections that no
  // one accepts, and a kept-alive client would wait on a connection no one reads.
  std::vector<std::shared_ptr<Conn>> open;
  for (const auto& [fd, c] : conns_) open.push_back(c);
  {
    std::lock_guard<std::mutex> held(durable_mu_);
    for (auto& [ticket, c] : held_) open.push_back(c);
    held_.clear();
    std::lock_guard<std::mutex> lock(mu_);
    open.insert(open.end(), rearm_.begin(), rearm_.end());
    open.insert(open.end(), released_.begin(), released_.end());
    rearm_.clear();
    released_.clear();
  }
  for (const std::shared_ptr<Conn>& c : open) Close(c);
  close(listen_fd_);
  listen_fd_ = -1;
}

void HttpServer::Stop() {
  stop_ = true;
  if (!serving_.exchange(true) && listen_fd_ >= 0) {
    close(listen_fd_);  // Serve() has not begun, and now never will
    listen_fd_ = -1;
  }
  Wake();
  std::lock_guard<std::mutex> lock(mu_);
  work_cv_.notify_all();
  priority_cv_.notify_all();
}

void HttpServer::Wake() {
  if (wake_fd_ < 0) return;
  loop_wakes_.fetch_add(1, std::memory_order_relaxed);
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;  // a full counter already wakes the loop
}

void HttpServer::NoteStall() { last_stall_ms_ = NowMs(); }

bool HttpServer::Stalled(int seconds) const {
  int64_t last = last_stall_ms_;
  return last >= 0 && NowMs() - last <= int64_t{seconds} * 1000;
}

HttpCounters HttpServer::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  HttpCounters counters = counters_;
  counters.loop_wakes = loop_wakes_.load(std::memory_order_relaxed);
  return counters;
}

void HttpServer::Loop() {
  epoll_event events[64];
  constexpr int kTickMs = 200;
  Clock::time_point last_tick = Clock::now();
  bool work_waits = false;  // a request waits for a worker (WakeForLateWork)
  while (!stop_) {
    const int timeout_ms =
        work_waits ? static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(kLateWork).count()) : kTickMs;
    int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
    Clock::time_point now = Clock::now();
    // The loop itself fell behind (CPU starved): agents may not have been heard.
    if (now - last_tick > std::chrono::milliseconds(1000 + kTickMs)) NoteStall();
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        Accept();
      } else if (fd == wake_fd_) {
        uint64_t v;
        while (read(wake_fd_, &v, sizeof(v)) > 0) {
        }
      } else if (auto it = conns_.find(fd); it != conns_.end()) {
        std::shared_ptr<Conn> c = it->second;
        if (c->in_service && !TakeBack(*c)) continue;
        c->armed = false;  // EPOLLONESHOT: this event disarmed it
        if (c->phase == Conn::Phase::kWriting) {
          OnWritable(c);
        } else {
          OnReadable(c);
        }
        // Still the loop's, and waiting for more bytes (or room to write): wait on.
        if (c->fd >= 0 && !c->in_service && !c->armed) {
          Arm(*c, c->phase == Conn::Phase::kWriting ? EPOLLOUT : EPOLLIN);
        }
      }
    }
    std::vector<std::shared_ptr<Conn>> back, released;
    {
      std::lock_guard<std::mutex> lock(mu_);
      back.swap(rearm_);
      released.swap(released_);
      WakeForLateWork(now);
      work_waits = !work_.empty() && asleep_ > woken_;
    }
    for (const std::shared_ptr<Conn>& c : back) Rearm(c);
    for (const std::shared_ptr<Conn>& c : released) SendReleased(c);
    if (now - last_tick >= std::chrono::milliseconds(kTickMs)) {
      last_tick = now;
      std::vector<std::shared_ptr<Conn>> late;
      for (const auto& [fd, c] : conns_) {
        // A worker's connection has no deadline of the loop's until it is handed back.
        if (c->in_service && !TakeBack(*c)) continue;
        if (now > c->deadline) late.push_back(c);
      }
      for (const std::shared_ptr<Conn>& c : late) {
        if (c->phase != Conn::Phase::kIdle) {
          std::lock_guard<std::mutex> lock(mu_);
          ++counters_.timed_out;
        }
        Close(c);
      }
    }
  }
}

void HttpServer::Accept() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) NoteStall();
      return;  // EAGAIN: none left
    }
    char host[INET6_ADDRSTRLEN] = "";
    int port = 0;
    if (addr.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&addr);
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
      port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
      port = ntohs(a->sin6_port);
    }
    // The share is per source address; on loopback, per local user too.
    std::string source = host;
    if (IsLoopback(addr)) {
      sockaddr_storage local{};
      socklen_t local_len = sizeof(local);
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0) {
        int64_t uid = LoopbackPeerUid(addr, local);
        if (uid >= 0) source += " uid " + std::to_string(uid);
      }
    }
    int& open = per_source_[source];
    int total = 0;
    for (const auto& [src, k] : per_source_) total += k;
    if (open >= limits_.per_source || total >= limits_.max_connections) {
      // Refused before a byte is read: a source cannot hold more than its share. Someone was
      // turned away, perhaps an agent: the server counts as too busy to hear agents.
      static const std::string kBody = "{\"error\":\"too many connections from this address\",\"retry\":true}";
      static const std::string kBusy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
          "Content-Length: " +
          std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
      ssize_t w = send(fd, kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      (void)w;
      close(fd);
      if (open == 0) per_source_.erase(source);
      NoteStall();
      std::lock_guard<std::mutex> lock(mu_);
      if (open >= limits_.per_source)
        ++counters_.refused_per_source;
      else
        ++counters_.refused_full;
      continue;
    }
    ++open;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_shared<Conn>();
    c->fd = fd;
    c->source = source;
    c->address = host;
    c->source_port = port;
    c->deadline = Clock::now() + std::chrono::milliseconds(limits_.idle_timeout_ms);
    conns_[fd] = c;
    Arm(*c, EPOLLIN);
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.accepted;
  }
}

void HttpServer::OnReadable(const std::shared_ptr<Conn>& c) {
  char chunk[16384];
  const size_t cap = limits_.max_header_bytes + limits_.max_body_bytes + 1;
  for (;;) {
    ssize_t n = recv(c->fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      c->buf.append(chunk, static_cast<size_t>(n));
      if (c->buf.size() > cap) break;  // TryParse refuses it
      // A short read took what the socket held: no second recv just to see EAGAIN. Bytes
      // that come later are reported again (the registration is level-triggered), once the
      // connection is re-armed.
      if (static_cast<size_t>(n) < sizeof(chunk)) break;
      continue;
    }
    if (n == 0) {
      Close(c);
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    Close(c);
    return;
  }
  TryParse(c);
}

bool HttpServer::TryParse(const std::shared_ptr<Conn>& c) {
  if (c->buf.empty()) return false;
  auto fail = [&](int status) {
    c->error_status = status;
    c->keep_alive = false;
    c->priority = false;
    Disarm(*c);
    c->in_service = true;
    std::lock_guard<std::mutex> lock(mu_);
    QueueWork(c);
    return false;
  };
  if (c->phase == Conn::Phase::kIdle) {
    c->phase = Conn::Phase::kHeaders;
    c->deadline = Clock::now() + std::chrono::milliseconds(limits_.header_timeout_ms);
  }
  if (c->phase == Conn::Phase::kHeaders) {
    size_t end = c->buf.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c->buf.size() > limits_.max_header_bytes) return fail(431);
      return false;
    }
    if (end > limits_.max_header_bytes) return fail(431);
    c->req = httplib::Request();
    c->req.remote_addr = c->address;
    c->req.remote_port = c->source_port;
    size_t line_end = c->buf.find("\r\n");
    std::string line = c->buf.substr(0, line_end);
    size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    if (sp1 == std::string::npos || sp2 == sp1) return fail(400);
    c->req.method = line.substr(0, sp1);
    c->req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    c->req.version = line.substr(sp2 + 1);
    if (c->req.version != "HTTP/1.1" && c->req.version != "HTTP/1.0") return fail(400);
    size_t q = c->req.target.find('?');
    c->req.path = Decode(c->req.target.substr(0, q), false);
    if (q != std::string::npos) {
      std::string query = c->req.target.substr(q + 1);
      size_t s = 0;
      while (s <= query.size()) {
        size_t amp = query.find('&', s);
        if (amp == std::string::npos) amp = query.size();
        std::string kv = query.substr(s, amp - s);
        s = amp + 1;
        if (kv.empty()) continue;
        size_t eq = kv.find('=');
        c->req.params.emplace(Decode(kv.substr(0, eq), true),
                              eq == std::string::npos ? "" : Decode(kv.substr(eq + 1), true));
      }
    }
    size_t pos = line_end + 2;
    while (pos < end) {
      size_t next = c->buf.find("\r\n", pos);
      std::string h = c->buf.substr(pos, next - pos);
      pos = next + 2;
      size_t colon = h.find(':');
      if (colon == std::string::npos || colon == 0) return fail(400);
      c->req.headers.emplace(h.substr(0, colon), Trim(h.substr(colon + 1)));
    }
    if (c->req.has_header("Transfer-Encoding")) return fail(411);
    size_t length = 0;
    if (c->req.has_header("Content-Length")) {
      std::string v = c->req.get_header_value("Content-Length");
      if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos) return fail(400);
      length = std::stoull(v);
      if (length > limits_.max_body_bytes) return fail(413);
    }
    std::string connection = c->req.get_header_value("Connection");
    c->keep_alive =
        c->req.version == "HTTP/1.1" ? !EqualsNoCase(connection, "close") : EqualsNoCase(connection, "keep-alive");
    c->header_end = end + 4;
    c->body_len = length;
    c->phase = Conn::Phase::kBody;
    c->deadline = Clock::now() + std::chrono::milliseconds(limits_.body_timeout_ms);
    if (c->buf.size() < c->header_end + length && EqualsNoCase(c->req.get_header_value("Expect"), "100-continue")) {
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      ssize_t w = send(c->fd, kContinue, sizeof(kContinue) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      (void)w;  // a client that cannot take 25 bytes sends its body after a pause anyway
    }
  }
  if (c->buf.size() < c->header_end + c->body_len) return false;
  c->req.body = c->buf.substr(c->header_end, c->body_len);
  c->buf.erase(0, c->header_end + c->body_len);
  c->phase = Conn::Phase::kIdle;
  auto route = routes_.find(c->req.path);
  c->priority = false;
  if (route != routes_.end()) {
    auto m = route->second.find(c->req.method);
    if (m != route->second.end()) c->priority = m->second.priority;
  }
  // Armed only when a pipelined request was parsed without an event (Rearm).
  Disarm(*c);
  c->in_service = true;
  std::lock_guard<std::mutex> lock(mu_);
  if (c->priority) {
    priority_work_.push_back(Job{c, Clock::now()});
    priority_cv_.notify_one();
  } else {
    QueueWork(c);
  }
  return true;
}

void HttpServer::QueueWork(const std::shared_ptr<Conn>& c) {
  work_.push_back(Job{c, Clock::now()});
  if (awake_ + woken_ < busy_enough_ && asleep_ > woken_) {
    ++woken_;
    ++counters_.worker_wakes;
    work_cv_.notify_one();
  }
}

void HttpServer::WakeForLateWork(Clock::time_point now) {
  if (work_.empty() || asleep_ <= woken_ || now - work_.front().queued < kLateWork) return;
  ++woken_;
  ++counters_.worker_wakes;
  work_cv_.notify_one();
}

void HttpServer::Rearm(const std::shared_ptr<Conn>& c) {
  c->in_service = false;
  c->handed_back.store(false, std::memory_order_relaxed);
  if (c->closing || stop_) {
    Close(c);
    return;
  }
  conns_[c->fd] = c;
  c->phase = Conn::Phase::kIdle;
  c->deadline = Clock::now() + std::chrono::milliseconds(limits_.idle_timeout_ms);
  if (!TryParse(c) && c->fd >= 0 && !c->in_service) Arm(*c, EPOLLIN);  // a pipelined request may be in buf
}

void HttpServer::Arm(Conn& c, uint32_t events) {
  epoll_event ev{};
  ev.events = events | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.fd = c.fd;
  epoll_ctl(epoll_fd_, c.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &ev);
  c.registered = true;
  c.armed = true;
}

void HttpServer::Disarm(Conn& c) {
  if (!c.armed) return;
  // EPOLL_CTL_MOD always adds EPOLLERR and EPOLLHUP: ONESHOT, so that a hang-up while a
  // worker holds c is reported once (and ignored), not in every loop iteration.
  epoll_event ev{};
  ev.events = EPOLLONESHOT;
  ev.data.fd = c.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.armed = false;
}

bool HttpServer::TakeBack(Conn& c) {
  if (!c.handed_back.load(std::memory_order_acquire)) return false;
  { std::lock_guard<std::mutex> done(c.handback_mu); }  // HandBack's epoll_ctl has returned
  c.handed_back.store(false, std::memory_order_relaxed);
  // Its answer is sent and HandBack armed it for the next request.
  c.in_service = false;
  c.armed = true;
  c.phase = Conn::Phase::kIdle;
  c.deadline = Clock::now() + std::chrono::milliseconds(limits_.idle_timeout_ms);
  return true;
}

void HttpServer::HandBack(std::shared_ptr<Conn> c) {
  // The common case goes back without the loop: armed here, taken back by the loop at its
  // next event. What needs the loop (a close, a pipelined request already read, a stop) is
  // queued for it, and it is woken.
  if (!stop_ && !c->closing && c->buf.empty() && c->registered) {
    const int fd = c->fd;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    ev.data.fd = fd;
    std::lock_guard<std::mutex> arming(c->handback_mu);
    c->handed_back.store(true, std::memory_order_release);
    // From here the loop may take c (once this unlocks): only the copies above are used.
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  rearm_.push_back(std::move(c));
  Wake();
}

void HttpServer::Close(const std::shared_ptr<Conn>& c) {
  if (c->fd < 0) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  c->registered = false;
  c->armed = false;
  conns_.erase(c->fd);
  close(c->fd);
  c->fd = -1;
  auto it = per_source_.find(c->source);
  if (it != per_source_.end() && --it->second <= 0) per_source_.erase(it);
}

void HttpServer::Worker(bool priority) {
  std::deque<Job>& queue = priority ? priority_work_ : work_;
  std::condition_variable& cv = priority ? priority_cv_ : work_cv_;
  bool served = false, alone = false;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (served) --in_service_;
      served = false;
      if (!priority && !stop_ && queue.empty()) {
        --awake_;
        ++asleep_;
        while (!stop_ && queue.empty()) {
          cv.wait(lock);
          // Every return from the wait uses up a wake of QueueWork's (or is spurious: then
          // the count is low, and at worst one more worker is woken than needed).
          if (woken_ > 0) --woken_;
        }
        --asleep_;
        ++awake_;
      } else {
        cv.wait(lock, [&] { return stop_ || !queue.empty(); });
      }
      if (stop_) return;
      job = std::move(queue.front());
      queue.pop_front();
      ++in_service_;
      served = true;
      // A worker that writes its request's change (Store::InlineWrite) waits for the disk:
      // only where another worker is there for the requests that come meanwhile.
      alone = !priority && limits_.workers >= 2 && in_service_ == 1 && work_.empty() && priority_work_.empty();
    }
    bool held = Serve(*job.conn, alone, priority);
    // An agent's request that took more than a second from arrival to answer: gpupoold was
    // too busy to hear agents in time.
    if (priority && Clock::now() - job.queued > std::chrono::seconds(1)) NoteStall();
    if (held) {
      Park(std::move(job.conn));
      continue;
    }
    HandBack(std::move(job.conn));
  }
}

namespace {

// The request a worker thread is serving, for HoldAnswerUntil.
struct HoldSlot {
  bool can_hold = false;
  bool alone = false;              // ServingAlone
  HttpServer* ordinary = nullptr;  // the server, for a request of an ordinary route (WaitingWorker)
  uint64_t ticket = 0;
};
thread_local HoldSlot* current_hold = nullptr;

}  // namespace

bool HttpServer::HoldAnswerUntil(uint64_t ticket) {
  if (current_hold == nullptr || !current_hold->can_hold) return false;
  current_hold->ticket = std::max(current_hold->ticket, ticket);
  return true;
}

bool HttpServer::ServingAlone() { return current_hold != nullptr && current_hold->alone; }

HttpServer::WaitingWorker::WaitingWorker() {
  if (current_hold == nullptr || current_hold->ordinary == nullptr) return;
  server_ = current_hold->ordinary;
  std::lock_guard<std::mutex> lock(server_->mu_);
  --server_->awake_;
  if (!server_->work_.empty() && server_->awake_ + server_->woken_ < server_->busy_enough_ &&
      server_->asleep_ > server_->woken_) {
    ++server_->woken_;
    ++server_->counters_.worker_wakes;
    server_->work_cv_.notify_one();
  }
}

HttpServer::WaitingWorker::~WaitingWorker() {
  if (server_ == nullptr) return;
  std::lock_guard<std::mutex> lock(server_->mu_);
  ++server_->awake_;
}

bool HttpServer::Serve(Conn& c, bool alone, bool priority) {
  httplib::Response res;
  if (c.error_status != 0) {
    res.status = c.error_status;
    if (error_handler_) error_handler_(c.req, res);
    Answer(c, res, false);
    // The client may still be sending (a body too large, say): closing with its bytes
    // unread would reset the connection and lose the answer. Read and drop them for a
    // moment first (a lingering close).
    if (c.fd >= 0) {
      shutdown(c.fd, SHUT_WR);
      Clock::time_point until = Clock::now() + std::chrono::milliseconds(500);
      char sink[16384];
      size_t dropped = 0;
      while (Clock::now() < until && dropped < (size_t{4} << 20)) {
        pollfd p{c.fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        ssize_t n = recv(c.fd, sink, sizeof(sink), 0);
        if (n <= 0) break;
        dropped += static_cast<size_t>(n);
      }
    }
    return false;
  }
  auto route = routes_.find(c.req.path);
  const Route* r = nullptr;
  if (route == routes_.end()) {
    res.status = 404;
  } else if (auto m = route->second.find(c.req.method); m == route->second.end()) {
    res.status = 405;
  } else {
    r = &m->second;
  }
  if (r == nullptr) {
    if (error_handler_) error_handler_(c.req, res);
    Answer(c, res, c.keep_alive);
    return false;
  }
  HoldSlot hold;
  {
    std::lock_guard<std::mutex> lock(durable_mu_);
    hold.can_hold = durable_known_;
    // Nor any answer waiting for the disk: under load there always is one, and a worker
    // that wrote inline then would leave the queue to workers yet to be woken.
    hold.alone = alone && held_.empty();
  }
  if (!priority) hold.ordinary = this;
  current_hold = &hold;
  try {
    r->handler(c.req, res);
  } catch (...) {
    res = httplib::Response();
    res.status = 500;
    hold.ticket = 0;
    if (exception_handler_) exception_handler_(c.req, res, std::current_exception());
  }
  current_hold = nullptr;
  if (res.status == -1) res.status = 200;
  if (hold.ticket > 0) {
    c.held_ticket = hold.ticket;
    c.out = Format(res, c.keep_alive);
    c.out_sent = 0;
    if (!c.keep_alive) c.closing = true;
    return true;
  }
  Answer(c, res, c.keep_alive);
  return false;
}

std::string HttpServer::Format(httplib::Response& res, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(res.status) + " " + Reason(res.status) + "\r\n";
  for (const auto& [k, v] : res.headers) {
    if (EqualsNoCase(k, "Content-Length") || EqualsNoCase(k, "Connection")) continue;
    out += k + ": " + v + "\r\n";
  }
  out += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  out += res.body;
  return out;
}

void HttpServer::Answer(Conn& c, httplib::Response& res, bool keep_alive) {
  if (!WriteAll(c.fd, Format(res, keep_alive)) || !keep_alive) c.closing = true;
}

// The answer of a request whose change could not be saved.
std::string HttpServer::FailureAnswer(const std::string& body, bool keep_alive) {
  httplib::Response res;
  res.status = 500;
  res.set_content(body, "application/json");
  return HttpServer::Format(res, keep_alive);
}

void HttpServer::Park(std::shared_ptr<Conn> c) {
  {
    std::lock_guard<std::mutex> lock(durable_mu_);
    if (c->held_ticket > durable_) {
      if (failure_body_.empty()) {
        held_.emplace(c->held_ticket, std::move(c));
        return;
      }
      c->out = FailureAnswer(failure_body_, !c->closing);
    }
  }
  // Durable already (or never to be): sent now, from this worker.
  std::vector<std::shared_ptr<Conn>> ready;
  ready.push_back(std::move(c));
  Deliver(std::move(ready));
}

void HttpServer::NotifyDurable(uint64_t durable, const std::string& failure_body) {
  std::vector<std::shared_ptr<Conn>> ready;
  {
    std::lock_guard<std::mutex> lock(durable_mu_);
    durable_known_ = true;
    durable_ = std::max(durable_, durable);
    if (failure_body_.empty()) failure_body_ = failure_body;
    auto end = failure_body_.empty() ? held_.upper_bound(durable_) : held_.end();
    for (auto it = held_.begin(); it != end; ++it) {
      if (it->first > durable_) it->second->out = FailureAnswer(failure_body_, !it->second->closing);
      ready.push_back(std::move(it->second));
    }
    held_.erase(held_.begin(), end);
  }
  if (!ready.empty()) Deliver(std::move(ready));
}

void HttpServer::Deliver(std::vector<std::shared_ptr<Conn>> ready) {
  std::vector<std::shared_ptr<Conn>> rest;
  for (std::shared_ptr<Conn>& c : ready) {
    // Each connection is this thread's alone until it goes back to the loop.
    if (!stop_ && Flush(*c) > 0) {
      HandBack(std::move(c));
    } else {
      rest.push_back(std::move(c));  // the socket is full or failed, or the server stops
    }
  }
  if (rest.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  released_.insert(released_.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
  Wake();
}

int HttpServer::Flush(Conn& c) {
  while (c.out_sent < c.out.size()) {
    ssize_t n = send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return 0;
    } else {
      return -1;
    }
  }
  c.out.clear();
  c.out_sent = 0;
  c.held_ticket = 0;
  return 1;
}

void HttpServer::SendReleased(const std::shared_ptr<Conn>& c) {
  if (stop_) {
    Close(c);
    return;
  }
  int sent = Flush(*c);
  if (sent < 0) {
    Close(c);
  } else if (sent > 0) {
    Rearm(c);
  } else {
    // The client does not read its answer now: wait until it does, within the write timeout.
    c->in_service = false;
    c->handed_back.store(false, std::memory_order_relaxed);
    c->phase = Conn::Phase::kWriting;
    c->deadline = Clock::now() + std::chrono::milliseconds(limits_.write_timeout_ms);
    conns_[c->fd] = c;
    Arm(*c, EPOLLOUT);
  }
}

void HttpServer::OnWritable(const std::shared_ptr<Conn>& c) {
  int sent = Flush(*c);
  if (sent == 0) return;
  if (sent < 0) {
    Close(c);
    return;
  }
  c->phase = Conn::Phase::kIdle;
  Rearm(c);
}

bool HttpServer::WriteAll(int fd, const std::string& data) {
  Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(limits_.write_timeout_ms);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      ++counters_.timed_out;
      return false;
    }
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, static_cast<int>(left));
  }
  return true;
}

}  // namespace gpupool::poold

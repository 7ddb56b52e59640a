#include "common/http_connection.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <string_view>
#include <utility>

namespace gpupool {
namespace {

timeval ToTimeval(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

// A method is an HTTP token; a path starts with '/' and holds no space or control byte; a
// header value holds no control byte. Anything else would let a caller's text add headers or
// a second request to the wire.
bool IsToken(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))) return false;
  }
  return true;
}

bool IsPath(const std::string& s) {
  if (s.empty() || s[0] != '/') return false;
  for (unsigned char c : s) {
    if (c <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

bool IsHeaderValue(const std::string& s) {
  for (unsigned char c : s) {
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return true;
}

std::string Trim(std::string s) {
  size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  size_t end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

// "123" → 123; false for anything but decimal digits, or a value past `max`.
bool ParseLength(const std::string& text, size_t max, size_t* out) {
  if (text.empty() || text.size() > 19) return false;
  size_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<size_t>(c - '0');  // 19 digits cannot overflow 64 bits
  }
  if (value > max) return false;
  *out = value;
  return true;
}

}  // namespace

std::string ParseAnswerHead(std::string_view head, const HttpAnswerLimits& limits, HttpAnswerHead* out) {
  *out = HttpAnswerHead();
  // Status line: HTTP/1.x NNN[ reason]
  const size_t line_end = std::min(head.find("\r\n"), head.size());
  const std::string status_line(head.substr(0, line_end));
  auto digit = [&](size_t i) { return isdigit(static_cast<unsigned char>(status_line[i])) != 0; };
  if (status_line.size() < 12 || status_line.compare(0, 7, "HTTP/1.") != 0 || !digit(7) || status_line[8] != ' ' ||
      status_line[9] < '1' || status_line[9] > '5' || !digit(10) || !digit(11) ||
      (status_line.size() > 12 && status_line[12] != ' ')) {
    return "not an HTTP/1.x status line: '" + status_line.substr(0, 64) + "'";
  }
  out->status = (status_line[9] - '0') * 100 + (status_line[10] - '0') * 10 + (status_line[11] - '0');
  out->keep_alive = status_line[7] != '0';  // HTTP/1.1 keeps the connection unless told
  for (size_t pos = line_end; pos < head.size();) {
    pos += 2;  // past the "\r\n" that ends the previous line
    const size_t eol = std::min(head.find("\r\n", pos), head.size());
    const std::string line(head.substr(pos, eol - pos));
    pos = eol;
    const size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) return "malformed answer header line '" + line.substr(0, 64) + "'";
    const std::string name = line.substr(0, colon);
    const std::string value = Trim(line.substr(colon + 1));
    if (strcasecmp(name.c_str(), "Content-Length") == 0) {
      size_t parsed;
      if (!ParseLength(value, limits.max_body_bytes, &parsed) || (out->has_length && parsed != out->length)) {
        return "bad or oversized Content-Length '" + value.substr(0, 32) + "' (at most " +
               std::to_string(limits.max_body_bytes) + ")";
      }
      out->has_length = true;
      out->length = parsed;
    } else if (strcasecmp(name.c_str(), "Transfer-Encoding") == 0) {
      return "answer uses Transfer-Encoding '" + value.substr(0, 32) + "', which gpupoold never sends";
    } else if (strcasecmp(name.c_str(), "Connection") == 0) {
      if (strcasecmp(value.c_str(), "close") == 0) out->keep_alive = false;
      if (strcasecmp(value.c_str(), "keep-alive") == 0) out->keep_alive = true;
    }
  }
  return "";
}

HttpConnection::HttpConnection(std::string host, int port, int timeout_ms, HttpAnswerLimits limits)
    : host_(std::move(host)), port_(port), timeout_ms_(timeout_ms > 0 ? timeout_ms : 1), limits_(limits) {
  // "[::1]", as an IPv6 address is written in a URL: getaddrinfo takes it without brackets.
  if (host_.size() > 2 && host_.front() == '[' && host_.back() == ']') host_ = host_.substr(1, host_.size() - 2);
}

HttpConnection::~HttpConnection() { Close(); }

void HttpConnection::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  in_.clear();
}

HttpReply HttpConnection::Fail(HttpFailure failure, std::string detail) {
  Close();
  HttpReply reply;
  reply.failure = failure;
  reply.detail = std::move(detail);
  return reply;
}

HttpReply HttpConnection::Connect() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(port_);
  if (int rc = getaddrinfo(host_.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Fail(HttpFailure::kConnection, "cannot resolve '" + host_ + "': " + gai_strerror(rc));
  }
  HttpReply last = Fail(HttpFailure::kConnection, "no address for '" + host_ + "'");
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last = Fail(HttpFailure::kConnection, strerror(errno));
      continue;
    }
    // Non-blocking for the connect alone, so that it is bounded by the timeout.
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ready;
      do {
        ready = poll(&p, 1, timeout_ms_);
      } while (ready < 0 && errno == EINTR);
      if (ready == 0) {
        close(fd);
        last = Fail(HttpFailure::kConnectionTimeout, "no connection within " + std::to_string(timeout_ms_) + " ms");
        continue;
      }
      int error = 0;
      socklen_t len = sizeof(error);
      if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0 || error != 0) {
        close(fd);
        last = Fail(HttpFailure::kConnection, strerror(error != 0 ? error : errno));
        continue;
      }
    } else if (rc < 0) {
      int error = errno;
      close(fd);
      last = Fail(HttpFailure::kConnection, strerror(error));
      continue;
    }
    // From here blocking, each send and read bounded by the socket's timeouts: one system
    // call per send or read instead of a poll before each.
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    timeval tv = ToTimeval(timeout_ms_);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    freeaddrinfo(found);
    fd_ = fd;
    in_.clear();
    ++connections_opened_;
    return HttpReply{};
  }
  freeaddrinfo(found);
  return last;
}

// A kept connection the server has closed (its idle timeout, a restart) reads as EOF; one it
// wrote to unasked (a timeout answer before closing) has bytes waiting. Either way it is not
// used again. One non-blocking peek.
bool HttpConnection::KeptConnectionIsOpen() {
  if (!in_.empty()) return false;
  char byte;
  ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

HttpReply HttpConnection::SendAll(const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Fail(HttpFailure::kWrite, "send timed out after " + std::to_string(timeout_ms_) + " ms");
    } else {
      return Fail(HttpFailure::kWrite, n < 0 ? strerror(errno) : "connection closed");
    }
  }
  return HttpReply{};
}

HttpReply HttpConnection::ReadAnswer() {
  char chunk[16384];
  // One more read into in_. kEnd: the server closed the connection; kFailed: *why says what
  // went wrong (a closed connection is left to the caller, which may expect it).
  enum class Read { kMore, kEnd, kFailed };
  auto read_more = [&](HttpReply* why) {
    for (;;) {
      ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n > 0) {
        in_.append(chunk, static_cast<size_t>(n));
        return Read::kMore;
      }
      if (n == 0) return Read::kEnd;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        *why = Fail(HttpFailure::kRead, "read timed out after " + std::to_string(timeout_ms_) + " ms");
      } else {
        *why = Fail(HttpFailure::kRead, strerror(errno));
      }
      return Read::kFailed;
    }
  };
  // Where the answer must go on: an end is a failure too.
  auto need_more = [&](HttpReply* why) {
    Read r = read_more(why);
    if (r == Read::kEnd) *why = Fail(HttpFailure::kRead, "connection closed before the whole answer");
    return r == Read::kMore;
  };
  // Interim answers (100 Continue) before the real one: a few at most, so that a server
  // sending them without end cannot hold the caller past its timeout.
  constexpr int kMaxInterimAnswers = 8;
  for (int interim = 0;; ++interim) {
    if (interim > kMaxInterimAnswers) {
      return Fail(HttpFailure::kBadAnswer, "more than " + std::to_string(kMaxInterimAnswers) + " interim answers");
    }
    HttpReply why;
    size_t header_end;
    while ((header_end = in_.find("\r\n\r\n")) == std::string::npos) {
      if (in_.size() > limits_.max_header_bytes) {
        return Fail(HttpFailure::kBadAnswer,
                    "answer header longer than " + std::to_string(limits_.max_header_bytes) + " bytes");
      }
      if (!need_more(&why)) return why;
    }
    if (header_end > limits_.max_header_bytes) {
      return Fail(HttpFailure::kBadAnswer,
                  "answer header longer than " + std::to_string(limits_.max_header_bytes) + " bytes");
    }
    HttpAnswerHead head;
    if (std::string detail = ParseAnswerHead(std::string_view(in_).substr(0, header_end), limits_, &head);
        !detail.empty()) {
      return Fail(HttpFailure::kBadAnswer, detail);
    }
    const int status = head.status;
    bool keep_alive = head.keep_alive;
    const bool has_length = head.has_length;
    const size_t length = head.length;
    const size_t body_begin = header_end + 4;
    if (status < 200) {  // an interim answer (100 Continue): the real one follows
      in_.erase(0, body_begin);
      continue;
    }
    HttpReply reply;
    reply.status = status;
    if (status == 204 || status == 304) {
      // No body, whatever the header says (RFC 9110): nothing more to wait for.
      in_.erase(0, body_begin);
    } else if (has_length) {
      in_.reserve(body_begin + length);  // length is at most limits_.max_body_bytes
      while (in_.size() - body_begin < length) {
        if (!need_more(&why)) return why;
      }
      reply.body = in_.substr(body_begin, length);
      in_.erase(0, body_begin + length);
    } else {
      // No length: the body ends where the server closes the connection.
      keep_alive = false;
      for (;;) {
        if (in_.size() - body_begin > limits_.max_body_bytes) {
          return Fail(HttpFailure::kBadAnswer,
                      "answer body longer than " + std::to_string(limits_.max_body_bytes) + " bytes");
        }
        Read r = read_more(&why);
        if (r == Read::kFailed) return why;
        if (r == Read::kEnd) break;
      }
      reply.body = in_.substr(body_begin);
      in_.clear();
    }
    if (!keep_alive) Close();
    return reply;
  }
}

HttpReply HttpConnection::Exchange(const std::string& method, const std::string& path, const std::string& authorization,
                                   const std::string* body) {
  // The caller's mistake: refused before anything is sent, the kept connection left as it is.
  auto refuse = [](std::string detail) {
    HttpReply reply;
    reply.failure = HttpFailure::kBadRequest;
    reply.detail = std::move(detail);
    return reply;
  };
  if (!IsToken(method)) return refuse("bad HTTP method '" + method.substr(0, 32) + "'");
  if (!IsPath(path)) return refuse("bad request path (must start with '/', no spaces or control bytes)");
  if (!IsHeaderValue(authorization)) return refuse("the Authorization value holds a control byte");
  std::string request;
  request.reserve(160 + path.size() + authorization.size() + (body != nullptr ? body->size() : 0));
  request += method;
  request += ' ';
  request += path;
  request += " HTTP/1.1\r\nHost: ";
  request += host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_;
  request += ':';
  request += std::to_string(port_);
  request += "\r\nUser-Agent: gpupool\r\nConnection: keep-alive\r\n";
  if (!authorization.empty()) {
    request += "Authorization: ";
    request += authorization;
    request += "\r\n";
  }
  if (body != nullptr) {
    request += "Content-Type: application/json\r\nContent-Length: ";
    request += std::to_string(body->size());
    request += "\r\n\r\n";
    request += *body;
  } else {
    request += "\r\n";
  }
  if (fd_ >= 0 && !KeptConnectionIsOpen()) Close();
  if (fd_ < 0) {
    HttpReply connected = Connect();
    if (!connected.ok()) return connected;
  }
  HttpReply sent = SendAll(request);
  if (!sent.ok()) return sent;
  return ReadAnswer();
}

}  // namespace gpupool

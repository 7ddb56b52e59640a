// HttpConnection: one keep-alive HTTP/1.1 connection from ApiClient to gpupoold.
//
// Why not httplib::Client: it writes a request's header and body with two sends and polls
// the socket before every read and write, about ten system calls and two TCP segments per
// request. With TCP_NODELAY each segment wakes gpupoold's event loop on its own, and the
// header alone is not a request yet. Here a request is one send (header and body in one
// buffer), its answer is read with blocking reads under SO_RCVTIMEO, and a reused connection
// is checked with one non-blocking peek: three system calls for a small request and answer.
//
// What it speaks: requests with a Content-Length body (or none); answers with a
// Content-Length, or delimited by the connection's close; 1xx interim answers are skipped.
// A chunked answer (gpupoold never sends one) is refused with an error that says so. Not
// thread-safe: one per thread, as ApiClient.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace gpupool {

enum class HttpFailure {
  kNone,
  kConnection,         // refused, unreachable, or the name does not resolve
  kConnectionTimeout,  // no connection within the timeout
  kWrite,              // the request could not be sent
  kRead,               // no (complete) answer: read failed, timed out, or the peer closed
  kBadAnswer,          // an answer that is not HTTP/1.x as gpupoold sends it
  kBadRequest,         // the caller's method, path or a header value cannot go on the wire
};

struct HttpReply {
  HttpFailure failure = HttpFailure::kNone;
  std::string detail;  // why, when failure != kNone
  int status = 0;
  std::string body;

  bool ok() const { return failure == HttpFailure::kNone; }
};

// Limits on what an answer may hold; beyond them the answer is refused (kBadAnswer) and the
// connection closed, so a wrong or hostile server cannot make the client take unbounded memory.
struct HttpAnswerLimits {
  size_t max_header_bytes = 64 * 1024;
  size_t max_body_bytes = size_t{1} << 30;
};

// The head of an answer: its status line and headers.
struct HttpAnswerHead {
  int status = 0;
  bool keep_alive = true;  // HTTP/1.1 without "Connection: close", or 1.0 with keep-alive
  bool has_length = false;
  size_t length = 0;  // Content-Length, at most limits.max_body_bytes
};

// Parses `head`, an answer's bytes before its blank line ("\r\n\r\n" not included).
// Returns "" and fills *out, or says what is wrong (a status line that is not HTTP/1.x, a
// header line without a name, a bad, repeated-and-different or oversized Content-Length,
// any Transfer-Encoding). HttpConnection reads every answer with it; tests/fuzz/http_answer
// feeds it arbitrary bytes.
std::string ParseAnswerHead(std::string_view head, const HttpAnswerLimits& limits, HttpAnswerHead* out);

class HttpConnection {
 public:
  // host: a name or address; timeout_ms bounds the connect and each send and read.
  HttpConnection(std::string host, int port, int timeout_ms, HttpAnswerLimits limits = {});
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // One request and its answer. Opens the connection first if there is none (or the server
  // has closed the kept one). authorization may be empty (no header); content_type is sent
  // only with a body.
  HttpReply Exchange(const std::string& method, const std::string& path, const std::string& authorization,
                     const std::string* body);

  // The number of TCP connections opened so far (tests: keep-alive reuses one).
  int connections_opened() const { return connections_opened_; }

 private:
  HttpReply Connect();
  bool KeptConnectionIsOpen();
  HttpReply SendAll(const std::string& data);
  HttpReply ReadAnswer();
  HttpReply Fail(HttpFailure failure, std::string detail);
  void Close();

  std::string host_;
  int port_;
  int timeout_ms_;
  HttpAnswerLimits limits_;
  int fd_ = -1;
  std::string in_;  // bytes read past the last answer (none, with gpupoold)
  int connections_opened_ = 0;
};

}  // namespace gpupool

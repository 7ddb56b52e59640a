// Status: the error value returned across gpupool's internal boundaries (LevelDB style).
// A Status is either OK or carries a code and a one-line message naming the problem.
#pragma once

#include <string>
#include <utility>

namespace gpupool {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,   // bad input: option, config, request field (HTTP 400)
    kUnauthenticated,   // no or bad credential (401)
    kPermissionDenied,  // authenticated but not allowed (403)
    kNotFound,          // unknown object (404)
    kConflict,          // cannot ever succeed as asked (409)
    kTooLarge,          // request over the size limit (413)
    kUnavailable,       // try again later: no idle GPU, daemon unreachable (503)
    kInternal,          // a bug or an I/O failure (500)
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
  static Status Unauthenticated(std::string m) { return Status(Code::kUnauthenticated, std::move(m)); }
  static Status PermissionDenied(std::string m) { return Status(Code::kPermissionDenied, std::move(m)); }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status Conflict(std::string m) { return Status(Code::kConflict, std::move(m)); }
  static Status TooLarge(std::string m) { return Status(Code::kTooLarge, std::move(m)); }
  static Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
  static Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // HTTP status code for this Status (200 for OK).
  int HttpCode() const;
  static Status FromHttp(int http_code, std::string message);

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// Result<T>: a value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return value_; }
  const T& value() const { return value_; }
  T* operator->() { return &value_; }
  T& operator*() { return value_; }

 private:
  Status status_;
  T value_{};
};

}  // namespace gpupool

#define GPUPOOL_RETURN_IF_ERROR(expr) \
  do {                                \
    ::gpupool::Status _s = (expr);    \
    if (!_s.ok()) return _s;          \
  } while (0)

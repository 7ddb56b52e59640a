#include "common/status.h"

namespace gpupool {

int Status::HttpCode() const {
  switch (code_) {
    case Code::kOk:
      return 200;
    case Code::kInvalidArgument:
      return 400;
    case Code::kUnauthenticated:
      return 401;
    case Code::kPermissionDenied:
      return 403;
    case Code::kNotFound:
      return 404;
    case Code::kConflict:
      return 409;
    case Code::kTooLarge:
      return 413;
    case Code::kUnavailable:
      return 503;
    case Code::kInternal:
      return 500;
  }
  return 500;
}

Status Status::FromHttp(int http_code, std::string message) {
  switch (http_code) {
    case 200:
    case 201:
    case 204:
      return Status();
    case 400:
      return InvalidArgument(std::move(message));
    case 401:
      return Unauthenticated(std::move(message));
    case 403:
      return PermissionDenied(std::move(message));
    case 404:
      return NotFound(std::move(message));
    case 409:
      return Conflict(std::move(message));
    case 413:
      return TooLarge(std::move(message));
    case 503:
      return Unavailable(std::move(message));
    default:
      return Internal(std::move(message));
  }
}

}  // namespace gpupool

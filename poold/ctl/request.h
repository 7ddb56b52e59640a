// ApiRequest: the one HTTP call (docs/api.md) that carries out a parsed gpupoolctl command.
// Pure: building it sends nothing, so tests check paths, query strings and bodies directly.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "poold/ctl/args.h"

namespace gpupool::ctl {

struct ApiRequest {
  bool post = false;
  std::string path;          // with query string, e.g. "/v1/gpus?id=gpuhost1%3A0"
  nlohmann::json body;       // POST only
  bool authenticate = true;  // false for /v1/ping
};

// The request for `args` (a verb other than kHelp/kVersion).
ApiRequest BuildRequest(const CtlArgs& args);

// Percent-encodes a query-string value (RFC 3986 unreserved characters stay as they are).
std::string QueryEscape(const std::string& value);

}  // namespace gpupool::ctl

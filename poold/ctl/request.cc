#include "poold/ctl/request.h"

#include <cstdio>

namespace gpupool::ctl {
namespace {

// Appends "key=value" to a query string being built in *path.
void AddQuery(std::string* path, const std::string& key, const std::string& value) {
  *path += path->find('?') == std::string::npos ? "?" : "&";
  *path += key + "=" + QueryEscape(value);
}

}  // namespace

std::string QueryEscape(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '_' || c == '.' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

ApiRequest BuildRequest(const CtlArgs& a) {
  ApiRequest r;
  switch (a.verb) {
    case Verb::kHelp:
    case Verb::kVersion:
    case Verb::kPing:
      r.path = "/v1/ping";
      r.authenticate = false;
      break;
    case Verb::kShowPools:
      r.path = "/v1/pools";
      if (!a.pool.empty()) AddQuery(&r.path, "name", a.pool);
      break;
    case Verb::kShowGpus:
      r.path = "/v1/gpus";
      if (!a.gpu.empty()) AddQuery(&r.path, "id", a.gpu);
      if (!a.pool.empty()) AddQuery(&r.path, "pool", a.pool);
      break;
    case Verb::kShowLeases:
      r.path = "/v1/leases";
      if (a.job) AddQuery(&r.path, "job", std::to_string(*a.job));
      if (!a.lease.empty()) AddQuery(&r.path, "id", a.lease);
      break;
    case Verb::kShowEvents:
      r.path = "/v1/events";
      if (!a.gpu.empty()) AddQuery(&r.path, "gpu", a.gpu);
      if (a.job) AddQuery(&r.path, "job", std::to_string(*a.job));
      if (a.since) AddQuery(&r.path, "since", std::to_string(*a.since));
      if (a.limit) AddQuery(&r.path, "limit", std::to_string(*a.limit));
      break;
    case Verb::kUpdateGpu:
      r.post = true;
      r.path = "/v1/gpus/update";
      r.body = {{"gpu", a.gpu}, {"state", a.state}};
      if (a.reason) r.body["reason"] = *a.reason;
      break;
    case Verb::kMigrate:
      r.post = true;
      r.path = "/v1/leases/migrate";
      r.body = {{"lease", a.lease}};
      if (!a.gpu.empty()) r.body["gpu"] = a.gpu;
      if (!a.to.empty()) r.body["to"] = a.to;
      if (a.reason) r.body["reason"] = *a.reason;
      break;
    case Verb::kRelease:
      r.post = true;
      r.path = "/v1/leases/release";
      if (a.job) {
        r.body = {{"job_id", *a.job}};
      } else {
        r.body = {{"id", a.lease}};
      }
      if (a.reason) r.body["reason"] = *a.reason;
      break;
  }
  return r;
}

}  // namespace gpupool::ctl

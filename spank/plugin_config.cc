#include "spank/plugin_config.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <set>

namespace gpupool::spank {
namespace {

Status Bad(const std::string& arg, const std::string& what) {
  return Status::InvalidArgument("plugstack.conf: argument '" + arg + "': " + what);
}

Result<int> ParseInt(const std::string& arg, const std::string& value, int min, int max) {
  if (value.empty()) return Bad(arg, "empty value");
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value[0] == '+' || value[0] == ' ') {
    return Bad(arg, "'" + value + "' is not an integer");
  }
  if (v < min || v > max) {
    return Bad(arg, "must be between " + std::to_string(min) + " and " + std::to_string(max));
  }
  return static_cast<int>(v);
}

Result<bool> ParseBool(const std::string& arg, const std::string& value) {
  if (value == "yes" || value == "true" || value == "1") return true;
  if (value == "no" || value == "false" || value == "0") return false;
  return Bad(arg, "must be yes or no");
}

Status NonEmpty(const std::string& arg, const std::string& value) {
  return value.empty() ? Bad(arg, "empty value") : Status::OK();
}

Status Absolute(const std::string& arg, const std::string& value) {
  if (value.empty() || value[0] != '/') return Bad(arg, "must be an absolute path");
  return Status::OK();
}

}  // namespace

const std::vector<std::string>& PluginConfigKeys() {
  static const std::vector<std::string> keys = {"server",      "timeout",        "retry",     "profile",
                                                "profile_dir", "lib_dir",        "lease_dir", "munge_socket",
                                                "ttl",         "watch_interval", "notify",    "userfaultfd"};
  return keys;
}

Result<PluginConfig> ParsePluginConfig(const std::vector<std::string>& args) {
  PluginConfig c;
  std::set<std::string> seen;
  for (const std::string& arg : args) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument("plugstack.conf: argument '" + arg + "' is not key=value");
    }
    std::string key = arg.substr(0, eq);
    std::string value = arg.substr(eq + 1);
    if (!seen.insert(key).second) {
      return Status::InvalidArgument("plugstack.conf: argument '" + key + "' given twice");
    }
    if (key == "server") {
      GPUPOOL_RETURN_IF_ERROR(NonEmpty(arg, value));
      c.server = value;
    } else if (key == "timeout") {
      Result<int> v = ParseInt(arg, value, 1, 300);
      if (!v.ok()) return v.status();
      c.timeout_s = *v;
    } else if (key == "retry") {
      Result<int> v = ParseInt(arg, value, 0, 300);
      if (!v.ok()) return v.status();
      c.retry_s = *v;
    } else if (key == "profile") {
      GPUPOOL_RETURN_IF_ERROR(NonEmpty(arg, value));
      c.profile = value;
    } else if (key == "profile_dir") {
      GPUPOOL_RETURN_IF_ERROR(Absolute(arg, value));
      c.profile_dir = value;
    } else if (key == "lib_dir") {
      GPUPOOL_RETURN_IF_ERROR(Absolute(arg, value));
      c.lib_dir = value;
    } else if (key == "lease_dir") {
      GPUPOOL_RETURN_IF_ERROR(Absolute(arg, value));
      c.lease_dir = value;
    } else if (key == "munge_socket") {
      GPUPOOL_RETURN_IF_ERROR(Absolute(arg, value));
      c.munge_socket = value;
    } else if (key == "ttl") {
      Result<int> v = ParseInt(arg, value, 0, 7 * 24 * 3600);
      if (!v.ok()) return v.status();
      c.ttl_s = *v;
    } else if (key == "watch_interval") {
      Result<int> v = ParseInt(arg, value, 1, 3600);
      if (!v.ok()) return v.status();
      c.watch_interval_s = *v;
    } else if (key == "notify") {
      Result<bool> v = ParseBool(arg, value);
      if (!v.ok()) return v.status();
      c.notify = *v;
    } else if (key == "userfaultfd") {
      Result<bool> v = ParseBool(arg, value);
      if (!v.ok()) return v.status();
      c.userfaultfd = *v;
    } else {
      std::string expected;
      for (const std::string& k : PluginConfigKeys()) expected += (expected.empty() ? "" : ", ") + k;
      return Status::InvalidArgument("plugstack.conf: unknown argument '" + key + "' (expected one of: " + expected +
                                     ")");
    }
  }
  if (c.ttl_s != 0 && c.watch_interval_s * 2 > c.ttl_s) {
    return Status::InvalidArgument(
        "plugstack.conf: watch_interval must be at most half of ttl, or the lease expires "
        "between renewals");
  }
  return c;
}

std::string ProfilePath(const PluginConfig& config) {
  if (config.profile.find('/') != std::string::npos) return config.profile;
  return config.profile_dir + "/" + config.profile + ".profile";
}

void ApplyInstallDefaults(const std::string& plugin_dir, PluginConfig* config) {
  if (config->profile_dir.empty()) config->profile_dir = plugin_dir + "/../etc/gpupool/profiles";
  if (config->lib_dir.empty()) config->lib_dir = plugin_dir + "/remoting";
}

}  // namespace gpupool::spank

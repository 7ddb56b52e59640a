// PluginConfig: the key=value arguments of spank_gpupool's line in plugstack.conf.
//
// Parsed in one place, by every SPANK context, from the argv Slurm hands to each callback.
// Strict: an unknown key, a missing '=', a repeated key or a bad value is an error naming
// the argument, e.g. "plugstack.conf: unknown argument 'sever' (expected one of: ...)".
// Pure: no I/O, so tests link it directly.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::spank {

struct PluginConfig {
  std::string server = "http://127.0.0.1:6830";  // gpupoold's API
  int timeout_s = 10;                            // per API call (connect + answer)
  int retry_s = 15;                              // at job start, keep trying an unreachable gpupoold this long
  std::string profile = "gpupool";               // remoting profile: a NAME in profile_dir, or a /PATH
  std::string profile_dir;                       // empty: <plugin dir>/../etc/gpupool/profiles
  std::string lib_dir;                           // {lib_dir} in profiles; empty: <plugin dir>/remoting
  std::string lease_dir = "/run/gpupool";        // per-job lease files (node-local)
  std::string munge_socket;                      // empty: $MUNGE_SOCKET, else libmunge's default
  int ttl_s = 0;                                 // lease TTL asked for; 0: gpupoold's default
  int watch_interval_s = 5;                      // seconds between renewals (which also reveal swaps)
  bool notify = true;                            // slurm_notify_job when the lease moves to other GPUs
  // Open /dev/userfaultfd for the tasks of steps with pool GPUs (GPUPOOL_USERFAULTFD): the
  // remoting library's copy-on-write snapshots of uploads (gpupool-remote(7)).
  bool userfaultfd = false;
};

// The keys the parser accepts, in the order the man page documents them.
const std::vector<std::string>& PluginConfigKeys();

// Parses plugstack.conf arguments ("server=http://h:6830", "timeout=5", ...).
Result<PluginConfig> ParsePluginConfig(const std::vector<std::string>& args);

// The profile file to load: `profile` itself when it contains a '/', else
// `<profile_dir>/<profile>.profile`.
std::string ProfilePath(const PluginConfig& config);

// Fills profile_dir and lib_dir, when empty, from the directory holding the plugin.
void ApplyInstallDefaults(const std::string& plugin_dir, PluginConfig* config);

}  // namespace gpupool::spank

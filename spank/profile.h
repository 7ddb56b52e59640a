// Profile: a remoting profile, the small file that says which variables a job's steps get
// so that a remoting stack (gpupool's libcuda.so.1, rCUDA, SCUDA/LUPINE) finds the GPUs of
// the job's lease. Format (one rule per line, '#' starts a comment):
//
//   set     NAME=TEMPLATE   NAME becomes TEMPLATE
//   prepend NAME=TEMPLATE   NAME becomes TEMPLATE:<old value> (TEMPLATE when unset)
//   append  NAME=TEMPLATE   NAME becomes <old value>:TEMPLATE (TEMPLATE when unset)
//   each    NAME=TEMPLATE   once per GPU; NAME and TEMPLATE may use per-GPU fields
//   join    NAME=TEMPLATE   TEMPLATE once per GPU, joined with ','
//
// Templates use {field}: job-wide {count} {gpus} {endpoints} {lease_id} {generation}
// {job_id} {lib_dir} {lease_file} {server}; per GPU (each/join only) {i} {uuid} {id}
// {host} {index} {endpoint} {addr} {port} {pool} {rack}. '{{' and '}}' are literal braces.
// Parsing is strict: an unknown rule, field or variable name is an error naming file and
// line. Pure: tests link it directly.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "spank/lease.h"

namespace gpupool::spank {

struct ProfileRule {
  enum class Kind { kSet, kPrepend, kAppend, kEach, kJoin };
  Kind kind = Kind::kSet;
  std::string name;   // template for kEach, plain name otherwise
  std::string value;  // template
  int line = 0;
};

struct Profile {
  std::string name;  // file name, for messages
  std::vector<ProfileRule> rules;
};

// `name` stands for the file in messages ("gpupool.profile:3: ...").
Result<Profile> ParseProfile(const std::string& text, const std::string& name);
Result<Profile> LoadProfile(const std::string& path);

struct ProfileContext {
  const Lease* lease = nullptr;
  uint32_t job_id = 0;
  std::string lib_dir, lease_file, server;
  // The step's current value of a variable (for prepend/append); empty when unset.
  std::function<std::string(const std::string&)> current;
};

// The variables the profile sets for this lease, in rule order.
Result<EnvList> RenderProfile(const Profile& profile, const ProfileContext& context);

// Whether the step's processes follow a move of the lease's GPUs (the lease is then
// "movable": a drain moves it): they run gpupool's own library (the profile file is
// gpupool.profile) with failover on (GPUPOOL_FAILOVER as the profile sets it, else as the
// step brings it, is not "off"). Other remoting stacks cannot follow a move.
bool ProcessesFollowMoves(const Profile& profile, const std::function<std::string(const std::string&)>& current);

}  // namespace gpupool::spank

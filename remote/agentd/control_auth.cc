#include "remote/agentd/control_auth.h"

#include <unistd.h>

#include "common/log.h"

namespace gpupool::agentd {

bool MayControl(uid_t uid, uid_t agent_uid, const auth::RolePolicy& policy) {
  return uid == 0 || uid == agent_uid || policy.RoleOf(uid) >= auth::Role::kAgent;
}

ControlAuthorizer MakeMungeAuthorizer(const Config& config) {
  std::vector<std::string> warnings;
  auth::RolePolicy policy =
      auth::RolePolicy::FromNames(config.poold.slurm_user, config.poold.admins, config.poold.agent_users, &warnings);
  for (const std::string& w : warnings) log::Warning("control API: " + w);
  std::string socket = auth::ResolveMungeSocket(config.munge_socket);
  uid_t agent_uid = geteuid();
  return [policy, socket, agent_uid](const std::string& header) -> Status {
    const std::string prefix = "MUNGE ";
    if (header.empty()) {
      return Status::Unauthenticated("authentication required: no 'Authorization: MUNGE <credential>' header");
    }
    if (header.rfind(prefix, 0) != 0) {
      return Status::Unauthenticated("authentication required: Authorization is not 'MUNGE <credential>'");
    }
    Result<auth::Identity> id = auth::DecodeCredential(header.substr(prefix.size()), socket);
    if (!id.ok()) return id.status();
    if (!MayControl(id->uid, agent_uid, policy)) {
      return Status::PermissionDenied("user " + auth::UserName(id->uid) +
                                      " may not use the agent's control API (root, admins and agent_users only)");
    }
    return Status::OK();
  };
}

}  // namespace gpupool::agentd

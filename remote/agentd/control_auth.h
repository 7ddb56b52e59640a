// ControlAuth: who may use the agent's control API (GET /v1/gpus, POST /v1/faults).
//
// The same rule as gpupoold's agent endpoints (docs/api.md): a fresh MUNGE credential in
// "Authorization: MUNGE <cred>" whose uid is root, the agent's own uid, the SlurmUser, an
// admin or one of agent_users of gpupool.conf. This is the one place that decides; the
// control server calls it for every request.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "common/auth.h"
#include "common/config.h"
#include "common/status.h"

namespace gpupool::agentd {

// Returns OK, Unauthenticated (no/bad credential) or PermissionDenied (wrong user).
using ControlAuthorizer = std::function<Status(const std::string& authorization_header)>;

// MUNGE-based authorizer. Unknown user names in the config are logged and skipped.
ControlAuthorizer MakeMungeAuthorizer(const Config& config);

// The role rule alone (tests): may `uid` use the control API of an agent running as
// `agent_uid` under `policy`?
bool MayControl(uid_t uid, uid_t agent_uid, const auth::RolePolicy& policy);

}  // namespace gpupool::agentd

// Auth: MUNGE credentials for gpupool's API, and the roles they map to.
//
// A client encodes a fresh credential per request (payload "gpupool"); the server decodes
// it with its local munged, which refuses replays, and takes uid/gid from it. See
// docs/api.md "Authentication".
#pragma once

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::auth {

inline constexpr char kPayload[] = "gpupool";

// The munged socket to use: `configured` if non-empty, else $MUNGE_SOCKET, else "" (libmunge's
// built-in default).
std::string ResolveMungeSocket(const std::string& configured);

// A fresh credential for the calling process's uid/gid. Both calls resolve an empty
// `munge_socket` with ResolveMungeSocket.
Result<std::string> EncodeCredential(const std::string& munge_socket);

struct Identity {
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
};

// Decodes and checks a credential (not expired, not replayed, payload "gpupool").
// Unauthenticated with munge's own message otherwise.
Result<Identity> DecodeCredential(const std::string& credential, const std::string& munge_socket);

// "alice" or "1000" → uid; NotFound naming the user otherwise.
Result<uid_t> ResolveUser(const std::string& name_or_uid);
// uid → user name (the number as text when the uid has no passwd entry).
std::string UserName(uid_t uid);

enum class Role { kUser = 0, kAgent = 1, kAdmin = 2 };
const char* RoleName(Role role);

// Who is admin and who may act as an agent. root is always admin.
class RolePolicy {
 public:
  RolePolicy() = default;
  // Unknown user names are skipped with a warning in `warnings`.
  static RolePolicy FromNames(const std::string& slurm_user, const std::vector<std::string>& admins,
                              const std::vector<std::string>& agent_users, std::vector<std::string>* warnings);
  Role RoleOf(uid_t uid) const;

 private:
  std::set<uid_t> admins_;
  std::set<uid_t> agents_;
};

}  // namespace gpupool::auth

#include "common/auth.h"

#include <pwd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include <munge.h>

namespace gpupool::auth {
namespace {

// A munge context bound to `socket` (or libmunge's default); nullptr on failure.
munge_ctx_t NewContext(const std::string& socket, std::string* error) {
  munge_ctx_t ctx = munge_ctx_create();
  if (ctx == nullptr) {
    *error = "cannot create munge context";
    return nullptr;
  }
  if (!socket.empty()) {
    munge_err_t err = munge_ctx_set(ctx, MUNGE_OPT_SOCKET, socket.c_str());
    if (err != EMUNGE_SUCCESS) {
      *error = std::string("munge socket ") + socket + ": " + munge_ctx_strerror(ctx);
      munge_ctx_destroy(ctx);
      return nullptr;
    }
  }
  return ctx;
}

}  // namespace

std::string ResolveMungeSocket(const std::string& configured) {
  if (!configured.empty()) return configured;
  const char* env = std::getenv("MUNGE_SOCKET");
  return env != nullptr ? env : "";
}

Result<std::string> EncodeCredential(const std::string& munge_socket) {
  std::string error;
  munge_ctx_t ctx = NewContext(ResolveMungeSocket(munge_socket), &error);
  if (ctx == nullptr) return Status::Unauthenticated(error);
  char* cred = nullptr;
  munge_err_t err = munge_encode(&cred, ctx, kPayload, sizeof(kPayload) - 1);
  if (err != EMUNGE_SUCCESS) {
    std::string msg = std::string("cannot get a MUNGE credential: ") + munge_ctx_strerror(ctx);
    munge_ctx_destroy(ctx);
    return Status::Unauthenticated(msg);
  }
  std::string out(cred);
  std::free(cred);
  munge_ctx_destroy(ctx);
  return out;
}

Result<Identity> DecodeCredential(const std::string& credential, const std::string& munge_socket) {
  std::string error;
  munge_ctx_t ctx = NewContext(ResolveMungeSocket(munge_socket), &error);
  if (ctx == nullptr) return Status::Internal(error);
  void* payload = nullptr;
  int len = 0;
  Identity id;
  munge_err_t err = munge_decode(credential.c_str(), ctx, &payload, &len, &id.uid, &id.gid);
  std::string payload_text = payload != nullptr ? std::string(static_cast<char*>(payload), len) : "";
  std::free(payload);
  if (err != EMUNGE_SUCCESS) {
    std::string msg = std::string("invalid MUNGE credential: ") + munge_strerror(err);
    munge_ctx_destroy(ctx);
    if (err == EMUNGE_SOCKET || err == EMUNGE_TIMEOUT) return Status::Unavailable(msg);
    return Status::Unauthenticated(msg);
  }
  munge_ctx_destroy(ctx);
  if (payload_text != kPayload) {
    return Status::Unauthenticated("invalid MUNGE credential: not made for gpupool");
  }
  return id;
}

Result<uid_t> ResolveUser(const std::string& name_or_uid) {
  if (name_or_uid.empty()) return Status::InvalidArgument("empty user name");
  bool numeric = name_or_uid.find_first_not_of("0123456789") == std::string::npos;
  if (numeric && name_or_uid.size() < 10) return static_cast<uid_t>(std::stoul(name_or_uid));
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(name_or_uid.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return Status::NotFound("unknown user '" + name_or_uid + "'");
  }
  return found->pw_uid;
}

std::string UserName(uid_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return std::to_string(uid);
  }
  return found->pw_name;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kUser:
      return "user";
    case Role::kAgent:
      return "agent";
    case Role::kAdmin:
      return "admin";
  }
  return "user";
}

RolePolicy RolePolicy::FromNames(const std::string& slurm_user, const std::vector<std::string>& admins,
                                 const std::vector<std::string>& agent_users, std::vector<std::string>* warnings) {
  RolePolicy p;
  p.admins_.insert(0);
  auto add = [&](const std::string& name, std::set<uid_t>* to) {
    Result<uid_t> uid = ResolveUser(name);
    if (uid.ok()) {
      to->insert(uid.value());
    } else if (warnings != nullptr) {
      warnings->push_back(uid.status().message());
    }
  };
  if (!slurm_user.empty()) add(slurm_user, &p.admins_);
  for (const std::string& a : admins) add(a, &p.admins_);
  for (const std::string& a : agent_users) add(a, &p.agents_);
  return p;
}

Role RolePolicy::RoleOf(uid_t uid) const {
  if (admins_.count(uid) != 0) return Role::kAdmin;
  if (agents_.count(uid) != 0) return Role::kAgent;
  return Role::kUser;
}

}  // namespace gpupool::auth

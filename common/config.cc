// Strict loader for gpupool.conf. Every setting is checked against a table of known keys;
// the first problem found is returned with file, line and the key's path.
#include "common/config.h"

#include <cstdlib>
#include <initializer_list>
#include <set>
#include <sstream>
#include <utility>

#include <libconfig.h++>

namespace gpupool {
namespace {

// Where a setting came from, for messages: "gpupool.conf:14: pools[1].name".
std::string Where(const libconfig::Setting& s, const std::string& file) {
  std::ostringstream out;
  out << file;
  if (s.getSourceLine() > 0) out << ":" << s.getSourceLine();
  // libconfig spells list items "pools.[1].name"; admins know them as "pools[1].name".
  std::string path = s.getPath();
  for (size_t at = path.find(".["); at != std::string::npos; at = path.find(".[")) path.erase(at, 1);
  out << ": " << (path.empty() ? "(top level)" : path);
  return out.str();
}

Status Error(const libconfig::Setting& s, const std::string& file, const std::string& what) {
  return Status::InvalidArgument(Where(s, file) + ": " + what);
}

std::string Join(std::initializer_list<const char*> keys) {
  std::string out;
  for (const char* k : keys) {
    if (!out.empty()) out += ", ";
    out += k;
  }
  return out;
}

Status CheckKeys(const libconfig::Setting& group, const std::string& file, std::initializer_list<const char*> allowed) {
  if (!group.isGroup()) return Error(group, file, "must be a group { ... }");
  for (int i = 0; i < group.getLength(); ++i) {
    const libconfig::Setting& child = group[i];
    bool known = false;
    for (const char* k : allowed) known = known || child.getName() == std::string(k);
    if (!known) {
      return Error(child, file, "unknown key (expected one of: " + Join(allowed) + ")");
    }
  }
  return Status::OK();
}

// Typed readers: absent keys leave `out` unchanged.
Status ReadString(const libconfig::Setting& group, const char* key, const std::string& file, std::string* out) {
  if (!group.exists(key)) return Status::OK();
  const libconfig::Setting& s = group[key];
  if (s.getType() != libconfig::Setting::TypeString) return Error(s, file, "must be a string");
  *out = static_cast<const char*>(s);
  return Status::OK();
}

Status ReadInt(const libconfig::Setting& group, const char* key, const std::string& file, int min, int max, int* out) {
  if (!group.exists(key)) return Status::OK();
  const libconfig::Setting& s = group[key];
  if (s.getType() != libconfig::Setting::TypeInt && s.getType() != libconfig::Setting::TypeInt64) {
    return Error(s, file, "must be an integer");
  }
  long long v = s.getType() == libconfig::Setting::TypeInt ? static_cast<long long>(static_cast<int>(s))
                                                           : static_cast<long long>(s);
  if (v < min || v > max) {
    return Error(s, file, "must be between " + std::to_string(min) + " and " + std::to_string(max));
  }
  *out = static_cast<int>(v);
  return Status::OK();
}

Status ReadBool(const libconfig::Setting& group, const char* key, const std::string& file, bool* out) {
  if (!group.exists(key)) return Status::OK();
  const libconfig::Setting& s = group[key];
  if (s.getType() != libconfig::Setting::TypeBoolean) return Error(s, file, "must be true or false");
  *out = static_cast<bool>(s);
  return Status::OK();
}

Status ReadStringList(const libconfig::Setting& group, const char* key, const std::string& file,
                      std::vector<std::string>* out) {
  if (!group.exists(key)) return Status::OK();
  const libconfig::Setting& s = group[key];
  if (!s.isArray() && !s.isList()) return Error(s, file, "must be a list of strings [\"a\", \"b\"]");
  out->clear();
  for (int i = 0; i < s.getLength(); ++i) {
    if (s[i].getType() != libconfig::Setting::TypeString) return Error(s[i], file, "must be a string");
    out->push_back(static_cast<const char*>(s[i]));
  }
  return Status::OK();
}

Status ReadMemory(const libconfig::Setting& group, const char* key, const std::string& file, uint64_t* out_mib) {
  if (!group.exists(key)) return Status::OK();
  const libconfig::Setting& s = group[key];
  if (s.getType() == libconfig::Setting::TypeInt || s.getType() == libconfig::Setting::TypeInt64) {
    long long v = s.getType() == libconfig::Setting::TypeInt ? static_cast<int>(s) : static_cast<long long>(s);
    if (v < 0) return Error(s, file, "must not be negative");
    *out_mib = static_cast<uint64_t>(v);
    return Status::OK();
  }
  if (s.getType() != libconfig::Setting::TypeString) {
    return Error(s, file, "must be a size like \"80G\" or a number of MiB");
  }
  Result<uint64_t> mib = ParseMemoryMib(static_cast<const char*>(s));
  if (!mib.ok()) return Error(s, file, mib.status().message());
  *out_mib = mib.value();
  return Status::OK();
}

Status ParsePoold(const libconfig::Setting& g, const std::string& file, PooldConfig* c) {
  GPUPOOL_RETURN_IF_ERROR(CheckKeys(g, file,
                                    {"listen",
                                     "state_dir",
                                     "log_file",
                                     "slurm_user",
                                     "admins",
                                     "agent_users",
                                     "lease_ttl",
                                     "max_lease_ttl",
                                     "unreachable_timeout",
                                     "reap_interval",
                                     "slurm_reap",
                                     "enforce_licenses",
                                     "durability",
                                     "max_request_bytes",
                                     "threads",
                                     "header_timeout",
                                     "body_timeout",
                                     "connections_per_source",
                                     "state",
                                     "etcd_endpoints",
                                     "etcd_prefix",
                                     "etcd_ca_file",
                                     "etcd_cert_file",
                                     "etcd_key_file",
                                     "etcd_user",
                                     "etcd_password_file",
                                     "leader_ttl",
                                     "advertise",
                                     "token_key_file"}));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "listen", file, &c->listen));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "state_dir", file, &c->state_dir));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "token_key_file", file, &c->token_key_file));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "log_file", file, &c->log_file));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "slurm_user", file, &c->slurm_user));
  GPUPOOL_RETURN_IF_ERROR(ReadStringList(g, "admins", file, &c->admins));
  GPUPOOL_RETURN_IF_ERROR(ReadStringList(g, "agent_users", file, &c->agent_users));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "lease_ttl", file, 1, 365 * 24 * 3600, &c->lease_ttl));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "max_lease_ttl", file, 1, 365 * 24 * 3600, &c->max_lease_ttl));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "unreachable_timeout", file, 1, 86400, &c->unreachable_timeout));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "reap_interval", file, 0, 86400, &c->reap_interval));
  GPUPOOL_RETURN_IF_ERROR(ReadBool(g, "slurm_reap", file, &c->slurm_reap));
  GPUPOOL_RETURN_IF_ERROR(ReadBool(g, "enforce_licenses", file, &c->enforce_licenses));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "durability", file, &c->durability));
  if (c->durability != "fsync" && c->durability != "process") {
    return Error(g["durability"], file, "must be \"fsync\" or \"process\"");
  }
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "max_request_bytes", file, 1024, 64 << 20, &c->max_request_bytes));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "threads", file, 2, 4096, &c->threads));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "header_timeout", file, 1, 300, &c->header_timeout));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "body_timeout", file, 1, 300, &c->body_timeout));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "connections_per_source", file, 1, 65536, &c->connections_per_source));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "state", file, &c->state));
  if (c->state != "sqlite" && c->state != "etcd") {
    return Error(g["state"], file, "must be \"sqlite\" or \"etcd\"");
  }
  GPUPOOL_RETURN_IF_ERROR(ReadStringList(g, "etcd_endpoints", file, &c->etcd_endpoints));
  if (c->etcd_endpoints.empty()) return Error(g["etcd_endpoints"], file, "must name at least one etcd endpoint");
  for (const std::string& e : c->etcd_endpoints) {
    if (e.rfind("http://", 0) != 0 && e.rfind("https://", 0) != 0) {
      return Error(g["etcd_endpoints"], file,
                   "must be http://HOST:PORT or https://HOST:PORT URLs (etcd's client URLs); '" + e + "' is not");
    }
  }
  const bool tls = c->etcd_endpoints.front().rfind("https://", 0) == 0;
  for (const std::string& e : c->etcd_endpoints) {
    if ((e.rfind("https://", 0) == 0) != tls) {
      return Error(
          g["etcd_endpoints"], file,
          "must all be https:// or all be http://; '" + e + "' is not like '" + c->etcd_endpoints.front() + "'");
    }
  }
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "etcd_ca_file", file, &c->etcd_ca_file));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "etcd_cert_file", file, &c->etcd_cert_file));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "etcd_key_file", file, &c->etcd_key_file));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "etcd_user", file, &c->etcd_user));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "etcd_password_file", file, &c->etcd_password_file));
  const std::pair<const char*, const std::string*> locks[] = {{"etcd_ca_file", &c->etcd_ca_file},
                                                              {"etcd_cert_file", &c->etcd_cert_file},
                                                              {"etcd_key_file", &c->etcd_key_file},
                                                              {"etcd_user", &c->etcd_user},
                                                              {"etcd_password_file", &c->etcd_password_file}};
  for (const auto& [key, value] : locks) {
    if (!value->empty() && !tls) {
      // A certificate means nothing over plain HTTP, and a password would cross the network in clear.
      return Error(g[key], file, "needs https:// etcd_endpoints (etcd's client URLs with TLS)");
    }
  }
  if (c->etcd_cert_file.empty() != c->etcd_key_file.empty()) {
    return Error(g[c->etcd_cert_file.empty() ? "etcd_key_file" : "etcd_cert_file"], file,
                 "etcd_cert_file and etcd_key_file go together (the client certificate and its key)");
  }
  if (c->etcd_user.empty() != c->etcd_password_file.empty()) {
    return Error(g[c->etcd_user.empty() ? "etcd_password_file" : "etcd_user"], file,
                 "etcd_user and etcd_password_file go together (the etcd user and the file holding its password)");
  }
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "etcd_prefix", file, &c->etcd_prefix));
  if (c->etcd_prefix.empty() || c->etcd_prefix.front() != '/' || c->etcd_prefix.back() != '/') {
    return Error(g["etcd_prefix"], file, "must begin and end with '/'");
  }
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "leader_ttl", file, 2, 600, &c->leader_ttl));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "advertise", file, &c->advertise));
  if (c->lease_ttl > c->max_lease_ttl) {
    return Error(g, file, "lease_ttl must not exceed max_lease_ttl");
  }
  return Status::OK();
}

Status ParseSimGpus(const libconfig::Setting& list, const std::string& file, std::vector<SimGpuConfig>* out) {
  if (!list.isList()) return Error(list, file, "must be a list ( { model = ...; }, ... )");
  out->clear();
  for (int i = 0; i < list.getLength(); ++i) {
    const libconfig::Setting& g = list[i];
    GPUPOOL_RETURN_IF_ERROR(CheckKeys(g, file, {"model", "memory", "count"}));
    SimGpuConfig sim;
    GPUPOOL_RETURN_IF_ERROR(ReadString(g, "model", file, &sim.model));
    GPUPOOL_RETURN_IF_ERROR(ReadMemory(g, "memory", file, &sim.memory_mib));
    GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "count", file, 1, 1024, &sim.count));
    out->push_back(sim);
  }
  return Status::OK();
}

Status ParseAgent(const libconfig::Setting& g, const std::string& file, AgentConfig* c) {
  GPUPOOL_RETURN_IF_ERROR(
      CheckKeys(g, file,
                {"server", "host", "rack", "listen", "control", "backend", "heartbeat_interval", "hang_timeout",
                 "worker_user", "worker_program", "session_grace", "worker_same_user", "worker_cgroup", "worker_memory",
                 "worker_cpu_seconds", "sim"}));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "server", file, &c->server));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "host", file, &c->host));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "rack", file, &c->rack));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "listen", file, &c->listen));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "control", file, &c->control));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "backend", file, &c->backend));
  // Absent stays empty ("not set": gpupool-agentd refuses to start, remote/agentd/options.h).
  if (g.exists("backend") && c->backend != "sim" && c->backend != "cuda") {
    return Error(g["backend"], file, "must be \"sim\" or \"cuda\"");
  }
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "heartbeat_interval", file, 1, 3600, &c->heartbeat_interval));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "hang_timeout", file, 0, 3600, &c->hang_timeout));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "worker_user", file, &c->worker_user));
  if (c->worker_user.empty()) return Error(g["worker_user"], file, "must name a user");
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "worker_program", file, &c->worker_program));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "session_grace", file, 1, 60, &c->session_grace));
  GPUPOOL_RETURN_IF_ERROR(ReadBool(g, "worker_same_user", file, &c->worker_same_user));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "worker_cgroup", file, &c->worker_cgroup));
  if (c->worker_cgroup != "auto" && c->worker_cgroup != "required" && c->worker_cgroup != "off") {
    return Error(g["worker_cgroup"], file, "must be \"auto\", \"required\" or \"off\"");
  }
  GPUPOOL_RETURN_IF_ERROR(ReadMemory(g, "worker_memory", file, &c->worker_memory_mib));
  if (c->worker_memory_mib > (uint64_t{1} << 30)) {
    return Error(g["worker_memory"], file, "is larger than 1 PiB");
  }
  if (c->worker_memory_mib != 0 && c->worker_memory_mib < 64) {
    return Error(g["worker_memory"], file,
                 "must be 0 (automatic) or at least 64 MiB (a worker needs that much to start)");
  }
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "worker_cpu_seconds", file, 0, 100000000, &c->worker_cpu_seconds));
  if (g.exists("sim")) {
    const libconfig::Setting& sim = g["sim"];
    GPUPOOL_RETURN_IF_ERROR(CheckKeys(sim, file, {"gpus", "faults"}));
    if (sim.exists("gpus")) GPUPOOL_RETURN_IF_ERROR(ParseSimGpus(sim["gpus"], file, &c->sim_gpus));
    GPUPOOL_RETURN_IF_ERROR(ReadStringList(sim, "faults", file, &c->sim_faults));
  }
  return Status::OK();
}

Status ParsePools(const libconfig::Setting& list, const std::string& file, std::vector<PoolConfig>* out) {
  if (!list.isList()) return Error(list, file, "must be a list ( { name = ...; }, ... )");
  std::set<std::string> names;
  for (int i = 0; i < list.getLength(); ++i) {
    const libconfig::Setting& g = list[i];
    GPUPOOL_RETURN_IF_ERROR(CheckKeys(g, file, {"name", "models", "racks", "hosts", "min_memory"}));
    PoolConfig pool;
    if (!g.exists("name")) return Error(g, file, "pool has no name");
    GPUPOOL_RETURN_IF_ERROR(ReadString(g, "name", file, &pool.name));
    if (!IsValidName(pool.name)) {
      return Error(g["name"], file, "pool name '" + pool.name + "' must be 1-64 of [A-Za-z0-9_.-]");
    }
    if (!names.insert(pool.name).second) {
      return Error(g["name"], file, "duplicate pool '" + pool.name + "'");
    }
    GPUPOOL_RETURN_IF_ERROR(ReadStringList(g, "models", file, &pool.models));
    GPUPOOL_RETURN_IF_ERROR(ReadStringList(g, "racks", file, &pool.racks));
    GPUPOOL_RETURN_IF_ERROR(ReadStringList(g, "hosts", file, &pool.hosts));
    GPUPOOL_RETURN_IF_ERROR(ReadMemory(g, "min_memory", file, &pool.min_memory_mib));
    out->push_back(pool);
  }
  return Status::OK();
}

Status ParseGpus(const libconfig::Setting& list, const std::string& file, const std::vector<PoolConfig>& pools,
                 std::vector<GpuAssignment>* out) {
  if (!list.isList()) return Error(list, file, "must be a list ( { gpu = ...; pool = ...; }, ... )");
  std::set<std::string> seen;
  for (int i = 0; i < list.getLength(); ++i) {
    const libconfig::Setting& g = list[i];
    GPUPOOL_RETURN_IF_ERROR(CheckKeys(g, file, {"gpu", "pool"}));
    GpuAssignment a;
    a.line = g.getSourceLine();
    if (!g.exists("gpu") || !g.exists("pool")) return Error(g, file, "needs both gpu and pool");
    GPUPOOL_RETURN_IF_ERROR(ReadString(g, "gpu", file, &a.gpu));
    GPUPOOL_RETURN_IF_ERROR(ReadString(g, "pool", file, &a.pool));
    if (!seen.insert(a.gpu).second) return Error(g["gpu"], file, "duplicate GPU '" + a.gpu + "'");
    bool known = false;
    for (const PoolConfig& p : pools) known = known || p.name == a.pool;
    if (!known) return Error(g["pool"], file, "unknown pool '" + a.pool + "' (not defined in pools)");
    out->push_back(a);
  }
  return Status::OK();
}

Status ParseClient(const libconfig::Setting& g, const std::string& file, ClientConfig* c) {
  GPUPOOL_RETURN_IF_ERROR(CheckKeys(g, file, {"server", "timeout"}));
  GPUPOOL_RETURN_IF_ERROR(ReadString(g, "server", file, &c->server));
  GPUPOOL_RETURN_IF_ERROR(ReadInt(g, "timeout", file, 1, 3600, &c->timeout));
  return Status::OK();
}

Result<Config> FromLibconfig(const libconfig::Config& cfg, const std::string& file) {
  Config c;
  c.path = file;
  const libconfig::Setting& root = cfg.getRoot();
  GPUPOOL_RETURN_IF_ERROR(CheckKeys(root, file, {"gpupoold", "pools", "gpus", "agent", "client", "munge_socket"}));
  GPUPOOL_RETURN_IF_ERROR(ReadString(root, "munge_socket", file, &c.munge_socket));
  if (root.exists("gpupoold")) GPUPOOL_RETURN_IF_ERROR(ParsePoold(root["gpupoold"], file, &c.poold));
  if (root.exists("pools")) GPUPOOL_RETURN_IF_ERROR(ParsePools(root["pools"], file, &c.pools));
  if (root.exists("gpus")) GPUPOOL_RETURN_IF_ERROR(ParseGpus(root["gpus"], file, c.pools, &c.gpus));
  if (root.exists("agent")) GPUPOOL_RETURN_IF_ERROR(ParseAgent(root["agent"], file, &c.agent));
  if (root.exists("client")) GPUPOOL_RETURN_IF_ERROR(ParseClient(root["client"], file, &c.client));
  if (c.agent.sim_gpus.empty()) c.agent.sim_gpus.push_back(SimGpuConfig{"A100-SXM4-80GB", 81920, 4});
  return c;
}

}  // namespace

bool IsValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Result<uint64_t> ParseMemoryMib(const std::string& text) {
  if (text.empty()) return Status::InvalidArgument("empty size");
  size_t pos = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &pos, 10);
  } catch (...) {
    return Status::InvalidArgument("bad size '" + text + "' (expected e.g. 80G, 16384M)");
  }
  std::string unit = text.substr(pos);
  uint64_t mult = 0;
  if (unit.empty() || unit == "M" || unit == "MB" || unit == "MiB")
    mult = 1;
  else if (unit == "G" || unit == "GB" || unit == "GiB")
    mult = 1024;
  else if (unit == "T" || unit == "TB" || unit == "TiB")
    mult = 1024 * 1024;
  else
    return Status::InvalidArgument("bad size unit in '" + text + "' (use M, G or T)");
  if (value > (1ULL << 40) / mult) return Status::InvalidArgument("size '" + text + "' is too large");
  return static_cast<uint64_t>(value * mult);
}

Result<Config> LoadConfig(const std::string& path) {
  libconfig::Config cfg;
  try {
    cfg.readFile(path.c_str());
  } catch (const libconfig::FileIOException&) {
    return Status::InvalidArgument(path + ": cannot read config file");
  } catch (const libconfig::ParseException& e) {
    return Status::InvalidArgument(std::string(e.getFile() ? e.getFile() : path.c_str()) + ":" +
                                   std::to_string(e.getLine()) + ": " + e.getError());
  }
  try {
    return FromLibconfig(cfg, path);
  } catch (const libconfig::ConfigException& e) {
    return Status::InvalidArgument(path + ": " + e.what());
  }
}

Result<Config> ParseConfig(const std::string& text, const std::string& name) {
  libconfig::Config cfg;
  try {
    cfg.readString(text);
  } catch (const libconfig::ParseException& e) {
    return Status::InvalidArgument(name + ":" + std::to_string(e.getLine()) + ": " + e.getError());
  }
  try {
    return FromLibconfig(cfg, name);
  } catch (const libconfig::ConfigException& e) {
    return Status::InvalidArgument(name + ": " + e.what());
  }
}

std::string DefaultConfigPath() {
  const char* env = std::getenv("GPUPOOL_CONF");
  return env != nullptr && *env != '\0' ? env : "/etc/gpupool/gpupool.conf";
}

}  // namespace gpupool

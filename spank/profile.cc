#include "spank/profile.h"

#include <fstream>
#include <map>
#include <sstream>

namespace gpupool::spank {
namespace {

const char* const kJobFields[] = {"count",  "gpus",    "endpoints",  "lease_id", "generation",
                                  "job_id", "lib_dir", "lease_file", "server"};
const char* const kGpuFields[] = {"i", "uuid", "id", "host", "index", "endpoint", "addr", "port", "pool", "rack"};

bool IsJobField(const std::string& f) {
  for (const char* k : kJobFields)
    if (f == k) return true;
  return false;
}
bool IsGpuField(const std::string& f) {
  for (const char* k : kGpuFields)
    if (f == k) return true;
  return false;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// Walks a template, calling `field` for each {name} and `text` for literal runs.
// Returns an error message, or "" when the template is well formed.
std::string WalkTemplate(const std::string& t, const std::function<void(const std::string&)>& text,
                         const std::function<std::string(const std::string&)>& field) {
  std::string lit;
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (c == '{' && i + 1 < t.size() && t[i + 1] == '{') {
      lit += '{';
      ++i;
      continue;
    }
    if (c == '}' && i + 1 < t.size() && t[i + 1] == '}') {
      lit += '}';
      ++i;
      continue;
    }
    if (c == '}') return "unmatched '}'";
    if (c != '{') {
      lit += c;
      continue;
    }
    size_t close = t.find('}', i);
    if (close == std::string::npos) return "unclosed '{'";
    text(lit);
    lit.clear();
    std::string err = field(t.substr(i + 1, close - i - 1));
    if (!err.empty()) return err;
    i = close;
  }
  text(lit);
  return "";
}

// Checks that every {field} of `t` is known and allowed where it is used.
std::string CheckTemplate(const std::string& t, bool per_gpu) {
  return WalkTemplate(
      t, [](const std::string&) {},
      [per_gpu](const std::string& f) -> std::string {
        if (IsJobField(f)) return "";
        if (IsGpuField(f)) return per_gpu ? "" : "{" + f + "} is per GPU: use it in 'each' or 'join'";
        return "unknown field {" + f + "}";
      });
}

bool ValidVariableName(const std::string& n) {
  if (n.empty() || (n[0] >= '0' && n[0] <= '9')) return false;
  for (char c : n) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

std::string Join(const std::vector<std::string>& items, char sep) {
  std::string out;
  for (const std::string& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

using Fields = std::map<std::string, std::string>;

Fields JobFields(const ProfileContext& ctx) {
  const Lease& lease = *ctx.lease;
  std::vector<std::string> endpoints;
  for (const LeaseGpu& g : lease.gpus) endpoints.push_back(g.endpoint);
  return {{"count", std::to_string(lease.gpus.size())},
          {"gpus", GpusVariable(lease)},
          {"endpoints", Join(endpoints, ',')},
          {"lease_id", lease.id},
          {"generation", std::to_string(lease.generation)},
          {"job_id", std::to_string(ctx.job_id)},
          {"lib_dir", ctx.lib_dir},
          {"lease_file", ctx.lease_file},
          {"server", ctx.server}};
}

Fields GpuFields(const Fields& job, const LeaseGpu& g, size_t i) {
  Fields f = job;
  size_t colon = g.endpoint.rfind(':');
  f["i"] = std::to_string(i);
  f["uuid"] = g.uuid;
  f["id"] = g.id;
  f["host"] = g.host;
  f["index"] = std::to_string(g.index);
  f["endpoint"] = g.endpoint;
  f["addr"] = colon == std::string::npos ? g.endpoint : g.endpoint.substr(0, colon);
  f["port"] = colon == std::string::npos ? "" : g.endpoint.substr(colon + 1);
  f["pool"] = g.pool;
  f["rack"] = g.rack;
  return f;
}

std::string Expand(const std::string& t, const Fields& fields) {
  std::string out;
  WalkTemplate(
      t, [&out](const std::string& s) { out += s; },
      [&out, &fields](const std::string& f) -> std::string {
        auto it = fields.find(f);
        if (it != fields.end()) out += it->second;
        return "";
      });
  return out;
}

}  // namespace

Result<Profile> ParseProfile(const std::string& text, const std::string& name) {
  Profile profile;
  profile.name = name;
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    std::string where = name + ":" + std::to_string(line) + ": ";
    size_t hash = raw.find('#');
    std::string s = Trim(hash == std::string::npos ? raw : raw.substr(0, hash));
    if (s.empty()) continue;
    size_t space = s.find_first_of(" \t");
    if (space == std::string::npos) {
      return Status::InvalidArgument(where + "expected 'set|prepend|append|each|join NAME=VALUE'");
    }
    std::string word = s.substr(0, space);
    std::string rest = Trim(s.substr(space));
    ProfileRule rule;
    rule.line = line;
    if (word == "set")
      rule.kind = ProfileRule::Kind::kSet;
    else if (word == "prepend")
      rule.kind = ProfileRule::Kind::kPrepend;
    else if (word == "append")
      rule.kind = ProfileRule::Kind::kAppend;
    else if (word == "each")
      rule.kind = ProfileRule::Kind::kEach;
    else if (word == "join")
      rule.kind = ProfileRule::Kind::kJoin;
    else
      return Status::InvalidArgument(where + "unknown rule '" + word +
                                     "' (expected set, prepend, append, each or join)");
    size_t eq = rest.find('=');
    if (eq == std::string::npos) return Status::InvalidArgument(where + "expected NAME=VALUE");
    rule.name = Trim(rest.substr(0, eq));
    rule.value = Trim(rest.substr(eq + 1));
    bool each = rule.kind == ProfileRule::Kind::kEach;
    if (each) {
      std::string err = CheckTemplate(rule.name, true);
      if (!err.empty()) return Status::InvalidArgument(where + "name: " + err);
      // The name must still be a valid variable name once its fields are filled in.
      std::string sample = Expand(rule.name, {{"i", "0"}, {"index", "0"}, {"port", "0"}});
      if (!ValidVariableName(sample) || sample.find('{') != std::string::npos) {
        return Status::InvalidArgument(where + "'" + rule.name + "' does not make a variable name (use e.g. {i})");
      }
      if (rule.name.find("{i}") == std::string::npos) {
        return Status::InvalidArgument(where +
                                       "'each' needs {i} in the name, or every GPU "
                                       "would overwrite the same variable");
      }
    } else if (!ValidVariableName(rule.name)) {
      return Status::InvalidArgument(where + "bad variable name '" + rule.name + "'");
    }
    bool per_gpu = each || rule.kind == ProfileRule::Kind::kJoin;
    std::string err = CheckTemplate(rule.value, per_gpu);
    if (!err.empty()) return Status::InvalidArgument(where + err);
    profile.rules.push_back(rule);
  }
  return profile;
}

Result<Profile> LoadProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read remoting profile " + path);
  std::stringstream text;
  text << in.rdbuf();
  std::string base = path.substr(path.rfind('/') + 1);
  return ParseProfile(text.str(), base);
}

Result<EnvList> RenderProfile(const Profile& profile, const ProfileContext& ctx) {
  if (ctx.lease == nullptr) return Status::Internal("RenderProfile without a lease");
  Fields job = JobFields(ctx);
  EnvList out;
  // Later rules see what earlier ones set (prepend twice to one variable composes).
  auto current = [&](const std::string& name) -> std::string {
    for (auto it = out.rbegin(); it != out.rend(); ++it)
      if (it->first == name) return it->second;
    return ctx.current ? ctx.current(name) : "";
  };
  for (const ProfileRule& r : profile.rules) {
    switch (r.kind) {
      case ProfileRule::Kind::kSet:
        out.emplace_back(r.name, Expand(r.value, job));
        break;
      case ProfileRule::Kind::kPrepend: {
        std::string old = current(r.name), v = Expand(r.value, job);
        out.emplace_back(r.name, old.empty() ? v : v + ":" + old);
        break;
      }
      case ProfileRule::Kind::kAppend: {
        std::string old = current(r.name), v = Expand(r.value, job);
        out.emplace_back(r.name, old.empty() ? v : old + ":" + v);
        break;
      }
      case ProfileRule::Kind::kEach:
        for (size_t i = 0; i < ctx.lease->gpus.size(); ++i) {
          Fields f = GpuFields(job, ctx.lease->gpus[i], i);
          out.emplace_back(Expand(r.name, f), Expand(r.value, f));
        }
        break;
      case ProfileRule::Kind::kJoin: {
        std::vector<std::string> items;
        for (size_t i = 0; i < ctx.lease->gpus.size(); ++i) {
          items.push_back(Expand(r.value, GpuFields(job, ctx.lease->gpus[i], i)));
        }
        out.emplace_back(r.name, Join(items, ','));
        break;
      }
    }
  }
  return out;
}

bool ProcessesFollowMoves(const Profile& profile, const std::function<std::string(const std::string&)>& current) {
  if (profile.name != "gpupool.profile") return false;
  std::string failover = current ? current("GPUPOOL_FAILOVER") : "";
  for (const ProfileRule& rule : profile.rules) {
    if (rule.kind == ProfileRule::Kind::kSet && rule.name == "GPUPOOL_FAILOVER") failover = rule.value;
  }
  return failover != "off";
}

}  // namespace gpupool::spank

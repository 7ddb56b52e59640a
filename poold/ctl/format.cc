#include "poold/ctl/format.h"

#include <cctype>
#include <cstdio>
#include <ctime>
#include <optional>

namespace gpupool::ctl {
namespace {

using nlohmann::json;

constexpr char kNull[] = "(null)";

// The field's text: strings as they are, numbers and booleans in JSON notation,
// absent/null/objects as "".
std::string Text(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null() || it->is_object() || it->is_array()) return "";
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

std::optional<int64_t> Int(const json& obj, const char* key) {
  if (!obj.is_object()) return std::nullopt;
  auto it = obj.find(key);
  if (it == obj.end()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_unsigned()) return static_cast<int64_t>(it->get<uint64_t>());
  return std::nullopt;
}

Field Str(const char* name, const json& obj, const char* key) { return {name, QuoteValue(Text(obj, key))}; }

Field Num(const char* name, const json& obj, const char* key) {
  std::optional<int64_t> v = Int(obj, key);
  return {name, v ? std::to_string(*v) : QuoteValue(Text(obj, key))};
}

// A job id field where 0 or absent means "no job".
Field Job(const char* name, const json& obj, const char* key) {
  std::optional<int64_t> v = Int(obj, key);
  if (v && *v == 0) return {name, kNull};
  return Num(name, obj, key);
}

// A number where negative means "unknown" (numa_node = -1).
Field Known(const char* name, const json& obj, const char* key) {
  std::optional<int64_t> v = Int(obj, key);
  if (v && *v < 0) return {name, kNull};
  return Num(name, obj, key);
}

// true/false as Slurm writes flags: Yes, No (absent: No).
Field YesNo(const char* name, const json& obj, const char* key) {
  auto it = obj.is_object() ? obj.find(key) : obj.end();
  return {name, it != obj.end() && it->is_boolean() && it->get<bool>() ? "Yes" : "No"};
}

Field Time(const char* name, const json& obj, const char* key) {
  std::optional<int64_t> v = Int(obj, key);
  return {name, v ? FormatTime(*v) : QuoteValue(Text(obj, key))};
}

Field Memory(const char* name, const json& obj, const char* key) {
  std::optional<int64_t> v = Int(obj, key);
  if (v && *v >= 0) return {name, FormatMemoryMib(static_cast<uint64_t>(*v))};
  return {name, QuoteValue(Text(obj, key))};
}

const json& List(const json& obj, const char* key) {
  static const json kEmpty = json::array();
  if (!obj.is_object()) return kEmpty;
  auto it = obj.find(key);
  return it != obj.end() && it->is_array() ? *it : kEmpty;
}

// Joins an array of strings or of objects (taking `id_key` of each) with commas.
std::string JoinIds(const json& list, const char* id_key) {
  std::string out;
  for (const json& item : list) {
    std::string id = item.is_object() ? Text(item, id_key) : (item.is_string() ? item.get<std::string>() : item.dump());
    if (!out.empty()) out += ",";
    out += id;
  }
  return out;
}

// "a100:2,h100:1" from a lease's request list.
std::string PoolCounts(const json& request) {
  std::string out;
  for (const json& r : request) {
    if (!out.empty()) out += ",";
    std::string count = Text(r, "count");
    out += Text(r, "pool") + (count.empty() ? "" : ":" + count);
  }
  return out;
}

// Renders a list answer: records, or `empty_text` when there are none.
std::string RenderList(const json& list, Record (*to_record)(const json&), bool oneliner,
                       const std::string& empty_text) {
  if (list.empty()) return empty_text + "\n";
  std::string out;
  for (const json& item : list) out += RenderRecord(to_record(item), oneliner);
  return out;
}

bool HasList(const json& answer, const char* key) {
  return answer.is_object() && answer.contains(key) && answer[key].is_array();
}

Status MissingList(const char* key) {
  return Status::Internal(std::string("gpupoold's answer has no '") + key + "' list");
}

}  // namespace

std::string QuoteValue(const std::string& text) {
  if (text.empty()) return kNull;
  bool plain = true;
  for (unsigned char c : text) plain = plain && std::isgraph(c) && c != '"' && c != '\\';
  if (plain) return text;
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (std::iscntrl(c)) {
          char hex[5];
          std::snprintf(hex, sizeof(hex), "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string FormatTime(int64_t epoch_seconds) {
  if (epoch_seconds <= 0) return kNull;
  std::time_t t = static_cast<std::time_t>(epoch_seconds);
  std::tm tm{};
  if (localtime_r(&t, &tm) == nullptr) return std::to_string(epoch_seconds);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

std::string FormatMemoryMib(uint64_t mib) {
  if (mib != 0 && mib % (1024 * 1024) == 0) return std::to_string(mib / (1024 * 1024)) + "T";
  if (mib != 0 && mib % 1024 == 0) return std::to_string(mib / 1024) + "G";
  return std::to_string(mib) + (mib == 0 ? "" : "M");
}

Record PoolRecord(const json& p) {
  return {
      {Str("Pool", p, "name")},
      {Num("Total", p, "total"), Num("Idle", p, "idle"), Num("Leased", p, "leased"), Num("Draining", p, "draining"),
       Num("Drained", p, "drained"), Num("Failed", p, "failed"), Num("Unreachable", p, "unreachable")},
      {Num("Usable", p, "usable"), Num("Leases", p, "leases")},
  };
}

Record GpuRecord(const json& g) {
  return {
      {Str("GpuId", g, "id"), Str("Uuid", g, "uuid")},
      {Str("Pool", g, "pool"), Str("Rack", g, "rack"), Str("Host", g, "host"), Num("Index", g, "index")},
      {Str("Model", g, "model"), Memory("Memory", g, "memory_mib"), Str("PciBusId", g, "pci_bus_id"),
       Known("NumaNode", g, "numa_node")},
      {Str("State", g, "state"), Job("Job", g, "job_id"), Str("Lease", g, "lease"), Str("Health", g, "health")},
      {Str("Endpoint", g, "endpoint"), Time("LastSeen", g, "last_seen")},
      {Str("Reason", g, "reason")},
  };
}

Record LeaseRecord(const json& l) {
  std::string user = Text(l, "user");
  std::string uid = Text(l, "uid");
  if (user.empty()) user = uid;
  std::string owner = QuoteValue(user) + (uid.empty() ? "" : "(" + uid + ")");
  return {
      {Str("LeaseId", l, "id"), Job("JobId", l, "job_id"), {"User", owner}, Str("State", l, "state")},
      {{"Pool", QuoteValue(PoolCounts(List(l, "request")))},
       Str("Place", l, "place"),
       Memory("MinMemory", l, "min_memory_mib"),
       Num("Generation", l, "generation"),
       YesNo("Movable", l, "movable")},
      {{"Gpus", QuoteValue(JoinIds(List(l, "gpus"), "id"))}},
      {Time("Created", l, "created"), Time("Renewed", l, "renewed"), Time("Expires", l, "expires"),
       Num("Ttl", l, "ttl")},
  };
}

Record EventRecord(const json& e) {
  return {
      {Num("Seq", e, "seq"), Time("Time", e, "time"), Str("Type", e, "type"), Str("Gpu", e, "gpu"),
       Job("JobId", e, "job_id"), Str("Lease", e, "lease")},
      {Str("Detail", e, "detail")},
  };
}

std::string RenderRecord(const Record& record, bool oneliner) {
  std::string out;
  for (size_t i = 0; i < record.size(); ++i) {
    if (i > 0) out += oneliner ? " " : "\n   ";
    for (size_t j = 0; j < record[i].size(); ++j) {
      if (j > 0) out += " ";
      out += record[i][j].key + "=" + record[i][j].value;
    }
  }
  return out + (oneliner ? "\n" : "\n\n");
}

Result<std::string> FormatAnswer(const CtlArgs& args, const json& answer, const std::string& server) {
  bool o = args.oneliner;
  switch (args.verb) {
    case Verb::kHelp:
    case Verb::kVersion:
      return Status::Internal("--help and --version send no request");
    case Verb::kPing: {
      bool ok = answer.is_object() && answer.value("ok", false) == true;
      if (!ok) return Status::Internal("gpupoold at " + server + " answered the ping without \"ok\":true");
      std::string version = Text(answer, "version");
      std::string out = "gpupoold at " + server + " is UP" + (version.empty() ? "" : " (version " + version + ")");
      // Replicas (state = "etcd"): say which one leads.
      std::string role = Text(answer, "role"), leader = Text(answer, "leader");
      if (role == "leader") out += "; it is the leader";
      if (role == "follower") {
        out += leader.empty() ? "; it is a follower and no leader is elected"
                              : "; it is a follower; the leader is " + leader;
      }
      return out + "\n";
    }
    case Verb::kShowPools: {
      if (!HasList(answer, "pools")) return MissingList("pools");
      const json& list = answer["pools"];
      if (list.empty() && !args.pool.empty()) return Status::NotFound("no such pool '" + args.pool + "'");
      return RenderList(list, PoolRecord, o, "No pools defined");
    }
    case Verb::kShowGpus: {
      if (!HasList(answer, "gpus")) return MissingList("gpus");
      const json& list = answer["gpus"];
      if (list.empty() && !args.gpu.empty()) return Status::NotFound("no such GPU '" + args.gpu + "'");
      return RenderList(list, GpuRecord, o, args.pool.empty() ? "No GPUs registered" : "No GPUs in pool " + args.pool);
    }
    case Verb::kShowLeases: {
      if (!HasList(answer, "leases")) return MissingList("leases");
      const json& list = answer["leases"];
      if (list.empty() && !args.lease.empty()) return Status::NotFound("no such lease '" + args.lease + "'");
      return RenderList(list, LeaseRecord, o, "No leases");
    }
    case Verb::kShowEvents: {
      if (!HasList(answer, "events")) return MissingList("events");
      return RenderList(answer["events"], EventRecord, o, "No events");
    }
    case Verb::kUpdateGpu: {
      if (!answer.is_object() || !answer.contains("gpu") || !answer["gpu"].is_object()) {
        return Status::Internal("gpupoold's answer has no 'gpu' object");
      }
      return RenderRecord(GpuRecord(answer["gpu"]), o);
    }
    case Verb::kMigrate: {
      if (!answer.is_object() || !answer.contains("lease") || !answer["lease"].is_object()) {
        return Status::Internal("gpupoold's answer has no 'lease' object");
      }
      return RenderRecord(LeaseRecord(answer["lease"]), o);
    }
    case Verb::kRelease: {
      if (!HasList(answer, "released")) return MissingList("released");
      return "Released=" + QuoteValue(JoinIds(answer["released"], "id")) + "\n";
    }
  }
  return Status::Internal("unknown command");
}

}  // namespace gpupool::ctl

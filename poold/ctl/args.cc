// Command-line parsing for gpupoolctl. Command words and keys are case-insensitive, like
// scontrol's; values are kept as typed (except state names, which are folded to lower case).
#include "poold/ctl/args.h"

#include "common/config.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <map>

namespace gpupool::ctl {
namespace {

constexpr int64_t kMaxJobId = 0xFFFFFFFFLL;  // Slurm job ids are uint32

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string JoinKeys(std::initializer_list<const char*> keys) {
  std::string out;
  for (const char* k : keys) {
    if (!out.empty()) out += ", ";
    out += k;
  }
  return out;
}

// Words of a command after its verb: positional words and key=value pairs.
struct Words {
  std::vector<std::string> positional;
  std::map<std::string, std::string> pairs;  // lower-case key → value
};

Result<Words> SplitWords(const std::vector<std::string>& words, const std::string& command,
                         std::initializer_list<const char*> allowed_keys) {
  Words out;
  for (const std::string& w : words) {
    size_t eq = w.find('=');
    if (eq == std::string::npos) {
      out.positional.push_back(w);
      continue;
    }
    std::string key = Lower(w.substr(0, eq));
    std::string value = w.substr(eq + 1);
    if (key.empty()) return Status::InvalidArgument("malformed argument '" + w + "' (expected KEY=VALUE)");
    bool known = std::any_of(allowed_keys.begin(), allowed_keys.end(), [&](const char* k) { return key == k; });
    if (!known) {
      std::string expected = allowed_keys.size() == 0 ? "it takes no keys" : "expected " + JoinKeys(allowed_keys);
      return Status::InvalidArgument("unknown key '" + key + "' for '" + command + "' (" + expected + ")");
    }
    if (value.empty()) return Status::InvalidArgument("'" + key + "=' needs a value");
    if (!out.pairs.emplace(key, value).second) {
      return Status::InvalidArgument("'" + key + "' given more than once");
    }
  }
  return out;
}

Status AtMostPositional(const Words& w, size_t max, const std::string& command, const std::string& hint) {
  if (w.positional.size() <= max) return Status::OK();
  return Status::InvalidArgument("unexpected word '" + w.positional[max] + "' for '" + command + "'" +
                                 (hint.empty() ? "" : " (" + hint + ")"));
}

// Decimal digits only, no sign, within [min, max].
Status ParseNumber(const std::string& key, const std::string& text, int64_t min, int64_t max, const char* what,
                   std::optional<int64_t>* out) {
  bool digits = !text.empty() && text.size() <= 18 &&
                std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
  int64_t v = digits ? std::stoll(text) : -1;
  if (!digits || v < min || v > max) {
    return Status::InvalidArgument(key + " must be " + what + ", not '" + text + "'");
  }
  *out = v;
  return Status::OK();
}

// Ids (GPU ids, UUIDs, lease ids) are printable words: no blanks, no control characters.
Status CheckId(const std::string& key, const std::string& value) {
  bool ok =
      value.size() <= 256 && std::all_of(value.begin(), value.end(), [](unsigned char c) { return std::isgraph(c); });
  if (!ok) return Status::InvalidArgument("bad " + key + " '" + value + "' (no blanks or control characters)");
  return Status::OK();
}

Status CheckPool(const std::string& value) {
  if (IsValidName(value)) return Status::OK();
  return Status::InvalidArgument("bad pool name '" + value + "' (1-64 of [A-Za-z0-9_.-])");
}

// Applies the keys common to several commands.
Status TakeFilters(const Words& w, CtlArgs* a) {
  auto it = w.pairs.find("pool");
  if (it != w.pairs.end()) {
    GPUPOOL_RETURN_IF_ERROR(CheckPool(it->second));
    a->pool = it->second;
  }
  it = w.pairs.find("gpu");
  if (it != w.pairs.end()) {
    GPUPOOL_RETURN_IF_ERROR(CheckId("gpu", it->second));
    a->gpu = it->second;
  }
  it = w.pairs.find("lease");
  if (it != w.pairs.end()) {
    GPUPOOL_RETURN_IF_ERROR(CheckId("lease", it->second));
    a->lease = it->second;
  }
  it = w.pairs.find("job");
  if (it != w.pairs.end()) {
    GPUPOOL_RETURN_IF_ERROR(ParseNumber("job", it->second, 1, kMaxJobId, "a job id (a positive integer)", &a->job));
  }
  it = w.pairs.find("since");
  if (it != w.pairs.end()) {
    GPUPOOL_RETURN_IF_ERROR(
        ParseNumber("since", it->second, 0, INT64_MAX / 2, "an event sequence number (0 or more)", &a->since));
  }
  it = w.pairs.find("limit");
  if (it != w.pairs.end()) {
    GPUPOOL_RETURN_IF_ERROR(ParseNumber("limit", it->second, 1, 1000000, "a count between 1 and 1000000", &a->limit));
  }
  return Status::OK();
}

// Well-formed UTF-8 (no overlong forms, no surrogates): the request body is JSON, which
// cannot carry anything else.
bool IsUtf8(const std::string& text) {
  static constexpr uint32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};  // by continuation count
  size_t i = 0;
  while (i < text.size()) {
    auto c = static_cast<unsigned char>(text[i]);
    size_t more = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 4;
    if (more == 4 || more >= text.size() - i) return false;  // not a lead byte, or cut short
    uint32_t code = more == 0 ? c : c & (0x3f >> more);
    for (size_t k = 1; k <= more; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    if (code < kSmallest[more] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += more + 1;
  }
  return true;
}

// reason="..." of update and release: one printable line, at most 1024 bytes (the API's limit).
Status TakeReason(const Words& w, CtlArgs* a) {
  auto it = w.pairs.find("reason");
  if (it == w.pairs.end()) return Status::OK();
  bool printable = std::none_of(it->second.begin(), it->second.end(), [](unsigned char c) { return std::iscntrl(c); });
  if (!printable) return Status::InvalidArgument("reason must not contain control characters");
  if (!IsUtf8(it->second)) return Status::InvalidArgument("reason must be UTF-8 text");
  if (it->second.size() > 1024) return Status::InvalidArgument("reason is longer than 1024 characters");
  a->reason = it->second;
  return Status::OK();
}

Status ParseShow(const std::vector<std::string>& words, CtlArgs* a) {
  if (words.empty()) {
    return Status::InvalidArgument("'show' needs what to show: pools, gpus, leases or events");
  }
  std::string what = Lower(words[0]);
  std::vector<std::string> rest(words.begin() + 1, words.end());
  if (what == "pools" || what == "pool") {
    a->verb = Verb::kShowPools;
    Result<Words> w = SplitWords(rest, "show pools", {});
    if (!w.ok()) return w.status();
    GPUPOOL_RETURN_IF_ERROR(AtMostPositional(*w, 1, "show pools", "expected at most one pool name"));
    if (!w->positional.empty()) {
      GPUPOOL_RETURN_IF_ERROR(CheckPool(w->positional[0]));
      a->pool = w->positional[0];
    }
    return Status::OK();
  }
  if (what == "gpus" || what == "gpu") {
    a->verb = Verb::kShowGpus;
    Result<Words> w = SplitWords(rest, "show gpus", {"pool"});
    if (!w.ok()) return w.status();
    GPUPOOL_RETURN_IF_ERROR(AtMostPositional(*w, 1, "show gpus", "expected at most one GPU id"));
    GPUPOOL_RETURN_IF_ERROR(TakeFilters(*w, a));
    if (!w->positional.empty()) {
      GPUPOOL_RETURN_IF_ERROR(CheckId("gpu", w->positional[0]));
      a->gpu = w->positional[0];
    }
    return Status::OK();
  }
  if (what == "leases" || what == "lease") {
    a->verb = Verb::kShowLeases;
    Result<Words> w = SplitWords(rest, "show leases", {"job", "lease"});
    if (!w.ok()) return w.status();
    GPUPOOL_RETURN_IF_ERROR(AtMostPositional(*w, 0, "show leases", "expected job=N or lease=ID"));
    return TakeFilters(*w, a);
  }
  if (what == "events" || what == "event") {
    a->verb = Verb::kShowEvents;
    Result<Words> w = SplitWords(rest, "show events", {"gpu", "job", "since", "limit"});
    if (!w.ok()) return w.status();
    GPUPOOL_RETURN_IF_ERROR(AtMostPositional(*w, 0, "show events", "expected gpu=, job=, since= or limit="));
    return TakeFilters(*w, a);
  }
  return Status::InvalidArgument("cannot show '" + words[0] + "' (expected pools, gpus, leases or events)");
}

Status ParseUpdate(const std::vector<std::string>& words, CtlArgs* a) {
  a->verb = Verb::kUpdateGpu;
  Result<Words> w = SplitWords(words, "update", {"gpu", "state", "reason"});
  if (!w.ok()) return w.status();
  GPUPOOL_RETURN_IF_ERROR(AtMostPositional(*w, 0, "update", "expected gpu=ID state=drain|resume|fail"));
  GPUPOOL_RETURN_IF_ERROR(TakeFilters(*w, a));
  if (a->gpu.empty()) return Status::InvalidArgument("'update' needs gpu=ID");
  auto state = w->pairs.find("state");
  if (state == w->pairs.end()) return Status::InvalidArgument("'update' needs state=drain|resume|fail");
  a->state = Lower(state->second);
  if (a->state != "drain" && a->state != "resume" && a->state != "fail") {
    return Status::InvalidArgument("bad state '" + state->second + "' (expected drain, resume or fail)");
  }
  return TakeReason(*w, a);
}

Status ParseRelease(const std::vector<std::string>& words, CtlArgs* a) {
  a->verb = Verb::kRelease;
  Result<Words> w = SplitWords(words, "release", {"lease", "job", "reason"});
  if (!w.ok()) return w.status();
  GPUPOOL_RETURN_IF_ERROR(AtMostPositional(*w, 0, "release", "expected lease=ID or job=N"));
  GPUPOOL_RETURN_IF_ERROR(TakeFilters(*w, a));
  if (a->lease.empty() == !a->job.has_value()) {
    return Status::InvalidArgument("'release' needs exactly one of lease=ID or job=N");
  }
  return TakeReason(*w, a);
}

Status ParseMigrate(const std::vector<std::string>& words, CtlArgs* a) {
  a->verb = Verb::kMigrate;
  Result<Words> w = SplitWords(words, "migrate", {"lease", "gpu", "to", "reason"});
  if (!w.ok()) return w.status();
  GPUPOOL_RETURN_IF_ERROR(AtMostPositional(*w, 0, "migrate", "expected lease=ID [gpu=ID] [to=ID]"));
  GPUPOOL_RETURN_IF_ERROR(TakeFilters(*w, a));
  if (a->lease.empty()) return Status::InvalidArgument("'migrate' needs lease=ID");
  if (auto to = w->pairs.find("to"); to != w->pairs.end()) {
    GPUPOOL_RETURN_IF_ERROR(CheckId("to", to->second));
    a->to = to->second;
  }
  return TakeReason(*w, a);
}

// Takes the value of an option given as "--opt VALUE" or "--opt=VALUE".
Status OptionValue(const std::vector<std::string>& args, size_t* i, const std::string& name, std::string* out) {
  const std::string& word = args[*i];
  if (word.size() > name.size() && word.compare(0, name.size() + 1, name + "=") == 0) {
    *out = word.substr(name.size() + 1);
  } else if (*i + 1 < args.size()) {
    *out = args[++*i];
  } else {
    return Status::InvalidArgument("option " + name + " needs a value");
  }
  if (out->empty()) return Status::InvalidArgument("option " + name + " needs a value");
  return Status::OK();
}

bool IsOption(const std::string& word, const char* name) {
  std::string n = name;
  return word == n || (n.rfind("--", 0) == 0 && word.rfind(n + "=", 0) == 0);
}

}  // namespace

Result<CtlArgs> ParseArgs(const std::vector<std::string>& args) {
  CtlArgs a;
  bool help = false, version = false;
  std::vector<std::string> words;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& w = args[i];
    if (w.size() < 2 || w[0] != '-') {
      words.push_back(w);
    } else if (w == "-o" || w == "--oneliner") {
      a.oneliner = true;
    } else if (w == "--json") {
      a.json = true;
    } else if (w == "-h" || w == "--help") {
      help = true;
    } else if (w == "-V" || w == "--version") {
      version = true;
    } else if (IsOption(w, "--server")) {
      GPUPOOL_RETURN_IF_ERROR(OptionValue(args, &i, "--server", &a.server));
    } else if (w == "-f" || IsOption(w, "--config")) {
      GPUPOOL_RETURN_IF_ERROR(OptionValue(args, &i, w == "-f" ? "-f" : "--config", &a.config_path));
    } else {
      return Status::InvalidArgument("unknown option '" + w + "'");
    }
  }
  if (help) {
    a.verb = Verb::kHelp;
    return a;
  }
  if (version) {
    a.verb = Verb::kVersion;
    return a;
  }
  if (a.oneliner && a.json) return Status::InvalidArgument("-o and --json cannot be combined");
  if (words.empty()) return Status::InvalidArgument("no command given");

  std::string command = Lower(words[0]);
  std::vector<std::string> rest(words.begin() + 1, words.end());
  if (command == "show") {
    GPUPOOL_RETURN_IF_ERROR(ParseShow(rest, &a));
  } else if (command == "update") {
    GPUPOOL_RETURN_IF_ERROR(ParseUpdate(rest, &a));
  } else if (command == "release") {
    GPUPOOL_RETURN_IF_ERROR(ParseRelease(rest, &a));
  } else if (command == "migrate") {
    GPUPOOL_RETURN_IF_ERROR(ParseMigrate(rest, &a));
  } else if (command == "ping") {
    a.verb = Verb::kPing;
    if (!rest.empty()) return Status::InvalidArgument("unexpected word '" + rest[0] + "' for 'ping'");
  } else if (command == "help") {
    a.verb = Verb::kHelp;
  } else if (command == "version") {
    a.verb = Verb::kVersion;
  } else {
    return Status::InvalidArgument("unknown command '" + words[0] +
                                   "' (expected show, update, release, migrate or ping)");
  }
  return a;
}

std::string UsageText() {
  return "Usage: gpupoolctl [OPTIONS] COMMAND\n"
         "\n"
         "Commands:\n"
         "  show pools [NAME]\n"
         "  show gpus [ID] [pool=P]\n"
         "  show leases [job=N] [lease=ID]\n"
         "  show events [gpu=ID] [job=N] [since=SEQ] [limit=K]\n"
         "  update gpu=ID state=drain|resume|fail [reason=\"...\"]\n"
         "  release lease=ID | job=N [reason=\"...\"]\n"
         "  migrate lease=ID [gpu=ID] [to=ID] [reason=\"...\"]\n"
         "  ping\n"
         "\n"
         "Options:\n"
         "  --server URL    gpupoold's address (default: $GPUPOOL_SERVER, else client.server)\n"
         "  -f CONF         config file (default: $GPUPOOL_CONF, else /etc/gpupool/gpupool.conf)\n"
         "  -o, --oneliner  one line per record\n"
         "  --json          the API's JSON answer, pretty-printed\n"
         "  -h, --help      this text\n"
         "  -V, --version   print the version\n"
         "\n"
         "See gpupoolctl(1).\n";
}

}  // namespace gpupool::ctl

#include "remote/agentd/options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <charconv>
#include <map>

namespace gpupool::agentd {
namespace {

Result<int> ParseInt(const std::string& text, int min, int max) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    return Status::InvalidArgument("'" + text + "' is not an integer in " + std::to_string(min) + ".." +
                                   std::to_string(max));
  }
  return value;
}

Status OptionError(const std::string& option, const std::string& value, const Status& why) {
  return Status::InvalidArgument(option + " '" + value + "': " + why.message());
}

}  // namespace

std::string Usage() {
  return "usage: gpupool-agentd [-D] [-v...] [-f CONF] [--server URL] [--host NAME] [--rack NAME]\n"
         "                      [--listen HOST:PORT] [--control HOST:PORT] [--backend sim|cuda]\n"
         "                      [--sim-gpus MODEL:MEM:COUNT[,...]] [--fault INDEX:fail[=REASON]|fail-after=N|hang]...\n"
         "                      [--log-file PATH] [--pid-file PATH]\n"
         "  -D  stay in the foreground    -v  more verbose (repeat for debug)    -f  config file\n"
         "  See gpupool-agentd(8).\n";
}

Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  // Options that take a value, and where it goes.
  std::map<std::string, std::optional<std::string>*> string_options = {
      {"--server", &cl.server},     {"--host", &cl.host},          {"--rack", &cl.rack},
      {"--listen", &cl.listen},     {"--control", &cl.control},    {"--backend", &cl.backend},
      {"-f", &cl.config_path},      {"--config", &cl.config_path}, {"--log-file", &cl.log_file},
      {"--pid-file", &cl.pid_file},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "-D" || arg == "--foreground") {
      cl.foreground = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      cl.help = true;
      continue;
    }
    if (arg == "-V" || arg == "--version") {
      cl.version = true;
      continue;
    }
    if (arg.size() >= 2 && arg[0] == '-' && arg[1] == 'v' && arg.find_first_not_of('v', 1) == std::string::npos) {
      cl.verbose += static_cast<int>(arg.size() - 1);  // -v, -vv, -vvv
      continue;
    }
    if (arg == "--verbose") {
      ++cl.verbose;
      continue;
    }
    if (arg.empty() || arg[0] != '-') {
      return Status::InvalidArgument("unexpected argument '" + arg + "' (see --help)");
    }
    std::string name = arg;
    std::optional<std::string> value;
    if (size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    bool known = string_options.count(name) > 0 || name == "--sim-gpus" || name == "--fault";
    if (!known) return Status::InvalidArgument("unknown option '" + name + "' (see --help)");
    if (!value) {
      if (i + 1 >= args.size()) return Status::InvalidArgument("option '" + name + "' needs a value");
      value = args[++i];
    }
    if (value->empty()) return Status::InvalidArgument("option '" + name + "' needs a non-empty value");
    if (name == "--sim-gpus") {
      Result<std::vector<SimGpuConfig>> gpus = ParseSimGpuSpec(*value);
      if (!gpus.ok()) return OptionError(name, *value, gpus.status());
      cl.sim_gpus = gpus.value();
    } else if (name == "--fault") {
      Result<std::pair<int, device::Fault>> fault = ParseFaultOption(*value);
      if (!fault.ok()) return OptionError(name, *value, fault.status());
      cl.faults.push_back(fault.value());
    } else {
      *string_options[name] = *value;
    }
  }
  return cl;
}

Result<std::vector<SimGpuConfig>> ParseSimGpuSpec(const std::string& spec) {
  std::vector<SimGpuConfig> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string entry = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t c1 = entry.find(':');
    size_t c2 = c1 == std::string::npos ? std::string::npos : entry.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos || entry.find(':', c2 + 1) != std::string::npos) {
      return Status::InvalidArgument("entry '" + entry + "': expected MODEL:MEM:COUNT (e.g. A100-SXM4-80GB:80G:4)");
    }
    SimGpuConfig gpu;
    gpu.model = entry.substr(0, c1);
    if (gpu.model.empty()) return Status::InvalidArgument("entry '" + entry + "': empty model");
    Result<uint64_t> mem = ParseMemoryMib(entry.substr(c1 + 1, c2 - c1 - 1));
    if (!mem.ok()) return Status::InvalidArgument("entry '" + entry + "': " + mem.status().message());
    if (mem.value() == 0) return Status::InvalidArgument("entry '" + entry + "': memory must be > 0");
    gpu.memory_mib = mem.value();
    Result<int> count = ParseInt(entry.substr(c2 + 1), 1, 1024);
    if (!count.ok()) return Status::InvalidArgument("entry '" + entry + "': count " + count.status().message());
    gpu.count = count.value();
    out.push_back(gpu);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<std::pair<int, device::Fault>> ParseFaultOption(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("expected GPU_INDEX:fail|fail-after=N|hang");
  }
  Result<int> index = ParseInt(text.substr(0, colon), 0, 1023);
  if (!index.ok()) return Status::InvalidArgument("GPU index " + index.status().message());
  Result<device::Fault> fault = device::ParseFaultSpec(text.substr(colon + 1));
  if (!fault.ok()) return fault.status();
  return std::make_pair(index.value(), fault.value());
}

Result<HostPort> ParseHostPort(const std::string& text, bool allow_zero) {
  HostPort hp;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Status::InvalidArgument("'" + text + "' is not HOST:PORT");
    }
    hp.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) {
      return Status::InvalidArgument("'" + text + "' is not HOST:PORT");
    }
    hp.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (hp.host.empty()) return Status::InvalidArgument("'" + text + "': empty host");
  Result<int> port = ParseInt(port_text, allow_zero ? 0 : 1, 65535);
  if (!port.ok()) return Status::InvalidArgument("'" + text + "': port " + port.status().message());
  hp.port = port.value();
  return hp;
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr addr{};
  if (inet_pton(AF_INET, host.c_str(), &addr) == 1) {
    return (ntohl(addr.s_addr) >> 24) == 127;
  }
  return false;
}

Result<Settings> ResolveSettings(const CommandLine& cl) {
  Settings s;
  std::string path = cl.config_path.value_or(DefaultConfigPath());
  struct stat st;
  bool exists = ::stat(path.c_str(), &st) == 0;
  if (cl.config_path || exists) {
    if (!exists) return Status::InvalidArgument("config file '" + path + "' does not exist");
    Result<Config> config = LoadConfig(path);
    if (!config.ok()) return config.status();
    s.config = config.value();
  } else {
    // No config file at the default place: built-in defaults (what ParseConfig gives "").
    Result<Config> config = ParseConfig("", "(defaults)");
    if (!config.ok()) return config.status();
    s.config = config.value();
  }
  AgentConfig& a = s.config.agent;
  if (cl.server) a.server = *cl.server;
  if (cl.host) a.host = *cl.host;
  if (cl.rack) a.rack = *cl.rack;
  if (cl.listen) a.listen = *cl.listen;
  if (cl.control) a.control = *cl.control;
  if (cl.backend) a.backend = *cl.backend;
  if (cl.sim_gpus) a.sim_gpus = *cl.sim_gpus;

  if (!a.backend.empty() && a.backend != "sim" && a.backend != "cuda") {
    return Status::InvalidArgument("--backend '" + a.backend + "': expected sim or cuda");
  }
  if (a.host.empty()) {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') {
      return Status::InvalidArgument("cannot determine the host name; set --host");
    }
    a.host = buf;
  }
  if (a.rack.empty()) return Status::InvalidArgument("--rack: empty rack name");
  Result<HostPort> listen = ParseHostPort(a.listen, /*allow_zero=*/false);
  if (!listen.ok()) return Status::InvalidArgument("--listen " + listen.status().message());
  if (!a.control.empty()) {
    Result<HostPort> control = ParseHostPort(a.control, /*allow_zero=*/true);
    if (!control.ok()) return Status::InvalidArgument("--control " + control.status().message());
    if (!IsLoopbackHost(control->host)) {
      return Status::InvalidArgument("--control '" + a.control +
                                     "': the control API listens on loopback only (127.0.0.1, ::1)");
    }
  }
  if (a.server.empty()) return Status::InvalidArgument("--server: empty address");
  // No default backend (common/config.h): checked after the addresses, so that their
  // errors come first whatever the backend, and before the faults, which need it.
  if (a.backend.empty()) {
    return Status::InvalidArgument(
        "agent.backend is not set " + (exists ? "in " + path : "(no " + path + ")") +
        ": set backend = \"cuda\"; for this host's GPUs or backend = \"sim\"; for simulated ones "
        "(or --backend cuda|sim)");
  }
  if (cl.faults.size() > 0 && a.backend != "sim") {
    return Status::InvalidArgument("--fault: only the sim backend injects faults");
  }
  s.foreground = cl.foreground;
  s.verbose = cl.verbose;
  s.log_file = cl.log_file.value_or("");
  s.pid_file = cl.pid_file.value_or("");
  // Faults from the config come first; the command line's are applied after them.
  for (const std::string& text : a.sim_faults) {
    Result<std::pair<int, device::Fault>> fault = ParseFaultOption(text);
    if (!fault.ok()) return Status::InvalidArgument("agent.sim.faults: " + fault.status().message());
    s.faults.push_back(fault.value());
  }
  if (!s.faults.empty() && a.backend != "sim") {
    return Status::InvalidArgument("agent.sim.faults: only the sim backend injects faults");
  }
  s.faults.insert(s.faults.end(), cl.faults.begin(), cl.faults.end());
  return s;
}

}  // namespace gpupool::agentd

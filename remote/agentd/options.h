// Options: gpupool-agentd's command line, and how it combines with gpupool.conf.
//
// The command line overrides the `agent` section of the config file. Every error is one
// line naming the option or value ("--sim-gpus 'A100:80G': expected MODEL:MEM:COUNT"); the
// caller prints it and exits 2 without starting anything.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "remote/device/fault.h"

namespace gpupool::agentd {

struct CommandLine {
  bool foreground = false;                 // -D
  int verbose = 0;                         // -v, repeatable
  bool help = false;                       // -h, --help
  bool version = false;                    // -V, --version
  std::optional<std::string> config_path;  // -f CONF
  std::optional<std::string> log_file;     // --log-file PATH
  std::optional<std::string> pid_file;     // --pid-file PATH (written once serving)
  // Overrides of AgentConfig.
  std::optional<std::string> server, host, rack, listen, control, backend;
  std::optional<std::vector<SimGpuConfig>> sim_gpus;
  std::vector<std::pair<int, device::Fault>> faults;  // --fault INDEX:SPEC, in order
};

// Parses argv[1..] (`args` excludes the program name). Accepts "--opt VALUE" and
// "--opt=VALUE".
Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

// The usage text for -h.
std::string Usage();

// What the agent runs with: the config file (or defaults) with the command line applied.
struct Settings {
  Config config;  // config.agent is the effective agent configuration
  bool foreground = false;
  int verbose = 0;
  std::string log_file;
  std::string pid_file;
  std::vector<std::pair<int, device::Fault>> faults;
};

// Loads the config (-f, else DefaultConfigPath(); a missing default file means built-in
// defaults, a missing -f file is an error), applies overrides and validates the result:
// addresses, a loopback-only control address, the backend name, a non-empty host name
// (gethostname() when unset). The backend has no default: neither agent.backend nor
// --backend is an error naming the key, so that an agent installed and started on a host
// nobody configured never registers simulated GPUs.
Result<Settings> ResolveSettings(const CommandLine& cl);

// "MODEL:MEM:COUNT[,MODEL:MEM:COUNT...]" with MEM like 80G or 81920M.
Result<std::vector<SimGpuConfig>> ParseSimGpuSpec(const std::string& spec);

// "INDEX:SPEC" (SPEC as device::ParseFaultSpec).
Result<std::pair<int, device::Fault>> ParseFaultOption(const std::string& text);

struct HostPort {
  std::string host;
  int port = 0;
};
// "host:port" or "[v6addr]:port"; port 0..65535 (0 only when `allow_zero`).
Result<HostPort> ParseHostPort(const std::string& text, bool allow_zero);
// 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(const std::string& host);

}  // namespace gpupool::agentd

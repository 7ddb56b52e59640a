// gpupoolctl's program logic: resolves where gpupoold is (options, environment, config),
// sends the one request a command needs and prints the answer. main.cc only calls Main().
//
// Exit codes: 0 success; 1 any error (config, daemon unreachable, refused request), printed
// as one line "gpupoolctl: error: <message>"; 2 bad usage (the same line plus a hint).
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "poold/ctl/args.h"
#include "poold/ctl/request.h"

namespace gpupool::ctl {

// The process environment gpupoolctl reads, made explicit so that tests can supply it.
struct CtlEnv {
  std::string gpupool_server;                             // $GPUPOOL_SERVER
  std::string gpupool_conf;                               // $GPUPOOL_CONF
  std::string system_conf = "/etc/gpupool/gpupool.conf";  // read only if it exists
  static CtlEnv FromProcess();
};

// Where and how to reach gpupoold.
struct Settings {
  std::string server;
  std::string munge_socket;  // empty: $MUNGE_SOCKET, else libmunge's default
  int timeout_ms = 5000;
  std::string config_path;  // the config that was read; "" when defaults were used
};

// Server: --server, else $GPUPOOL_SERVER, else the config's client.server. Config: -f, else
// $GPUPOOL_CONF, else the system config if it exists, else defaults. A config that was
// named (-f, $GPUPOOL_CONF) must exist; any config read must load cleanly.
Result<Settings> ResolveSettings(const CtlArgs& args, const CtlEnv& env);

// Sends an API request and returns the parsed answer (or the server's error).
using Transport = std::function<Result<nlohmann::json>(const ApiRequest&)>;

// A transport that talks to gpupoold over HTTP with MUNGE credentials.
Transport HttpTransport(const Settings& settings);

// Carries out a parsed command (not kHelp/kVersion) through `transport`. Returns the exit code.
int Execute(const CtlArgs& args, const std::string& server, const Transport& transport, std::ostream& out,
            std::ostream& err);

// The whole program; `args` excludes the program name.
int Main(const std::vector<std::string>& args, const CtlEnv& env, std::ostream& out, std::ostream& err);

}  // namespace gpupool::ctl

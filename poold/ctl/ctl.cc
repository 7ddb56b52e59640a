#include "poold/ctl/ctl.h"

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <memory>

#include "common/api_client.h"
#include "common/config.h"
#include "poold/ctl/format.h"

#ifndef GPUPOOL_VERSION
#define GPUPOOL_VERSION "unknown"
#endif

namespace gpupool::ctl {
namespace {

constexpr char kPrefix[] = "gpupoolctl: error: ";

int Fail(std::ostream& err, const std::string& message) {
  err << kPrefix << message << "\n";
  return 1;
}

int UsageError(std::ostream& err, const std::string& message) {
  err << kPrefix << message << "\n"
      << "Try 'gpupoolctl --help' for more information.\n";
  return 2;
}

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

CtlEnv CtlEnv::FromProcess() {
  CtlEnv env;
  env.gpupool_server = Getenv("GPUPOOL_SERVER");
  env.gpupool_conf = Getenv("GPUPOOL_CONF");
  return env;
}

Result<Settings> ResolveSettings(const CtlArgs& args, const CtlEnv& env) {
  std::string path = args.config_path;
  if (path.empty()) path = env.gpupool_conf;
  if (path.empty() && access(env.system_conf.c_str(), F_OK) == 0) path = env.system_conf;

  Config config;  // defaults
  if (!path.empty()) {
    Result<Config> loaded = LoadConfig(path);
    if (!loaded.ok()) return loaded.status();
    config = std::move(loaded.value());
  }
  Settings s;
  s.config_path = path;
  s.server = !args.server.empty()          ? args.server
             : !env.gpupool_server.empty() ? env.gpupool_server
                                           : config.client.server;
  s.munge_socket = config.munge_socket;
  s.timeout_ms = config.client.timeout * 1000;
  return s;
}

Transport HttpTransport(const Settings& settings) {
  // Shared so that the keep-alive connection outlives copies of the function object.
  auto make = [settings](bool authenticate) {
    ApiClientOptions o;
    o.server = settings.server;
    o.timeout_ms = settings.timeout_ms;
    o.munge_socket = settings.munge_socket;
    o.authenticate = authenticate;
    return std::make_shared<ApiClient>(o);
  };
  std::shared_ptr<ApiClient> authed = make(true);
  std::shared_ptr<ApiClient> anonymous = make(false);
  return [authed, anonymous](const ApiRequest& r) -> Result<nlohmann::json> {
    ApiClient& client = r.authenticate ? *authed : *anonymous;
    return r.post ? client.Post(r.path, r.body) : client.Get(r.path);
  };
}

int Execute(const CtlArgs& args, const std::string& server, const Transport& transport, std::ostream& out,
            std::ostream& err) {
  ApiRequest request = BuildRequest(args);
  Result<nlohmann::json> answer = transport(request);
  if (!answer.ok()) {
    // Without a credential nothing is sent. If the daemon is not there either, that is the
    // more useful thing to say (the admin fixes it first), so ask the unauthenticated ping.
    if (request.authenticate && answer.status().code() == Status::Code::kUnauthenticated) {
      CtlArgs ping;
      ping.verb = Verb::kPing;
      Result<nlohmann::json> pong = transport(BuildRequest(ping));
      if (!pong.ok() && pong.status().code() == Status::Code::kUnavailable) {
        return Fail(err, pong.status().message());
      }
    }
    return Fail(err, answer.status().message());
  }
  if (args.json) {
    out << answer->dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  Result<std::string> text = FormatAnswer(args, answer.value(), server);
  if (!text.ok()) return Fail(err, text.status().message());
  out << text.value();
  return 0;
}

int Main(const std::vector<std::string>& argv, const CtlEnv& env, std::ostream& out, std::ostream& err) {
  try {
    Result<CtlArgs> args = ParseArgs(argv);
    if (!args.ok()) return UsageError(err, args.status().message());
    if (args->verb == Verb::kHelp) {
      out << UsageText();
      return 0;
    }
    if (args->verb == Verb::kVersion) {
      out << "gpupoolctl " << GPUPOOL_VERSION << "\n";
      return 0;
    }
    Result<Settings> settings = ResolveSettings(args.value(), env);
    if (!settings.ok()) return Fail(err, settings.status().message());
    return Execute(args.value(), settings->server, HttpTransport(settings.value()), out, err);
  } catch (const std::exception& e) {
    return Fail(err, std::string("internal error: ") + e.what());
  }
}

}  // namespace gpupool::ctl

// RunAgentd: gpupool-agentd as a function, so main() stays one line and tests can drive the
// whole daemon in-process.
//
// Order of start: options and config (bad input: one line on stderr, exit 2, nothing
// started) → detach unless -D (the parent waits until the child is serving and exits with
// its status) → backend → injected faults → control API → data path (when built) → agent
// thread. SIGTERM or SIGINT stops everything in reverse order; exit 0.
#pragma once

#include <string>
#include <vector>

namespace gpupool::agentd {

// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // could not start (backend, port in use, ...)
inline constexpr int kExitUsage = 2;    // bad option, config or fault spec

// `args` excludes the program name. Blocks until a stop signal.
int RunAgentd(const std::vector<std::string>& args);

}  // namespace gpupool::agentd

// The bytes gpupoold sends an agent's data port to see that the agent's process itself
// answers (poold/agent_probe.cc), and that the agent's acceptor recognises
// (remote/transport/acceptor.cc). Not a handshake: they do not begin with the bootstrap
// magic, so every agent closes such a connection at once; one that knows them does so
// without warning about a bad handshake.
#pragma once

#include <string_view>

namespace gpupool {

inline constexpr std::string_view kAgentProbeBytes = "gpupoold probe\n";

}  // namespace gpupool

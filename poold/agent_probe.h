// AgentProbe: gpupoold's own look at a GPU host's agent, when a client says it lost its
// connection to it (POST /v1/leases/agent-lost, docs/api.md). The probe opens a TCP
// connection to the agent's data endpoint (the address it registered; the agent's control
// API listens on its host's loopback only, out of gpupoold's reach) and closes it at once,
// without a handshake (the agent's acceptor drops such a connection: acceptor.h).
//
// The answer is gpupoold's observation, never the client's: a refused connection (the agent
// process is gone, its port closed) or none within the timeout (the host is down or cut
// off) means the agent is lost; a connection that opens means it is alive.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace gpupool::poold {

// OK when a TCP connection to `endpoint` ("HOST:PORT", "[V6]:PORT") opens within `timeout`;
// Unavailable naming what happened otherwise (refused, no answer, no such host);
// InvalidArgument for an endpoint that is not HOST:PORT.
Status ProbeAgentEndpoint(const std::string& endpoint, std::chrono::milliseconds timeout);

}  // namespace gpupool::poold

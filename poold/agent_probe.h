// AgentProbe: gpupoold's own look at a GPU host's agent, when a client says it lost its
// connection to it (POST /v1/leases/agent-lost, docs/api.md). The probe opens a TCP
// connection to the agent's data endpoint (the address it registered; the agent's control
// API listens on its host's loopback only, out of gpupoold's reach), sends a few bytes that
// are not a handshake, and waits for the agent to close the connection (its acceptor closes
// one with a bad magic at once: acceptor.h).
//
// The answer is gpupoold's observation, never the client's: a refused connection (the agent
// process is gone, its port closed), none within the timeout (the host is down or cut off),
// or one that opens but is never closed (the kernel accepts for a process that is stopped
// or hung) means the agent is lost; an agent that reads the probe and closes is alive.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace gpupool::poold {

// OK when the agent at `endpoint` ("HOST:PORT", "[V6]:PORT") took a connection and closed it
// (or answered) within `timeout`; Unavailable naming what happened otherwise (refused, no
// answer, connected but never answered, no such host);
// InvalidArgument for an endpoint that is not HOST:PORT.
Status ProbeAgentEndpoint(const std::string& endpoint, std::chrono::milliseconds timeout);

}  // namespace gpupool::poold

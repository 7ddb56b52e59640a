// gpupool-agentd: registers this host's GPUs with gpupoold and serves them. See agentd.h.
#include <string>
#include <vector>

#include "remote/agentd/agentd.h"
#include "remote/worker/device_kinds.h"

int main(int argc, char** argv) {
  gpupool::worker::RegisterDeviceKinds();  // before any thread: agent.backend names one
  return gpupool::agentd::RunAgentd(std::vector<std::string>(argv + 1, argv + argc));
}

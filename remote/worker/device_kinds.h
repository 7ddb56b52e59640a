// RegisterDeviceKinds: the one place that tells a process of the agent which kinds of GPU
// it can serve (remote/device/device_kind.h). Both of the agent's programs call it first
// thing in main: gpupool-agentd, which opens the configured kind's backend, and
// gpupool-worker, which runs sessions on that kind's executors.
#pragma once

namespace gpupool::worker {

// Registers "sim" and "cuda" (which, built without cuda.h, says so when used).
// Idempotent; call before any thread starts.
void RegisterDeviceKinds();

}  // namespace gpupool::worker

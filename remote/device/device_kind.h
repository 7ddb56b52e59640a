// DeviceKind: one kind of GPU the agent can serve ("sim", "cuda"): how to open this host's
// devices of that kind (a GpuBackend) and how to run a session on one of them (an
// Executor). The kinds live below the data plane (remote/devices/<kind>/); the data plane
// and the agent reach them only through this interface, by name.
//
// Registration: the agent's processes register the kinds they are built with once, at the
// start of main (remote/worker/device_kinds.h), before any thread starts; a test registers
// the kind it tests. Lookups may come from any thread afterwards.
#pragma once

#include <memory>
#include <string>

#include "common/config.h"
#include "common/status.h"
#include "remote/device/activity.h"
#include "remote/device/backend.h"
#include "remote/device/executor.h"

namespace gpupool::device {

// The executors of one data-path server over the GPUs it serves: what a kind keeps per
// server lives here (the sim: each GPU's device memory, shared by its sessions).
// Thread-safe: the server's GPU threads share one.
class ExecutorSource {
 public:
  virtual ~ExecutorSource() = default;
  // An executor for a new session on `gpu`; an error (one line) when there cannot be one.
  virtual Result<std::unique_ptr<Executor>> Create(const GpuInfo& gpu) = 0;
  // What `gpu`'s device reports about itself now (activity.h), for the job's NVML: the
  // figures it cannot report are left unset and named in why_not.
  virtual GpuActivity Activity(const GpuInfo& /*gpu*/) {
    GpuActivity activity;
    activity.why_not = "this kind of device reports no utilisation, temperature or power";
    return activity;
  }
};

class DeviceKind {
 public:
  virtual ~DeviceKind() = default;
  // The name gpupool.conf's agent.backend and GpuBackend::name() use ("sim", "cuda").
  virtual std::string name() const = 0;
  // This host's devices of this kind. Errors are one line (a bad sim inventory, or why
  // the cuda backend cannot start here).
  virtual Result<std::unique_ptr<GpuBackend>> OpenBackend(const AgentConfig& config) const = 0;
  virtual std::unique_ptr<ExecutorSource> NewExecutorSource() const = 0;
};

// Adds `kind` under its name. False (and `kind` dropped) when a kind of that name is there
// already: the first registration stays, so pointers FindDeviceKind gave out stay valid.
bool RegisterDeviceKind(std::unique_ptr<DeviceKind> kind);
// The kind registered under `name`; nullptr when none is.
const DeviceKind* FindDeviceKind(const std::string& name);
// The registered names, for error messages: "sim or cuda".
std::string DeviceKindNames();

// The backend of kind `name`: InvalidArgument "unknown backend 'x' (expected sim or cuda)"
// when no kind of that name is registered, else the kind's OpenBackend.
Result<std::unique_ptr<GpuBackend>> OpenBackend(const std::string& name, const AgentConfig& config);

}  // namespace gpupool::device

// ControlServer: the agent's local HTTP+JSON API, for operators and tests.
//
//   GET  /v1/gpus    → {"host","backend","registered","gpus":[{index, uuid, model,
//                       memory_mib, pci_bus_id, numa_node, health, reason, fault:{mode,
//                       ops, reason}, operations, lease, generation}]}
//   POST /v1/faults  {"index":0,"mode":"fail"|"fail_after"|"hang"|"clear","ops":N,
//                     "reason":"Xid 79"} → {"gpu":{...as above}}
//
// Loopback only (the bind address is checked, and so is each peer), every request needs
// a credential accepted by the ControlAuthorizer. Errors are {"error":"one line"} with the
// code of docs/api.md; a rejected request changes nothing.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "remote/agentd/agent.h"
#include "remote/agentd/control_auth.h"
#include "remote/agentd/lease_table.h"
#include "remote/device/backend.h"

namespace gpupool::agentd {

struct ControlServerOptions {
  std::string listen;                     // "127.0.0.1:PORT"; port 0 picks a free one
  std::string host;                       // this agent's host name (shown in answers)
  device::GpuBackend* backend = nullptr;  // required
  const LeaseTable* leases = nullptr;     // optional
  const Agent* agent = nullptr;           // optional (for "registered")
  ControlAuthorizer authorize;            // required
  size_t max_request_bytes = 65536;
};

class ControlServer {
 public:
  // Binds and starts serving on a thread of its own. Fails when the address is not
  // loopback or cannot be bound.
  static Result<std::unique_ptr<ControlServer>> Start(ControlServerOptions options);
  ~ControlServer();  // stops serving
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  int port() const;

  // The handlers, callable without HTTP (tests). Each returns the HTTP code and fills
  // *answer.
  int HandleGetGpus(nlohmann::json* answer) const;
  int HandlePostFault(const std::string& body, nlohmann::json* answer) const;

 private:
  struct Impl;
  explicit ControlServer(std::unique_ptr<Impl> impl);
  nlohmann::json GpuView(const device::GpuInfo& info) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool::agentd

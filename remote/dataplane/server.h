// Server: the GPU-host end of the data path, run inside gpupool-agentd.
//
// Listens for connections from the replacement libcuda.so.1 (remote/client), checks each
// client's lease credential with `authorize` (the agent knows, from gpupoold's heartbeat
// answers, which lease holds which GPU), and runs the client's CUDA operations on the
// backend's GPU: the sim executor when the backend is "sim", the cuda executor when it is
// "cuda". Before every device operation it asks backend->BeforeOperation (fault injection
// and health), and reports in-band GPU failures with backend->ReportFailure.
// A client's allocations, modules, streams and events are freed when it disconnects.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "remote/backend/backend.h"

namespace gpupool::dataplane {

using Authorizer = std::function<bool(const std::string& lease_id,
                                      const std::string& token,
                                      const std::string& gpu_uuid)>;

struct ServerOptions {
  std::string listen;  // "HOST:PORT" (port 0: any free port)
  backend::GpuBackend* backend = nullptr;
  Authorizer authorize;
};

class Server {
 public:
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);
  virtual ~Server();

  // The port actually listened on (useful with port 0).
  virtual int port() const = 0;

 protected:
  Server() = default;
};

}  // namespace gpupool::dataplane

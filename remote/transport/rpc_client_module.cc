#include "remote/transport/rpc_client_module.h"

#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" __attribute__((visibility("default"))) gpupool::transport::ClientConnection* gpupool_ucx_connect(
    const char* endpoint, char* error, size_t error_size) {
  try {
    std::string address = endpoint;
    std::string gpu;
    if (size_t at = address.find('@'); at != std::string::npos) {
      gpu = address.substr(0, at);
      address = address.substr(at + 1);
    }
    // The job's lease (set by spank_gpupool): the agent checks it at the handshake,
    // before the connection reaches the session's worker.
    gpupool::transport::RpcClient::Credential credential;
    if (const char* lease = std::getenv("GPUPOOL_LEASE_ID")) credential.lease_id = lease;
    if (const char* token = std::getenv("GPUPOOL_LEASE_TOKEN")) credential.token = token;
    auto client = gpupool::transport::RpcClient::Connect(address, gpu, credential);
    if (!client.ok()) {
      const bool refused = client.status().code() == gpupool::Status::Code::kPermissionDenied;
      std::snprintf(error, error_size, "%s%s", refused ? kRefusedPrefix : "", client.status().message().c_str());
      return nullptr;
    }
    return client.value().release();
  } catch (...) {
    std::snprintf(error, error_size, "cannot connect to %s: internal error", endpoint);
    return nullptr;
  }
}

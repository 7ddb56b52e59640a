#include "remote/transport/rpc_client_module.h"

#include <cstdio>
#include <string>

extern "C" __attribute__((visibility("default"))) gpupool::transport::ClientConnection*
gpupool_ucx_connect(const char* endpoint, char* error, size_t error_size) {
  try {
    std::string address = endpoint;
    std::string gpu;
    if (size_t at = address.find('@'); at != std::string::npos) {
      gpu = address.substr(0, at);
      address = address.substr(at + 1);
    }
    auto client = gpupool::transport::RpcClient::Connect(address, gpu);
    if (!client.ok()) {
      std::snprintf(error, error_size, "%s", client.status().message().c_str());
      return nullptr;
    }
    return client.value().release();
  } catch (...) {
    std::snprintf(error, error_size, "cannot connect to %s: internal error", endpoint);
    return nullptr;
  }
}

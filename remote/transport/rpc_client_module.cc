#include "remote/transport/rpc_client_module.h"

#include <cstdio>

extern "C" __attribute__((visibility("default"))) gpupool::transport::ClientConnection*
gpupool_ucx_connect(const char* endpoint, char* error, size_t error_size) {
  try {
    auto client = gpupool::transport::RpcClient::Connect(endpoint);
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

// The UCX client transport as a loadable module (libgpupool-ucx-client.so).
//
// The replacement libcuda.so.1 must not load UCX until cuInit: libucs installs signal
// handlers and reads its configuration when it is loaded, before the library could set
// UCX_ERROR_SIGNALS= / UCX_MEM_MALLOC_HOOKS=n, and a process that never calls CUDA should
// not carry a transport at all. So libcuda.so.1 does not link UCX: at cuInit it sets those
// defaults and dlopens this module, which links UCX, from its own directory.
#pragma once

#include <cstddef>
#include <cstdlib>

#include "remote/transport/rpc_client.h"

// The module's one entry point: connects to `endpoint`, "HOST:PORT" or
// "GPU_UUID@HOST:PORT" (the form of a GPUPOOL_GPUS entry; the agent then runs
// the connection on that GPU's thread). The credential presented at the handshake is the
// job's lease, from GPUPOOL_LEASE_ID and GPUPOOL_LEASE_TOKEN. On failure returns nullptr
// and writes a one-line reason to `error`; when the server refused the credential, the
// reason starts with kRefusedPrefix.
inline constexpr const char kRefusedPrefix[] = "refused: ";
extern "C" gpupool::transport::ClientConnection* gpupool_ucx_connect(const char* endpoint, char* error,
                                                                     size_t error_size);
using GpupoolUcxConnectFunction = decltype(&gpupool_ucx_connect);
inline constexpr const char* kGpupoolUcxModuleName = "libgpupool-ucx-client.so";

// Sets the UCX environment defaults an injected library needs, without overriding what
// the user set: no UCX signal handlers (they would steal the application's SIGSEGV etc.)
// and no malloc hooks (they interpose on the application's allocator). Must run before
// UCX is loaded.
namespace gpupool::transport {
inline void SetInjectedLibraryUcxDefaults() {
  setenv("UCX_ERROR_SIGNALS", "", /*overwrite=*/0);
  setenv("UCX_MEM_MALLOC_HOOKS", "n", 0);
}
}  // namespace gpupool::transport

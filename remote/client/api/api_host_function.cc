// Driver API: host functions in stream order (cuLaunchHostFunc, cuStreamAddCallback). The
// ordering itself is core/host_work.cc's; the work is queued by ops/stream.h.
#include "remote/client/core/api_common.h"
#include "remote/client/graph/graphs.h"
#include "remote/client/ops/stream.h"

using namespace gpupool::client;       // NOLINT
using namespace gpupool::client::ops;  // NOLINT

GPUPOOL_CUDA_API CUresult CUDAAPI cuLaunchHostFunc(CUstream stream, CUhostFn function, void* data) {
  GPUPOOL_BODY({
    if (function == nullptr) return CUDA_ERROR_INVALID_VALUE;
    GPUPOOL_CAPTURE(CU_GRAPH_NODE_TYPE_HOST, stream,
                    [function, data](CUstream s) { return LaunchHostFunction(s, function, data); });
    return LaunchHostFunction(stream, function, data);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream stream, CUhostFn function, void* data) {
  return cuLaunchHostFunc(stream, function, data);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamAddCallback(CUstream stream, CUstreamCallback callback, void* data,
                                                      unsigned int flags) {
  GPUPOOL_BODY({
    if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    // Not capturable on a GPU either (cuLaunchHostFunc is).
    if (AnyCapture() && InvalidateCapture(stream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return LaunchHostWork(stream, [callback, stream, data](CUresult status) { callback(stream, status, data); });
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream stream, CUstreamCallback callback, void* data,
                                                           unsigned int flags) {
  return cuStreamAddCallback(stream, callback, data, flags);
}

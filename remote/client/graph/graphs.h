// Stream capture and graphs (graphs.cc): what the library records while a stream
// captures, and the guard that keeps other work off a capturing stream.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace gpupool::client {

// One captured call, run again on the stream a graph is launched on.
using CapturedWork = std::function<CUresult(CUstream)>;

// Whether any stream of this process is capturing (one atomic load: the fast path of
// every stream-ordered call).
bool AnyCapture();

// If `stream` is capturing: appends `work` to its capture as a node of `type`, sets
// *status (CUDA_SUCCESS) and returns true. Otherwise returns false and the caller does the
// work now.
bool CaptureWork(CUstream stream, CUgraphNodeType type, CapturedWork work, CUresult* status);

// The same for a kernel launch, recorded as a kernel node with its arguments `params`
// packed in the kernel's layout (so cuGraphKernelNodeGetParams and cuGraphExecUpdate see
// them); a cooperative launch's node has the cooperative attribute, one in thread block
// clusters (`cluster`, on a GPU whose driver runs them) the cluster dimension.
bool CaptureKernel(CUstream stream, CUfunction function, const unsigned grid[3], const unsigned block[3],
                   unsigned shared_mem, std::vector<char> params, bool cooperative, CUresult* status,
                   const unsigned* cluster = nullptr);

// cuMemAllocAsync and cuMemFreeAsync on a capturing stream: a memory allocation node
// (its graph memory allocated now on `device`, the address in *dptr) or a free node (of
// graph memory only: other memory gets CUDA_ERROR_INVALID_VALUE and invalidates the
// capture). False when `stream` does not capture.
bool CaptureGraphAlloc(CUstream stream, int device, size_t bytes, CUdeviceptr* dptr, CUresult* status);
bool CaptureGraphFree(CUstream stream, CUdeviceptr dptr, CUresult* status);

// If `stream` is capturing: invalidates its capture (a call that cannot be captured was
// made on it) and returns true.
bool InvalidateCapture(CUstream stream);

// The capture check of every request that reaches the agent (core/runtime.h's CaptureCheck,
// installed when the library loads): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and the
// capture invalidated, as a GPU's driver does) when request `op` is ordered on a stream of
// `device` that is capturing but the call that made it records nothing (a stream
// synchronisation, say); else CUDA_SUCCESS.
CUresult RefuseOnCapturingStream(int device, uint32_t op, const void* args, size_t args_len);

// cuStreamDestroy and cuEventDestroy during a capture. A stream that joined a capture
// (it waited for an event recorded in it) leaves it, its work captured already, and may be
// destroyed, as graphMemoryNodes-style programs do with a helper stream before the capture
// ends; the stream the capture began on cannot be: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
// and the capture invalidated. An event the capture recorded is forgotten by it.
// CUDA_SUCCESS when `stream` does not capture.
CUresult LeaveCaptureForDestroy(CUstream stream, int device, uint64_t id);
void ForgetCapturedEvent(CUevent event);

// cuGraphLaunch on a capturing stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the
// capture invalidated, as a GPU's driver answers (driver 580 on an H100); else CUDA_SUCCESS.
CUresult RefuseGraphLaunchInCapture(CUstream stream);

// cuEventRecord and cuStreamWaitEvent during a capture (an event recorded in a capture
// makes a stream that waits for it join the capture). As a driver does, they add a node to
// the graph only when `external` (CU_EVENT_RECORD_EXTERNAL, CU_EVENT_WAIT_EXTERNAL);
// otherwise they order work, and the captured graph, a chain in call order, has that order
// already. A capture does not wait for an event from outside it unless the wait is
// external (CUDA_ERROR_STREAM_CAPTURE_ISOLATION). False: nothing to do with a capture.
bool CaptureEventRecord(CUevent event, CUstream stream, bool external, CapturedWork work, CUresult* status);
bool CaptureStreamWait(CUstream stream, CUevent event, bool external, CapturedWork work, CUresult* status);

}  // namespace gpupool::client

// At the top of a stream-ordered entry point's body: records the call as a node of
// `type` when `stream` captures. The lambda gets the stream to run on.
#define GPUPOOL_CAPTURE(type, stream, ...)                                                  \
  do {                                                                                      \
    CUresult gpupool_captured = CUDA_SUCCESS;                                               \
    if (::gpupool::client::AnyCapture() &&                                                  \
        ::gpupool::client::CaptureWork((stream), (type), __VA_ARGS__, &gpupool_captured)) { \
      return gpupool_captured;                                                              \
    }                                                                                       \
  } while (0)

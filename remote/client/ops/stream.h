// Stream-ordered operations on streams and events, and host functions: the one
// implementation of each. The exported functions (api/api_stream.cc,
// api/api_host_function.cc) validate, record the call when its stream captures, then call
// these; a graph launch calls them for its event, wait and host nodes (graph/graphs.cc).
// None of them looks at stream capture.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>

namespace gpupool::client::ops {

// A round trip about `stream` (dataplane::kOpStreamSynchronize, kOpStreamQuery).
CUresult StreamCall(CUstream stream, uint32_t op);

// Records `event` on `stream` (one-way); CUDA_ERROR_INVALID_HANDLE for an event of another
// device.
CUresult RecordEvent(CUevent event, CUstream stream);

// A round trip about `event` (dataplane::kOpEventQuery, kOpEventSynchronize).
CUresult EventCall(CUevent event, uint32_t op);

// Has `stream` wait for `event`: on the agent when both are on one GPU, else here, now
// (there is no path between two remote GPUs).
CUresult WaitEvent(CUstream stream, CUevent event);

// Runs `work` (given the status of the stream's earlier work) in stream order on a thread
// of this library (core/host_work.cc).
CUresult LaunchHostWork(CUstream stream, std::function<void(CUresult)> work);
// cuLaunchHostFunc's work: CUDA_ERROR_INVALID_VALUE for no function.
CUresult LaunchHostFunction(CUstream stream, CUhostFn function, void* data);

}  // namespace gpupool::client::ops

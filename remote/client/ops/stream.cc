// Stream-ordered stream and event operations, and host functions (ops/stream.h).
#include <functional>
#include <utility>

#include "remote/client/core/api_common.h"
#include "remote/client/ops/stream.h"

namespace gpupool::client::ops {

namespace dp = gpupool::dataplane;

namespace {

// An event and a stream given together (record, wait): both resolved, or the error.
CUresult EventAndStream(CUevent handle, CUstream stream, Event** event, int* device, uint64_t* stream_id) {
  *event = AsEvent(handle);
  if (*event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return ResolveDevice(stream, device, stream_id);
}

}  // namespace

CUresult StreamCall(CUstream stream, uint32_t op) {
  int device = 0;
  uint64_t id = 0;
  if (CUresult status = ResolveDevice(stream, &device, &id); status != CUDA_SUCCESS) return status;
  dp::StreamArgs args{id, 0, 0};
  return Runtime::Get().Call(device, op, &args, sizeof(args));
}

CUresult RecordEvent(CUevent handle, CUstream stream) {
  Event* event = nullptr;
  int device = 0;
  uint64_t stream_id = 0;
  if (CUresult status = EventAndStream(handle, stream, &event, &device, &stream_id); status != CUDA_SUCCESS) {
    return status;
  }
  if (device != event->context->device) return CUDA_ERROR_INVALID_HANDLE;
  dp::EventRecordArgs args{event->id, stream_id};
  return Runtime::Get().Post(device, dp::kOpEventRecord, &args, sizeof(args));
}

CUresult EventCall(CUevent handle, uint32_t op) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  Event* event = AsEvent(handle);
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  dp::EventArgs args{event->id, event->flags, 0};
  return Runtime::Get().Call(event->context->device, op, &args, sizeof(args));
}

CUresult WaitEvent(CUstream stream, CUevent handle) {
  Event* event = nullptr;
  int device = 0;
  uint64_t stream_id = 0;
  if (CUresult status = EventAndStream(handle, stream, &event, &device, &stream_id); status != CUDA_SUCCESS) {
    return status;
  }
  if (event->context->device != device) {
    // Cross-GPU dependency: wait here for the event, then the stream may go on.
    return EventCall(handle, dp::kOpEventSynchronize);
  }
  dp::StreamWaitEventArgs args{stream_id, event->id};
  return Runtime::Get().Post(device, dp::kOpStreamWaitEvent, &args, sizeof(args));
}

CUresult LaunchHostWork(CUstream stream, std::function<void(CUresult)> work) {
  int device = 0;
  uint64_t stream_id = 0;
  if (CUresult status = ResolveDevice(stream, &device, &stream_id); status != CUDA_SUCCESS) {
    return status;
  }
  return Runtime::Get().EnqueueHostFunction(device, stream_id, std::move(work));
}

CUresult LaunchHostFunction(CUstream stream, CUhostFn function, void* data) {
  if (function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return LaunchHostWork(stream, [function, data](CUresult) { function(data); });
}

}  // namespace gpupool::client::ops

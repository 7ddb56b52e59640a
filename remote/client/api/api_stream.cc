// Driver API: streams and events.
//
// Stream and event handles are created here (the server learns them one-way); operations
// that wait (synchronize, query, elapsed time) are round trips that also deliver the
// errors of earlier asynchronous work.
#include <algorithm>
#include <cstring>
#include <utility>

#include "remote/client/core/api_common.h"
#include "remote/client/core/device_attributes.h"
#include "remote/client/graph/graphs.h"
#include "remote/client/ops/stream.h"

using namespace gpupool::client;       // NOLINT
using namespace gpupool::client::ops;  // NOLINT

namespace {

namespace dp = gpupool::dataplane;

CUresult CreateStream(CUstream* result, unsigned flags, int priority) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
  if ((flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) return CUDA_ERROR_INVALID_VALUE;
  priority = std::min(kLeastStreamPriority, std::max(kGreatestStreamPriority, priority));
  auto stream = std::make_unique<Stream>();
  stream->id = Runtime::Get().NewId();
  stream->context = CurrentContext();
  stream->flags = flags;
  stream->priority = priority;
  dp::StreamArgs args{stream->id, flags, priority};
  if (CUresult status = Runtime::Get().Post(device, dp::kOpStreamCreate, &args, sizeof(args)); status != CUDA_SUCCESS) {
    return status;
  }
  {
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    stream->context->streams.insert(stream.get());
  }
  *result = reinterpret_cast<CUstream>(stream.release());
  return CUDA_SUCCESS;
}

// cuEventRecord(WithFlags): recorded instead while `stream` captures (graphs.cc).
CUresult RecordOrCapture(CUevent event, CUstream stream, unsigned int flags) {
  CUresult captured = CUDA_SUCCESS;
  if (AnyCapture() && CaptureEventRecord(
                          event, stream, (flags & CU_EVENT_RECORD_EXTERNAL) != 0,
                          [=](CUstream s) { return RecordEvent(event, s); }, &captured)) {
    return captured;
  }
  return RecordEvent(event, stream);
}

}  // namespace

// --- Streams -------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
  GPUPOOL_BODY({ return CreateStream(stream, flags, 0); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  GPUPOOL_BODY({ return CreateStream(stream, flags, priority); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamDestroy_v2(CUstream handle) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Stream* stream = AsStream(handle);
    if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (CUresult status = LeaveCaptureForDestroy(handle, stream->context->device, stream->id); status != CUDA_SUCCESS) {
      return status;
    }
    {
      std::lock_guard<std::mutex> lock(Runtime::Get().mu());
      stream->context->streams.erase(stream);
    }
    dp::StreamArgs args{stream->id, 0, 0};
    CUresult status = Runtime::Get().Post(stream->context->device, dp::kOpStreamDestroy, &args, sizeof(args));
    stream->magic = 0;
    delete stream;
    return status;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamDestroy(CUstream stream) { return cuStreamDestroy_v2(stream); }

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  GPUPOOL_BODY({ return StreamCall(stream, dp::kOpStreamSynchronize); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream stream) { return cuStreamSynchronize(stream); }

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamQuery(CUstream stream) {
  GPUPOOL_BODY({ return StreamCall(stream, dp::kOpStreamQuery); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamQuery_ptsz(CUstream stream) { return cuStreamQuery(stream); }

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  GPUPOOL_BODY({
    if ((flags & ~CU_EVENT_WAIT_EXTERNAL) != 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult captured = CUDA_SUCCESS;
    if (AnyCapture() && CaptureStreamWait(
                            stream, event, (flags & CU_EVENT_WAIT_EXTERNAL) != 0,
                            [=](CUstream s) { return WaitEvent(s, event); }, &captured)) {
      return captured;
    }
    return WaitEvent(stream, event);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream stream, CUevent event, unsigned int flags) {
  return cuStreamWaitEvent(stream, event, flags);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetFlags(CUstream handle, unsigned int* flags) {
  GPUPOOL_BODY({
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (IsDefaultStream(handle)) {
      *flags = 0;
      return CUDA_SUCCESS;
    }
    Stream* stream = AsStream(handle);
    if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *flags = stream->flags;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetPriority(CUstream handle, int* priority) {
  GPUPOOL_BODY({
    if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (IsDefaultStream(handle)) {
      *priority = 0;
      return CUDA_SUCCESS;
    }
    Stream* stream = AsStream(handle);
    if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *priority = stream->priority;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetCtx(CUstream handle, CUcontext* context) {
  GPUPOOL_BODY({
    if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (IsDefaultStream(handle)) {
      if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
      *context = reinterpret_cast<CUcontext>(CurrentContext());
      return CUDA_SUCCESS;
    }
    Stream* stream = AsStream(handle);
    if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *context = reinterpret_cast<CUcontext>(stream->context);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetDevice(CUstream handle, CUdevice* device) {
  GPUPOOL_BODY({
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int ordinal = 0;
    if (CUresult status = ResolveDevice(handle, &ordinal, nullptr); status != CUDA_SUCCESS) {
      return status;
    }
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetDevice_ptsz(CUstream handle, CUdevice* device) {
  return cuStreamGetDevice(handle, device);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetId(CUstream handle, unsigned long long* id) {
  GPUPOOL_BODY({
    if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (IsDefaultStream(handle)) {
      *id = 0;
      return CUDA_SUCCESS;
    }
    Stream* stream = AsStream(handle);
    if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *id = stream->id;
    return CUDA_SUCCESS;
  });
}

// --- Events --------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuEventCreate(CUevent* result, unsigned int flags) {
  GPUPOOL_BODY({
    if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
    auto event = std::make_unique<Event>();
    event->id = Runtime::Get().NewId();
    event->context = CurrentContext();
    event->flags = flags;
    dp::EventArgs args{event->id, flags, 0};
    if (CUresult status = Runtime::Get().Post(device, dp::kOpEventCreate, &args, sizeof(args));
        status != CUDA_SUCCESS) {
      return status;
    }
    {
      std::lock_guard<std::mutex> lock(Runtime::Get().mu());
      event->context->events.insert(event.get());
    }
    *result = reinterpret_cast<CUevent>(event.release());
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuEventDestroy_v2(CUevent handle) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Event* event = AsEvent(handle);
    if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    ForgetCapturedEvent(handle);
    {
      std::lock_guard<std::mutex> lock(Runtime::Get().mu());
      event->context->events.erase(event);
    }
    dp::EventArgs args{event->id, 0, 0};
    CUresult status = Runtime::Get().Post(event->context->device, dp::kOpEventDestroy, &args, sizeof(args));
    event->magic = 0;
    delete event;
    return status;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuEventDestroy(CUevent event) { return cuEventDestroy_v2(event); }

GPUPOOL_CUDA_API CUresult CUDAAPI cuEventRecord(CUevent event, CUstream stream) {
  GPUPOOL_BODY({ return RecordOrCapture(event, stream, 0); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuEventRecord_ptsz(CUevent event, CUstream stream) {
  return cuEventRecord(event, stream);
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuEventRecordWithFlags(CUevent event, CUstream stream, unsigned int flags) {
  GPUPOOL_BODY({
    if ((flags & ~CU_EVENT_RECORD_EXTERNAL) != 0) return CUDA_ERROR_INVALID_VALUE;
    return RecordOrCapture(event, stream, flags);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent event, CUstream stream, unsigned int flags) {
  return cuEventRecordWithFlags(event, stream, flags);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuEventQuery(CUevent event) {
  GPUPOOL_BODY({ return EventCall(event, dp::kOpEventQuery); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuEventSynchronize(CUevent event) {
  GPUPOOL_BODY({ return EventCall(event, dp::kOpEventSynchronize); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuEventElapsedTime_v2(float* milliseconds, CUevent start, CUevent end) {
  GPUPOOL_BODY({
    if (milliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Event* first = AsEvent(start);
    Event* second = AsEvent(end);
    if (first == nullptr || second == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (first->context->device != second->context->device) return CUDA_ERROR_INVALID_HANDLE;
    dp::EventElapsedArgs args{first->id, second->id};
    std::string out;
    CUresult status = Runtime::Get().Call(first->context->device, dp::kOpEventElapsed, &args, sizeof(args), nullptr, 0,
                                          nullptr, 0, &out);
    if (status != CUDA_SUCCESS) return status;
    dp::EventElapsedResult result{};
    if (out.size() != sizeof(result)) return CUDA_ERROR_UNKNOWN;
    std::memcpy(&result, out.data(), sizeof(result));
    *milliseconds = result.milliseconds;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuEventElapsedTime(float* milliseconds, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(milliseconds, start, end);
}

// --- Stream capture (graphs): graphs.cc, but the capture mode ----------------------------

namespace {

thread_local CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  GPUPOOL_BODY({
    if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        *mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    std::swap(*mode, capture_mode);
    return CUDA_SUCCESS;
  });
}

// --- Stream attributes ---------------------------------------------------------------------
// Scheduling hints (access policy window, synchronization policy, memory sync domains)
// are accepted and read back as the defaults: they tune a GPU's caches and scheduler,
// never results. The priority is the stream's own.

namespace {

// The attribute values set on `handle` (a stream, or the current context's default stream),
// or nullptr for a handle that is neither; under Runtime::mu().
std::map<int, CUstreamAttrValue>* AttributesOf(CUstream handle) {
  if (IsDefaultStream(handle)) {
    Context* context = CurrentContext();
    return context != nullptr ? &context->default_stream_attributes : nullptr;
  }
  Stream* stream = AsStream(handle);
  return stream != nullptr ? &stream->attributes : nullptr;
}

// What a GPU accepts for `attribute` (the access policy window within the device's
// limit, its hit ratio a fraction, its properties known; a known synchronisation
// policy); CUDA_ERROR_INVALID_VALUE naming nothing else, as a driver answers.
CUresult CheckStreamAttribute(CUstreamAttrID attribute, const CUstreamAttrValue& value) {
  switch (attribute) {
    case CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
      const CUaccessPolicyWindow& window = value.accessPolicyWindow;
      auto known = [](CUaccessProperty property) {
        return property == CU_ACCESS_PROPERTY_NORMAL || property == CU_ACCESS_PROPERTY_STREAMING ||
               property == CU_ACCESS_PROPERTY_PERSISTING;
      };
      if (window.num_bytes > kMaxAccessPolicyWindowBytes || !(window.hitRatio >= 0.0f) || window.hitRatio > 1.0f ||
          !known(window.hitProp) || !known(window.missProp)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      return CUDA_SUCCESS;
    }
    case CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY:
      return value.syncPolicy >= CU_SYNC_POLICY_AUTO && value.syncPolicy <= CU_SYNC_POLICY_BLOCKING_SYNC
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_VALUE;
    case CU_STREAM_ATTRIBUTE_PRIORITY:
    case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN:
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetAttribute(CUstream handle, CUstreamAttrID attribute,
                                                       CUstreamAttrValue* value) {
  GPUPOOL_BODY({
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    if (CUresult status = ResolveDevice(handle, &device, nullptr); status != CUDA_SUCCESS) {
      return status;
    }
    std::memset(value, 0, sizeof(*value));
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    if (attribute == CU_STREAM_ATTRIBUTE_PRIORITY) {
      Stream* stream = AsStream(handle);
      value->priority = stream ? stream->priority : 0;
      return CUDA_SUCCESS;
    }
    auto* attributes = AttributesOf(handle);
    if (attributes != nullptr) {
      if (auto found = attributes->find(attribute); found != attributes->end()) {
        *value = found->second;
        return CUDA_SUCCESS;
      }
    }
    if (attribute == CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY) {
      value->syncPolicy = CU_SYNC_POLICY_AUTO;
    } else if (attribute == CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW) {
      value->accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_NORMAL;
      value->accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_NORMAL;
    }
    return CUDA_SUCCESS;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetAttribute_ptsz(CUstream handle, CUstreamAttrID attribute,
                                                            CUstreamAttrValue* value) {
  return cuStreamGetAttribute(handle, attribute, value);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamSetAttribute(CUstream handle, CUstreamAttrID attribute,
                                                       const CUstreamAttrValue* value) {
  GPUPOOL_BODY({
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    if (CUresult status = ResolveDevice(handle, &device, nullptr); status != CUDA_SUCCESS) {
      return status;
    }
    if (CUresult status = CheckStreamAttribute(attribute, *value); status != CUDA_SUCCESS) {
      return status;
    }
    if (attribute == CU_STREAM_ATTRIBUTE_PRIORITY) return CUDA_SUCCESS;  // fixed at creation
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    if (auto* attributes = AttributesOf(handle); attributes != nullptr) {
      (*attributes)[attribute] = *value;
    }
    return CUDA_SUCCESS;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamSetAttribute_ptsz(CUstream handle, CUstreamAttrID attribute,
                                                            const CUstreamAttrValue* value) {
  return cuStreamSetAttribute(handle, attribute, value);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamCopyAttributes(CUstream destination, CUstream source) {
  GPUPOOL_BODY({
    int device = 0;
    if (CUresult status = ResolveDevice(source, &device, nullptr); status != CUDA_SUCCESS) {
      return status;
    }
    if (CUresult status = ResolveDevice(destination, &device, nullptr); status != CUDA_SUCCESS) {
      return status;
    }
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    auto* from = AttributesOf(source);
    auto* to = AttributesOf(destination);
    if (from != nullptr && to != nullptr && from != to) *to = *from;
    return CUDA_SUCCESS;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamCopyAttributes_ptsz(CUstream destination, CUstream source) {
  return cuStreamCopyAttributes(destination, source);
}

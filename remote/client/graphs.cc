// Stream capture and graphs: cuStreamBeginCapture ... cuStreamEndCapture, then
// cuGraphInstantiate and cuGraphLaunch, as CUDA graphs are used by most programs that
// use them (and by cudaStreamBeginCapture, cudaGraphLaunch).
//
// While a stream captures, the stream-ordered calls made on it (kernel launches,
// asynchronous copies and memsets, event records and waits, host functions, graph
// launches) are recorded instead of run: each as the same call with its arguments kept
// (a launch's parameters copied at capture time, as a kernel node keeps them; a copy's
// host pointer kept, so a launch of the graph reads the host memory of that moment, as
// a memcpy node does). A stream that waits for an event recorded in a capture joins it.
// The graph is the recorded calls in the order the program made them, which respects
// every dependency the capture expressed; cuGraphLaunch issues them again, in that
// order, on the launch stream. So a graph runs on one stream: branches that a GPU could
// run side by side run one after another, with the same results.
//
// Not here (their entry points answer CUDA_ERROR_NOT_SUPPORTED, naming themselves):
// building graphs node by node (cuGraphAdd*Node), reading or changing nodes, updating an
// instantiated graph, capture into an existing graph, device-side graph launch.
//
// Another stream-ordered call on a capturing stream that records nothing (a stream
// synchronisation or query, for instance) gets CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
// invalidates the capture, as on a GPU.
#include "remote/client/graphs.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "remote/client/api_common.h"

#undef cuStreamGetCaptureInfo

namespace gpupool::client {
namespace {

constexpr uint32_t kGraphMagic = 0x67726631;      // "grf1"
constexpr uint32_t kGraphExecMagic = 0x67657831;  // "gex1"

struct Graph {
  uint32_t magic = kGraphMagic;
  std::vector<CapturedWork> work;
};

struct GraphExec {
  uint32_t magic = kGraphExecMagic;
  std::vector<CapturedWork> work;
};

struct Capture {
  uint64_t id = 0;
  CUstream origin = nullptr;
  std::vector<CapturedWork> work;
  std::set<CUstream> streams;                   // the origin and the streams that joined
  std::set<std::pair<int, uint64_t>> on_agent;  // the same, as (device, agent stream id)
  std::set<CUevent> events;                     // recorded in this capture
  bool invalidated = false;
};

std::mutex mu;
std::atomic<int> captures{0};
std::map<CUstream, std::shared_ptr<Capture>> by_stream;
std::map<CUevent, std::shared_ptr<Capture>> by_event;
uint64_t next_capture_id = 1;

Graph* AsGraph(CUgraph handle) {
  auto* graph = reinterpret_cast<Graph*>(handle);
  return graph != nullptr && graph->magic == kGraphMagic ? graph : nullptr;
}

GraphExec* AsGraphExec(CUgraphExec handle) {
  auto* exec = reinterpret_cast<GraphExec*>(handle);
  return exec != nullptr && exec->magic == kGraphExecMagic ? exec : nullptr;
}

std::shared_ptr<Capture> CaptureOf(CUstream stream) {
  auto found = by_stream.find(stream);
  return found == by_stream.end() ? nullptr : found->second;
}

// Adds `stream` (already checked) to `capture`.
void Join(const std::shared_ptr<Capture>& capture, CUstream stream, int device, uint64_t id) {
  capture->streams.insert(stream);
  capture->on_agent.insert({device, id});
  by_stream[stream] = capture;
}

// A graph or an instantiated graph (nullptr: not a valid handle).
template <typename T>
CUresult Destroy(T* object) {
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  object->magic = 0;  // a stale handle whose memory is not reused yet is refused
  delete object;
  return CUDA_SUCCESS;
}

CUresult Instantiate(CUgraphExec* result, CUgraph handle, cuuint64_t flags) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Graph* graph = AsGraph(handle);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) {
    return static_cast<CUresult>(
        ReportUnsupported("cuGraphInstantiate(device launch)", "graphs launched from kernels"));
  }
  constexpr cuuint64_t kKnown = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  auto* exec = new GraphExec;
  exec->work = graph->work;
  *result = reinterpret_cast<CUgraphExec>(exec);
  return CUDA_SUCCESS;
}

}  // namespace

bool AnyCapture() { return captures.load(std::memory_order_acquire) != 0; }

bool CaptureWork(CUstream stream, CapturedWork work, CUresult* status) {
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Capture> capture = CaptureOf(stream);
  if (capture == nullptr) return false;
  if (capture->invalidated) {
    *status = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else {
    capture->work.push_back(std::move(work));
    *status = CUDA_SUCCESS;
  }
  return true;
}

bool InvalidateCapture(CUstream stream) {
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Capture> capture = CaptureOf(stream);
  if (capture == nullptr) return false;
  capture->invalidated = true;
  return true;
}

CUresult RefuseOnCapturingStream(int device, uint32_t op, const void* args, size_t args_len) {
  if (!AnyCapture()) return CUDA_SUCCESS;
  uint64_t stream = 0;
  if (!RequestStream(op, args, args_len, &stream)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [handle, capture] : by_stream) {
    if (capture->on_agent.count({device, stream})) {
      capture->invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace gpupool::client

using namespace gpupool::client;

// --- Capture -------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream stream,
                                                          CUstreamCaptureMode mode) {
  GPUPOOL_BODY({
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    int device = 0;
    uint64_t id = 0;
    if (CUresult status = ResolveDevice(stream, &device, &id); status != CUDA_SUCCESS) {
      return status;
    }
    // The default streams synchronise with every other stream: a GPU refuses them too.
    if (IsDefaultStream(stream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    std::lock_guard<std::mutex> lock(mu);
    if (CaptureOf(stream) != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
    auto capture = std::make_shared<Capture>();
    capture->id = next_capture_id++;
    capture->origin = stream;
    Join(capture, stream, device, id);
    captures.fetch_add(1, std::memory_order_release);
    return CUDA_SUCCESS;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream stream,
                                                               CUstreamCaptureMode mode) {
  return cuStreamBeginCapture_v2(stream, mode);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamEndCapture(CUstream stream, CUgraph* result) {
  GPUPOOL_BODY({
    if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<Capture> capture = CaptureOf(stream);
    if (capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
    if (capture->origin != stream) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    for (CUstream joined : capture->streams) by_stream.erase(joined);
    for (CUevent event : capture->events) {
      auto found = by_event.find(event);
      if (found != by_event.end() && found->second == capture) by_event.erase(found);
    }
    captures.fetch_sub(1, std::memory_order_release);
    *result = nullptr;
    if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    auto* graph = new Graph;
    graph->work = std::move(capture->work);
    *result = reinterpret_cast<CUgraph>(graph);
    return CUDA_SUCCESS;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream stream, CUgraph* result) {
  return cuStreamEndCapture(stream, result);
}

namespace {

CUresult CaptureStatus(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult result = ResolveDevice(stream, &device, nullptr); result != CUDA_SUCCESS) {
    return result;
  }
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Capture> capture = CaptureOf(stream);
  *status = capture == nullptr     ? CU_STREAM_CAPTURE_STATUS_NONE
            : capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                   : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id != nullptr) *id = capture == nullptr ? 0 : capture->id;
  return CUDA_SUCCESS;
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamIsCapturing(CUstream stream,
                                                      CUstreamCaptureStatus* status) {
  GPUPOOL_BODY({ return CaptureStatus(stream, status, nullptr); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream stream,
                                                           CUstreamCaptureStatus* status) {
  return cuStreamIsCapturing(stream, status);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream stream,
                                                         CUstreamCaptureStatus* status,
                                                         cuuint64_t* id) {
  GPUPOOL_BODY({ return CaptureStatus(stream, status, id); });
}

// The graph being built and its dependency frontier are not available while capturing
// (the graph exists once the capture ends), so they are given as none.
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetCaptureInfo_v2(
    CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
    const CUgraphNode** dependencies, size_t* dependency_count) {
  GPUPOOL_BODY({
    if (graph) *graph = nullptr;
    if (dependencies) *dependencies = nullptr;
    if (dependency_count) *dependency_count = 0;
    return CaptureStatus(stream, status, id);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3(
    CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
    const CUgraphNode** dependencies, const CUgraphEdgeData** edges, size_t* dependency_count) {
  GPUPOOL_BODY({
    if (edges) *edges = nullptr;
    return cuStreamGetCaptureInfo_v2(stream, status, id, graph, dependencies, dependency_count);
  });
}

namespace gpupool::client {

// cuEventRecord on a capturing stream: recorded, and the event remembered so that a
// stream waiting for it joins the capture. Returns false when `stream` is not capturing.
bool CaptureEventRecord(CUevent event, CUstream stream, CapturedWork work, CUresult* status) {
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Capture> capture = CaptureOf(stream);
  if (capture == nullptr) return false;
  if (capture->invalidated) {
    *status = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  capture->work.push_back(std::move(work));
  capture->events.insert(event);
  by_event[event] = capture;
  *status = CUDA_SUCCESS;
  return true;
}

// cuStreamWaitEvent: a stream waiting for an event recorded in a capture joins that
// capture (nothing to record: the order of the recorded calls already has the wait); a
// capturing stream waiting for any other event records the wait. Returns false when
// neither the stream nor the event takes part in a capture.
bool CaptureStreamWait(CUstream stream, CUevent event, CapturedWork work, CUresult* status) {
  int device = 0;
  uint64_t id = 0;
  if (ResolveDevice(stream, &device, &id) != CUDA_SUCCESS) return false;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Capture> capture = CaptureOf(stream);
  auto recorded = by_event.find(event);
  std::shared_ptr<Capture> source = recorded == by_event.end() ? nullptr : recorded->second;
  if (capture == nullptr && source == nullptr) return false;
  *status = CUDA_SUCCESS;
  if (source != nullptr && capture == nullptr) {
    if (IsDefaultStream(stream)) {
      source->invalidated = true;
      *status = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      return true;
    }
    Join(source, stream, device, id);
  } else if (source != nullptr && source != capture) {
    *status = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  } else if (source == nullptr) {
    if (capture->invalidated) {
      *status = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
      capture->work.push_back(std::move(work));
    }
  }
  return true;
}

}  // namespace gpupool::client

// --- Graphs --------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                              unsigned long long flags) {
  GPUPOOL_BODY({ return Instantiate(exec, graph, flags); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph,
                                                        CUgraphNode* error_node, char* log,
                                                        size_t log_size) {
  GPUPOOL_BODY({
    if (error_node) *error_node = nullptr;
    if (log != nullptr && log_size > 0) log[0] = '\0';
    return Instantiate(exec, graph, 0);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphInstantiateWithParams(
    CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  GPUPOOL_BODY({
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    params->hErrNode_out = nullptr;
    CUresult status = Instantiate(exec, graph, params->flags);
    params->result_out = status == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS
                                                : CUDA_GRAPH_INSTANTIATE_ERROR;
    return status;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(
    CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return cuGraphInstantiateWithParams(exec, graph, params);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphLaunch(CUgraphExec handle, CUstream stream) {
  GPUPOOL_BODY({
    GraphExec* exec = AsGraphExec(handle);
    if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // A graph launched on a capturing stream becomes part of that capture.
    GPUPOOL_CAPTURE(stream, [handle](CUstream s) { return cuGraphLaunch(handle, s); });
    for (const CapturedWork& work : exec->work) {
      if (CUresult status = work(stream); status != CUDA_SUCCESS) return status;
    }
    return CUDA_SUCCESS;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return cuGraphLaunch(exec, stream);
}

// Nothing to upload ahead: the work goes to the agent when the graph is launched.
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphUpload(CUgraphExec handle, CUstream stream) {
  GPUPOOL_BODY({
    if (AsGraphExec(handle) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    return ResolveDevice(stream, &device, nullptr);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec exec, CUstream stream) {
  return cuGraphUpload(exec, stream);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec handle) {
  GPUPOOL_BODY({ return Destroy(AsGraphExec(handle)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphDestroy(CUgraph handle) {
  GPUPOOL_BODY({ return Destroy(AsGraph(handle)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphClone(CUgraph* clone, CUgraph handle) {
  GPUPOOL_BODY({
    Graph* graph = AsGraph(handle);
    if (clone == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto* copy = new Graph;
    copy->work = graph->work;
    *clone = reinterpret_cast<CUgraph>(copy);
    return CUDA_SUCCESS;
  });
}

// A node per recorded call; the handles name them for counting and comparing only (the
// node calls that would read them answer CUDA_ERROR_NOT_SUPPORTED).
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphGetNodes(CUgraph handle, CUgraphNode* nodes,
                                                  size_t* count) {
  GPUPOOL_BODY({
    Graph* graph = AsGraph(handle);
    if (count == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    size_t total = graph->work.size();
    if (nodes != nullptr) {
      for (size_t i = 0; i < *count; ++i) {
        nodes[i] = i < total ? reinterpret_cast<CUgraphNode>(&graph->work[i]) : nullptr;
      }
      *count = std::min(*count, total);
    } else {
      *count = total;
    }
    return CUDA_SUCCESS;
  });
}

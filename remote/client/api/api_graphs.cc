// Driver API: stream capture and graphs, their instantiation and launch (what a capture
// records and how a launch runs a graph: graph/graphs.cc).
#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/client/graph/capture.h"
#include "remote/client/graph/graph_model.h"
#include "remote/client/graph/graphs.h"
#include "remote/client/ops/memory.h"
#include "remote/client/ops/stream.h"

#undef cuStreamGetCaptureInfo
#undef cuStreamUpdateCaptureDependencies
#undef cuStreamBeginCaptureToGraph

using namespace gpupool::client;           // NOLINT
using namespace gpupool::client::capture;  // NOLINT

// --- Capture -------------------------------------------------------------------------------

namespace {

// Starts a capture on `stream` into `into` (the program's graph, after `deps`) or, when it
// is nullptr, into a graph of the capture's own.
CUresult BeginCapture(CUstream stream, CUstreamCaptureMode mode, CUgraph into, const CUgraphNode* deps,
                      size_t dep_count) {
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
  auto capture = std::make_shared<Capture>();
  if (into == nullptr) {
    capture->owned = std::make_unique<Graph>();
    capture->graph = capture->owned.get();
  } else {
    capture->graph = AsGraph(into);
    if (capture->graph == nullptr || !FrontierOf(capture->graph, deps, dep_count, &capture->frontier)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  if (CaptureOf(stream) != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  capture->id = next_capture_id++;
  capture->origin = stream;
  Join(capture, stream, device, id);
  captures.fetch_add(1, std::memory_order_release);
  return CUDA_SUCCESS;
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  GPUPOOL_BODY({ return BeginCapture(stream, mode, nullptr, nullptr, 0); });
}

// Captures into a graph the program has, after `deps`: a conditional node's body, say.
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode* deps,
                                                              const CUgraphEdgeData* edges, size_t dep_count,
                                                              CUstreamCaptureMode mode) {
  GPUPOOL_BODY({
    if (CUresult status = graph::CheckEdges(edges, dep_count); status != CUDA_SUCCESS) {
      return status;
    }
    if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return BeginCapture(stream, mode, graph, deps, dep_count);
  });
}

// `result` may be NULL for a capture into the program's graph (the graph is the program's
// already, as graphConditionalNodes-style programs end a conditional body's capture); a
// capture into a graph of its own needs somewhere to put it.
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamEndCapture(CUstream stream, CUgraph* result) {
  GPUPOOL_BODY({
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<Capture> capture = CaptureOf(stream);
    if (result == nullptr && (capture == nullptr || capture->owned != nullptr)) return CUDA_ERROR_INVALID_VALUE;
    if (capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
    if (capture->origin != stream) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    for (CUstream joined : capture->streams) by_stream.erase(joined);
    for (CUevent event : capture->events) {
      auto found = by_event.find(event);
      if (found != by_event.end() && found->second == capture) by_event.erase(found);
    }
    captures.fetch_sub(1, std::memory_order_release);
    if (result != nullptr) *result = nullptr;
    if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    CUgraph graph = reinterpret_cast<CUgraph>(capture->owned != nullptr ? capture->owned.release() : capture->graph);
    if (result != nullptr) *result = graph;
    return CUDA_SUCCESS;
  });
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

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  GPUPOOL_BODY({ return CaptureStatus(stream, status, nullptr); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status,
                                                         cuuint64_t* id) {
  GPUPOOL_BODY({ return CaptureStatus(stream, status, id); });
}

// While `stream` captures: the graph being built and the nodes its next captured call
// will run after (valid until the next call on the stream, as CUDA says).
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream stream, CUstreamCaptureStatus* status,
                                                            cuuint64_t* id, CUgraph* graph,
                                                            const CUgraphNode** dependencies,
                                                            size_t* dependency_count) {
  GPUPOOL_BODY({
    if (graph) *graph = nullptr;
    if (dependencies) *dependencies = nullptr;
    if (dependency_count) *dependency_count = 0;
    if (CUresult result = CaptureStatus(stream, status, id); result != CUDA_SUCCESS) {
      return result;
    }
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<Capture> capture = CaptureOf(stream);
    if (capture == nullptr || capture->invalidated) return CUDA_SUCCESS;
    if (graph) *graph = reinterpret_cast<CUgraph>(capture->graph);
    if (dependencies) *dependencies = capture->frontier.empty() ? nullptr : capture->frontier.data();
    if (dependency_count) *dependency_count = capture->frontier.size();
    return CUDA_SUCCESS;
  });
}

// Sets (CU_STREAM_SET_CAPTURE_DEPENDENCIES) or adds to (CU_STREAM_ADD_CAPTURE_DEPENDENCIES)
// the nodes that the next call captured on `stream` runs after: nodes of the capture's
// graph, such as one the program added to it while it captures.
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream stream, CUgraphNode* nodes,
                                                                       const CUgraphEdgeData* edges, size_t count,
                                                                       unsigned int flags) {
  GPUPOOL_BODY({
    if (CUresult status = graph::CheckEdges(edges, count); status != CUDA_SUCCESS) return status;
    if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    int device = 0;
    if (CUresult status = ResolveDevice(stream, &device, nullptr); status != CUDA_SUCCESS) {
      return status;
    }
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<Capture> capture = CaptureOf(stream);
    if (capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
    if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    std::vector<CUgraphNode> frontier;
    if (flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES) frontier = capture->frontier;
    if (!FrontierOf(capture->graph, nodes, count, &frontier)) return CUDA_ERROR_INVALID_VALUE;
    capture->frontier = std::move(frontier);
    return CUDA_SUCCESS;
  });
}

// --- Graphs --------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                              unsigned long long flags) {
  GPUPOOL_BODY({ return Instantiate(exec, graph, flags); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node,
                                                        char* log, size_t log_size) {
  GPUPOOL_BODY({
    if (error_node) *error_node = nullptr;
    if (log != nullptr && log_size > 0) log[0] = '\0';
    return Instantiate(exec, graph, 0);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                               CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  GPUPOOL_BODY({
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    params->hErrNode_out = nullptr;
    CUresult status = Instantiate(exec, graph, params->flags);
    params->result_out = status == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return status;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphLaunch(CUgraphExec handle, CUstream stream) {
  GPUPOOL_BODY({
    GraphExec* exec = AsGraphExec(handle);
    if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult refused = RefuseGraphLaunchInCapture(stream); refused != CUDA_SUCCESS) {
      return refused;
    }
    // Allocations an earlier launch left in use: refused, or freed first (auto-free).
    for (const Node& node : exec->nodes) {
      if (node.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && graph::GraphMemoryInUse(node.memory->dptr) &&
          !(exec->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)) {
        LogError(
            "cuGraphLaunch: an allocation of the graph's last launch is not freed yet "
            "(instantiate with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH to have "
            "launches free it)");
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    for (const Node& node : exec->nodes) {
      if (node.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        graph::SetGraphMemoryInUse(node.memory->dptr, false);
      }
    }
    // Conditions with a default value start each launch from it.
    for (const auto& condition : exec->default_conditions) {
      if (CUresult status = ops::Memset(condition->slot, condition->default_value, 4, 1, stream);
          status != CUDA_SUCCESS) {
        return status;
      }
    }
    for (const Node& node : exec->nodes) {
      if (CUresult status = graph::RunNode(node, stream); status != CUDA_SUCCESS) return status;
    }
    // The launch holds the user objects of its graph until it completes: destroying the
    // instantiated graph meanwhile does not run their destructors early.
    auto held = std::make_unique<graph::UserObjectRefs>(exec->user_objects);
    for (const Node& node : exec->nodes) {
      if (node.child != nullptr) graph::CollectUserObjects(*node.child, held.get());
    }
    if (!held->empty()) {
      CUresult status = ops::LaunchHostFunction(
          stream, [](void* refs) { delete static_cast<graph::UserObjectRefs*>(refs); }, held.get());
      if (status != CUDA_SUCCESS) return status;
      held.release();  // the host function owns it now
    }
    return CUDA_SUCCESS;
  });
}

// Nothing to upload ahead: the work goes to the agent when the graph is launched.
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphUpload(CUgraphExec handle, CUstream stream) {
  GPUPOOL_BODY({
    if (AsGraphExec(handle) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    return ResolveDevice(stream, &device, nullptr);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec handle) {
  GPUPOOL_BODY({
    GraphExec* exec = AsGraphExec(handle);
    if (exec != nullptr && exec->instantiated != nullptr) *exec->instantiated = false;
    return Destroy(exec);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphDestroy(CUgraph handle) {
  GPUPOOL_BODY({
    Graph* graph = AsGraph(handle);
    // A conditional node's body is the node's: it goes with the node's graph.
    if (graph != nullptr && graph->conditional_body) return CUDA_ERROR_INVALID_VALUE;
    return Destroy(graph);  // ~Graph: stale handles to it and its nodes are refused
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphClone(CUgraph* clone, CUgraph handle) {
  GPUPOOL_BODY({
    Graph* graph = AsGraph(handle);
    if (clone == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // As on a GPU (driver 580 answers CUDA_ERROR_NOT_SUPPORTED for both).
    if (graph::HasMemoryNodes(*graph) || graph::HasConditionalNodes(*graph)) {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    *clone = reinterpret_cast<CUgraph>(graph::Clone(*graph).release());
    return CUDA_SUCCESS;
  });
}

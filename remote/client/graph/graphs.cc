// Stream capture and graphs: cuStreamBeginCapture ... cuStreamEndCapture, then
// cuGraphInstantiate and cuGraphLaunch, as CUDA graphs are used by most programs that
// use them (and by cudaStreamBeginCapture, cudaGraphLaunch). Graphs built node by node
// are in graph_nodes.cc; the objects both make are in graph_model.h.
//
// While a stream captures, the stream-ordered calls made on it (kernel launches,
// asynchronous copies and memsets, event records and waits, host functions, graph
// launches) are recorded instead of run: each as a node that makes the same call with its
// arguments kept (a launch's parameters copied at capture time, as a kernel node keeps
// them; a copy's host pointer kept, so a launch of the graph reads the host memory of that
// moment, as a memcpy node does). A stream that waits for an event recorded in a capture
// joins it. The captured graph is a chain of its nodes in the order the program made the
// calls (all the streams of a capture share one frontier), which respects every
// dependency the capture expressed.
//
// cuMemAllocAsync on a capturing stream records a memory allocation node (its graph
// memory, graph_memory.cc, is allocated at the call, so the address it returns holds for
// every launch); cuMemFreeAsync of graph memory records a free node, and of any other
// memory is refused (CUDA_ERROR_INVALID_VALUE, the capture invalidated), as on a GPU. A
// launch of an instantiated graph whose allocations an earlier launch left in use fails
// with CUDA_ERROR_INVALID_VALUE unless it was instantiated with
// CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, which frees them first. A graph with
// memory nodes has one instantiated graph at a time and cannot be cloned.
//
// A capture may go into a graph the program has (cuStreamBeginCaptureToGraph), and the
// program may add nodes to the graph being captured and make the next captured call run
// after them (cuStreamGetCaptureInfo, cuStreamUpdateCaptureDependencies), as programs do
// to put a conditional node (graph_conditionals.cc) in a captured graph.
//
// Not here (its entry points answer CUDA_ERROR_NOT_SUPPORTED, naming themselves):
// device-side graph launch.
//
// Another stream-ordered call on a capturing stream that records nothing (a stream
// synchronisation or query, for instance) gets CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
// invalidates the capture, as on a GPU.
#include "remote/client/graph/graphs.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/client/graph/graph_model.h"

#undef cuStreamGetCaptureInfo
#undef cuStreamUpdateCaptureDependencies
#undef cuStreamBeginCaptureToGraph

namespace gpupool::client {
namespace {

using graph::AsGraph;
using graph::AsGraphExec;
using graph::Graph;
using graph::GraphExec;
using graph::Node;

struct Capture {
  uint64_t id = 0;
  CUstream origin = nullptr;
  // The graph the captured calls go into: one of the capture's own, given to the program
  // when the capture ends, or the program's (cuStreamBeginCaptureToGraph).
  std::unique_ptr<Graph> owned;
  Graph* graph = nullptr;
  // The nodes the next captured call runs after (cuStreamGetCaptureInfo's dependencies;
  // cuStreamUpdateCaptureDependencies changes them).
  std::vector<CUgraphNode> frontier;
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

std::shared_ptr<Capture> CaptureOf(CUstream stream) {
  auto found = by_stream.find(stream);
  return found == by_stream.end() ? nullptr : found->second;
}

// Adds a captured call to the capture's graph, after the frontier, and makes it the
// frontier: so the calls form a chain in the order they were made, which respects every
// dependency the capture expressed.
void Append(Capture& capture, Node node) {
  auto added = std::make_unique<Node>(std::move(node));
  added->owner = capture.graph;
  for (CUgraphNode dep : capture.frontier) {
    Node* before = graph::AsNode(dep);
    if (before != nullptr && before->owner == capture.graph) added->deps.push_back(before);
  }
  capture.frontier.assign(1, reinterpret_cast<CUgraphNode>(added.get()));
  capture.graph->nodes.push_back(std::move(added));
}

// Checks that `nodes` are nodes of `graph` (none repeated) for a capture's frontier.
bool FrontierOf(const Graph* graph, const CUgraphNode* nodes, size_t count,
                std::vector<CUgraphNode>* frontier) {
  if (count > 0 && nodes == nullptr) return false;
  for (size_t i = 0; i < count; ++i) {
    Node* node = graph::AsNode(nodes[i]);
    if (node == nullptr || node->owner != graph ||
        std::find(frontier->begin(), frontier->end(), nodes[i]) != frontier->end()) {
      return false;
    }
    frontier->push_back(nodes[i]);
  }
  return true;
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
  std::vector<const Node*> order;
  if (!graph::LaunchOrder(*graph, &order)) {
    LogError("cuGraphInstantiate: the graph's dependencies form a cycle");
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A graph with memory or conditional nodes has one instantiated graph at a time (a
  // driver answers CUDA_ERROR_NOT_SUPPORTED to a second one: driver 580 on an H100).
  const bool memory_nodes = graph::HasMemoryNodes(*graph);
  const bool conditional_nodes = graph::HasConditionalNodes(*graph);
  if ((memory_nodes || conditional_nodes) && *graph->instantiated) {
    LogError(
        "cuGraphInstantiate: a graph with %s nodes has one instantiated graph at a time, "
        "and this one has one",
        memory_nodes ? "memory" : "conditional");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto exec = std::make_unique<GraphExec>();
  exec->flags = flags;
  if (memory_nodes || conditional_nodes) {
    *graph->instantiated = true;
    exec->instantiated = graph->instantiated;
  }
  for (const Node* node : order) {
    exec->index[node] = exec->nodes.size();
    exec->nodes.push_back(graph::ExecCopy(*node));
  }
  exec->shape = graph::ShapeOf(order);
  exec->user_objects = graph->user_objects;
  graph::CollectDefaultConditions(*graph, &exec->default_conditions);
  *result = reinterpret_cast<CUgraphExec>(exec.release());
  return CUDA_SUCCESS;
}

// Under mu: the capture of `stream` (nullptr: it does not capture); *status is
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when the capture takes no more calls, else
// CUDA_SUCCESS.
std::shared_ptr<Capture> OpenCaptureOf(CUstream stream, CUresult* status) {
  std::shared_ptr<Capture> capture = CaptureOf(stream);
  *status = capture != nullptr && capture->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                                                       : CUDA_SUCCESS;
  return capture;
}

// Appends `node` to the capture of `stream`; false when it does not capture.
bool AddCaptured(CUstream stream, Node node, CUresult* status) {
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Capture> capture = OpenCaptureOf(stream, status);
  if (capture == nullptr) return false;
  if (*status == CUDA_SUCCESS) Append(*capture, std::move(node));
  return true;
}

}  // namespace

bool AnyCapture() { return captures.load(std::memory_order_acquire) != 0; }

bool CaptureWork(CUstream stream, CUgraphNodeType type, CapturedWork work, CUresult* status) {
  Node node;
  node.type = type;
  node.work = std::move(work);
  return AddCaptured(stream, std::move(node), status);
}

bool CaptureKernel(CUstream stream, CUfunction function, const unsigned grid[3],
                   const unsigned block[3], unsigned shared_mem, std::vector<char> params,
                   bool cooperative, CUresult* status) {
  Node node;
  node.type = CU_GRAPH_NODE_TYPE_KERNEL;
  if (cooperative) node.attributes[CU_LAUNCH_ATTRIBUTE_COOPERATIVE].cooperative = 1;
  node.function = function;
  std::copy(grid, grid + 3, node.grid);
  std::copy(block, block + 3, node.block);
  node.shared_mem = shared_mem;
  node.params = std::move(params);
  return AddCaptured(stream, std::move(node), status);
}

bool CaptureGraphAlloc(CUstream stream, int device, size_t bytes, CUdeviceptr* dptr,
                       CUresult* status) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (OpenCaptureOf(stream, status) == nullptr) return false;
    if (*status != CUDA_SUCCESS) return true;
  }
  // Allocated outside the lock (a request to the GPU), in the stream's context when it is
  // the device's.
  Node node;
  node.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  Stream* s = AsStream(stream);
  if (s != nullptr) PushContext(s->context);
  *status = graph::NewGraphMemory(device, bytes, &node.memory);
  if (s != nullptr) PopContext();
  if (*status != CUDA_SUCCESS) {
    InvalidateCapture(stream);
    return true;
  }
  node.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  node.alloc.poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  node.alloc.bytesize = bytes;
  node.alloc.dptr = node.memory->dptr;
  CUdeviceptr address = node.memory->dptr;
  if (!AddCaptured(stream, std::move(node), status)) return false;  // the capture ended
  if (*status == CUDA_SUCCESS) *dptr = address;
  return true;
}

bool CaptureGraphFree(CUstream stream, CUdeviceptr dptr, CUresult* status) {
  if (!AnyCapture()) return false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (CaptureOf(stream) == nullptr) return false;
  }
  if (!graph::IsGraphMemory(dptr)) {
    LogError(
        "cuMemFreeAsync on a capturing stream: %#llx is not graph memory (only memory "
        "from cuMemAllocAsync in a capture or an allocation node can be freed in a graph)",
        static_cast<unsigned long long>(dptr));
    InvalidateCapture(stream);
    *status = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  Node node;
  node.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  node.alloc.dptr = dptr;
  return AddCaptured(stream, std::move(node), status);
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

CUresult RefuseGraphLaunchInCapture(CUstream stream) {
  if (!AnyCapture()) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Capture> capture = CaptureOf(stream);
  if (capture == nullptr) return CUDA_SUCCESS;
  capture->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

}  // namespace gpupool::client

using namespace gpupool::client;

// --- Capture -------------------------------------------------------------------------------

namespace {

// Starts a capture on `stream` into `into` (the program's graph, after `deps`) or, when it
// is nullptr, into a graph of the capture's own.
CUresult BeginCapture(CUstream stream, CUstreamCaptureMode mode, CUgraph into,
                      const CUgraphNode* deps, size_t dep_count) {
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
    if (capture->graph == nullptr ||
        !FrontierOf(capture->graph, deps, dep_count, &capture->frontier)) {
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

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream stream,
                                                          CUstreamCaptureMode mode) {
  GPUPOOL_BODY({ return BeginCapture(stream, mode, nullptr, nullptr, 0); });
}

// Captures into a graph the program has, after `deps`: a conditional node's body, say.
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph,
                                                              const CUgraphNode* deps,
                                                              const CUgraphEdgeData* edges,
                                                              size_t dep_count,
                                                              CUstreamCaptureMode mode) {
  GPUPOOL_BODY({
    if (CUresult status = graph::CheckEdges(edges, dep_count); status != CUDA_SUCCESS) {
      return status;
    }
    if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return BeginCapture(stream, mode, graph, deps, dep_count);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph,
                                                                   const CUgraphNode* deps,
                                                                   const CUgraphEdgeData* edges,
                                                                   size_t dep_count,
                                                                   CUstreamCaptureMode mode) {
  return cuStreamBeginCaptureToGraph(stream, graph, deps, edges, dep_count, mode);
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
    *result = reinterpret_cast<CUgraph>(capture->owned != nullptr ? capture->owned.release()
                                                                  : capture->graph);
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

// While `stream` captures: the graph being built and the nodes its next captured call
// will run after (valid until the next call on the stream, as CUDA says).
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetCaptureInfo_v2(
    CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
    const CUgraphNode** dependencies, size_t* dependency_count) {
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
    if (dependencies)
      *dependencies = capture->frontier.empty() ? nullptr : capture->frontier.data();
    if (dependency_count) *dependency_count = capture->frontier.size();
    return CUDA_SUCCESS;
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

// Sets (CU_STREAM_SET_CAPTURE_DEPENDENCIES) or adds to (CU_STREAM_ADD_CAPTURE_DEPENDENCIES)
// the nodes that the next call captured on `stream` runs after: nodes of the capture's
// graph, such as one the program added to it while it captures.
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream stream,
                                                                       CUgraphNode* nodes,
                                                                       const CUgraphEdgeData* edges,
                                                                       size_t count,
                                                                       unsigned int flags) {
  GPUPOOL_BODY({
    if (CUresult status = graph::CheckEdges(edges, count); status != CUDA_SUCCESS) return status;
    if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES &&
        flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES) {
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
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream stream,
                                                                    CUgraphNode* nodes,
                                                                    size_t count,
                                                                    unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(stream, nodes, nullptr, count, flags);
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(CUstream stream,
                                                                         CUgraphNode* nodes,
                                                                         size_t count,
                                                                         unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(stream, nodes, nullptr, count, flags);
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2_ptsz(
    CUstream stream, CUgraphNode* nodes, const CUgraphEdgeData* edges, size_t count,
    unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(stream, nodes, edges, count, flags);
}

namespace gpupool::client {

// cuEventRecord on a capturing stream: recorded as a node when external, and the event
// remembered so that a stream waiting for it joins the capture. Returns false when
// `stream` is not capturing.
bool CaptureEventRecord(CUevent event, CUstream stream, bool external, CapturedWork work,
                        CUresult* status) {
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Capture> capture = OpenCaptureOf(stream, status);
  if (capture == nullptr) return false;
  if (*status != CUDA_SUCCESS) return true;
  if (external) {
    Node node;
    node.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    node.event = event;
    node.work = std::move(work);
    Append(*capture, std::move(node));
  }
  capture->events.insert(event);
  by_event[event] = capture;
  *status = CUDA_SUCCESS;
  return true;
}

// cuStreamWaitEvent: a stream waiting for an event recorded in a capture joins that
// capture (nothing to record: the order of the recorded calls already has the wait); a
// capturing stream records a wait only when it is external (graphs.h). Returns false when
// neither the stream nor the event takes part in a capture.
bool CaptureStreamWait(CUstream stream, CUevent event, bool external, CapturedWork work,
                       CUresult* status) {
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
  } else if (source == nullptr && !external) {
    // An event from outside the capture: a driver refuses to order the capture after it
    // unless the wait is external (CUDA_ERROR_STREAM_CAPTURE_ISOLATION, and the capture is
    // invalidated: driver 580 on an H100).
    capture->invalidated = true;
    *status = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  } else if (external) {
    if (capture->invalidated) {
      *status = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
      Node node;
      node.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
      node.event = event;
      node.work = std::move(work);
      Append(*capture, std::move(node));
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
      if (CUresult status = cuMemsetD32Async(condition->slot, condition->default_value, 1, stream);
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
      CUresult status = cuLaunchHostFunc(
          stream, [](void* refs) { delete static_cast<graph::UserObjectRefs*>(refs); }, held.get());
      if (status != CUDA_SUCCESS) return status;
      held.release();  // the host function owns it now
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

// --- The graph objects (graph_model.h) -----------------------------------------------------

namespace gpupool::client::graph {

Graph::~Graph() {
  for (auto& node : nodes) node->magic = 0;
  magic = 0;
}

Graph* AsGraph(CUgraph handle) {
  auto* graph = reinterpret_cast<Graph*>(handle);
  return graph != nullptr && graph->magic == kGraphMagic ? graph : nullptr;
}

GraphExec* AsGraphExec(CUgraphExec handle) {
  auto* exec = reinterpret_cast<GraphExec*>(handle);
  return exec != nullptr && exec->magic == kGraphExecMagic ? exec : nullptr;
}

Node* AsNode(CUgraphNode handle) {
  auto* node = reinterpret_cast<Node*>(handle);
  return node != nullptr && node->magic == kNodeMagic && node->owner != nullptr ? node : nullptr;
}

std::unique_ptr<Graph> Clone(const Graph& graph) {
  auto copy = std::make_unique<Graph>();
  for (const auto& node : graph.nodes) {
    auto twin = std::make_unique<Node>(*node);
    twin->owner = copy.get();
    twin->param_pointers.clear();
    if (node->child != nullptr) twin->child = Clone(*node->child);
    CopyBodies(twin.get());
    copy->clone_of[node.get()] = twin.get();
    copy->nodes.push_back(std::move(twin));
  }
  for (auto& twin : copy->nodes) {
    for (Node*& dep : twin->deps) dep = copy->clone_of.at(dep);
  }
  copy->user_objects = graph.user_objects;  // a clone holds references of its own
  copy->conditions = graph.conditions;
  return copy;
}

bool LaunchOrder(const Graph& graph, std::vector<const Node*>* order) {
  // Kahn's algorithm, taking the earliest-created ready node each time.
  std::map<const Node*, size_t> position;
  for (size_t i = 0; i < graph.nodes.size(); ++i) position[graph.nodes[i].get()] = i;
  std::vector<size_t> waiting(graph.nodes.size());
  std::vector<std::vector<size_t>> dependents(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    waiting[i] = graph.nodes[i]->deps.size();
    for (const Node* dep : graph.nodes[i]->deps) dependents[position.at(dep)].push_back(i);
  }
  std::set<size_t> ready;
  for (size_t i = 0; i < waiting.size(); ++i) {
    if (waiting[i] == 0) ready.insert(i);
  }
  order->clear();
  while (!ready.empty()) {
    size_t next = *ready.begin();
    ready.erase(ready.begin());
    order->push_back(graph.nodes[next].get());
    for (size_t dependent : dependents[next]) {
      if (--waiting[dependent] == 0) ready.insert(dependent);
    }
  }
  return order->size() == graph.nodes.size();
}

std::vector<std::vector<size_t>> ShapeOf(const std::vector<const Node*>& order) {
  std::map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::vector<std::vector<size_t>> shape(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    for (const Node* dep : order[i]->deps) shape[i].push_back(position.at(dep));
    std::sort(shape[i].begin(), shape[i].end());
  }
  return shape;
}

Node ExecCopy(const Node& node) {
  Node copy = node;
  copy.owner = nullptr;
  copy.deps.clear();
  copy.param_pointers.clear();
  if (node.child != nullptr) copy.child = Clone(*node.child);
  CopyBodies(&copy);
  return copy;
}

CUresult RunNode(const Node& node, CUstream stream) {
  if (!node.enabled) return CUDA_SUCCESS;
  if (node.work) return node.work(stream);
  switch (node.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      auto cooperative = node.attributes.find(CU_LAUNCH_ATTRIBUTE_COOPERATIVE);
      return LaunchPacked(node.function, node.grid, node.block, node.shared_mem, stream,
                          node.params,
                          cooperative != node.attributes.end() && cooperative->second.cooperative);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return cuMemcpy3DAsync_v2(&node.copy, stream);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS& m = node.memset;
      size_t pitch = m.height > 1 ? m.pitch : m.width * m.elementSize;
      switch (m.elementSize) {
        case 1:
          return cuMemsetD2D8Async(m.dst, pitch, static_cast<unsigned char>(m.value), m.width,
                                   m.height, stream);
        case 2:
          return cuMemsetD2D16Async(m.dst, pitch, static_cast<unsigned short>(m.value),
                                    m.width, m.height, stream);
        default:
          return cuMemsetD2D32Async(m.dst, pitch, m.value, m.width, m.height, stream);
      }
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      return cuLaunchHostFunc(stream, node.host.fn, node.host.userData);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return cuEventRecord(node.event, stream);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return cuStreamWaitEvent(stream, node.event, 0);
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return RunGraph(*node.child, stream);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return RunConditional(node, stream);
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return CUDA_SUCCESS;
    // The memory is on the GPU already (graph_memory.cc): the nodes mark it in use and
    // free, in the order the stream reaches them.
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return SetGraphMemoryInUse(node.memory->dptr, true) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      if (!SetGraphMemoryInUse(node.alloc.dptr, false)) {
        LogError("graph launch: a free node's allocation is not in use (freed already)");
        return CUDA_ERROR_INVALID_VALUE;
      }
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

}  // namespace gpupool::client::graph

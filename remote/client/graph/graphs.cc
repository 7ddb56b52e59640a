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
#include "remote/client/graph/capture.h"
#include "remote/client/graph/graph_model.h"
#include "remote/client/ops/memory.h"
#include "remote/client/ops/stream.h"
#include "remote/client/ops/launch.h"

#undef cuStreamGetCaptureInfo
#undef cuStreamUpdateCaptureDependencies
#undef cuStreamBeginCaptureToGraph

namespace gpupool::client::capture {

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
bool FrontierOf(const Graph* graph, const CUgraphNode* nodes, size_t count, std::vector<CUgraphNode>* frontier) {
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

CUresult Instantiate(CUgraphExec* result, CUgraph handle, cuuint64_t flags) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Graph* graph = AsGraph(handle);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) {
    return static_cast<CUresult>(
        ReportUnsupported("cuGraphInstantiate(device launch)", "graphs launched from kernels"));
  }
  constexpr cuuint64_t kKnown = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
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
  *status = capture != nullptr && capture->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
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

}  // namespace gpupool::client::capture

namespace gpupool::client {

using namespace capture;  // NOLINT

bool AnyCapture() { return captures.load(std::memory_order_acquire) != 0; }

bool CaptureWork(CUstream stream, CUgraphNodeType type, CapturedWork work, CUresult* status) {
  Node node;
  node.type = type;
  node.work = std::move(work);
  return AddCaptured(stream, std::move(node), status);
}

bool CaptureKernel(CUstream stream, CUfunction function, const unsigned grid[3], const unsigned block[3],
                   unsigned shared_mem, std::vector<char> params, bool cooperative, CUresult* status,
                   const unsigned* cluster) {
  Node node;
  node.type = CU_GRAPH_NODE_TYPE_KERNEL;
  if (cooperative) node.attributes[CU_LAUNCH_ATTRIBUTE_COOPERATIVE].cooperative = 1;
  if (cluster != nullptr) {
    auto& dim = node.attributes[CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION].clusterDim;
    dim.x = cluster[0];
    dim.y = cluster[1];
    dim.z = cluster[2];
  }
  node.function = function;
  std::copy(grid, grid + 3, node.grid);
  std::copy(block, block + 3, node.block);
  node.shared_mem = shared_mem;
  node.params = std::move(params);
  return AddCaptured(stream, std::move(node), status);
}

bool CaptureGraphAlloc(CUstream stream, int device, size_t bytes, CUdeviceptr* dptr, CUresult* status) {
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

namespace {
// Every request passes it (Runtime::Admit) from the moment the library is loaded.
[[maybe_unused]] const bool capture_check_installed = (InstallCaptureCheck(&RefuseOnCapturingStream), true);
}  // namespace

CUresult LeaveCaptureForDestroy(CUstream stream, int device, uint64_t id) {
  if (!AnyCapture()) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Capture> capture = CaptureOf(stream);
  if (capture == nullptr) return CUDA_SUCCESS;
  if (capture->origin == stream) {
    capture->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  capture->streams.erase(stream);
  capture->on_agent.erase({device, id});
  by_stream.erase(stream);
  return CUDA_SUCCESS;
}

void ForgetCapturedEvent(CUevent event) {
  if (!AnyCapture()) return;
  std::lock_guard<std::mutex> lock(mu);
  auto found = by_event.find(event);
  if (found == by_event.end()) return;
  found->second->events.erase(event);
  by_event.erase(found);
}

CUresult RefuseGraphLaunchInCapture(CUstream stream) {
  if (!AnyCapture()) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Capture> capture = CaptureOf(stream);
  if (capture == nullptr) return CUDA_SUCCESS;
  capture->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

// cuEventRecord on a capturing stream: recorded as a node when external, and the event
// remembered so that a stream waiting for it joins the capture. Returns false when
// `stream` is not capturing.
bool CaptureEventRecord(CUevent event, CUstream stream, bool external, CapturedWork work, CUresult* status) {
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
bool CaptureStreamWait(CUstream stream, CUevent event, bool external, CapturedWork work, CUresult* status) {
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
      // A cluster shape only a captured launch gives a node (api/api_module.cc: on a GPU
      // that runs clusters, for a kernel whose launch needs one).
      auto cluster = node.attributes.find(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
      unsigned shape[3] = {1, 1, 1};
      if (cluster != node.attributes.end()) {
        shape[0] = cluster->second.clusterDim.x;
        shape[1] = cluster->second.clusterDim.y;
        shape[2] = cluster->second.clusterDim.z;
      }
      return ops::LaunchPacked(node.function, node.grid, node.block, node.shared_mem, stream, node.params,
                               cooperative != node.attributes.end() && cooperative->second.cooperative, shape);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return ops::Copy3D(&node.copy, stream);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS& m = node.memset;
      size_t pitch = m.height > 1 ? m.pitch : m.width * m.elementSize;
      switch (m.elementSize) {
        case 1:
          return ops::Memset2D(m.dst, pitch, static_cast<unsigned char>(m.value), 1, m.width, m.height, stream);
        case 2:
          return ops::Memset2D(m.dst, pitch, static_cast<unsigned short>(m.value), 2, m.width, m.height, stream);
        default:
          return ops::Memset2D(m.dst, pitch, m.value, 4, m.width, m.height, stream);
      }
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      return ops::LaunchHostFunction(stream, node.host.fn, node.host.userData);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return ops::RecordEvent(node.event, stream);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return ops::WaitEvent(stream, node.event);
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

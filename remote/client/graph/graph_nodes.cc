// Graphs built node by node (cudaGraphCreate, cudaGraphAddKernelNode, ...): adding kernel,
// memcpy, memset, host, empty, event record, event wait and child-graph nodes; reading and
// changing their parameters, in a graph and in an instantiated graph; edges; enabling and
// disabling nodes of an instantiated graph; updating an instantiated graph from a graph of
// the same shape; a DOT description of a graph; kernel node attributes (kept and read
// back; the cooperative one makes the node's launch cooperative).
//
// The objects are in graph_model.h; graphs.cc instantiates and launches them. A node
// copies the parameters it is given (a kernel node its arguments, packed in the kernel's
// layout) at the call, as the driver does. Edges carry no data: an edge with a port or a
// type other than the default (programmatic dependent launch) is refused as not supported.
//
// Memory allocation and free nodes (cuGraphAddMemAllocNode, cuGraphAddMemFreeNode, their
// generic forms and GetParams): an allocation node's graph memory is allocated when the node
// is made (graph_memory.cc); a free node must name graph memory that the graph does not free
// already. As on a GPU, a graph with memory nodes cannot lose nodes or edges, be a child
// graph, be cloned or be updated into an instantiated graph, and the parameters of its
// memory nodes cannot change. cuDeviceGraphMemTrim (nothing to trim: the memory of a node
// that still exists keeps its address), cuDeviceGetGraphMemAttribute and
// cuDeviceSetGraphMemAttribute (resetting a high watermark) are here too.
//
// Not here (their entry points answer CUDA_ERROR_NOT_SUPPORTED, naming themselves):
// external semaphore and batch memory operation nodes, graph memory on the host or
// reachable from other GPUs. User objects are in user_objects.cc, conditional nodes in
// graph_conditionals.cc.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/client/graph/graph_model.h"

namespace gpupool::client::graph {
namespace {

// Checks `deps` (all nodes of `graph`, no repeats) and adds `node` to `graph` after them.
CUresult AddNode(CUgraphNode* result, CUgraph handle, const CUgraphNode* deps, size_t count,
                 std::unique_ptr<Node> node) {
  Graph* graph = AsGraph(handle);
  if (result == nullptr || graph == nullptr || (count > 0 && deps == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::set<Node*> seen;
  for (size_t i = 0; i < count; ++i) {
    Node* dep = AsNode(deps[i]);
    if (dep == nullptr || dep->owner != graph || !seen.insert(dep).second) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    node->deps.push_back(dep);
  }
  node->owner = graph;
  *result = reinterpret_cast<CUgraphNode>(node.get());
  graph->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

// --- Node parameters: checked and copied into a node ---------------------------------------

CUresult SetKernel(Node* node, CUfunction func, CUkernel kern, const unsigned grid[3],
                   const unsigned block[3], unsigned shared_mem, void** params, void** extra) {
  CUfunction function = func != nullptr ? func : reinterpret_cast<CUfunction>(kern);
  if (AsFunction(function) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  std::vector<char> packed;
  if (CUresult status = PackKernelParams(function, params, extra, &packed);
      status != CUDA_SUCCESS) {
    return status;
  }
  node->type = CU_GRAPH_NODE_TYPE_KERNEL;
  node->function = function;
  std::copy(grid, grid + 3, node->grid);
  std::copy(block, block + 3, node->block);
  node->shared_mem = shared_mem;
  node->params = std::move(packed);
  node->param_pointers.clear();
  node->work = nullptr;
  return CUDA_SUCCESS;
}

template <typename Params>
CUresult SetKernel(Node* node, const Params* p, CUkernel kern) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  return SetKernel(node, p->func, kern, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
}

CUresult SetMemcpy(Node* node, const CUDA_MEMCPY3D* copy) {
  if (copy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (copy->WidthInBytes == 0 || copy->Height == 0 || copy->Depth == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  node->type = CU_GRAPH_NODE_TYPE_MEMCPY;
  node->copy = *copy;
  node->work = nullptr;
  return CUDA_SUCCESS;
}

CUresult SetMemset(Node* node, CUdeviceptr dst, size_t pitch, unsigned value, unsigned element_size,
                   size_t width, size_t height) {
  if (dst == 0 || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 1 && element_size != 2 && element_size != 4) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (height > 1 && pitch < width * element_size) return CUDA_ERROR_INVALID_VALUE;
  node->type = CU_GRAPH_NODE_TYPE_MEMSET;
  node->memset = CUDA_MEMSET_NODE_PARAMS{dst, pitch, value, element_size, width, height};
  node->work = nullptr;
  return CUDA_SUCCESS;
}

CUresult SetHost(Node* node, CUhostFn fn, void* data) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  node->type = CU_GRAPH_NODE_TYPE_HOST;
  node->host = CUDA_HOST_NODE_PARAMS{fn, data};
  node->work = nullptr;
  return CUDA_SUCCESS;
}

CUresult SetEvent(Node* node, CUgraphNodeType type, CUevent event) {
  if (AsEvent(event) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  node->type = type;
  node->event = event;
  node->work = nullptr;
  return CUDA_SUCCESS;
}

CUresult SetChild(Node* node, CUgraph child) {
  Graph* graph = AsGraph(child);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (HasMemoryNodes(*graph)) return CUDA_ERROR_NOT_SUPPORTED;  // as on a GPU
  if (HasConditionalNodes(*graph)) {
    LogError("a graph with conditional nodes cannot be a child graph (as on a GPU)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  node->type = CU_GRAPH_NODE_TYPE_GRAPH;
  node->child = Clone(*graph);  // the node gets its own copy, as on a GPU
  node->work = nullptr;
  return CUDA_SUCCESS;
}

// An allocation node: checks the parameters, allocates its graph memory on the device they
// name and gives its address in p->dptr.
CUresult SetMemAlloc(Node* node, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  if (p == nullptr || p->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  const CUmemPoolProps& props = p->poolProps;
  if (props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props.handleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (props.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return static_cast<CUresult>(
        ReportUnsupported("cuGraphAddMemAllocNode", "graph memory anywhere but on the device"));
  }
  const int device = props.location.id;
  if (device < 0 || device >= Runtime::Get().device_count()) return CUDA_ERROR_INVALID_VALUE;
  if (p->accessDescCount > static_cast<size_t>(Runtime::Get().device_count()) ||
      (p->accessDescCount > 0 && p->accessDescs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < p->accessDescCount; ++i) {
    const CUmemAccessDesc& access = p->accessDescs[i];
    if (access.location.type != CU_MEM_LOCATION_TYPE_DEVICE || access.location.id < 0 ||
        access.location.id >= Runtime::Get().device_count() ||
        (access.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
         access.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
         access.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (access.location.id != device && access.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      return static_cast<CUresult>(ReportUnsupported(
          "cuGraphAddMemAllocNode", "graph memory reachable from other GPUs (peer access)"));
    }
  }
  if (CUresult status = NewGraphMemory(device, p->bytesize, &node->memory);
      status != CUDA_SUCCESS) {
    return status;
  }
  node->type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  node->access.assign(p->accessDescs, p->accessDescs + p->accessDescCount);
  node->alloc = *p;
  node->alloc.dptr = node->memory->dptr;
  node->work = nullptr;
  p->dptr = node->memory->dptr;
  return CUDA_SUCCESS;
}

// A free node of `graph`: `dptr` must be graph memory that `graph` does not free already.
CUresult SetMemFree(Node* node, CUgraph handle, CUdeviceptr dptr) {
  Graph* graph = AsGraph(handle);
  if (graph == nullptr || !IsGraphMemory(dptr)) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& other : graph->nodes) {
    if (other->type == CU_GRAPH_NODE_TYPE_MEM_FREE && other->alloc.dptr == dptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  node->type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  node->alloc.dptr = dptr;
  node->work = nullptr;
  return CUDA_SUCCESS;
}

// The generic form (cuGraphAddNode, cuGraphNodeSetParams): sets `node` from `params`.
CUresult SetFromParams(Node* node, const CUgraphNodeParams* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (params->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return SetKernel(node, &params->kernel, params->kernel.kern);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (params->memcpy.flags != 0) return CUDA_ERROR_INVALID_VALUE;
      return SetMemcpy(node, &params->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS_v2& m = params->memset;
      return SetMemset(node, m.dst, m.pitch, m.value, m.elementSize, m.width, m.height);
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      return SetHost(node, params->host.fn, params->host.userData);
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return SetChild(node, params->graph.graph);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return SetEvent(node, params->type, params->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return SetEvent(node, params->type, params->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EMPTY:
      node->type = CU_GRAPH_NODE_TYPE_EMPTY;
      node->work = nullptr;
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      // Made by cuGraphAddNode itself; a memory or conditional node's parameters cannot
      // change.
      return CUDA_ERROR_NOT_SUPPORTED;
    default:
      return static_cast<CUresult>(
          ReportUnsupported("cuGraphAddNode", "semaphore and memory operation nodes"));
  }
}

// Runs `set` on a new node and adds it to the graph.
template <typename Set>
CUresult Add(CUgraphNode* result, CUgraph graph, const CUgraphNode* deps, size_t count, Set set) {
  auto node = std::make_unique<Node>();
  if (CUresult status = set(node.get()); status != CUDA_SUCCESS) return status;
  return AddNode(result, graph, deps, count, std::move(node));
}

// A node of a graph, of the given type (a captured call of that type has no parameters
// to read or change: CUDA_ERROR_NOT_SUPPORTED).
CUresult NodeOfType(CUgraphNode handle, CUgraphNodeType type, Node** result) {
  Node* node = AsNode(handle);
  if (node == nullptr || node->type != type) return CUDA_ERROR_INVALID_VALUE;
  if (node->work) {
    return static_cast<CUresult>(ReportUnsupported("reading or changing a captured node",
                                                   "parameters of captured copies, memsets, host "
                                                   "functions, events and graph launches"));
  }
  *result = node;
  return CUDA_SUCCESS;
}

// The copy of graph node `handle` in `exec`, of the given type.
CUresult ExecNodeOfType(CUgraphExec exec_handle, CUgraphNode handle, CUgraphNodeType type,
                        Node** result) {
  GraphExec* exec = AsGraphExec(exec_handle);
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto found = exec->index.find(reinterpret_cast<const Node*>(handle));
  if (found == exec->index.end()) return CUDA_ERROR_INVALID_VALUE;
  Node* node = &exec->nodes[found->second];
  if (node->type != type) return CUDA_ERROR_INVALID_VALUE;
  *result = node;
  return CUDA_SUCCESS;
}

// Sets a node (of a graph or an instantiated graph) from new parameters, keeping its place.
template <typename Set>
CUresult Change(Node* node, Set set) {
  Node changed = *node;
  if (CUresult status = set(&changed); status != CUDA_SUCCESS) return status;
  changed.deps = node->deps;
  changed.owner = node->owner;
  changed.enabled = node->enabled;
  *node = std::move(changed);
  return CUDA_SUCCESS;
}

template <typename Params>
void GetKernel(Node* node, Params* p) {
  p->func = node->function;
  p->gridDimX = node->grid[0];
  p->gridDimY = node->grid[1];
  p->gridDimZ = node->grid[2];
  p->blockDimX = node->block[0];
  p->blockDimY = node->block[1];
  p->blockDimZ = node->block[2];
  p->sharedMemBytes = node->shared_mem;
  // Pointers into the node's copy of the arguments, one per parameter.
  node->param_pointers.clear();
  if (Function* function = AsFunction(node->function); function != nullptr) {
    for (const auto& slot : function->layout.params) {
      node->param_pointers.push_back(
          slot.offset < node->params.size() ? node->params.data() + slot.offset : nullptr);
    }
  }
  p->kernelParams = node->param_pointers.empty() ? nullptr : node->param_pointers.data();
  p->extra = nullptr;
}

// Fills a caller's array of `count` entries with `items` (nullptr: only the count), as
// cuGraphGetNodes and its kin do.
template <typename T>
void FillList(const std::vector<T>& items, T* out, size_t* count) {
  if (out == nullptr) {
    *count = items.size();
    return;
  }
  for (size_t i = 0; i < *count; ++i) out[i] = i < items.size() ? items[i] : T{};
  *count = std::min(*count, items.size());
}

void ZeroEdges(CUgraphEdgeData* edges, size_t count) {
  if (edges != nullptr) std::memset(edges, 0, count * sizeof(CUgraphEdgeData));
}

CUresult GetEdges(CUgraph handle, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges,
                  size_t* count) {
  Graph* graph = AsGraph(handle);
  if (graph == nullptr || count == nullptr || (from == nullptr) != (to == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::vector<CUgraphNode> sources, targets;
  for (const auto& node : graph->nodes) {
    for (Node* dep : node->deps) {
      sources.push_back(reinterpret_cast<CUgraphNode>(dep));
      targets.push_back(reinterpret_cast<CUgraphNode>(node.get()));
    }
  }
  size_t wanted = *count;
  FillList(sources, from, count);
  size_t ignored = wanted;
  FillList(targets, to, &ignored);
  if (from != nullptr) ZeroEdges(edges, wanted);
  return CUDA_SUCCESS;
}

CUresult Dependencies(CUgraphNode handle, CUgraphNode* deps, CUgraphEdgeData* edges,
                      size_t* count) {
  Node* node = AsNode(handle);
  if (node == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> list;
  for (Node* dep : node->deps) list.push_back(reinterpret_cast<CUgraphNode>(dep));
  size_t wanted = *count;
  FillList(list, deps, count);
  if (deps != nullptr) ZeroEdges(edges, wanted);
  return CUDA_SUCCESS;
}

CUresult Dependents(CUgraphNode handle, CUgraphNode* dependents, CUgraphEdgeData* edges,
                    size_t* count) {
  Node* node = AsNode(handle);
  if (node == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> list;
  for (const auto& other : node->owner->nodes) {
    if (std::find(other->deps.begin(), other->deps.end(), node) != other->deps.end()) {
      list.push_back(reinterpret_cast<CUgraphNode>(other.get()));
    }
  }
  size_t wanted = *count;
  FillList(list, dependents, count);
  if (dependents != nullptr) ZeroEdges(edges, wanted);
  return CUDA_SUCCESS;
}

// Adds (or removes) the edges from[i] -> to[i] of `handle`; all or nothing.
CUresult ChangeEdges(CUgraph handle, const CUgraphNode* from, const CUgraphNode* to,
                     const CUgraphEdgeData* edges, size_t count, bool add) {
  Graph* graph = AsGraph(handle);
  if (graph == nullptr || (count > 0 && (from == nullptr || to == nullptr))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult status = CheckEdges(edges, count); status != CUDA_SUCCESS) return status;
  if (!add && HasMemoryNodes(*graph)) return CUDA_ERROR_NOT_SUPPORTED;  // as on a GPU
  std::set<std::pair<Node*, Node*>> pairs;
  for (size_t i = 0; i < count; ++i) {
    Node* source = AsNode(from[i]);
    Node* target = AsNode(to[i]);
    if (source == nullptr || target == nullptr || source->owner != graph ||
        target->owner != graph || source == target || !pairs.insert({source, target}).second) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    bool present =
        std::find(target->deps.begin(), target->deps.end(), source) != target->deps.end();
    if (present == add) return CUDA_ERROR_INVALID_VALUE;  // a duplicate, or no such edge
  }
  for (const auto& [source, target] : pairs) {
    if (add) {
      target->deps.push_back(source);
    } else {
      target->deps.erase(std::find(target->deps.begin(), target->deps.end(), source));
    }
  }
  return CUDA_SUCCESS;
}

CUresult Update(CUgraphExec exec_handle, CUgraph handle, CUgraphExecUpdateResultInfo* info) {
  GraphExec* exec = AsGraphExec(exec_handle);
  Graph* graph = AsGraph(handle);
  if (exec == nullptr || graph == nullptr || info == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *info = CUgraphExecUpdateResultInfo{CU_GRAPH_EXEC_UPDATE_SUCCESS, nullptr, nullptr};
  std::vector<const Node*> order;
  if (!LaunchOrder(*graph, &order)) return CUDA_ERROR_INVALID_VALUE;
  // Memory nodes cannot be updated (their allocations are the graph's own), as on a GPU.
  const bool exec_memory_nodes =
      std::any_of(exec->nodes.begin(), exec->nodes.end(), [](const Node& node) {
        return node.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
               node.type == CU_GRAPH_NODE_TYPE_MEM_FREE;
      });
  if (exec_memory_nodes || HasMemoryNodes(*graph)) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  // The same node types, each after the same positions, as the instantiated graph.
  const std::vector<std::vector<size_t>> shape = ShapeOf(order);
  if (order.size() != exec->nodes.size()) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i]->type != exec->nodes[i].type || shape[i] != exec->shape[i]) {
      info->result = order[i]->type != exec->nodes[i].type
                         ? CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
                         : CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
      info->errorNode = reinterpret_cast<CUgraphNode>(const_cast<Node*>(order[i]));
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
  }
  for (size_t i = 0; i < order.size(); ++i) {
    bool enabled = exec->nodes[i].enabled;
    exec->nodes[i] = ExecCopy(*order[i]);
    exec->nodes[i].enabled = enabled;
    exec->index[order[i]] = i;
  }
  // The new source graph's user object references replace the old ones (a launch in
  // flight holds its own until it ends).
  exec->user_objects = graph->user_objects;
  exec->default_conditions.clear();
  CollectDefaultConditions(*graph, &exec->default_conditions);
  return CUDA_SUCCESS;
}

const char* TypeName(CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return "kernel";
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return "memcpy";
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return "memset";
    case CU_GRAPH_NODE_TYPE_HOST:
      return "host";
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return "graph";
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return "empty";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return "event_wait";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return "event_record";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "mem_alloc";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "mem_free";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return "conditional";
    default:
      return "other";
  }
}

}  // namespace

CUresult CheckEdges(const CUgraphEdgeData* edges, size_t count) {
  if (edges == nullptr) return CUDA_SUCCESS;
  for (size_t i = 0; i < count; ++i) {
    if (edges[i].from_port != 0 || edges[i].to_port != 0 || edges[i].type != 0) {
      return static_cast<CUresult>(ReportUnsupported(
          "graph edge data", "edges other than full dependencies (programmatic launch)"));
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace gpupool::client::graph

using namespace gpupool::client;         // NOLINT
using namespace gpupool::client::graph;  // NOLINT

// --- Graphs and nodes ----------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphCreate(CUgraph* result, unsigned int flags) {
  GPUPOOL_BODY({
    if (result == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    *result = reinterpret_cast<CUgraph>(new Graph);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph,
                                                          const CUgraphNode* deps, size_t count,
                                                          const CUDA_KERNEL_NODE_PARAMS* params) {
  GPUPOOL_BODY({
    return Add(node, graph, deps, count, [&](Node* n) {
      return params == nullptr ? CUDA_ERROR_INVALID_VALUE : SetKernel(n, params, params->kern);
    });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* node, CUgraph graph,
                                                       const CUgraphNode* deps, size_t count,
                                                       const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  GPUPOOL_BODY({
    return Add(node, graph, deps, count,
               [&](Node* n) { return SetKernel(n, params, static_cast<CUkernel>(nullptr)); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* node, CUgraph graph,
                                                       const CUgraphNode* deps, size_t count,
                                                       const CUDA_MEMCPY3D* copy, CUcontext) {
  GPUPOOL_BODY(
      { return Add(node, graph, deps, count, [&](Node* n) { return SetMemcpy(n, copy); }); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* node, CUgraph graph,
                                                       const CUgraphNode* deps, size_t count,
                                                       const CUDA_MEMSET_NODE_PARAMS* p,
                                                       CUcontext) {
  GPUPOOL_BODY({
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return Add(node, graph, deps, count, [&](Node* n) {
      return SetMemset(n, p->dst, p->pitch, p->value, p->elementSize, p->width, p->height);
    });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode* node, CUgraph graph,
                                                     const CUgraphNode* deps, size_t count,
                                                     const CUDA_HOST_NODE_PARAMS* p) {
  GPUPOOL_BODY({
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return Add(node, graph, deps, count, [&](Node* n) { return SetHost(n, p->fn, p->userData); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* node, CUgraph graph,
                                                      const CUgraphNode* deps, size_t count) {
  GPUPOOL_BODY({ return Add(node, graph, deps, count, [](Node*) { return CUDA_SUCCESS; }); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph,
                                                           const CUgraphNode* deps, size_t count,
                                                           CUgraph child) {
  GPUPOOL_BODY(
      { return Add(node, graph, deps, count, [&](Node* n) { return SetChild(n, child); }); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode* node, CUgraph graph,
                                                            const CUgraphNode* deps, size_t count,
                                                            CUevent event) {
  GPUPOOL_BODY({
    return Add(node, graph, deps, count,
               [&](Node* n) { return SetEvent(n, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode* node, CUgraph graph,
                                                          const CUgraphNode* deps, size_t count,
                                                          CUevent event) {
  GPUPOOL_BODY({
    return Add(node, graph, deps, count,
               [&](Node* n) { return SetEvent(n, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph,
                                                    const CUgraphNode* deps,
                                                    const CUgraphEdgeData* edges, size_t count,
                                                    CUgraphNodeParams* params) {
  GPUPOOL_BODY({
    if (CUresult status = CheckEdges(edges, count); status != CUDA_SUCCESS) return status;
    if (params != nullptr && params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
      return Add(node, graph, deps, count, [&](Node* n) {
        // The same layout as CUDA_MEM_ALLOC_NODE_PARAMS.
        return SetMemAlloc(n, reinterpret_cast<CUDA_MEM_ALLOC_NODE_PARAMS*>(&params->alloc));
      });
    }
    if (params != nullptr && params->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      return Add(node, graph, deps, count,
                 [&](Node* n) { return SetConditional(n, &params->conditional); });
    }
    if (params != nullptr && params->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
      return Add(node, graph, deps, count,
                 [&](Node* n) { return SetMemFree(n, graph, params->free.dptr); });
    }
    return Add(node, graph, deps, count, [&](Node* n) { return SetFromParams(n, params); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddNode(CUgraphNode* node, CUgraph graph,
                                                 const CUgraphNode* deps, size_t count,
                                                 CUgraphNodeParams* params) {
  return cuGraphAddNode_v2(node, graph, deps, nullptr, count, params);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph,
                                                         const CUgraphNode* deps, size_t count,
                                                         CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    return Add(node, graph, deps, count, [&](Node* n) { return SetMemAlloc(n, params); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph,
                                                        const CUgraphNode* deps, size_t count,
                                                        CUdeviceptr dptr) {
  GPUPOOL_BODY({
    return Add(node, graph, deps, count, [&](Node* n) { return SetMemFree(n, graph, dptr); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode handle, CUgraphNodeType* type) {
  GPUPOOL_BODY({
    Node* node = AsNode(handle);
    if (node == nullptr || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *type = node->type;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode handle) {
  GPUPOOL_BODY({
    Node* node = AsNode(handle);
    if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Graph* graph = node->owner;
    if (HasMemoryNodes(*graph)) return CUDA_ERROR_NOT_SUPPORTED;  // as on a GPU
    for (auto& other : graph->nodes) {
      auto& deps = other->deps;
      deps.erase(std::remove(deps.begin(), deps.end(), node), deps.end());
    }
    node->magic = 0;
    graph->nodes.erase(std::find_if(graph->nodes.begin(), graph->nodes.end(),
                                    [node](const auto& owned) { return owned.get() == node; }));
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphGetNodes(CUgraph handle, CUgraphNode* nodes,
                                                  size_t* count) {
  GPUPOOL_BODY({
    Graph* graph = AsGraph(handle);
    if (count == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::vector<CUgraphNode> list;
    for (const auto& node : graph->nodes) list.push_back(reinterpret_cast<CUgraphNode>(node.get()));
    FillList(list, nodes, count);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphGetRootNodes(CUgraph handle, CUgraphNode* nodes,
                                                      size_t* count) {
  GPUPOOL_BODY({
    Graph* graph = AsGraph(handle);
    if (count == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // Newest first, as a driver lists them (driver 580 on an H100 listed three roots made
    // in the order 0, 1, 2 as 2, 1, 0; cuGraphGetNodes lists 0, 1, 2).
    std::vector<CUgraphNode> list;
    for (auto node = graph->nodes.rbegin(); node != graph->nodes.rend(); ++node) {
      if ((*node)->deps.empty()) list.push_back(reinterpret_cast<CUgraphNode>(node->get()));
    }
    FillList(list, nodes, count);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph graph, CUgraphNode* from,
                                                     CUgraphNode* to, CUgraphEdgeData* edges,
                                                     size_t* count) {
  GPUPOOL_BODY({ return GetEdges(graph, from, to, edges, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphGetEdges(CUgraph graph, CUgraphNode* from, CUgraphNode* to,
                                                  size_t* count) {
  GPUPOOL_BODY({ return GetEdges(graph, from, to, nullptr, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps,
                                                                CUgraphEdgeData* edges,
                                                                size_t* count) {
  GPUPOOL_BODY({ return Dependencies(node, deps, edges, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps,
                                                             size_t* count) {
  GPUPOOL_BODY({ return Dependencies(node, deps, nullptr, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetDependentNodes_v2(CUgraphNode node,
                                                                  CUgraphNode* dependents,
                                                                  CUgraphEdgeData* edges,
                                                                  size_t* count) {
  GPUPOOL_BODY({ return Dependents(node, dependents, edges, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode node,
                                                               CUgraphNode* dependents,
                                                               size_t* count) {
  GPUPOOL_BODY({ return Dependents(node, dependents, nullptr, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph graph, const CUgraphNode* from,
                                                            const CUgraphNode* to,
                                                            const CUgraphEdgeData* edges,
                                                            size_t count) {
  GPUPOOL_BODY({ return ChangeEdges(graph, from, to, edges, count, true); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddDependencies(CUgraph graph, const CUgraphNode* from,
                                                         const CUgraphNode* to, size_t count) {
  GPUPOOL_BODY({ return ChangeEdges(graph, from, to, nullptr, count, true); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph graph,
                                                               const CUgraphNode* from,
                                                               const CUgraphNode* to,
                                                               const CUgraphEdgeData* edges,
                                                               size_t count) {
  GPUPOOL_BODY({ return ChangeEdges(graph, from, to, edges, count, false); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph graph, const CUgraphNode* from,
                                                            const CUgraphNode* to, size_t count) {
  GPUPOOL_BODY({ return ChangeEdges(graph, from, to, nullptr, count, false); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode* result, CUgraphNode original,
                                                         CUgraph clone) {
  GPUPOOL_BODY({
    Graph* graph = AsGraph(clone);
    if (result == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto found = graph->clone_of.find(reinterpret_cast<const Node*>(original));
    if (found == graph->clone_of.end() ||
        AsNode(reinterpret_cast<CUgraphNode>(found->second)) == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *result = reinterpret_cast<CUgraphNode>(found->second);
    return CUDA_SUCCESS;
  });
}

// --- Node parameters -----------------------------------------------------------------------

namespace {

// Reads graph node `handle` (of `type`) into *out with get(node, out).
template <typename Out, typename Get>
CUresult ReadNode(CUgraphNode handle, CUgraphNodeType type, Out* out, Get get) {
  Node* node = nullptr;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = NodeOfType(handle, type, &node); status != CUDA_SUCCESS) return status;
  get(node, out);
  return CUDA_SUCCESS;
}

// Changes graph node `handle` (of `type`) with set(copy), keeping its place.
template <typename Set>
CUresult ChangeNode(CUgraphNode handle, CUgraphNodeType type, Set set) {
  Node* node = nullptr;
  if (CUresult status = NodeOfType(handle, type, &node); status != CUDA_SUCCESS) return status;
  return Change(node, set);
}

// The same for the copy of `handle` in an instantiated graph.
template <typename Set>
CUresult ChangeExecNode(CUgraphExec exec, CUgraphNode handle, CUgraphNodeType type, Set set) {
  Node* node = nullptr;
  if (CUresult status = ExecNodeOfType(exec, handle, type, &node); status != CUDA_SUCCESS) {
    return status;
  }
  return Change(node, set);
}

auto SetKernelV2(const CUDA_KERNEL_NODE_PARAMS* p) {
  return
      [p](Node* n) { return p == nullptr ? CUDA_ERROR_INVALID_VALUE : SetKernel(n, p, p->kern); };
}
auto SetKernelV1(const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  return [p](Node* n) { return SetKernel(n, p, static_cast<CUkernel>(nullptr)); };
}
auto SetMemcpyFrom(const CUDA_MEMCPY3D* p) {
  return [p](Node* n) { return SetMemcpy(n, p); };
}
auto SetMemsetFrom(const CUDA_MEMSET_NODE_PARAMS* p) {
  return [p](Node* n) {
    return p == nullptr
               ? CUDA_ERROR_INVALID_VALUE
               : SetMemset(n, p->dst, p->pitch, p->value, p->elementSize, p->width, p->height);
  };
}
auto SetHostFrom(const CUDA_HOST_NODE_PARAMS* p) {
  return [p](Node* n) {
    return p == nullptr ? CUDA_ERROR_INVALID_VALUE : SetHost(n, p->fn, p->userData);
  };
}
auto SetEventTo(CUgraphNodeType type, CUevent event) {
  return [type, event](Node* n) { return SetEvent(n, type, event); };
}
auto SetFrom(const CUgraphNodeParams* p) {
  return [p](Node* n) { return SetFromParams(n, p); };
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode handle,
                                                                CUDA_KERNEL_NODE_PARAMS* p) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_KERNEL, p,
                    [](Node* node, CUDA_KERNEL_NODE_PARAMS* out) {
                      GetKernel(node, out);
                      // Functions and kernels are one object here; the runtime maps a kernel back
                      // to its host entry point.
                      out->kern = reinterpret_cast<CUkernel>(node->function);
                      out->ctx = nullptr;
                    });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode handle,
                                                             CUDA_KERNEL_NODE_PARAMS_v1* p) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_KERNEL, p,
                    [](Node* node, CUDA_KERNEL_NODE_PARAMS_v1* out) { GetKernel(node, out); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode handle,
                                                                const CUDA_KERNEL_NODE_PARAMS* p) {
  GPUPOOL_BODY({ return ChangeNode(handle, CU_GRAPH_NODE_TYPE_KERNEL, SetKernelV2(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode handle,
                                                             const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  GPUPOOL_BODY({ return ChangeNode(handle, CU_GRAPH_NODE_TYPE_KERNEL, SetKernelV1(p)); });
}

// Kernel node attributes: the launch attributes cuLaunchKernelEx takes, checked the same
// way (a cluster of more than one block, or a kernel-triggered event, is not supported).
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeSetAttribute(
    CUgraphNode handle, CUkernelNodeAttrID attribute, const CUkernelNodeAttrValue* value) {
  GPUPOOL_BODY({
    Node* node = nullptr;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = NodeOfType(handle, CU_GRAPH_NODE_TYPE_KERNEL, &node);
        status != CUDA_SUCCESS) {
      return status;
    }
    CUlaunchAttribute as_launch{};
    as_launch.id = attribute;
    as_launch.value = *value;
    CUlaunchConfig config{};
    config.attrs = &as_launch;
    config.numAttrs = 1;
    if (CUresult status = CheckLaunchAttributes(config); status != CUDA_SUCCESS) return status;
    node->attributes[attribute] = *value;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode handle,
                                                                CUkernelNodeAttrID attribute,
                                                                CUkernelNodeAttrValue* value) {
  GPUPOOL_BODY({
    Node* node = nullptr;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = NodeOfType(handle, CU_GRAPH_NODE_TYPE_KERNEL, &node);
        status != CUDA_SUCCESS) {
      return status;
    }
    auto found = node->attributes.find(attribute);
    *value = found != node->attributes.end() ? found->second : CUkernelNodeAttrValue{};
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeCopyAttributes(CUgraphNode dst,
                                                                  CUgraphNode src) {
  GPUPOOL_BODY({
    Node* to = nullptr;
    Node* from = nullptr;
    if (CUresult status = NodeOfType(dst, CU_GRAPH_NODE_TYPE_KERNEL, &to); status != CUDA_SUCCESS) {
      return status;
    }
    if (CUresult status = NodeOfType(src, CU_GRAPH_NODE_TYPE_KERNEL, &from);
        status != CUDA_SUCCESS) {
      return status;
    }
    to->attributes = from->attributes;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode handle, CUDA_MEMCPY3D* p) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_MEMCPY, p,
                    [](Node* node, CUDA_MEMCPY3D* out) { *out = node->copy; });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode handle,
                                                             const CUDA_MEMCPY3D* p) {
  GPUPOOL_BODY({ return ChangeNode(handle, CU_GRAPH_NODE_TYPE_MEMCPY, SetMemcpyFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode handle,
                                                             CUDA_MEMSET_NODE_PARAMS* p) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_MEMSET, p,
                    [](Node* node, CUDA_MEMSET_NODE_PARAMS* out) { *out = node->memset; });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode handle,
                                                             const CUDA_MEMSET_NODE_PARAMS* p) {
  GPUPOOL_BODY({ return ChangeNode(handle, CU_GRAPH_NODE_TYPE_MEMSET, SetMemsetFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphHostNodeGetParams(CUgraphNode handle,
                                                           CUDA_HOST_NODE_PARAMS* p) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_HOST, p,
                    [](Node* node, CUDA_HOST_NODE_PARAMS* out) { *out = node->host; });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode handle,
                                                           const CUDA_HOST_NODE_PARAMS* p) {
  GPUPOOL_BODY({ return ChangeNode(handle, CU_GRAPH_NODE_TYPE_HOST, SetHostFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode handle,
                                                                CUgraph* graph) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_GRAPH, graph, [](Node* node, CUgraph* out) {
      *out = reinterpret_cast<CUgraph>(node->child.get());
    });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* event) {
  GPUPOOL_BODY({
    return ReadNode(node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event,
                    [](Node* n, CUevent* out) { *out = n->event; });
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent event) {
  GPUPOOL_BODY({
    return ChangeNode(node, CU_GRAPH_NODE_TYPE_EVENT_RECORD,
                      SetEventTo(CU_GRAPH_NODE_TYPE_EVENT_RECORD, event));
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* event) {
  GPUPOOL_BODY({
    return ReadNode(node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event,
                    [](Node* n, CUevent* out) { *out = n->event; });
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphEventWaitNodeSetEvent(CUgraphNode node, CUevent event) {
  GPUPOOL_BODY({
    return ChangeNode(node, CU_GRAPH_NODE_TYPE_WAIT_EVENT,
                      SetEventTo(CU_GRAPH_NODE_TYPE_WAIT_EVENT, event));
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode node,
                                                               CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  GPUPOOL_BODY({
    return ReadNode(node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, out,
                    [](Node* n, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
                      *p = n->alloc;
                      // Owned by the node, as the driver's are.
                      p->accessDescs = n->access.empty() ? nullptr : n->access.data();
                      p->accessDescCount = n->access.size();
                    });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* out) {
  GPUPOOL_BODY({
    return ReadNode(node, CU_GRAPH_NODE_TYPE_MEM_FREE, out,
                    [](Node* n, CUdeviceptr* dptr) { *dptr = n->alloc.dptr; });
  });
}

// --- Graph memory of a device (graph_memory.cc) --------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (Runtime::Get().device(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;  // graph memory not in use belongs to a node that still exists
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device,
                                                               CUgraphMem_attribute attr,
                                                               void* value) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (Runtime::Get().device(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const GraphMemoryUse use = GraphMemoryUseOf(device);
    cuuint64_t figure = 0;
    switch (attr) {
      case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: figure = use.used; break;
      case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: figure = use.used_high; break;
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: figure = use.reserved; break;
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: figure = use.reserved_high; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
    *static_cast<cuuint64_t*>(value) = figure;
    return CUDA_SUCCESS;
  });
}

// Only the high watermarks can be set, and only to zero (which resets them to the current
// figure), as on a GPU.
GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device,
                                                               CUgraphMem_attribute attr,
                                                               void* value) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (Runtime::Get().device(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    if (value == nullptr || *static_cast<const cuuint64_t*>(value) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    ResetGraphMemoryHigh(device, attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
                         attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode handle,
                                                       CUgraphNodeParams* params) {
  GPUPOOL_BODY({
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return ChangeNode(handle, params->type, SetFrom(params));
  });
}

// --- Instantiated graphs -------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(
    CUgraphExec exec, CUgraphNode handle, const CUDA_KERNEL_NODE_PARAMS* p) {
  GPUPOOL_BODY({ return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_KERNEL, SetKernelV2(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams(
    CUgraphExec exec, CUgraphNode handle, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  GPUPOOL_BODY({ return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_KERNEL, SetKernelV1(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec exec,
                                                                 CUgraphNode handle,
                                                                 const CUDA_MEMCPY3D* p,
                                                                 CUcontext) {
  GPUPOOL_BODY(
      { return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_MEMCPY, SetMemcpyFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec exec,
                                                                 CUgraphNode handle,
                                                                 const CUDA_MEMSET_NODE_PARAMS* p,
                                                                 CUcontext) {
  GPUPOOL_BODY(
      { return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_MEMSET, SetMemsetFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode handle,
                                                               const CUDA_HOST_NODE_PARAMS* p) {
  GPUPOOL_BODY({ return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_HOST, SetHostFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec exec,
                                                                     CUgraphNode handle,
                                                                     CUgraph child) {
  GPUPOOL_BODY({
    return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_GRAPH,
                          [child](Node* n) { return SetChild(n, child); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec,
                                                                     CUgraphNode node,
                                                                     CUevent event) {
  GPUPOOL_BODY({
    return ChangeExecNode(exec, node, CU_GRAPH_NODE_TYPE_EVENT_RECORD,
                          SetEventTo(CU_GRAPH_NODE_TYPE_EVENT_RECORD, event));
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec,
                                                                   CUgraphNode node,
                                                                   CUevent event) {
  GPUPOOL_BODY({
    return ChangeExecNode(exec, node, CU_GRAPH_NODE_TYPE_WAIT_EVENT,
                          SetEventTo(CU_GRAPH_NODE_TYPE_WAIT_EVENT, event));
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode handle,
                                                           CUgraphNodeParams* params) {
  GPUPOOL_BODY({
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return ChangeExecNode(exec, handle, params->type, SetFrom(params));
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode handle,
                                                        unsigned int enabled) {
  GPUPOOL_BODY({
    GraphExec* graph_exec = AsGraphExec(exec);
    if (graph_exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto found = graph_exec->index.find(reinterpret_cast<const Node*>(handle));
    if (found == graph_exec->index.end()) return CUDA_ERROR_INVALID_VALUE;
    Node& node = graph_exec->nodes[found->second];
    // Kernel, memcpy and memset nodes only, as on a GPU.
    if (node.type != CU_GRAPH_NODE_TYPE_KERNEL && node.type != CU_GRAPH_NODE_TYPE_MEMCPY &&
        node.type != CU_GRAPH_NODE_TYPE_MEMSET) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    node.enabled = enabled != 0;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode handle,
                                                        unsigned int* enabled) {
  GPUPOOL_BODY({
    GraphExec* graph_exec = AsGraphExec(exec);
    if (graph_exec == nullptr || enabled == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto found = graph_exec->index.find(reinterpret_cast<const Node*>(handle));
    if (found == graph_exec->index.end()) return CUDA_ERROR_INVALID_VALUE;
    *enabled = graph_exec->nodes[found->second].enabled ? 1 : 0;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph,
                                                       CUgraphExecUpdateResultInfo* info) {
  GPUPOOL_BODY({ return Update(exec, graph, info); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec exec, CUgraph graph,
                                                    CUgraphNode* error_node,
                                                    CUgraphExecUpdateResult* result) {
  GPUPOOL_BODY({
    if (error_node == nullptr || result == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUgraphExecUpdateResultInfo info{};
    CUresult status = Update(exec, graph, &info);
    *error_node = info.errorNode;
    *result = info.result;
    return status;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecGetFlags(CUgraphExec exec, cuuint64_t* flags) {
  GPUPOOL_BODY({
    GraphExec* graph_exec = AsGraphExec(exec);
    if (graph_exec == nullptr || flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *flags = graph_exec->flags;
    return CUDA_SUCCESS;
  });
}

// A DOT description: one vertex per node (its type, and the kernel's name), one arrow per
// edge. The flags choose more detail on a GPU; here the description is always this one.
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphDebugDotPrint(CUgraph handle, const char* path,
                                                       unsigned int) {
  GPUPOOL_BODY({
    Graph* graph = AsGraph(handle);
    if (graph == nullptr || path == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FILE* out = std::fopen(path, "w");
    if (out == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
    std::map<const Node*, size_t> id;
    for (size_t i = 0; i < graph->nodes.size(); ++i) id[graph->nodes[i].get()] = i;
    std::fprintf(out, "digraph gpupool_graph {\n");
    for (size_t i = 0; i < graph->nodes.size(); ++i) {
      const Node& node = *graph->nodes[i];
      Function* function = AsFunction(node.function);
      std::fprintf(out, "  n%zu [label=\"%zu: %s%s%s\"];\n", i, i, TypeName(node.type),
                   function != nullptr ? " " : "",
                   function != nullptr ? function->name.c_str() : "");
    }
    for (size_t i = 0; i < graph->nodes.size(); ++i) {
      for (const Node* dep : graph->nodes[i]->deps) {
        std::fprintf(out, "  n%zu -> n%zu;\n", id.at(dep), i);
      }
    }
    std::fprintf(out, "}\n");
    return std::fclose(out) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
  });
}

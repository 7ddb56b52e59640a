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
#include "remote/client/graph/node_build.h"
#include "remote/client/ops/launch.h"

namespace gpupool::client::graph {

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

CUresult SetKernel(Node* node, CUfunction func, CUkernel kern, const unsigned grid[3], const unsigned block[3],
                   unsigned shared_mem, void** params, void** extra) {
  CUfunction function = func != nullptr ? func : reinterpret_cast<CUfunction>(kern);
  if (AsFunction(function) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  std::vector<char> packed;
  if (CUresult status = ops::PackKernelParams(function, params, extra, &packed); status != CUDA_SUCCESS) {
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

CUresult SetMemset(Node* node, CUdeviceptr dst, size_t pitch, unsigned value, unsigned element_size, size_t width,
                   size_t height) {
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
  if (props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props.handleTypes != CU_MEM_HANDLE_TYPE_NONE) {
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
        (access.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && access.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
         access.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (access.location.id != device && access.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      return static_cast<CUresult>(
          ReportUnsupported("cuGraphAddMemAllocNode", "graph memory reachable from other GPUs (peer access)"));
    }
  }
  if (CUresult status = NewGraphMemory(device, p->bytesize, &node->memory); status != CUDA_SUCCESS) {
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
      return static_cast<CUresult>(ReportUnsupported("cuGraphAddNode", "semaphore and memory operation nodes"));
  }
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
CUresult ExecNodeOfType(CUgraphExec exec_handle, CUgraphNode handle, CUgraphNodeType type, Node** result) {
  GraphExec* exec = AsGraphExec(exec_handle);
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto found = exec->index.find(reinterpret_cast<const Node*>(handle));
  if (found == exec->index.end()) return CUDA_ERROR_INVALID_VALUE;
  Node* node = &exec->nodes[found->second];
  if (node->type != type) return CUDA_ERROR_INVALID_VALUE;
  *result = node;
  return CUDA_SUCCESS;
}

void ZeroEdges(CUgraphEdgeData* edges, size_t count) {
  if (edges != nullptr) std::memset(edges, 0, count * sizeof(CUgraphEdgeData));
}

CUresult GetEdges(CUgraph handle, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges, size_t* count) {
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

CUresult Dependencies(CUgraphNode handle, CUgraphNode* deps, CUgraphEdgeData* edges, size_t* count) {
  Node* node = AsNode(handle);
  if (node == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> list;
  for (Node* dep : node->deps) list.push_back(reinterpret_cast<CUgraphNode>(dep));
  size_t wanted = *count;
  FillList(list, deps, count);
  if (deps != nullptr) ZeroEdges(edges, wanted);
  return CUDA_SUCCESS;
}

CUresult Dependents(CUgraphNode handle, CUgraphNode* dependents, CUgraphEdgeData* edges, size_t* count) {
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
CUresult ChangeEdges(CUgraph handle, const CUgraphNode* from, const CUgraphNode* to, const CUgraphEdgeData* edges,
                     size_t count, bool add) {
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
    if (source == nullptr || target == nullptr || source->owner != graph || target->owner != graph ||
        source == target || !pairs.insert({source, target}).second) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    bool present = std::find(target->deps.begin(), target->deps.end(), source) != target->deps.end();
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
  const bool exec_memory_nodes = std::any_of(exec->nodes.begin(), exec->nodes.end(), [](const Node& node) {
    return node.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || node.type == CU_GRAPH_NODE_TYPE_MEM_FREE;
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
      info->result = order[i]->type != exec->nodes[i].type ? CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
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
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return "mem_alloc";
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return "mem_free";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return "conditional";
    default:
      return "other";
  }
}

CUresult CheckEdges(const CUgraphEdgeData* edges, size_t count) {
  if (edges == nullptr) return CUDA_SUCCESS;
  for (size_t i = 0; i < count; ++i) {
    if (edges[i].from_port != 0 || edges[i].to_port != 0 || edges[i].type != 0) {
      return static_cast<CUresult>(
          ReportUnsupported("graph edge data", "edges other than full dependencies (programmatic launch)"));
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace gpupool::client::graph

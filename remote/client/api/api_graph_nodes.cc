// Driver API: graphs built node by node, their nodes' parameters and edges, updates of
// instantiated graphs (the building itself: graph/graph_nodes.cc).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <vector>
#include "remote/client/api/clusters.h"
#include "remote/client/core/api_common.h"
#include "remote/client/graph/graph_model.h"
#include "remote/client/ops/launch.h"
#include "remote/client/graph/node_build.h"

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

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                          size_t count, const CUDA_KERNEL_NODE_PARAMS* params) {
  GPUPOOL_BODY({
    return Add(node, graph, deps, count, [&](Node* n) {
      return params == nullptr ? CUDA_ERROR_INVALID_VALUE : SetKernel(n, params, params->kern);
    });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                       size_t count, const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  GPUPOOL_BODY({
    return Add(node, graph, deps, count, [&](Node* n) { return SetKernel(n, params, static_cast<CUkernel>(nullptr)); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                       size_t count, const CUDA_MEMCPY3D* copy, CUcontext) {
  GPUPOOL_BODY({ return Add(node, graph, deps, count, [&](Node* n) { return SetMemcpy(n, copy); }); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                       size_t count, const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  GPUPOOL_BODY({
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return Add(node, graph, deps, count,
               [&](Node* n) { return SetMemset(n, p->dst, p->pitch, p->value, p->elementSize, p->width, p->height); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                     size_t count, const CUDA_HOST_NODE_PARAMS* p) {
  GPUPOOL_BODY({
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return Add(node, graph, deps, count, [&](Node* n) { return SetHost(n, p->fn, p->userData); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                      size_t count) {
  GPUPOOL_BODY({ return Add(node, graph, deps, count, [](Node*) { return CUDA_SUCCESS; }); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                           size_t count, CUgraph child) {
  GPUPOOL_BODY({ return Add(node, graph, deps, count, [&](Node* n) { return SetChild(n, child); }); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                            size_t count, CUevent event) {
  GPUPOOL_BODY({
    return Add(node, graph, deps, count, [&](Node* n) { return SetEvent(n, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                          size_t count, CUevent event) {
  GPUPOOL_BODY({
    return Add(node, graph, deps, count, [&](Node* n) { return SetEvent(n, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
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
      return Add(node, graph, deps, count, [&](Node* n) { return SetConditional(n, &params->conditional); });
    }
    if (params != nullptr && params->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
      return Add(node, graph, deps, count, [&](Node* n) { return SetMemFree(n, graph, params->free.dptr); });
    }
    return Add(node, graph, deps, count, [&](Node* n) { return SetFromParams(n, params); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                         size_t count, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    return Add(node, graph, deps, count, [&](Node* n) { return SetMemAlloc(n, params); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                        size_t count, CUdeviceptr dptr) {
  GPUPOOL_BODY({ return Add(node, graph, deps, count, [&](Node* n) { return SetMemFree(n, graph, dptr); }); });
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

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphGetNodes(CUgraph handle, CUgraphNode* nodes, size_t* count) {
  GPUPOOL_BODY({
    Graph* graph = AsGraph(handle);
    if (count == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::vector<CUgraphNode> list;
    for (const auto& node : graph->nodes) list.push_back(reinterpret_cast<CUgraphNode>(node.get()));
    FillList(list, nodes, count);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphGetRootNodes(CUgraph handle, CUgraphNode* nodes, size_t* count) {
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

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph graph, CUgraphNode* from, CUgraphNode* to,
                                                     CUgraphEdgeData* edges, size_t* count) {
  GPUPOOL_BODY({ return GetEdges(graph, from, to, edges, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphGetEdges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, size_t* count) {
  GPUPOOL_BODY({ return GetEdges(graph, from, to, nullptr, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps,
                                                                CUgraphEdgeData* edges, size_t* count) {
  GPUPOOL_BODY({ return Dependencies(node, deps, edges, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* count) {
  GPUPOOL_BODY({ return Dependencies(node, deps, nullptr, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* dependents,
                                                                  CUgraphEdgeData* edges, size_t* count) {
  GPUPOOL_BODY({ return Dependents(node, dependents, edges, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* dependents,
                                                               size_t* count) {
  GPUPOOL_BODY({ return Dependents(node, dependents, nullptr, count); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph graph, const CUgraphNode* from,
                                                            const CUgraphNode* to, const CUgraphEdgeData* edges,
                                                            size_t count) {
  GPUPOOL_BODY({ return ChangeEdges(graph, from, to, edges, count, true); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                                         size_t count) {
  GPUPOOL_BODY({ return ChangeEdges(graph, from, to, nullptr, count, true); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph graph, const CUgraphNode* from,
                                                               const CUgraphNode* to, const CUgraphEdgeData* edges,
                                                               size_t count) {
  GPUPOOL_BODY({ return ChangeEdges(graph, from, to, edges, count, false); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph graph, const CUgraphNode* from,
                                                            const CUgraphNode* to, size_t count) {
  GPUPOOL_BODY({ return ChangeEdges(graph, from, to, nullptr, count, false); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode* result, CUgraphNode original, CUgraph clone) {
  GPUPOOL_BODY({
    Graph* graph = AsGraph(clone);
    if (result == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto found = graph->clone_of.find(reinterpret_cast<const Node*>(original));
    if (found == graph->clone_of.end() || AsNode(reinterpret_cast<CUgraphNode>(found->second)) == nullptr) {
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
  return [p](Node* n) { return p == nullptr ? CUDA_ERROR_INVALID_VALUE : SetKernel(n, p, p->kern); };
}
auto SetKernelV1(const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  return [p](Node* n) { return SetKernel(n, p, static_cast<CUkernel>(nullptr)); };
}
auto SetMemcpyFrom(const CUDA_MEMCPY3D* p) {
  return [p](Node* n) { return SetMemcpy(n, p); };
}
auto SetMemsetFrom(const CUDA_MEMSET_NODE_PARAMS* p) {
  return [p](Node* n) {
    return p == nullptr ? CUDA_ERROR_INVALID_VALUE
                        : SetMemset(n, p->dst, p->pitch, p->value, p->elementSize, p->width, p->height);
  };
}
auto SetHostFrom(const CUDA_HOST_NODE_PARAMS* p) {
  return [p](Node* n) { return p == nullptr ? CUDA_ERROR_INVALID_VALUE : SetHost(n, p->fn, p->userData); };
}
auto SetEventTo(CUgraphNodeType type, CUevent event) {
  return [type, event](Node* n) { return SetEvent(n, type, event); };
}
auto SetFrom(const CUgraphNodeParams* p) {
  return [p](Node* n) { return SetFromParams(n, p); };
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode handle, CUDA_KERNEL_NODE_PARAMS* p) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_KERNEL, p, [](Node* node, CUDA_KERNEL_NODE_PARAMS* out) {
      GetKernel(node, out);
      // Functions and kernels are one object here; the runtime maps a kernel back
      // to its host entry point.
      out->kern = reinterpret_cast<CUkernel>(node->function);
      out->ctx = nullptr;
    });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode handle, CUDA_KERNEL_NODE_PARAMS_v1* p) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_KERNEL, p,
                    [](Node* node, CUDA_KERNEL_NODE_PARAMS_v1* out) { GetKernel(node, out); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode handle, const CUDA_KERNEL_NODE_PARAMS* p) {
  GPUPOOL_BODY({ return ChangeNode(handle, CU_GRAPH_NODE_TYPE_KERNEL, SetKernelV2(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode handle, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  GPUPOOL_BODY({ return ChangeNode(handle, CU_GRAPH_NODE_TYPE_KERNEL, SetKernelV1(p)); });
}

// Kernel node attributes: the launch attributes cuLaunchKernelEx takes, checked the same
// way (a kernel-triggered event is not supported). A cluster dimension is checked for the
// node's kernel and grid on the current context's GPU, and the graph's launches send it.
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeSetAttribute(CUgraphNode handle, CUkernelNodeAttrID attribute,
                                                                const CUkernelNodeAttrValue* value) {
  GPUPOOL_BODY({
    Node* node = nullptr;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = NodeOfType(handle, CU_GRAPH_NODE_TYPE_KERNEL, &node); status != CUDA_SUCCESS) {
      return status;
    }
    CUlaunchAttribute as_launch{};
    as_launch.id = attribute;
    as_launch.value = *value;
    CUlaunchConfig config{};
    config.gridDimX = node->grid[0];
    config.gridDimY = node->grid[1];
    config.gridDimZ = node->grid[2];
    config.blockDimX = node->block[0];
    config.blockDimY = node->block[1];
    config.blockDimZ = node->block[2];
    config.attrs = &as_launch;
    config.numAttrs = 1;
    if (attribute == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      std::vector<CUlaunchAttribute> others;
      unsigned shape[3];
      if (CUresult status = WithoutClusterDimension(config, node->function, &others, shape); status != CUDA_SUCCESS) {
        return status;
      }
      node->attributes[attribute] = *value;
      return CUDA_SUCCESS;
    }
    if (CUresult status = ops::CheckLaunchAttributes(config); status != CUDA_SUCCESS) return status;
    node->attributes[attribute] = *value;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode handle, CUkernelNodeAttrID attribute,
                                                                CUkernelNodeAttrValue* value) {
  GPUPOOL_BODY({
    Node* node = nullptr;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = NodeOfType(handle, CU_GRAPH_NODE_TYPE_KERNEL, &node); status != CUDA_SUCCESS) {
      return status;
    }
    auto found = node->attributes.find(attribute);
    *value = found != node->attributes.end() ? found->second : CUkernelNodeAttrValue{};
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) {
  GPUPOOL_BODY({
    Node* to = nullptr;
    Node* from = nullptr;
    if (CUresult status = NodeOfType(dst, CU_GRAPH_NODE_TYPE_KERNEL, &to); status != CUDA_SUCCESS) {
      return status;
    }
    if (CUresult status = NodeOfType(src, CU_GRAPH_NODE_TYPE_KERNEL, &from); status != CUDA_SUCCESS) {
      return status;
    }
    to->attributes = from->attributes;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode handle, CUDA_MEMCPY3D* p) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_MEMCPY, p, [](Node* node, CUDA_MEMCPY3D* out) { *out = node->copy; });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode handle, const CUDA_MEMCPY3D* p) {
  GPUPOOL_BODY({ return ChangeNode(handle, CU_GRAPH_NODE_TYPE_MEMCPY, SetMemcpyFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode handle, CUDA_MEMSET_NODE_PARAMS* p) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_MEMSET, p,
                    [](Node* node, CUDA_MEMSET_NODE_PARAMS* out) { *out = node->memset; });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode handle, const CUDA_MEMSET_NODE_PARAMS* p) {
  GPUPOOL_BODY({ return ChangeNode(handle, CU_GRAPH_NODE_TYPE_MEMSET, SetMemsetFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphHostNodeGetParams(CUgraphNode handle, CUDA_HOST_NODE_PARAMS* p) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_HOST, p,
                    [](Node* node, CUDA_HOST_NODE_PARAMS* out) { *out = node->host; });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode handle, const CUDA_HOST_NODE_PARAMS* p) {
  GPUPOOL_BODY({ return ChangeNode(handle, CU_GRAPH_NODE_TYPE_HOST, SetHostFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode handle, CUgraph* graph) {
  GPUPOOL_BODY({
    return ReadNode(handle, CU_GRAPH_NODE_TYPE_GRAPH, graph,
                    [](Node* node, CUgraph* out) { *out = reinterpret_cast<CUgraph>(node->child.get()); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* event) {
  GPUPOOL_BODY({
    return ReadNode(node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event, [](Node* n, CUevent* out) { *out = n->event; });
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent event) {
  GPUPOOL_BODY({
    return ChangeNode(node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, SetEventTo(CU_GRAPH_NODE_TYPE_EVENT_RECORD, event));
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* event) {
  GPUPOOL_BODY(
      { return ReadNode(node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event, [](Node* n, CUevent* out) { *out = n->event; }); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphEventWaitNodeSetEvent(CUgraphNode node, CUevent event) {
  GPUPOOL_BODY(
      { return ChangeNode(node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, SetEventTo(CU_GRAPH_NODE_TYPE_WAIT_EVENT, event)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  GPUPOOL_BODY({
    return ReadNode(node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, out, [](Node* n, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
      *p = n->alloc;
      // Owned by the node, as the driver's are.
      p->accessDescs = n->access.empty() ? nullptr : n->access.data();
      p->accessDescCount = n->access.size();
    });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* out) {
  GPUPOOL_BODY({
    return ReadNode(node, CU_GRAPH_NODE_TYPE_MEM_FREE, out, [](Node* n, CUdeviceptr* dptr) { *dptr = n->alloc.dptr; });
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

GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                                               void* value) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (Runtime::Get().device(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const GraphMemoryUse use = GraphMemoryUseOf(device);
    cuuint64_t figure = 0;
    switch (attr) {
      case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
        figure = use.used;
        break;
      case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
        figure = use.used_high;
        break;
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
        figure = use.reserved;
        break;
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        figure = use.reserved_high;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    *static_cast<cuuint64_t*>(value) = figure;
    return CUDA_SUCCESS;
  });
}

// Only the high watermarks can be set, and only to zero (which resets them to the current
// figure), as on a GPU.
GPUPOOL_CUDA_API CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
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
    ResetGraphMemoryHigh(device, attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode handle, CUgraphNodeParams* params) {
  GPUPOOL_BODY({
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return ChangeNode(handle, params->type, SetFrom(params));
  });
}

// --- Instantiated graphs -------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode handle,
                                                                    const CUDA_KERNEL_NODE_PARAMS* p) {
  GPUPOOL_BODY({ return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_KERNEL, SetKernelV2(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode handle,
                                                                 const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  GPUPOOL_BODY({ return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_KERNEL, SetKernelV1(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode handle,
                                                                 const CUDA_MEMCPY3D* p, CUcontext) {
  GPUPOOL_BODY({ return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_MEMCPY, SetMemcpyFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode handle,
                                                                 const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  GPUPOOL_BODY({ return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_MEMSET, SetMemsetFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode handle,
                                                               const CUDA_HOST_NODE_PARAMS* p) {
  GPUPOOL_BODY({ return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_HOST, SetHostFrom(p)); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode handle,
                                                                     CUgraph child) {
  GPUPOOL_BODY({
    return ChangeExecNode(exec, handle, CU_GRAPH_NODE_TYPE_GRAPH, [child](Node* n) { return SetChild(n, child); });
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node,
                                                                     CUevent event) {
  GPUPOOL_BODY({
    return ChangeExecNode(exec, node, CU_GRAPH_NODE_TYPE_EVENT_RECORD,
                          SetEventTo(CU_GRAPH_NODE_TYPE_EVENT_RECORD, event));
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent event) {
  GPUPOOL_BODY({
    return ChangeExecNode(exec, node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, SetEventTo(CU_GRAPH_NODE_TYPE_WAIT_EVENT, event));
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode handle,
                                                           CUgraphNodeParams* params) {
  GPUPOOL_BODY({
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return ChangeExecNode(exec, handle, params->type, SetFrom(params));
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode handle, unsigned int enabled) {
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

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode handle, unsigned int* enabled) {
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

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node,
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
GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphDebugDotPrint(CUgraph handle, const char* path, unsigned int) {
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
      std::fprintf(out, "  n%zu [label=\"%zu: %s%s%s\"];\n", i, i, TypeName(node.type), function != nullptr ? " " : "",
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

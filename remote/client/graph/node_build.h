// Building graphs node by node (graph/graph_nodes.cc): a node's parameters checked and
// copied into it, its edges, updates of an instantiated graph. The entry points that use
// them are api/api_graph_nodes.cc.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "remote/client/graph/graph_model.h"

namespace gpupool::client::graph {

// Checks `deps` (all nodes of `graph`, no repeats) and adds `node` to `graph` after them.
CUresult AddNode(CUgraphNode* result, CUgraph handle, const CUgraphNode* deps, size_t count,
                 std::unique_ptr<Node> node);

CUresult SetKernel(Node* node, CUfunction func, CUkernel kern, const unsigned grid[3], const unsigned block[3],
                   unsigned shared_mem, void** params, void** extra);

template <typename Params>
CUresult SetKernel(Node* node, const Params* p, CUkernel kern) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  return SetKernel(node, p->func, kern, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
}

CUresult SetMemcpy(Node* node, const CUDA_MEMCPY3D* copy);

CUresult SetMemset(Node* node, CUdeviceptr dst, size_t pitch, unsigned value, unsigned element_size, size_t width,
                   size_t height);

CUresult SetHost(Node* node, CUhostFn fn, void* data);

CUresult SetEvent(Node* node, CUgraphNodeType type, CUevent event);

CUresult SetChild(Node* node, CUgraph child);

// An allocation node: checks the parameters, allocates its graph memory on the device they
// name and gives its address in p->dptr.
CUresult SetMemAlloc(Node* node, CUDA_MEM_ALLOC_NODE_PARAMS* p);

// A free node of `graph`: `dptr` must be graph memory that `graph` does not free already.
CUresult SetMemFree(Node* node, CUgraph handle, CUdeviceptr dptr);

// The generic form (cuGraphAddNode, cuGraphNodeSetParams): sets `node` from `params`.
CUresult SetFromParams(Node* node, const CUgraphNodeParams* params);

// Runs `set` on a new node and adds it to the graph.
template <typename Set>
CUresult Add(CUgraphNode* result, CUgraph graph, const CUgraphNode* deps, size_t count, Set set) {
  auto node = std::make_unique<Node>();
  if (CUresult status = set(node.get()); status != CUDA_SUCCESS) return status;
  return AddNode(result, graph, deps, count, std::move(node));
}

// A node of a graph, of the given type (a captured call of that type has no parameters
// to read or change: CUDA_ERROR_NOT_SUPPORTED).
CUresult NodeOfType(CUgraphNode handle, CUgraphNodeType type, Node** result);

// The copy of graph node `handle` in `exec`, of the given type.
CUresult ExecNodeOfType(CUgraphExec exec_handle, CUgraphNode handle, CUgraphNodeType type, Node** result);

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
      node->param_pointers.push_back(slot.offset < node->params.size() ? node->params.data() + slot.offset : nullptr);
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

void ZeroEdges(CUgraphEdgeData* edges, size_t count);

CUresult GetEdges(CUgraph handle, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges, size_t* count);

CUresult Dependencies(CUgraphNode handle, CUgraphNode* deps, CUgraphEdgeData* edges, size_t* count);

CUresult Dependents(CUgraphNode handle, CUgraphNode* dependents, CUgraphEdgeData* edges, size_t* count);

// Adds (or removes) the edges from[i] -> to[i] of `handle`; all or nothing.
CUresult ChangeEdges(CUgraph handle, const CUgraphNode* from, const CUgraphNode* to, const CUgraphEdgeData* edges,
                     size_t count, bool add);

CUresult Update(CUgraphExec exec_handle, CUgraph handle, CUgraphExecUpdateResultInfo* info);

const char* TypeName(CUgraphNodeType type);

}  // namespace gpupool::client::graph

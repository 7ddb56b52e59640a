// The objects behind CUgraph, CUgraphNode and CUgraphExec handles: graphs.cc makes them
// from stream captures and launches them; graph_nodes.cc builds and reads them node by
// node (cuGraphAdd*Node and the calls that read, change and connect nodes);
// graph_conditionals.cc makes and runs conditional nodes.
//
// A graph is its nodes in creation order, each with the nodes it runs after. Instantiating
// copies the nodes in an order that runs each after its dependencies; a launch issues them
// in that order on the launch stream. So branches that a GPU could run side by side run
// one after another, with the same results.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "remote/client/graph/graphs.h"

namespace gpupool::client::graph {

constexpr uint32_t kGraphMagic = 0x67726631;      // "grf1"
constexpr uint32_t kGraphExecMagic = 0x67657831;  // "gex1"
constexpr uint32_t kNodeMagic = 0x676e6431;       // "gnd1"

struct Graph;

// A user object (cuUserObjectCreate): a destructor the driver calls once the last
// reference is released. References are held by the program (counted only), by graphs,
// by instantiated graphs and by their launches until those complete (user_objects.cc).
struct UserObject;

// The references one holder owns: copies take references of their own, destruction
// releases them (a count reaching zero runs the destructor, on the releasing thread).
class UserObjectRefs {
 public:
  UserObjectRefs() = default;
  UserObjectRefs(const UserObjectRefs& other) { Add(other); }
  UserObjectRefs& operator=(const UserObjectRefs& other);
  ~UserObjectRefs() { Clear(); }

  // `count` more references to `object`: new ones, or (move) the program's own.
  void Retain(UserObject* object, uint64_t count, bool move);
  // CUDA_ERROR_INVALID_VALUE when this holds fewer than `count`.
  CUresult Release(UserObject* object, uint64_t count);
  void Add(const UserObjectRefs& other);  // new references to all of `other`'s
  void Clear();
  bool empty() const { return counts_.empty(); }

 private:
  std::map<UserObject*, uint64_t> counts_;
};

// Graph memory: the allocation of a memory allocation node (cuGraphAddMemAllocNode, or
// cuMemAllocAsync on a capturing stream). CUDA fixes its address when the node is made and
// keeps it for every launch, so the memory is allocated on the GPU then (an ordinary
// allocation, which failover keeps like any other) and kept while a graph or an
// instantiated graph has the node, or a launch left it allocated: it is freed on the GPU
// once neither holds. A launch marks it allocated (the allocation node) and freed (a free
// node, cuMemFree or cuMemFreeAsync), as CUDA's lifetime rules say.
struct GraphMemoryHold {
  CUdeviceptr dptr = 0;
  explicit GraphMemoryHold(CUdeviceptr address) : dptr(address) {}
  ~GraphMemoryHold();  // the node's hold goes: freed on the GPU unless a launch left it in use
  GraphMemoryHold(const GraphMemoryHold&) = delete;
  GraphMemoryHold& operator=(const GraphMemoryHold&) = delete;
};

// Allocates `bytes` of graph memory on `device` (in the current context when it is that
// device's, else in the device's primary context).
CUresult NewGraphMemory(int device, size_t bytes, std::shared_ptr<GraphMemoryHold>* hold);
// Whether `dptr` is the start of graph memory (not yet freed on the GPU).
bool IsGraphMemory(CUdeviceptr dptr);
// Whether a launch left graph memory `dptr` allocated.
bool GraphMemoryInUse(CUdeviceptr dptr);
// A launch reached its allocation node (in_use) or a free of it (not): false when `dptr` is
// not graph memory, or a free finds it not in use.
bool SetGraphMemoryInUse(CUdeviceptr dptr, bool in_use);
// cuMemFree or cuMemFreeAsync outside a capture: false when `dptr` is not graph memory;
// else *status says whether it was in use (CUDA_SUCCESS) or not (CUDA_ERROR_INVALID_VALUE).
bool FreeGraphMemory(CUdeviceptr dptr, CUresult* status);
// cuDeviceGetGraphMemAttribute's figures for `device`: bytes in use and allocated (reserved),
// and their high watermarks; ResetGraphMemoryHigh sets a watermark back to the current value.
struct GraphMemoryUse {
  uint64_t used = 0, used_high = 0, reserved = 0, reserved_high = 0;
};
GraphMemoryUse GraphMemoryUseOf(int device);
void ResetGraphMemoryHigh(int device, bool used, bool reserved);

// The condition of conditional nodes (cuGraphConditionalHandleCreate): a 4-byte slot of
// device memory whose address is the handle, so that a kernel's cudaGraphSetConditional
// (the sim's built-in) stores its value there (graph_conditionals.cc). Kept while a graph,
// an instantiated graph or a conditional node has it; its slot is freed with it.
struct ConditionalHandle {
  CUdeviceptr slot = 0;
  unsigned default_value = 0;
  bool assign_default = false;  // CU_GRAPH_COND_ASSIGN_DEFAULT: set at each launch's start
  ~ConditionalHandle();
};

// One node, with copies of its parameters (the caller's structures may go away).
struct Node {
  uint32_t magic = kNodeMagic;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  Graph* owner = nullptr;   // nullptr for the copies an instantiated graph keeps
  std::vector<Node*> deps;  // nodes of `owner` that this one runs after
  bool enabled = true;      // cuGraphNodeSetEnabled (instantiated graphs only)

  // CU_GRAPH_NODE_TYPE_KERNEL: the arguments packed in the kernel's layout.
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_mem = 0;
  std::vector<char> params;
  std::vector<void*> param_pointers;  // into `params`, as cuGraphKernelNodeGetParams gives them
  // cuGraphKernelNodeSetAttribute values, by attribute (hints, read back as set; the
  // cooperative attribute makes the launch cooperative).
  std::map<int, CUkernelNodeAttrValue> attributes;
  // CU_GRAPH_NODE_TYPE_MEMCPY
  CUDA_MEMCPY3D copy{};
  // CU_GRAPH_NODE_TYPE_MEMSET
  CUDA_MEMSET_NODE_PARAMS memset{};
  // CU_GRAPH_NODE_TYPE_HOST
  CUDA_HOST_NODE_PARAMS host{};
  // CU_GRAPH_NODE_TYPE_EVENT_RECORD and CU_GRAPH_NODE_TYPE_WAIT_EVENT
  CUevent event = nullptr;
  // CU_GRAPH_NODE_TYPE_GRAPH: the node's own copy of the child graph.
  std::shared_ptr<Graph> child;
  // CU_GRAPH_NODE_TYPE_MEM_ALLOC: its graph memory (shared with the copy an instantiated
  // graph keeps), the parameters as given (cuGraphMemAllocNodeGetParams) and their access
  // descriptors. CU_GRAPH_NODE_TYPE_MEM_FREE: the address it frees, in `alloc.dptr`.
  std::shared_ptr<GraphMemoryHold> memory;
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  std::vector<CUmemAccessDesc> access;
  // CU_GRAPH_NODE_TYPE_CONDITIONAL: its condition, kind and body graphs (made by the node,
  // as CUDA makes them; `body_handles` is the array cuGraphAddNode hands out).
  std::shared_ptr<ConditionalHandle> condition;
  CUgraphConditionalNodeType conditional_type = CU_GRAPH_COND_TYPE_IF;
  std::vector<std::shared_ptr<Graph>> bodies;
  std::vector<CUgraph> body_handles;
  // A call recorded by a stream capture (every captured type but kernels, which are
  // recorded as kernel nodes): run as recorded.
  CapturedWork work;
};

struct Graph {
  uint32_t magic = kGraphMagic;
  std::vector<std::unique_ptr<Node>> nodes;  // in creation order
  std::map<const Node*, Node*> clone_of;     // a clone's original nodes -> its own
  // Set while an instantiated graph of this one exists (kept by both, as either may go
  // first): a graph with memory nodes may have only one at a time.
  std::shared_ptr<bool> instantiated = std::make_shared<bool>(false);
  UserObjectRefs user_objects;  // cuGraphRetainUserObject; clones and instantiations copy
  // The conditional handles made for this graph (cuGraphConditionalHandleCreate).
  std::vector<std::shared_ptr<ConditionalHandle>> conditions;
  bool conditional_body = false;  // a conditional node's body: the node owns it
  ~Graph();                       // stale handles to it and its nodes are refused from then on
};

// The conditionals that a launch of `graph` (its nodes, child graphs and bodies) sets to
// their default value before its first node (CU_GRAPH_COND_ASSIGN_DEFAULT).
void CollectDefaultConditions(const Graph& graph, std::vector<std::shared_ptr<ConditionalHandle>>* handles);

// Makes `node` a conditional node from `params` (cuGraphAddNode): checks them, makes its
// body graphs and gives their handles in params->phGraph_out.
CUresult SetConditional(Node* node, CUDA_CONDITIONAL_NODE_PARAMS* params);

// Makes `condition` (its slot allocated) a handle programs may name
// (cuGraphConditionalHandleCreate); forgotten when the handle is destroyed.
void RegisterCondition(const std::shared_ptr<ConditionalHandle>& condition);

// Gives a copied conditional node body graphs of its own (clones and instantiations).
void CopyBodies(Node* node);

// Runs a conditional node on `stream` (graph_conditionals.cc): waits for the stream to
// reach it, reads its condition and issues the body it selects (again for a while node,
// until the condition reads zero).
CUresult RunConditional(const Node& node, CUstream stream);

// Runs `graph`'s nodes on `stream` in launch order (a child graph or a conditional body).
CUresult RunGraph(const Graph& graph, CUstream stream);

// Edge data other than the default (all zeros) asks for programmatic dependencies, which
// this library does not do: CUDA_ERROR_NOT_SUPPORTED, saying so (graph_nodes.cc).
CUresult CheckEdges(const CUgraphEdgeData* edges, size_t count);

// Whether `graph` has a conditional node (such a graph cannot be a child graph).
bool HasConditionalNodes(const Graph& graph);

// Whether `graph` has a memory allocation or free node (such a graph cannot be cloned, be
// a child graph, lose nodes or edges, or be instantiated twice at once).
bool HasMemoryNodes(const Graph& graph);

struct GraphExec {
  uint32_t magic = kGraphExecMagic;
  cuuint64_t flags = 0;
  std::shared_ptr<bool> instantiated;   // its graph's flag, cleared when this goes
  std::vector<Node> nodes;              // copies, in launch order
  std::map<const Node*, size_t> index;  // a node of the instantiated graph -> its copy
  // Per copy, the positions of the nodes it ran after (cuGraphExecUpdate compares a new
  // graph with this, as the instantiated graph may have been destroyed since).
  std::vector<std::vector<size_t>> shape;
  UserObjectRefs user_objects;  // the instantiated (or last updating) graph's
  // Conditionals set to their default value at each launch (CollectDefaultConditions).
  std::vector<std::shared_ptr<ConditionalHandle>> default_conditions;
};

// The references of `graph` and of its child graphs, for a launch to hold until it ends.
void CollectUserObjects(const Graph& graph, UserObjectRefs* refs);

// The object behind a handle; nullptr when the handle is not a live one of that kind.
Graph* AsGraph(CUgraph handle);
GraphExec* AsGraphExec(CUgraphExec handle);
Node* AsNode(CUgraphNode handle);

// A deep copy: nodes, edges and child graphs; clone_of maps `graph`'s nodes to the copy's.
std::unique_ptr<Graph> Clone(const Graph& graph);

// `graph`'s nodes in an order that runs each after its dependencies (creation order among
// nodes that do not depend on each other). False when the edges make a cycle.
bool LaunchOrder(const Graph& graph, std::vector<const Node*>* order);

// For each node of `order` (a launch order), the sorted positions in it of its
// dependencies.
std::vector<std::vector<size_t>> ShapeOf(const std::vector<const Node*>& order);

// Issues one node's work on `stream` (a disabled node does nothing).
CUresult RunNode(const Node& node, CUstream stream);

// A copy of `node` for an instantiated graph: no owner or edges, its child graph copied.
Node ExecCopy(const Node& node);

}  // namespace gpupool::client::graph

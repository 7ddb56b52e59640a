// Conditional graph nodes (CUDA 12.4 on): cuGraphConditionalHandleCreate, and if, while
// and switch nodes made by cuGraphAddNode, whose body graphs the program fills with
// cuGraphAdd*Node or a capture (cuStreamBeginCaptureToGraph).
//
// A GPU evaluates a conditional node on the device, so a graph launch never waits on the
// host. Here a graph's nodes are issued from the host (graphs.cc), so a launch reaching a
// conditional node waits until its stream has done the work before it, reads the
// condition (4 bytes) and issues the body it selects: cuGraphLaunch of a graph with
// conditional nodes returns once its last conditional node has been evaluated, not at
// once. The results are the same.
//
// The condition lives in a 4-byte slot of device memory whose address is the handle, so
// a kernel's cudaGraphSetConditional (a built-in of the sim's PTX engine) is a store
// there, bounds-checked like any other. A GPU host's cuda backend runs kernels on the
// driver, whose cudaGraphSetConditional takes only its own handles: there, creating a
// handle answers CUDA_ERROR_NOT_SUPPORTED.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "remote/client/core/api_common.h"
#include "remote/client/graph/graph_model.h"
#include "remote/client/ops/mem_pools.h"
#include "remote/client/ops/memory.h"
#include "remote/client/ops/stream.h"

namespace gpupool::client::graph {
namespace {

// Live handles by slot address (the handle a program holds), and their lock. Never
// destroyed: a capture still open at exit lets its graph, and so its handles, go during
// static destruction.
std::mutex& ConditionsMu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<CUdeviceptr, std::weak_ptr<ConditionalHandle>>& Conditions() {
  static auto* conditions = new std::map<CUdeviceptr, std::weak_ptr<ConditionalHandle>>;
  return *conditions;
}

std::shared_ptr<ConditionalHandle> ConditionOf(CUgraphConditionalHandle handle) {
  std::lock_guard<std::mutex> lock(ConditionsMu());
  auto found = Conditions().find(static_cast<CUdeviceptr>(handle));
  return found == Conditions().end() ? nullptr : found->second.lock();
}

// Waits for `stream` to reach this point and reads the condition.
CUresult ReadCondition(const ConditionalHandle& condition, CUstream stream, unsigned* value) {
  if (CUresult status = ops::CopyDtoH(value, condition.slot, sizeof(*value), stream, true); status != CUDA_SUCCESS) {
    return status;
  }
  return ops::StreamCall(stream, dataplane::kOpStreamSynchronize);
}

}  // namespace

ConditionalHandle::~ConditionalHandle() {
  {
    std::lock_guard<std::mutex> lock(ConditionsMu());
    Conditions().erase(slot);
  }
  // An error after shutdown, or once its context is destroyed, is of no consequence.
  if (slot != 0) (void)Guard("cuMemFree_v2", [&] { return ops::FreeDeviceMemory(slot); });
}

CUresult SetConditional(Node* node, CUDA_CONDITIONAL_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<ConditionalHandle> condition = ConditionOf(params->handle);
  if (condition == nullptr) {
    LogError("cuGraphAddNode: %#llx is not a conditional handle (cuGraphConditionalHandleCreate)",
             static_cast<unsigned long long>(params->handle));
    return CUDA_ERROR_INVALID_VALUE;
  }
  const unsigned size = params->size;
  bool size_ok = false;
  const char* kind = "";
  switch (params->type) {
    case CU_GRAPH_COND_TYPE_IF:
      size_ok = size == 1 || size == 2, kind = "an if";
      break;
    case CU_GRAPH_COND_TYPE_WHILE:
      size_ok = size == 1, kind = "a while";
      break;
    case CU_GRAPH_COND_TYPE_SWITCH:
      size_ok = size >= 1, kind = "a switch";
      break;
    default:
      LogError("cuGraphAddNode: conditional node type %d is none of if, while and switch",
               static_cast<int>(params->type));
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (!size_ok) {
    LogError(
        "cuGraphAddNode: %s node of %u bodies (an if node has 1 or 2, a while node 1, a "
        "switch node at least 1)",
        kind, size);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (params->ctx != nullptr && AsContext(params->ctx) == nullptr) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  node->type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  node->condition = std::move(condition);
  node->conditional_type = params->type;
  node->bodies.clear();
  node->body_handles.clear();
  for (unsigned i = 0; i < size; ++i) {
    auto body = std::make_shared<Graph>();
    body->conditional_body = true;
    node->body_handles.push_back(reinterpret_cast<CUgraph>(body.get()));
    node->bodies.push_back(std::move(body));
  }
  node->work = nullptr;
  params->phGraph_out = node->body_handles.data();
  return CUDA_SUCCESS;
}

void CopyBodies(Node* node) {
  for (size_t i = 0; i < node->bodies.size(); ++i) {
    std::shared_ptr<Graph> body = Clone(*node->bodies[i]);
    body->conditional_body = true;
    node->body_handles[i] = reinterpret_cast<CUgraph>(body.get());
    node->bodies[i] = std::move(body);
  }
}

CUresult RunGraph(const Graph& graph, CUstream stream) {
  std::vector<const Node*> order;
  if (!LaunchOrder(graph, &order)) return CUDA_ERROR_INVALID_VALUE;
  for (const Node* node : order) {
    if (CUresult status = RunNode(*node, stream); status != CUDA_SUCCESS) return status;
  }
  return CUDA_SUCCESS;
}

CUresult RunConditional(const Node& node, CUstream stream) {
  unsigned value = 0;
  if (CUresult status = ReadCondition(*node.condition, stream, &value); status != CUDA_SUCCESS) {
    return status;
  }
  switch (node.conditional_type) {
    case CU_GRAPH_COND_TYPE_IF:
      if (value != 0) return RunGraph(*node.bodies[0], stream);
      return node.bodies.size() == 2 ? RunGraph(*node.bodies[1], stream) : CUDA_SUCCESS;
    case CU_GRAPH_COND_TYPE_WHILE:
      while (value != 0) {
        if (CUresult status = RunGraph(*node.bodies[0], stream); status != CUDA_SUCCESS) {
          return status;
        }
        if (CUresult status = ReadCondition(*node.condition, stream, &value); status != CUDA_SUCCESS) {
          return status;
        }
      }
      return CUDA_SUCCESS;
    case CU_GRAPH_COND_TYPE_SWITCH:
      return value < node.bodies.size() ? RunGraph(*node.bodies[value], stream) : CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

void CollectDefaultConditions(const Graph& graph, std::vector<std::shared_ptr<ConditionalHandle>>* handles) {
  for (const auto& node : graph.nodes) {
    if (node->condition != nullptr && node->condition->assign_default &&
        std::find(handles->begin(), handles->end(), node->condition) == handles->end()) {
      handles->push_back(node->condition);
    }
    if (node->child != nullptr) CollectDefaultConditions(*node->child, handles);
    for (const auto& body : node->bodies) CollectDefaultConditions(*body, handles);
  }
}

void RegisterCondition(const std::shared_ptr<ConditionalHandle>& condition) {
  std::lock_guard<std::mutex> lock(ConditionsMu());
  Conditions()[condition->slot] = condition;
}

bool HasConditionalNodes(const Graph& graph) {
  for (const auto& node : graph.nodes) {
    if (node->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) return true;
  }
  return false;
}

}  // namespace gpupool::client::graph

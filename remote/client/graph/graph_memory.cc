// Graph memory (graph_model.h): the allocations of memory allocation nodes, their in-use
// state across launches and frees, and the figures cuDeviceGetGraphMemAttribute reports.
//
// CUDA reserves an allocation node's address when the node is made and maps memory at it
// when a launch reaches the node. The agent's GPUs have no separate reservation, so the
// memory is allocated when the node is made, at an address of the library's choosing like
// every allocation (it stays the same on a replacement GPU), and is freed on the GPU once
// no graph or instantiated graph has the node and no launch left it in use. "Reserved"
// bytes are those allocated this way; "used" bytes are those a launch left in use.
#include <map>
#include <mutex>

#include "remote/client/core/api_common.h"
#include "remote/client/graph/graph_model.h"
#include "remote/client/ops/mem_pools.h"
#include "remote/client/ops/memory.h"

namespace gpupool::client::graph {
namespace {

struct Entry {
  size_t bytes = 0;
  int device = 0;
  bool held = true;     // a node (of a graph or an instantiated graph) still has it
  bool in_use = false;  // a launch reached its allocation node, and no free since
};

std::mutex memory_mu;
// Never destroyed: a capture still open at exit lets its nodes go during static
// destruction, and their holds come here.
std::map<CUdeviceptr, Entry>& Entries() {
  static auto* entries = new std::map<CUdeviceptr, Entry>;
  return *entries;
}
std::map<int, GraphMemoryUse>& UseByDevice() {
  static auto* use = new std::map<int, GraphMemoryUse>;
  return *use;
}

void AddUsed(const Entry& entry, int64_t bytes) {
  GraphMemoryUse& use = UseByDevice()[entry.device];
  use.used += bytes;
  if (use.used > use.used_high) use.used_high = use.used;
}

// Under memory_mu: forgets `found` when nothing holds it any more and says so (its memory
// is then freed on the GPU by the caller, outside the lock).
bool ForgetIfUnheld(std::map<CUdeviceptr, Entry>::iterator found) {
  if (found->second.held || found->second.in_use) return false;
  UseByDevice()[found->second.device].reserved -= found->second.bytes;
  Entries().erase(found);
  return true;
}

}  // namespace

GraphMemoryHold::~GraphMemoryHold() {
  bool free_now = false;
  {
    std::lock_guard<std::mutex> lock(memory_mu);
    auto found = Entries().find(dptr);
    if (found != Entries().end()) {
      found->second.held = false;
      free_now = ForgetIfUnheld(found);
    }
  }
  // Not graph memory any more, so this is an ordinary free (an error after shutdown, or
  // when its context was destroyed with it, is of no consequence here).
  if (free_now) (void)Guard("cuMemFree_v2", [&] { return ops::FreeDeviceMemory(dptr); });
}

CUresult NewGraphMemory(int device, size_t bytes, std::shared_ptr<GraphMemoryHold>* hold) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr dptr = 0;
  if (CUresult status = AllocateOnDevice(device, nullptr, bytes, &dptr); status != CUDA_SUCCESS) {
    return status;
  }
  {
    std::lock_guard<std::mutex> lock(memory_mu);
    Entries()[dptr] = Entry{bytes, device, true, false};
    GraphMemoryUse& use = UseByDevice()[device];
    use.reserved += bytes;
    if (use.reserved > use.reserved_high) use.reserved_high = use.reserved;
  }
  *hold = std::make_shared<GraphMemoryHold>(dptr);
  return CUDA_SUCCESS;
}

bool IsGraphMemory(CUdeviceptr dptr) {
  std::lock_guard<std::mutex> lock(memory_mu);
  return Entries().count(dptr) != 0;
}

bool GraphMemoryInUse(CUdeviceptr dptr) {
  std::lock_guard<std::mutex> lock(memory_mu);
  auto found = Entries().find(dptr);
  return found != Entries().end() && found->second.in_use;
}

namespace {

enum class Marked { kNotGraphMemory, kNotInUse, kDone };

// Marks graph memory `dptr` in use or free, in one look at the registry (a free of memory
// not in use is refused).
Marked Mark(CUdeviceptr dptr, bool in_use) {
  bool free_now = false;
  {
    std::lock_guard<std::mutex> lock(memory_mu);
    auto found = Entries().find(dptr);
    if (found == Entries().end()) return Marked::kNotGraphMemory;
    if (!in_use && !found->second.in_use) return Marked::kNotInUse;
    if (found->second.in_use != in_use) {
      AddUsed(found->second,
              in_use ? static_cast<int64_t>(found->second.bytes) : -static_cast<int64_t>(found->second.bytes));
      found->second.in_use = in_use;
    }
    free_now = ForgetIfUnheld(found);
  }
  if (free_now) (void)Guard("cuMemFree_v2", [&] { return ops::FreeDeviceMemory(dptr); });
  return Marked::kDone;
}

}  // namespace

bool SetGraphMemoryInUse(CUdeviceptr dptr, bool in_use) { return Mark(dptr, in_use) == Marked::kDone; }

bool FreeGraphMemory(CUdeviceptr dptr, CUresult* status) {
  Marked marked = Mark(dptr, false);
  if (marked == Marked::kNotGraphMemory) return false;
  *status = marked == Marked::kDone ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  return true;
}

GraphMemoryUse GraphMemoryUseOf(int device) {
  std::lock_guard<std::mutex> lock(memory_mu);
  auto found = UseByDevice().find(device);
  return found == UseByDevice().end() ? GraphMemoryUse{} : found->second;
}

void ResetGraphMemoryHigh(int device, bool used, bool reserved) {
  std::lock_guard<std::mutex> lock(memory_mu);
  GraphMemoryUse& use = UseByDevice()[device];
  if (used) use.used_high = use.used;
  if (reserved) use.reserved_high = use.reserved;
}

bool HasMemoryNodes(const Graph& graph) {
  for (const auto& node : graph.nodes) {
    if (node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || node->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
      return true;
    }
  }
  return false;
}

}  // namespace gpupool::client::graph

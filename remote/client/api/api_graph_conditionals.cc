// Driver API: cuGraphConditionalHandleCreate (conditional nodes: graph/graph_conditionals.cc).
#include <cstring>
#include <memory>

#include "remote/client/core/api_common.h"
#include "remote/client/graph/graph_model.h"
#include "remote/client/ops/mem_pools.h"
#include "remote/client/ops/memory.h"

using namespace gpupool::client;         // NOLINT
using namespace gpupool::client::graph;  // NOLINT

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle* result, CUgraph handle,
                                                                 CUcontext ctx, unsigned int default_value,
                                                                 unsigned int flags) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Graph* graph = AsGraph(handle);
    if (result == nullptr || graph == nullptr || (flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    Context* context = ctx != nullptr ? AsContext(ctx) : CurrentContext();
    if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (context->magic == kDestroyedContextMagic) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    Device* device = Runtime::Get().device(context->device);
    if (device == nullptr || std::strcmp(device->description().executor, "sim") != 0) {
      return static_cast<CUresult>(ReportUnsupported("cuGraphConditionalHandleCreate",
                                                     "conditional nodes on a GPU host's cuda backend (its kernels' "
                                                     "cudaGraphSetConditional takes the driver's own handles)"));
    }
    auto condition = std::make_shared<ConditionalHandle>();
    if (CUresult status = AllocateOnDevice(context->device, context, sizeof(unsigned), &condition->slot);
        status != CUDA_SUCCESS) {
      condition->slot = 0;
      return status;
    }
    condition->default_value = default_value;
    condition->assign_default = (flags & CU_GRAPH_COND_ASSIGN_DEFAULT) != 0;
    RegisterCondition(condition);
    // The first launch starts from the default value either way.
    if (CUresult status = ops::Memset(condition->slot, default_value, 4, 1, nullptr); status != CUDA_SUCCESS) {
      return status;
    }
    graph->conditions.push_back(condition);
    *result = static_cast<CUgraphConditionalHandle>(condition->slot);
    return CUDA_SUCCESS;
  });
}

// Driver API: user objects (what they are: graph/user_objects.cc).
#include "remote/client/core/api_common.h"
#include "remote/client/graph/graph_model.h"
#include "remote/client/graph/user_objects.h"

namespace uo = gpupool::client::graph;

GPUPOOL_CUDA_API CUresult CUDAAPI cuUserObjectCreate(CUuserObject* result, void* pointer, CUhostFn destroy,
                                                     unsigned int initial_references, unsigned int flags) {
  GPUPOOL_BODY({
    if (result == nullptr || destroy == nullptr || !uo::ValidCount(initial_references) ||
        flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    auto* object = new uo::UserObject;
    object->pointer = pointer;
    object->destroy = destroy;
    object->references = initial_references;
    *result = reinterpret_cast<CUuserObject>(object);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuUserObjectRetain(CUuserObject handle, unsigned int count) {
  GPUPOOL_BODY({
    uo::UserObject* object = uo::AsUserObject(handle);
    if (object == nullptr || !uo::ValidCount(count)) return CUDA_ERROR_INVALID_VALUE;
    uo::AddReferences(object, count);
    return CUDA_SUCCESS;
  });
}

// Releasing more references than the program holds is its error, as on a GPU (where it
// is undefined); here it is refused when the object has fewer references in all.
GPUPOOL_CUDA_API CUresult CUDAAPI cuUserObjectRelease(CUuserObject handle, unsigned int count) {
  GPUPOOL_BODY({
    uo::UserObject* object = uo::AsUserObject(handle);
    if (object == nullptr || !uo::ValidCount(count)) return CUDA_ERROR_INVALID_VALUE;
    return uo::DropReferences(object, count);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphRetainUserObject(CUgraph handle, CUuserObject object_handle,
                                                          unsigned int count, unsigned int flags) {
  GPUPOOL_BODY({
    uo::Graph* graph = uo::AsGraph(handle);
    uo::UserObject* object = uo::AsUserObject(object_handle);
    if (graph == nullptr || object == nullptr || !uo::ValidCount(count) ||
        (flags != 0 && flags != CU_GRAPH_USER_OBJECT_MOVE)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    graph->user_objects.Retain(object, count, flags == CU_GRAPH_USER_OBJECT_MOVE);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphReleaseUserObject(CUgraph handle, CUuserObject object_handle,
                                                           unsigned int count) {
  GPUPOOL_BODY({
    uo::Graph* graph = uo::AsGraph(handle);
    uo::UserObject* object = uo::AsUserObject(object_handle);
    if (graph == nullptr || object == nullptr || !uo::ValidCount(count)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return graph->user_objects.Release(object, count);
  });
}

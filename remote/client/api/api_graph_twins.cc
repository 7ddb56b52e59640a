// Driver API: the exported twins of graph and capture calls (per-thread default stream
// _ptsz forms, older and newer versions) that answer by calling the entry point they
// stand for. They live here, in api/, because graph/ never calls an exported function.
#include "remote/client/core/api_common.h"

#undef cuStreamBeginCaptureToGraph
#undef cuStreamGetCaptureInfo
#undef cuStreamUpdateCaptureDependencies

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph,
                                                                   const CUgraphNode* deps,
                                                                   const CUgraphEdgeData* edges, size_t dep_count,
                                                                   CUstreamCaptureMode mode) {
  return cuStreamBeginCaptureToGraph(stream, graph, deps, edges, dep_count, mode);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
  return cuStreamBeginCapture_v2(stream, mode);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream stream, CUgraph* result) {
  return cuStreamEndCapture(stream, result);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream stream, CUstreamCaptureStatus* status) {
  return cuStreamIsCapturing(stream, status);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream stream, CUstreamCaptureStatus* status,
                                                            cuuint64_t* id, CUgraph* graph,
                                                            const CUgraphNode** dependencies,
                                                            const CUgraphEdgeData** edges, size_t* dependency_count) {
  GPUPOOL_BODY({
    if (edges) *edges = nullptr;
    return cuStreamGetCaptureInfo_v2(stream, status, id, graph, dependencies, dependency_count);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream stream, CUgraphNode* nodes, size_t count,
                                                                    unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(stream, nodes, nullptr, count, flags);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(CUstream stream, CUgraphNode* nodes,
                                                                         size_t count, unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(stream, nodes, nullptr, count, flags);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream stream, CUgraphNode* nodes,
                                                                            const CUgraphEdgeData* edges, size_t count,
                                                                            unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(stream, nodes, edges, count, flags);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                                    CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return cuGraphInstantiateWithParams(exec, graph, params);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return cuGraphLaunch(exec, stream);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec exec, CUstream stream) {
  return cuGraphUpload(exec, stream);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                 size_t count, CUgraphNodeParams* params) {
  return cuGraphAddNode_v2(node, graph, deps, nullptr, count, params);
}

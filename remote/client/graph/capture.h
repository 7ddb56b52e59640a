// The state of stream captures (graph/graphs.cc), shared with the capture and graph entry
// points (api/api_graphs.cc). REQUIRES: mu held for everything here except `captures`.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "remote/client/graph/graph_model.h"

namespace gpupool::client::capture {

using graph::AsGraph;
using graph::AsGraphExec;
using graph::Graph;
using graph::GraphExec;
using graph::Node;

struct Capture {
  uint64_t id = 0;
  CUstream origin = nullptr;
  // The graph the captured calls go into: one of the capture's own, given to the program
  // when the capture ends, or the program's (cuStreamBeginCaptureToGraph).
  std::unique_ptr<Graph> owned;
  Graph* graph = nullptr;
  // The nodes the next captured call runs after (cuStreamGetCaptureInfo's dependencies;
  // cuStreamUpdateCaptureDependencies changes them).
  std::vector<CUgraphNode> frontier;
  std::set<CUstream> streams;                   // the origin and the streams that joined
  std::set<std::pair<int, uint64_t>> on_agent;  // the same, as (device, agent stream id)
  std::set<CUevent> events;                     // recorded in this capture
  bool invalidated = false;
};

extern std::mutex mu;
extern std::atomic<int> captures;  // how many streams capture: AnyCapture's fast path
extern std::map<CUstream, std::shared_ptr<Capture>> by_stream;
extern std::map<CUevent, std::shared_ptr<Capture>> by_event;
extern uint64_t next_capture_id;

// The capture of `stream`, or nullptr.
std::shared_ptr<Capture> CaptureOf(CUstream stream);
// Adds a captured call to the capture's graph, after the frontier, and makes it the
// frontier: so the calls form a chain in the order they were made.
void Append(Capture& capture, Node node);
// Checks that `nodes` are nodes of `graph` (none repeated) for a capture's frontier.
bool FrontierOf(const Graph* graph, const CUgraphNode* nodes, size_t count, std::vector<CUgraphNode>* frontier);
// Adds `stream` (already checked) to `capture`.
void Join(const std::shared_ptr<Capture>& capture, CUstream stream, int device, uint64_t id);
// A graph or an instantiated graph (nullptr: not a valid handle).
template <typename T>
CUresult Destroy(T* object) {
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  object->magic = 0;  // a stale handle whose memory is not reused yet is refused
  delete object;
  return CUDA_SUCCESS;
}
// cuGraphInstantiate's work.
CUresult Instantiate(CUgraphExec* result, CUgraph handle, cuuint64_t flags);
// The capture of `stream` (nullptr: it does not capture); *status is
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when the capture takes no more calls.
std::shared_ptr<Capture> OpenCaptureOf(CUstream stream, CUresult* status);
// Appends `node` to the capture of `stream`; false when it does not capture.
bool AddCaptured(CUstream stream, Node node, CUresult* status);

}  // namespace gpupool::client::capture

// User objects as programs use them to tie a resource's life to a CUDA graph: the
// destructor runs once the last reference goes, whoever held it (the program, a graph, a
// clone, a child graph, an instantiated graph, a launch still running); references the
// program moves to a graph are no longer its own; an update swaps an instantiated
// graph's references for the new graph's; bad arguments are refused.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "../programs/check.h"

namespace {

std::atomic<int> destroyed[8];

void CUDART_CB Destroy(void* which) { destroyed[reinterpret_cast<intptr_t>(which)] += 1; }

cudaUserObject_t Make(intptr_t which, unsigned references = 1) {
  cudaUserObject_t object;
  CHECK(cudaUserObjectCreate(&object, reinterpret_cast<void*>(which), Destroy, references,
                             cudaUserObjectNoDestructorSync));
  return object;
}

__global__ void Spin(unsigned long long* out, int steps) {
  unsigned long long x = 1;
  for (int i = 0; i < steps; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  *out = x;
}

cudaGraph_t GraphOf(unsigned long long* out, int steps, cudaStream_t stream) {
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  Spin<<<1, 1, 0, stream>>>(out, steps);
  CHECK(cudaStreamEndCapture(stream, &graph));
  return graph;
}

// A host function that holds its stream until the program lets it go.
std::atomic<bool> let_go{false};
void CUDART_CB Hold(void*) {
  while (!let_go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

bool DestroyedWithin(int which, int expected, int milliseconds) {
  for (int waited = 0; destroyed[which] != expected && waited < milliseconds; waited += 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return destroyed[which] == expected;
}

}  // namespace

int main() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  unsigned long long* out;
  CHECK(cudaMalloc(&out, sizeof(*out)));

  // The program's own references.
  cudaUserObject_t own = Make(0, 1);
  CHECK(cudaUserObjectRetain(own, 2));
  CHECK(cudaUserObjectRelease(own, 2));
  EXPECT(destroyed[0] == 0);
  CHECK(cudaUserObjectRelease(own, 1));
  EXPECT(destroyed[0] == 1);

  // Moved to a graph; the instantiated graph and then its running launch keep it.
  cudaUserObject_t moved = Make(1);
  cudaGraph_t graph = GraphOf(out, 1000, stream);
  CHECK(cudaGraphRetainUserObject(graph, moved, 1, cudaGraphUserObjectMove));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphDestroy(graph));
  EXPECT(destroyed[1] == 0);
  CHECK(cudaLaunchHostFunc(stream, Hold, nullptr));  // the launch waits behind it
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaGraphExecDestroy(exec));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT(destroyed[1] == 0);  // the launch has not run yet
  let_go = true;
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(DestroyedWithin(1, 1, 5000));

  // A clone holds references of its own; so does a child graph's copy and what is
  // instantiated from its parent.
  cudaUserObject_t shared = Make(2);
  cudaGraph_t original = GraphOf(out, 10, stream);
  CHECK(cudaGraphRetainUserObject(original, shared, 1, 0));
  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, original));
  cudaGraph_t parent;
  CHECK(cudaGraphCreate(&parent, 0));
  cudaGraphNode_t child;
  CHECK(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, original));
  CHECK(cudaGraphDestroy(original));
  CHECK(cudaUserObjectRelease(shared, 1));
  CHECK(cudaGraphDestroy(clone));
  EXPECT(destroyed[2] == 0);  // the child graph node's copy
  cudaGraphExec_t parent_exec;
  CHECK(cudaGraphInstantiate(&parent_exec, parent, 0));
  CHECK(cudaGraphDestroy(parent));
  EXPECT(destroyed[2] == 0);  // the instantiated parent's copy of the child
  CHECK(cudaGraphLaunch(parent_exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaGraphExecDestroy(parent_exec));
  EXPECT(DestroyedWithin(2, 1, 5000));

  // An update gives the instantiated graph the new graph's references.
  cudaUserObject_t first = Make(3), second = Make(4);
  cudaGraph_t one = GraphOf(out, 10, stream), two = GraphOf(out, 20, stream);
  CHECK(cudaGraphRetainUserObject(one, first, 1, cudaGraphUserObjectMove));
  CHECK(cudaGraphRetainUserObject(two, second, 1, cudaGraphUserObjectMove));
  cudaGraphExec_t updated;
  CHECK(cudaGraphInstantiate(&updated, one, 0));
  cudaGraphExecUpdateResultInfo info;
  CHECK(cudaGraphExecUpdate(updated, two, &info));
  CHECK(cudaGraphDestroy(one));
  EXPECT(destroyed[3] == 1);
  CHECK(cudaGraphDestroy(two));
  EXPECT(destroyed[4] == 0);
  CHECK(cudaGraphExecDestroy(updated));
  EXPECT(destroyed[4] == 1);

  // Refused: no destructor-sync flag, no references, a graph releasing what it lacks.
  cudaUserObject_t bad;
  EXPECT(cudaUserObjectCreate(&bad, nullptr, Destroy, 1, 0) == cudaErrorInvalidValue);
  EXPECT(cudaUserObjectCreate(&bad, nullptr, Destroy, 0, cudaUserObjectNoDestructorSync) == cudaErrorInvalidValue);
  cudaUserObject_t kept = Make(5);
  cudaGraph_t empty;
  CHECK(cudaGraphCreate(&empty, 0));
  EXPECT(cudaGraphReleaseUserObject(empty, kept, 1) == cudaErrorInvalidValue);
  EXPECT(cudaGraphRetainUserObject(empty, kept, 0, 0) == cudaErrorInvalidValue);
  EXPECT(cudaGraphRetainUserObject(empty, kept, 1, 7) == cudaErrorInvalidValue);
  CHECK(cudaGraphRetainUserObject(empty, kept, 2, 0));
  CHECK(cudaGraphReleaseUserObject(empty, kept, 2));
  EXPECT(destroyed[5] == 0);
  CHECK(cudaUserObjectRelease(kept, 1));
  EXPECT(destroyed[5] == 1);
  CHECK(cudaGraphDestroy(empty));
  cudaGetLastError();

  CHECK(cudaFree(out));
  CHECK(cudaStreamDestroy(stream));
  for (int i = 0; i < 6; ++i) EXPECT(destroyed[i] == 1);
  std::printf("user_objects: OK\n");
  return 0;
}

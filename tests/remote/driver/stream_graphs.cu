// CUDA graphs captured from streams (cudaStreamBeginCapture ... cudaGraphLaunch): what is
// captured runs at each launch, in order, with the host memory of that moment and the
// kernel arguments of the capture; fork and join across streams through events; host
// functions and graphs inside graphs; a capture broken by a synchronisation is reported;
// captured nodes have types, and a captured copy's parameters are not readable (said so).
#include <cstdio>
#include <vector>

#include "../programs/check.h"
#include "graph_kernels.cuh"

int main() {
  const int n = 1000;
  const size_t bytes = n * sizeof(float);
  float *a = nullptr, *b = nullptr;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  float *in = nullptr, *out = nullptr;
  CHECK(cudaMallocHost(&in, bytes));
  CHECK(cudaMallocHost(&out, bytes));
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  // Capture: upload, fork onto s2 (b = 0, b += 5), main branch a = (a + add) * 2, join,
  // b into the upper half of a, host function, download.
  cudaStreamCaptureStatus status;
  CHECK(cudaStreamIsCapturing(s1, &status));
  EXPECT(status == cudaStreamCaptureStatusNone);
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  CHECK(cudaStreamIsCapturing(s1, &status));
  EXPECT(status == cudaStreamCaptureStatusActive);
  CHECK(cudaStreamIsCapturing(s2, &status));
  EXPECT(status == cudaStreamCaptureStatusNone);
  float add = 1.0f;
  CHECK(cudaMemcpyAsync(a, in, bytes, cudaMemcpyHostToDevice, s1));
  CHECK(cudaEventRecord(fork, s1));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));
  CHECK(cudaStreamIsCapturing(s2, &status));
  EXPECT(status == cudaStreamCaptureStatusActive);  // s2 joined the capture
  CHECK(cudaMemsetAsync(b, 0, bytes, s2));
  AddScalar<<<(n + 255) / 256, 256, 0, s2>>>(b, 5.0f, n);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(join, s2));
  AddScalar<<<(n + 255) / 256, 256, 0, s1>>>(a, add, n);
  add = 100.0f;  // a kernel node keeps the argument of the capture
  Scale<<<(n + 255) / 256, 256, 0, s1>>>(a, 2.0f, n);
  CHECK(cudaStreamWaitEvent(s1, join, 0));
  // After the join: the upper half of a becomes s2's branch (b).
  CHECK(cudaMemcpyAsync(a + n / 2, b, bytes / 2, cudaMemcpyDeviceToDevice, s1));
  CHECK(cudaLaunchHostFunc(s1, CountCall, nullptr));
  CHECK(cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToHost, s1));
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s1, &graph));
  CHECK(cudaStreamIsCapturing(s1, &status));
  EXPECT(status == cudaStreamCaptureStatusNone);
  CHECK(cudaStreamIsCapturing(s2, &status));
  EXPECT(status == cudaStreamCaptureStatusNone);
  EXPECT(host_calls == 0);  // nothing ran while capturing
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  // The copies, memset, kernels and host function: the events order the work, as on a GPU
  // (cudaEventRecordExternal and cudaEventWaitExternal would add nodes).
  EXPECT(nodes == 8);

  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 3; ++launch) {
    // The upload reads the host buffer at launch time, as a memcpy node does.
    for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i + launch);
    CHECK(cudaGraphLaunch(exec, s1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(host_calls == launch + 1);
    for (int i = 0; i < n; ++i) {
      float want = i < n / 2 ? (i + launch + 1.0f) * 2.0f : 5.0f;
      if (out[i] != want) {
        std::fprintf(stderr, "launch %d: out[%d] = %f, want %f\n", launch, i, out[i], want);
        return 1;
      }
    }
  }

  // A graph is not launched into a capture: a GPU's driver refuses the launch and
  // invalidates the capture (driver 580 on an H100). A clone launches as its original.
  CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeThreadLocal));
  EXPECT(cudaGraphLaunch(exec, s2) == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamIsCapturing(s2, &status));
  EXPECT(status == cudaStreamCaptureStatusInvalidated);
  cudaGraph_t outer = nullptr, clone = nullptr;
  EXPECT(cudaStreamEndCapture(s2, &outer) == cudaErrorStreamCaptureInvalidated);
  EXPECT(outer == nullptr);
  (void)cudaGetLastError();
  CHECK(cudaGraphClone(&clone, graph));
  cudaGraphExec_t outer_exec = nullptr;
  CHECK(cudaGraphInstantiate(&outer_exec, clone, 0));
  for (int i = 0; i < n; ++i) in[i] = 10.0f;
  CHECK(cudaGraphLaunch(outer_exec, s2));
  CHECK(cudaStreamSynchronize(s2));
  EXPECT(host_calls == 4);
  EXPECT(out[0] == 22.0f && out[n - 1] == 5.0f);

  // An event recorded with cudaEventRecordExternal is a node of the graph.
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  AddScalar<<<1, 32, 0, s1>>>(a, 1.0f, 32);
  CHECK(cudaEventRecordWithFlags(join, s1, cudaEventRecordExternal));
  EXPECT(cudaEventRecordWithFlags(join, s1, 0x10) == cudaErrorInvalidValue);
  // So is an external wait for an event recorded outside the capture.
  cudaEvent_t outside;
  CHECK(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming));
  CHECK(cudaEventRecord(outside, s2));
  CHECK(cudaStreamWaitEvent(s1, outside, cudaEventWaitExternal));
  cudaGraph_t external = nullptr;
  CHECK(cudaStreamEndCapture(s1, &external));
  CHECK(cudaGraphGetNodes(external, nullptr, &nodes));
  EXPECT(nodes == 3);
  CHECK(cudaGraphDestroy(external));
  // A plain wait for it is refused and breaks the capture, as on a GPU (an H100 with
  // driver 580 answers cudaErrorStreamCaptureIsolation, then cudaErrorStreamCaptureInvalidated).
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  EXPECT(cudaStreamWaitEvent(s1, outside, 0) == cudaErrorStreamCaptureIsolation);
  EXPECT(cudaStreamEndCapture(s1, &external) == cudaErrorStreamCaptureInvalidated);
  EXPECT(external == nullptr);
  (void)cudaGetLastError();
  CHECK(cudaEventDestroy(outside));

  // A synchronisation inside a capture breaks it; the stream is usable again after.
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed));
  AddScalar<<<1, 32, 0, s1>>>(a, 1.0f, 32);
  EXPECT(cudaStreamSynchronize(s1) == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamIsCapturing(s1, &status));
  EXPECT(status == cudaStreamCaptureStatusInvalidated);
  cudaGraph_t broken = nullptr;
  EXPECT(cudaStreamEndCapture(s1, &broken) == cudaErrorStreamCaptureInvalidated);
  EXPECT(broken == nullptr);
  (void)cudaGetLastError();
  CHECK(cudaStreamSynchronize(s1));

  // The legacy default stream cannot capture; ending a capture never begun is refused.
  EXPECT(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal) != cudaSuccess);
  (void)cudaGetLastError();
  EXPECT(cudaStreamEndCapture(s1, &broken) != cudaSuccess);
  (void)cudaGetLastError();

  // A captured copy has no parameters to read here (not supported, and said so).
  cudaGraphNode_t first = nullptr;
  size_t one = 1;
  CHECK(cudaGraphGetNodes(graph, &first, &one));
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(first, &type));
  EXPECT(type == cudaGraphNodeTypeMemcpy);
  cudaMemcpy3DParms copy_params{};
  EXPECT(cudaGraphMemcpyNodeGetParams(first, &copy_params) == cudaErrorNotSupported);
  (void)cudaGetLastError();

  CHECK(cudaGraphExecDestroy(outer_exec));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(clone));
  CHECK(cudaGraphDestroy(graph));
  CHECK_FREE(a, b);
  CHECK_FREE_HOST(in, out);
  std::printf("stream graphs: ok\n");
  return 0;
}

// Stream capture as NVIDIA's graph samples use it, each graph run and its results checked:
//   - a conditional WHILE node added to a graph while it is being captured
//     (cudaStreamGetCaptureInfo, cudaGraphAddNode, cudaStreamUpdateCaptureDependencies),
//     its body captured into the node's body graph with cudaStreamBeginCaptureToGraph and
//     ended with cudaStreamEndCapture(stream, NULL), as graphConditionalNodes does;
//   - allocation and free nodes captured on two streams (cudaMallocAsync, cudaFreeAsync,
//     events between them), the helper stream destroyed before the capture ends, as
//     graphMemoryNodes does; the stream the capture began on cannot be destroyed while
//     it captures.
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace {

constexpr int kCount = 1024;

// Counts down *counter (if not zero) and sets the condition to what is left; logs a run.
__global__ void CountDown(int* counter, int* runs, cudaGraphConditionalHandle handle) {
  if (*counter > 0) --*counter;
  ++*runs;
  cudaGraphSetConditional(handle, *counter);
}

__global__ void MarkDone(int* done) { *done += 1; }

__global__ void Square(const float* in, float* out, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) out[i] = in[i] * in[i];
}

__global__ void Negate(const float* in, float* out, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) out[i] = -in[i];
}

// A -> WHILE [ C ] -> D, where A and C both run CountDown.
cudaGraphExec_t CaptureWhileLoop(int* counter, int* runs, int* done) {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t dep_count = 0;
  CHECK(cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, &deps, nullptr, &dep_count));
  EXPECT(status == cudaStreamCaptureStatusActive && graph != nullptr && dep_count == 0);
  cudaGraphConditionalHandle handle;
  CHECK(cudaGraphConditionalHandleCreate(&handle, graph));
  CountDown<<<1, 1, 0, stream>>>(counter, runs, handle);
  CHECK(cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, &deps, nullptr, &dep_count));
  EXPECT(dep_count == 1);
  cudaGraphNodeParams params = {cudaGraphNodeTypeConditional};
  params.conditional.handle = handle;
  params.conditional.type = cudaGraphCondTypeWhile;
  params.conditional.size = 1;
  cudaGraphNode_t conditional;
  CHECK(cudaGraphAddNode(&conditional, graph, deps, nullptr, dep_count, &params));
  cudaGraph_t body = params.conditional.phGraph_out[0];
  CHECK(cudaStreamUpdateCaptureDependencies(stream, &conditional, nullptr, 1, cudaStreamSetCaptureDependencies));
  MarkDone<<<1, 1, 0, stream>>>(done);
  cudaGraph_t captured = nullptr;
  CHECK(cudaStreamEndCapture(stream, &captured));
  EXPECT(captured == graph);
  CHECK(cudaStreamDestroy(stream));

  cudaStream_t body_stream;
  CHECK(cudaStreamCreate(&body_stream));
  CHECK(cudaStreamBeginCaptureToGraph(body_stream, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
  CountDown<<<1, 1, 0, body_stream>>>(counter, runs, handle);
  CHECK(cudaStreamEndCapture(body_stream, nullptr));  // the graph is the program's
  CHECK(cudaStreamDestroy(body_stream));
  size_t body_nodes = 0;
  CHECK(cudaGraphGetNodes(body, nullptr, &body_nodes));
  EXPECT(body_nodes == 1);

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, captured, 0));
  CHECK(cudaGraphDestroy(captured));
  return exec;
}

// in -> square (stream) -> [helper: copy the squares out] ; negate -> copy out; the
// helper stream frees the squares and is destroyed before the capture ends.
cudaGraphExec_t CaptureMemoryNodes(const float* input, float* squares_out, float* negated_out) {
  cudaStream_t stream, helper;
  cudaEvent_t squared, negated, freed;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&helper, cudaStreamNonBlocking));
  CHECK(cudaEventCreate(&squared));
  CHECK(cudaEventCreate(&negated));
  CHECK(cudaEventCreate(&freed));
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  float *in = nullptr, *squares = nullptr, *result = nullptr;
  const size_t bytes = kCount * sizeof(float);
  CHECK(cudaMallocAsync(&in, bytes, stream));
  CHECK(cudaMallocAsync(&squares, bytes, stream));
  CHECK(cudaMemcpyAsync(in, input, bytes, cudaMemcpyHostToDevice, stream));
  Square<<<kCount / 256, 256, 0, stream>>>(in, squares, kCount);
  CHECK(cudaEventRecord(squared, stream));
  CHECK(cudaStreamWaitEvent(helper, squared, 0));
  CHECK(cudaMemcpyAsync(squares_out, squares, bytes, cudaMemcpyDeviceToHost, helper));
  CHECK(cudaFreeAsync(in, stream));
  CHECK(cudaMallocAsync(&result, bytes, stream));
  Negate<<<kCount / 256, 256, 0, stream>>>(squares, result, kCount);
  CHECK(cudaEventRecord(negated, stream));
  CHECK(cudaMemcpyAsync(negated_out, result, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaFreeAsync(result, stream));
  CHECK(cudaStreamWaitEvent(helper, negated, 0));
  CHECK(cudaFreeAsync(squares, helper));
  CHECK(cudaEventRecord(freed, helper));
  CHECK(cudaStreamWaitEvent(stream, freed, 0));
  // The helper stream's work is joined back: it may go, and so may the events.
  CHECK(cudaStreamDestroy(helper));
  CHECK(cudaEventDestroy(squared));
  CHECK(cudaEventDestroy(negated));
  CHECK(cudaEventDestroy(freed));
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaGraphDestroy(graph));
  return exec;
}

}  // namespace

int main() {
  int *counter = nullptr, *runs = nullptr, *done = nullptr;
  CHECK(cudaMalloc(&counter, sizeof(int)));
  CHECK(cudaMalloc(&runs, sizeof(int)));
  CHECK(cudaMalloc(&done, sizeof(int)));
  cudaGraphExec_t loop = CaptureWhileLoop(counter, runs, done);
  for (int start : {0, 1, 10}) {
    CHECK(cudaMemcpy(counter, &start, sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(runs, 0, sizeof(int)));
    CHECK(cudaMemset(done, 0, sizeof(int)));
    CHECK(cudaGraphLaunch(loop, 0));
    CHECK(cudaDeviceSynchronize());
    int left = -1, ran = 0, finished = 0;
    CHECK(cudaMemcpy(&left, counter, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&ran, runs, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&finished, done, sizeof(int), cudaMemcpyDeviceToHost));
    // A runs once; the loop body runs until the counter is 0.
    const int expected_runs = start <= 1 ? 1 : start;
    std::printf("while loop from %d: %d run(s), counter %d, done %d\n", start, ran, left, finished);
    EXPECT(left == 0 && ran == expected_runs && finished == 1);
  }
  CHECK(cudaGraphExecDestroy(loop));

  // The ordinary capture: its graph needs somewhere to go.
  cudaStream_t plain;
  CHECK(cudaStreamCreate(&plain));
  CHECK(cudaStreamBeginCapture(plain, cudaStreamCaptureModeGlobal));
  MarkDone<<<1, 1, 0, plain>>>(done);
  cudaGraph_t plain_graph = nullptr;
  CHECK(cudaStreamEndCapture(plain, &plain_graph));
  CHECK(cudaGraphDestroy(plain_graph));
  CHECK(cudaStreamDestroy(plain));

  float *input = nullptr, *squares = nullptr, *negated = nullptr;
  CHECK(cudaMallocHost(&input, kCount * sizeof(float)));
  CHECK(cudaMallocHost(&squares, kCount * sizeof(float)));
  CHECK(cudaMallocHost(&negated, kCount * sizeof(float)));
  cudaGraphExec_t memory_graph = CaptureMemoryNodes(input, squares, negated);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kCount; ++i) input[i] = 0.5f * static_cast<float>((i + round) % 97) - 10.f;
    CHECK(cudaGraphLaunch(memory_graph, stream));
    CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < kCount; ++i) {
      EXPECT(squares[i] == input[i] * input[i]);
      EXPECT(negated[i] == -(input[i] * input[i]));
    }
  }
  CHECK(cudaGraphExecDestroy(memory_graph));
  CHECK(cudaStreamDestroy(stream));
  std::printf("memory nodes captured on two streams, the helper destroyed in the capture: checked\n");

  if (OnTheSim()) {
    // The stream the capture began on, destroyed while it captures: refused and the capture
    // invalidated (the sim's answer; a driver's is not documented).
    cudaStream_t origin;
    CHECK(cudaStreamCreate(&origin));
    CHECK(cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal));
    MarkDone<<<1, 1, 0, origin>>>(done);
    EXPECT(cudaStreamDestroy(origin) == cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    cudaGraph_t broken = nullptr;
    EXPECT(cudaStreamEndCapture(origin, &broken) == cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    CHECK(cudaStreamDestroy(origin));
    // An ordinary capture has nowhere to put its graph without a pointer for it.
    cudaStream_t pointless;
    CHECK(cudaStreamCreate(&pointless));
    CHECK(cudaStreamBeginCapture(pointless, cudaStreamCaptureModeGlobal));
    EXPECT(cudaStreamEndCapture(pointless, nullptr) == cudaErrorInvalidValue);
    cudaGetLastError();
    cudaGraph_t ended = nullptr;
    CHECK(cudaStreamEndCapture(pointless, &ended));
    CHECK(cudaGraphDestroy(ended));
    CHECK(cudaStreamDestroy(pointless));
  }

  CHECK_FREE(counter, runs, done);
  CHECK_FREE_HOST(input, squares, negated);
  std::printf("capture fidelity: PASS\n");
  return 0;
}

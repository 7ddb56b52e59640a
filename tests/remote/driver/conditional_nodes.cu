// Conditional graph nodes as programs use them (CUDA 12.4 on): if, if/else, while and
// switch nodes whose condition a kernel sets with cudaGraphSetConditional; a default
// value assigned at each launch; bodies filled node by node and by capturing into them
// (cudaStreamBeginCaptureToGraph); a conditional node added to a graph while it is being
// captured (cudaStreamGetCaptureInfo, cudaStreamUpdateCaptureDependencies); a nested
// conditional; updates; clones, second instantiations and bad arguments refused.
#include <cstdio>

#include "../programs/check.h"

namespace {

__global__ void SetCondition(cudaGraphConditionalHandle handle, const unsigned* value) {
  cudaGraphSetConditional(handle, *value);
}

__global__ void Add(int* total, int amount) {
  if (threadIdx.x == 0) atomicAdd(total, amount);
}

// A loop body: counts its iterations and goes on while *left, decremented, is positive.
__global__ void CountDown(cudaGraphConditionalHandle handle, int* left, int* iterations) {
  if (threadIdx.x == 0) {
    *iterations += 1;
    *left -= 1;
    cudaGraphSetConditional(handle, *left > 0 ? 1 : 0);
  }
}

cudaGraphNode_t AddKernel(cudaGraph_t graph, const cudaGraphNode_t* deps, size_t count, void* function, void** args) {
  cudaGraphNodeParams params = {};
  params.type = cudaGraphNodeTypeKernel;
  params.kernel.func = function;
  params.kernel.gridDim = dim3(1);
  params.kernel.blockDim = dim3(32);
  params.kernel.kernelParams = args;
  cudaGraphNode_t node;
  CHECK(cudaGraphAddNode(&node, graph, deps, nullptr, count, &params));
  return node;
}

void AddAdd(cudaGraph_t graph, int* total, int amount) {
  void* args[] = {&total, &amount};
  AddKernel(graph, nullptr, 0, reinterpret_cast<void*>(Add), args);
}

// Adds a conditional node of `type` with `size` bodies after `deps`; the bodies in *bodies.
cudaGraphNode_t AddConditional(cudaGraph_t graph, const cudaGraphNode_t* deps, size_t count,
                               cudaGraphConditionalHandle handle, cudaGraphConditionalNodeType type, unsigned size,
                               cudaGraph_t** bodies) {
  cudaGraphNodeParams params = {};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = handle;
  params.conditional.type = type;
  params.conditional.size = size;
  cudaGraphNode_t node;
  CHECK(cudaGraphAddNode(&node, graph, deps, nullptr, count, &params));
  *bodies = params.conditional.phGraph_out;
  return node;
}

// A graph whose kernel sets a new condition to *value, then a conditional node of `type`
// with `size` bodies after it.
struct Branch {
  cudaGraph_t graph;
  cudaGraphConditionalHandle handle;
  cudaGraph_t* bodies;
};
Branch SetThenBranch(const unsigned* value, cudaGraphConditionalNodeType type, unsigned size) {
  Branch branch;
  CHECK(cudaGraphCreate(&branch.graph, 0));
  CHECK(cudaGraphConditionalHandleCreate(&branch.handle, branch.graph));
  void* args[] = {&branch.handle, &value};
  cudaGraphNode_t set = AddKernel(branch.graph, nullptr, 0, reinterpret_cast<void*>(SetCondition), args);
  AddConditional(branch.graph, &set, 1, branch.handle, type, size, &branch.bodies);
  return branch;
}

int Read(const int* device) {
  int value = 0;
  CHECK(cudaMemcpy(&value, device, sizeof(value), cudaMemcpyDeviceToHost));
  return value;
}

void Launch(cudaGraphExec_t exec, cudaStream_t stream) {
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

int main() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  int* total;
  int* left;
  int* iterations;
  unsigned* value;
  CHECK(cudaMalloc(&total, sizeof(int)));
  CHECK(cudaMalloc(&left, sizeof(int)));
  CHECK(cudaMalloc(&iterations, sizeof(int)));
  CHECK(cudaMalloc(&value, sizeof(unsigned)));
  auto set_value = [&](unsigned v) { CHECK(cudaMemcpy(value, &v, sizeof(v), cudaMemcpyHostToDevice)); };
  CHECK(cudaMemset(total, 0, sizeof(int)));

  // If: the body runs when the kernel before it set a non-zero condition.
  {
    auto [graph, handle, bodies] = SetThenBranch(value, cudaGraphCondTypeIf, 1);
    AddAdd(bodies[0], total, 1);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    set_value(1);
    Launch(exec, stream);
    EXPECT(Read(total) == 1);
    set_value(0);
    Launch(exec, stream);
    EXPECT(Read(total) == 1);
    set_value(7);
    Launch(exec, stream);
    EXPECT(Read(total) == 2);
    // A graph with conditional nodes cannot be cloned, instantiated twice at once or be a
    // child graph (a driver answers cudaErrorNotSupported: driver 580 on an H100); a body
    // is not the program's to destroy.
    cudaGraph_t clone = nullptr;
    EXPECT(cudaGraphClone(&clone, graph) == cudaErrorNotSupported);
    cudaGraphExec_t second_exec;
    EXPECT(cudaGraphInstantiate(&second_exec, graph, 0) == cudaErrorNotSupported);
    cudaGraph_t parent;
    cudaGraphNode_t child;
    CHECK(cudaGraphCreate(&parent, 0));
    EXPECT(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, graph) == cudaErrorNotSupported);
    CHECK(cudaGraphDestroy(parent));
    (void)cudaGetLastError();
    CHECK(cudaGraphDestroy(graph));  // the instantiated graph keeps what it needs
    Launch(exec, stream);
    EXPECT(Read(total) == 3);
    CHECK(cudaGraphExecDestroy(exec));
  }

  // If/else: the second body runs when the condition is zero.
  {
    auto [graph, handle, bodies] = SetThenBranch(value, cudaGraphCondTypeIf, 2);
    AddAdd(bodies[0], total, 10);
    AddAdd(bodies[1], total, 100);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaMemset(total, 0, sizeof(int)));
    set_value(0);
    Launch(exec, stream);
    EXPECT(Read(total) == 100);
    set_value(1);
    Launch(exec, stream);
    EXPECT(Read(total) == 110);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }

  // While, with a default of 1 assigned at each launch: the body runs until it clears the
  // condition; a second launch starts from the default again.
  {
    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphConditionalHandle handle;
    CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault));
    cudaGraph_t* bodies;
    AddConditional(graph, nullptr, 0, handle, cudaGraphCondTypeWhile, 1, &bodies);
    void* args[] = {&handle, &left, &iterations};
    AddKernel(bodies[0], nullptr, 0, reinterpret_cast<void*>(CountDown), args);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    int five = 5, three = 3;
    CHECK(cudaMemcpy(left, &five, sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(iterations, 0, sizeof(int)));
    Launch(exec, stream);
    EXPECT(Read(iterations) == 5 && Read(left) == 0);
    CHECK(cudaMemcpy(left, &three, sizeof(int), cudaMemcpyHostToDevice));
    Launch(exec, stream);
    EXPECT(Read(iterations) == 8 && Read(left) == 0);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }

  // While with a condition of 0 (no default assigned, nothing sets it): the body never runs.
  {
    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphConditionalHandle handle;
    CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 0, 0));
    cudaGraph_t* bodies;
    AddConditional(graph, nullptr, 0, handle, cudaGraphCondTypeWhile, 1, &bodies);
    CHECK(cudaMemset(total, 0, sizeof(int)));
    AddAdd(bodies[0], total, 1);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    Launch(exec, stream);
    EXPECT(Read(total) == 0);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }

  // Switch: body n runs for condition n; a condition past the last body runs none.
  {
    auto [graph, handle, bodies] = SetThenBranch(value, cudaGraphCondTypeSwitch, 3);
    for (int i = 0; i < 3; ++i) AddAdd(bodies[i], total, 1 << (4 * i));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaMemset(total, 0, sizeof(int)));
    for (unsigned v : {2u, 0u, 2u, 9u, 1u}) {
      set_value(v);
      Launch(exec, stream);
    }
    EXPECT(Read(total) == 0x211);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }

  // Captured: a kernel, then a conditional node added to the graph being captured, whose
  // body is captured from another stream, then a kernel after the conditional node.
  {
    cudaStream_t body_stream;
    CHECK(cudaStreamCreate(&body_stream));
    CHECK(cudaMemset(total, 0, sizeof(int)));
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    Add<<<1, 1, 0, stream>>>(total, 1);
    cudaStreamCaptureStatus status;
    cudaGraph_t graph;
    const cudaGraphNode_t* deps;
    size_t dep_count = 0;
    CHECK(cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, &deps, nullptr, &dep_count));
    EXPECT(status == cudaStreamCaptureStatusActive && graph != nullptr && dep_count == 1);
    cudaGraphConditionalHandle handle;
    CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault));
    cudaGraph_t* bodies;
    cudaGraphNode_t conditional = AddConditional(graph, deps, dep_count, handle, cudaGraphCondTypeWhile, 1, &bodies);
    CHECK(cudaStreamUpdateCaptureDependencies(stream, &conditional, nullptr, 1, cudaStreamSetCaptureDependencies));
    CHECK(cudaStreamBeginCaptureToGraph(body_stream, bodies[0], nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
    Add<<<1, 1, 0, body_stream>>>(total, 10);
    CountDown<<<1, 32, 0, body_stream>>>(handle, left, iterations);
    cudaGraph_t captured_body;
    CHECK(cudaStreamEndCapture(body_stream, &captured_body));
    EXPECT(captured_body == bodies[0]);
    Add<<<1, 1, 0, stream>>>(total, 1000);
    cudaGraph_t captured;
    CHECK(cudaStreamEndCapture(stream, &captured));
    EXPECT(captured == graph);
    size_t node_count = 0;
    CHECK(cudaGraphGetNodes(captured, nullptr, &node_count));
    EXPECT(node_count == 3);
    size_t body_nodes = 0;
    CHECK(cudaGraphGetNodes(bodies[0], nullptr, &body_nodes));
    EXPECT(body_nodes == 2);
    // The last kernel runs after the conditional node: one edge into it, from it.
    cudaGraphNode_t after[2];
    size_t after_count = 2;
    CHECK(cudaGraphNodeGetDependentNodes(conditional, after, nullptr, &after_count));
    EXPECT(after_count == 1);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, captured, 0));
    int four = 4;
    CHECK(cudaMemcpy(left, &four, sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(iterations, 0, sizeof(int)));
    Launch(exec, stream);
    EXPECT(Read(total) == 1 + 4 * 10 + 1000 && Read(iterations) == 4);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(captured));
    CHECK(cudaStreamDestroy(body_stream));
  }

  // Nested: an if node inside a while loop's body, on a condition of its own.
  {
    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphConditionalHandle loop, choice;
    CHECK(cudaGraphConditionalHandleCreate(&loop, graph, 1, cudaGraphCondAssignDefault));
    CHECK(cudaGraphConditionalHandleCreate(&choice, graph));
    cudaGraph_t* loop_bodies;
    AddConditional(graph, nullptr, 0, loop, cudaGraphCondTypeWhile, 1, &loop_bodies);
    void* count_args[] = {&loop, &left, &iterations};
    cudaGraphNode_t count = AddKernel(loop_bodies[0], nullptr, 0, reinterpret_cast<void*>(CountDown), count_args);
    void* set_args[] = {&choice, &left};  // the if runs while *left is non-zero
    cudaGraphNode_t set = AddKernel(loop_bodies[0], &count, 1, reinterpret_cast<void*>(SetCondition), set_args);
    cudaGraph_t* if_bodies;
    AddConditional(loop_bodies[0], &set, 1, choice, cudaGraphCondTypeIf, 1, &if_bodies);
    AddAdd(if_bodies[0], total, 1);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    int six = 6;
    CHECK(cudaMemcpy(left, &six, sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(iterations, 0, sizeof(int)));
    CHECK(cudaMemset(total, 0, sizeof(int)));
    Launch(exec, stream);
    EXPECT(Read(iterations) == 6 && Read(total) == 5);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }

  // Bad arguments.
  {
    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphConditionalHandle handle;
    EXPECT(cudaGraphConditionalHandleCreate(&handle, graph, 0, 0x80) == cudaErrorInvalidValue);
    CHECK(cudaGraphConditionalHandleCreate(&handle, graph));
    cudaGraphNodeParams params = {};
    params.type = cudaGraphNodeTypeConditional;
    params.conditional.handle = handle;
    cudaGraphNode_t node;
    params.conditional.type = cudaGraphCondTypeIf;
    params.conditional.size = 3;
    EXPECT(cudaGraphAddNode(&node, graph, nullptr, nullptr, 0, &params) == cudaErrorInvalidValue);
    params.conditional.type = cudaGraphCondTypeWhile;
    params.conditional.size = 2;
    EXPECT(cudaGraphAddNode(&node, graph, nullptr, nullptr, 0, &params) == cudaErrorInvalidValue);
    params.conditional.type = cudaGraphCondTypeSwitch;
    params.conditional.size = 0;
    EXPECT(cudaGraphAddNode(&node, graph, nullptr, nullptr, 0, &params) == cudaErrorInvalidValue);
    params.conditional.handle = handle + 4096;  // no handle
    params.conditional.size = 1;
    EXPECT(cudaGraphAddNode(&node, graph, nullptr, nullptr, 0, &params) == cudaErrorInvalidValue);
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    EXPECT(nodes == 0);  // nothing added by the refused calls
    params.conditional.handle = handle;
    cudaGraphNode_t conditional;
    CHECK(cudaGraphAddNode(&conditional, graph, nullptr, nullptr, 0, &params));
    EXPECT(cudaGraphDestroy(params.conditional.phGraph_out[0]) == cudaErrorInvalidValue);
    // Capture dependencies must be nodes of the graph being captured.
    cudaGraph_t other;
    CHECK(cudaGraphCreate(&other, 0));
    cudaGraphNode_t foreign;
    CHECK(cudaGraphAddEmptyNode(&foreign, other, nullptr, 0));
    EXPECT(cudaStreamUpdateCaptureDependencies(stream, &foreign, nullptr, 1, 0) ==
           cudaErrorIllegalState);  // not capturing
    CHECK(cudaStreamBeginCaptureToGraph(stream, graph, &conditional, nullptr, 1, cudaStreamCaptureModeGlobal));
    EXPECT(cudaStreamUpdateCaptureDependencies(stream, &foreign, nullptr, 1, 0) == cudaErrorInvalidValue);
    EXPECT(cudaStreamUpdateCaptureDependencies(stream, &conditional, nullptr, 1, 7) == cudaErrorInvalidValue);
    Add<<<1, 1, 0, stream>>>(total, 1);
    cudaGraph_t ended;
    CHECK(cudaStreamEndCapture(stream, &ended));
    EXPECT(ended == graph);
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    EXPECT(nodes == 2);
    CHECK(cudaGraphDestroy(other));
    CHECK(cudaGraphDestroy(graph));
  }

  CHECK_FREE(value, iterations, left, total);
  CHECK(cudaStreamDestroy(stream));
  std::printf("conditional_nodes: ok\n");
  return 0;
}

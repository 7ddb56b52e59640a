// CUDA graphs built node by node (cudaGraphCreate, cudaGraphAdd*Node): a diamond of copy,
// memset, kernel, empty and host nodes runs in dependency order (not creation order);
// nodes, roots, edges and types read back; kernel parameters changed in the graph, in the
// instantiated graph and through cudaGraphExecUpdate; nodes disabled; child graphs, clones,
// event nodes, the generic cudaGraphAddNode, a DOT file; cycles and bad nodes refused.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../programs/check.h"
#include "graph_kernels.cuh"

namespace {

constexpr int kN = 1000;
constexpr unsigned kBlocks = (kN + 255) / 256;

cudaKernelNodeParams KernelParams(void* kernel, void** args) { return KernelNodeParams(kernel, kBlocks, 256, args); }

// Checks out[i] == want(i) for every i, naming the first difference.
template <typename Want>
bool Expect(const char* what, const float* out, Want want) {
  for (int i = 0; i < kN; ++i) {
    if (out[i] != want(i)) {
      std::fprintf(stderr, "FAIL: %s: [%d] = %f, want %f\n", what, i, out[i], want(i));
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  const size_t bytes = kN * sizeof(float);
  float *a = nullptr, *b = nullptr, *in = nullptr, *out = nullptr, *out2 = nullptr;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMallocHost(&in, bytes));
  CHECK(cudaMallocHost(&out, bytes));
  CHECK(cudaMallocHost(&out2, bytes));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int n = kN;

  // The diamond: upload -> a += add -> join -> a *= 2 -> download a ; memset b -> b += 5 ->
  // join -> download b ; both downloads -> host function.
  cudaGraph_t graph = nullptr;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t upload, zero_b, add_a, add_b, join, scale_a, down_a, down_b, host;
  CHECK(cudaGraphAddMemcpyNode1D(&upload, graph, nullptr, 0, a, in, bytes, cudaMemcpyHostToDevice));
  cudaMemsetParams memset_params{};
  memset_params.dst = b;
  memset_params.value = 0;
  memset_params.elementSize = 4;
  memset_params.width = kN;
  memset_params.height = 1;
  CHECK(cudaGraphAddMemsetNode(&zero_b, graph, nullptr, 0, &memset_params));
  float add = 1.0f, five = 5.0f, two = 2.0f;
  void* add_a_args[] = {&a, &add, &n};
  cudaKernelNodeParams add_a_params = KernelParams(reinterpret_cast<void*>(AddScalar), add_a_args);
  CHECK(cudaGraphAddKernelNode(&add_a, graph, &upload, 1, &add_a_params));
  add = 100.0f;  // the node copied the arguments when it was added
  void* add_b_args[] = {&b, &five, &n};
  cudaKernelNodeParams add_b_params = KernelParams(reinterpret_cast<void*>(AddScalar), add_b_args);
  CHECK(cudaGraphAddKernelNode(&add_b, graph, &zero_b, 1, &add_b_params));
  cudaGraphNode_t both[] = {add_a, add_b};
  CHECK(cudaGraphAddEmptyNode(&join, graph, both, 2));
  void* scale_args[] = {&a, &two, &n};
  cudaKernelNodeParams scale_params = KernelParams(reinterpret_cast<void*>(Scale), scale_args);
  CHECK(cudaGraphAddKernelNode(&scale_a, graph, &join, 1, &scale_params));
  CHECK(cudaGraphAddMemcpyNode1D(&down_a, graph, &scale_a, 1, out, a, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaGraphAddMemcpyNode1D(&down_b, graph, &join, 1, out2, b, bytes, cudaMemcpyDeviceToHost));
  cudaHostNodeParams host_params{CountCall, nullptr};
  cudaGraphNode_t downs[] = {down_a, down_b};
  CHECK(cudaGraphAddHostNode(&host, graph, downs, 2, &host_params));

  // What the graph says of itself.
  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  EXPECT(count == 9);
  CHECK(cudaGraphGetRootNodes(graph, nullptr, &count));
  EXPECT(count == 2);
  cudaGraphNode_t roots[4] = {};
  count = 4;
  CHECK(cudaGraphGetRootNodes(graph, roots, &count));
  // Newest first, as a driver lists them (an H100 with driver 580 does).
  EXPECT(count == 2 && roots[0] == zero_b && roots[1] == upload && roots[2] == nullptr);
  CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  EXPECT(count == 9);
  std::vector<cudaGraphNode_t> from(count), to(count);
  CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), nullptr, &count));
  bool found_edge = false;
  for (size_t i = 0; i < count; ++i) found_edge |= from[i] == join && to[i] == scale_a;
  EXPECT(found_edge);
  CHECK(cudaGraphNodeGetDependencies(join, nullptr, nullptr, &count));
  EXPECT(count == 2);
  CHECK(cudaGraphNodeGetDependentNodes(join, nullptr, nullptr, &count));
  EXPECT(count == 2);
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(add_a, &type));
  EXPECT(type == cudaGraphNodeTypeKernel);
  CHECK(cudaGraphNodeGetType(upload, &type));
  EXPECT(type == cudaGraphNodeTypeMemcpy);
  CHECK(cudaGraphNodeGetType(zero_b, &type));
  EXPECT(type == cudaGraphNodeTypeMemset);
  CHECK(cudaGraphNodeGetType(join, &type));
  EXPECT(type == cudaGraphNodeTypeEmpty);
  CHECK(cudaGraphNodeGetType(host, &type));
  EXPECT(type == cudaGraphNodeTypeHost);

  // Three launches; the upload reads the host buffer of the moment.
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 3; ++launch) {
    for (int i = 0; i < kN; ++i) in[i] = static_cast<float>(i + launch);
    std::memset(out2, 0xff, bytes);
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    EXPECT(host_calls == launch + 1);
    if (!Expect("diamond a", out, [&](int i) { return (i + launch + 1.0f) * 2.0f; })) return 1;
    if (!Expect("diamond b", out2, [](int) { return 5.0f; })) return 1;
  }

  // Kernel parameters: read back (a copy of the arguments), changed in the graph (seen by
  // a new instantiation, not by the old one), changed in the instantiated graph only.
  cudaKernelNodeParams read{};
  CHECK(cudaGraphKernelNodeGetParams(add_a, &read));
  EXPECT(read.gridDim.x == kBlocks && read.blockDim.x == 256);
  EXPECT(*static_cast<float*>(read.kernelParams[1]) == 1.0f);
  EXPECT(*static_cast<float**>(read.kernelParams[0]) == a);
  float three = 3.0f;
  void* add3_args[] = {&a, &three, &n};
  cudaKernelNodeParams add3 = KernelParams(reinterpret_cast<void*>(AddScalar), add3_args);
  CHECK(cudaGraphKernelNodeSetParams(add_a, &add3));
  for (int i = 0; i < kN; ++i) in[i] = static_cast<float>(i);
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (!Expect("old instantiation", out, [](int i) { return (i + 1.0f) * 2.0f; })) return 1;
  cudaGraphExec_t exec3 = nullptr;
  CHECK(cudaGraphInstantiate(&exec3, graph, 0));
  CHECK(cudaGraphLaunch(exec3, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (!Expect("new instantiation", out, [](int i) { return (i + 3.0f) * 2.0f; })) return 1;
  float seven = 7.0f;
  void* add7_args[] = {&a, &seven, &n};
  cudaKernelNodeParams add7 = KernelParams(reinterpret_cast<void*>(AddScalar), add7_args);
  CHECK(cudaGraphExecKernelNodeSetParams(exec3, add_a, &add7));
  CHECK(cudaGraphLaunch(exec3, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (!Expect("exec set params", out, [](int i) { return (i + 7.0f) * 2.0f; })) return 1;
  CHECK(cudaGraphKernelNodeGetParams(add_a, &read));
  EXPECT(*static_cast<float*>(read.kernelParams[1]) == 3.0f);  // the graph kept its own

  // A disabled node does not run; enabled again, it does.
  unsigned enabled = 0;
  CHECK(cudaGraphNodeSetEnabled(exec3, scale_a, 0));
  CHECK(cudaGraphNodeGetEnabled(exec3, scale_a, &enabled));
  EXPECT(enabled == 0);
  CHECK(cudaGraphLaunch(exec3, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (!Expect("disabled scale", out, [](int i) { return i + 7.0f; })) return 1;
  CHECK(cudaGraphNodeSetEnabled(exec3, scale_a, 1));
  CHECK(cudaGraphLaunch(exec3, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (!Expect("enabled scale", out, [](int i) { return (i + 7.0f) * 2.0f; })) return 1;

  // Dependency order, not creation order: the scale is created first, the memset that
  // must precede it second, then the edge memset -> scale.
  cudaGraph_t ordered = nullptr;
  CHECK(cudaGraphCreate(&ordered, 0));
  cudaGraphNode_t late_scale, early_set;
  float ten = 10.0f;
  void* ten_args[] = {&a, &ten, &n};
  cudaKernelNodeParams ten_params = KernelParams(reinterpret_cast<void*>(Scale), ten_args);
  CHECK(cudaGraphAddKernelNode(&late_scale, ordered, nullptr, 0, &ten_params));
  cudaMemsetParams ones{};
  ones.dst = a;
  ones.value = 0x3f800000u;  // 1.0f
  ones.elementSize = 4;
  ones.width = kN;
  ones.height = 1;
  CHECK(cudaGraphAddMemsetNode(&early_set, ordered, nullptr, 0, &ones));
  CHECK(cudaGraphAddDependencies(ordered, &early_set, &late_scale, nullptr, 1));
  EXPECT(cudaGraphAddDependencies(ordered, &early_set, &late_scale, nullptr, 1) ==
         cudaErrorInvalidValue);  // the edge exists already
  (void)cudaGetLastError();
  cudaGraphExec_t ordered_exec = nullptr;
  CHECK(cudaGraphInstantiate(&ordered_exec, ordered, 0));
  CHECK(cudaGraphLaunch(ordered_exec, stream));
  CHECK(cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (!Expect("dependency order", out, [](int) { return 10.0f; })) return 1;

  // A cycle cannot be instantiated; removing an edge breaks it.
  CHECK(cudaGraphAddDependencies(ordered, &late_scale, &early_set, nullptr, 1));
  cudaGraphExec_t cyclic = nullptr;
  EXPECT(cudaGraphInstantiate(&cyclic, ordered, 0) != cudaSuccess);
  (void)cudaGetLastError();
  CHECK(cudaGraphRemoveDependencies(ordered, &late_scale, &early_set, nullptr, 1));
  CHECK(cudaGraphInstantiate(&cyclic, ordered, 0));
  CHECK(cudaGraphExecDestroy(cyclic));

  // A child graph (the diamond) inside another graph, after an event record node, with a
  // host node after it; and a clone of that graph, whose nodes are found from the original's.
  cudaEvent_t event;
  CHECK(cudaEventCreate(&event));
  cudaGraph_t outer = nullptr;
  CHECK(cudaGraphCreate(&outer, 0));
  cudaGraphNode_t record, child, after;
  CHECK(cudaGraphAddEventRecordNode(&record, outer, nullptr, 0, event));
  CHECK(cudaGraphAddChildGraphNode(&child, outer, &record, 1, graph));
  CHECK(cudaGraphAddHostNode(&after, outer, &child, 1, &host_params));
  cudaGraph_t inner = nullptr;
  CHECK(cudaGraphChildGraphNodeGetGraph(child, &inner));
  CHECK(cudaGraphGetNodes(inner, nullptr, &count));
  EXPECT(count == 9);
  cudaGraph_t outer_clone = nullptr;
  CHECK(cudaGraphClone(&outer_clone, outer));
  cudaGraphNode_t cloned_after = nullptr;
  CHECK(cudaGraphNodeFindInClone(&cloned_after, after, outer_clone));
  EXPECT(cloned_after != nullptr && cloned_after != after);
  CHECK(cudaGraphNodeGetType(cloned_after, &type));
  EXPECT(type == cudaGraphNodeTypeHost);
  cudaGraphExec_t outer_exec = nullptr;
  CHECK(cudaGraphInstantiate(&outer_exec, outer_clone, 0));
  int calls_before = host_calls;
  for (int i = 0; i < kN; ++i) in[i] = 2.0f;
  CHECK(cudaGraphLaunch(outer_exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(host_calls == calls_before + 2);        // the child's host node and the outer one
  EXPECT(cudaEventQuery(event) == cudaSuccess);  // recorded by the graph
  if (!Expect("child graph", out, [](int) { return (2.0f + 3.0f) * 2.0f; })) return 1;

  // cudaGraphExecUpdate from graphs captured with other arguments: same shape updates,
  // another shape is refused and the instantiated graph keeps its parameters.
  cudaGraph_t captured = nullptr, recaptured = nullptr, other_shape = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemsetAsync(a, 0, bytes, stream));
  AddScalar<<<kBlocks, 256, 0, stream>>>(a, 1.0f, n);
  CHECK(cudaStreamEndCapture(stream, &captured));
  cudaGraphExec_t captured_exec = nullptr;
  CHECK(cudaGraphInstantiate(&captured_exec, captured, 0));
  // Programs that capture every step destroy each graph once it is instantiated or used
  // to update: the instantiated graph outlives it.
  CHECK(cudaGraphDestroy(captured));
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemsetAsync(a, 0, bytes, stream));
  AddScalar<<<kBlocks, 256, 0, stream>>>(a, 42.0f, n);
  CHECK(cudaStreamEndCapture(stream, &recaptured));
  cudaGraphExecUpdateResultInfo info{};
  CHECK(cudaGraphExecUpdate(captured_exec, recaptured, &info));
  EXPECT(info.result == cudaGraphExecUpdateSuccess);
  CHECK(cudaGraphLaunch(captured_exec, stream));
  CHECK(cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (!Expect("updated", out, [](int) { return 42.0f; })) return 1;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  AddScalar<<<kBlocks, 256, 0, stream>>>(a, 1.0f, n);
  CHECK(cudaStreamEndCapture(stream, &other_shape));
  EXPECT(cudaGraphExecUpdate(captured_exec, other_shape, &info) == cudaErrorGraphExecUpdateFailure);
  EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged);
  (void)cudaGetLastError();
  CHECK(cudaGraphLaunch(captured_exec, stream));
  CHECK(cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (!Expect("kept after a refused update", out, [](int) { return 42.0f; })) return 1;
  // The same node types with other edges: two independent kernels, then the same two
  // one after the other.
  cudaGraph_t apart = nullptr, chained = nullptr;
  CHECK(cudaGraphCreate(&apart, 0));
  CHECK(cudaGraphCreate(&chained, 0));
  cudaGraphNode_t first_kernel, second_kernel;
  CHECK(cudaGraphAddKernelNode(&first_kernel, apart, nullptr, 0, &ten_params));
  CHECK(cudaGraphAddKernelNode(&second_kernel, apart, nullptr, 0, &ten_params));
  CHECK(cudaGraphAddKernelNode(&first_kernel, chained, nullptr, 0, &ten_params));
  CHECK(cudaGraphAddKernelNode(&second_kernel, chained, &first_kernel, 1, &ten_params));
  cudaGraphExec_t apart_exec = nullptr;
  CHECK(cudaGraphInstantiate(&apart_exec, apart, 0));
  EXPECT(cudaGraphExecUpdate(apart_exec, chained, &info) == cudaErrorGraphExecUpdateFailure);
  EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged);
  (void)cudaGetLastError();
  CHECK(cudaGraphExecUpdate(apart_exec, apart, &info));
  CHECK(cudaGraphExecDestroy(apart_exec));
  CHECK(cudaGraphDestroy(apart));
  CHECK(cudaGraphDestroy(chained));
  // A captured kernel is a kernel node with its arguments.
  cudaGraphNode_t captured_nodes[2];
  count = 2;
  CHECK(cudaGraphGetNodes(recaptured, captured_nodes, &count));
  CHECK(cudaGraphNodeGetType(captured_nodes[1], &type));
  EXPECT(type == cudaGraphNodeTypeKernel);
  CHECK(cudaGraphKernelNodeGetParams(captured_nodes[1], &read));
  EXPECT(*static_cast<float*>(read.kernelParams[1]) == 42.0f);

  // The generic cudaGraphAddNode.
  cudaGraph_t generic = nullptr;
  CHECK(cudaGraphCreate(&generic, 0));
  cudaGraphNodeParams node_params{};
  node_params.type = cudaGraphNodeTypeKernel;
  float eleven = 11.0f;
  void* eleven_args[] = {&a, &eleven, &n};
  node_params.kernel.func = reinterpret_cast<void*>(AddScalar);
  node_params.kernel.gridDim = dim3(kBlocks);
  node_params.kernel.blockDim = dim3(256);
  node_params.kernel.kernelParams = eleven_args;
  cudaGraphNode_t generic_node;
  CHECK(cudaGraphAddNode(&generic_node, generic, nullptr, nullptr, 0, &node_params));
  cudaGraphExec_t generic_exec = nullptr;
  CHECK(cudaGraphInstantiate(&generic_exec, generic, 0));
  CHECK(cudaMemsetAsync(a, 0, bytes, stream));
  CHECK(cudaGraphLaunch(generic_exec, stream));
  CHECK(cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (!Expect("generic node", out, [](int) { return 11.0f; })) return 1;

  // A DOT description names the kernels and has the edges.
  const char* dot_path = "graph_nodes.dot";
  CHECK(cudaGraphDebugDotPrint(graph, dot_path, 0));
  std::ifstream dot_file(dot_path);
  std::stringstream dot;
  dot << dot_file.rdbuf();
  std::remove(dot_path);
  EXPECT(dot.str().find("digraph") != std::string::npos);
  EXPECT(dot.str().find("AddScalar") != std::string::npos);
  EXPECT(dot.str().find("->") != std::string::npos);

  // Refused: a dependency from another graph, a memset of 3-byte elements, and an
  // allocation node in host memory (not supported here, and said so; graph_memory covers
  // allocation nodes on the device).
  cudaGraphNode_t refused = nullptr;
  EXPECT(cudaGraphAddEmptyNode(&refused, graph, &late_scale, 1) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  memset_params.elementSize = 3;
  EXPECT(cudaGraphAddMemsetNode(&refused, graph, nullptr, 0, &memset_params) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  cudaMemAllocNodeParams alloc{};
  alloc.poolProps.allocType = cudaMemAllocationTypePinned;
  alloc.poolProps.location.type = cudaMemLocationTypeHost;
  alloc.poolProps.location.id = 0;
  alloc.bytesize = 1 << 20;
  EXPECT(cudaGraphAddMemAllocNode(&refused, generic, nullptr, 0, &alloc) == cudaErrorNotSupported);
  (void)cudaGetLastError();
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  EXPECT(count == 9);  // nothing was added by the refused calls

  // Destroying a node removes its edges.
  CHECK(cudaGraphDestroyNode(join));
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  EXPECT(count == 8);
  CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  EXPECT(count == 5);  // 9 less the 4 edges of the empty node

  for (cudaGraphExec_t e : {exec, exec3, ordered_exec, outer_exec, captured_exec, generic_exec}) {
    CHECK(cudaGraphExecDestroy(e));
  }
  for (cudaGraph_t g : {graph, ordered, outer, outer_clone, recaptured, other_shape, generic}) {
    CHECK(cudaGraphDestroy(g));
  }
  CHECK(cudaEventDestroy(event));
  CHECK_FREE(a, b);
  CHECK_FREE_HOST(in, out, out2);
  std::printf("graph nodes: ok\n");
  return 0;
}

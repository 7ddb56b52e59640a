// Graph memory nodes: cudaMallocAsync and cudaFreeAsync captured from a stream, and
// allocation and free nodes added by hand. The address of an allocation holds for every
// launch, its memory holds data between the nodes, an allocation a launch leaves in use is
// usable by later stream work and must be freed before the graph runs again (unless it was
// instantiated with auto-free), and by another graph's free node, cudaFreeAsync or
// cudaFree. The device's graph memory figures follow. What CUDA refuses is refused: a
// free node of other memory, a second free, a second instantiation, clones, child graphs,
// removing nodes, and ordinary memory freed in a capture (which invalidates it).
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace {

__global__ void Twice(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * in[i];
}

__global__ void AddOne(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + 1;
}

unsigned long long GraphMemory(cudaGraphMemAttributeType attribute) {
  unsigned long long value = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, attribute, &value));
  return value;
}

cudaGraphNodeType TypeOf(cudaGraphNode_t node) {
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(node, &type));
  return type;
}

cudaMemAllocNodeParams AllocParams(size_t bytes) {
  cudaMemAllocNodeParams params = {};
  params.poolProps.allocType = cudaMemAllocationTypePinned;
  params.poolProps.location.type = cudaMemLocationTypeDevice;
  params.poolProps.location.id = 0;
  params.bytesize = bytes;
  return params;
}

}  // namespace

int main() {
  const int n = 4096;
  const size_t bytes = n * sizeof(float);
  const int blocks = (n + 255) / 256;
  float *in = nullptr, *out = nullptr;
  CHECK(cudaMallocHost(&in, bytes));
  CHECK(cudaMallocHost(&out, bytes));
  float *d_in = nullptr, *d_out = nullptr;
  CHECK(cudaMalloc(&d_in, bytes));
  CHECK(cudaMalloc(&d_out, bytes));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const unsigned long long reserved_before = GraphMemory(cudaGraphMemAttrReservedMemCurrent);
  size_t free_before = 0, free_now = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_before, &total));

  // 1. Captured: in -> d_in; tmp = 2 * d_in; d_out = tmp + 1; d_out -> out; tmp freed.
  cudaGraph_t captured = nullptr;
  float* tmp = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(cudaMallocAsync(&tmp, bytes, stream));
  EXPECT(tmp != nullptr);
  CHECK(cudaMemcpyAsync(d_in, in, bytes, cudaMemcpyHostToDevice, stream));
  Twice<<<blocks, 256, 0, stream>>>(d_in, tmp, n);
  AddOne<<<blocks, 256, 0, stream>>>(tmp, d_out, n);
  CHECK(cudaMemcpyAsync(out, d_out, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaFreeAsync(tmp, stream));
  CHECK(cudaStreamEndCapture(stream, &captured));
  // Allocated on the GPU when captured: the graph's memory is reserved, not in use.
  EXPECT(GraphMemory(cudaGraphMemAttrReservedMemCurrent) >= reserved_before + bytes);
  CHECK(cudaMemGetInfo(&free_now, &total));
  // Exact on the sim; a GPU's driver hands out small allocations from larger chunks.
  if (OnTheSim()) EXPECT(free_now <= free_before - bytes);
  EXPECT(GraphMemory(cudaGraphMemAttrUsedMemCurrent) == 0);

  size_t count = 0;
  CHECK(cudaGraphGetNodes(captured, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK(cudaGraphGetNodes(captured, nodes.data(), &count));
  EXPECT(count == 6);
  EXPECT(TypeOf(nodes.front()) == cudaGraphNodeTypeMemAlloc);
  EXPECT(TypeOf(nodes.back()) == cudaGraphNodeTypeMemFree);
  cudaMemAllocNodeParams read = {};
  CHECK(cudaGraphMemAllocNodeGetParams(nodes.front(), &read));
  EXPECT(read.dptr == tmp && read.bytesize == bytes);
  EXPECT(read.poolProps.location.type == cudaMemLocationTypeDevice);
  void* freed = nullptr;
  CHECK(cudaGraphMemFreeNodeGetParams(nodes.back(), &freed));
  EXPECT(freed == tmp);
  EXPECT(cudaGraphMemFreeNodeGetParams(nodes.front(), &freed) == cudaErrorInvalidValue);

  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, captured, 0));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 97 + round);
    CHECK(cudaGraphLaunch(exec, stream));  // freed in the graph: may run again at once
    CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < n; ++i) EXPECT(out[i] == 2.0f * (i % 97 + round) + 1);
  }
  EXPECT(GraphMemory(cudaGraphMemAttrUsedMemCurrent) == 0);
  EXPECT(GraphMemory(cudaGraphMemAttrUsedMemHigh) >= bytes);
  // What CUDA refuses for a graph with memory nodes.
  cudaGraphExec_t second = nullptr;
  EXPECT(cudaGraphInstantiate(&second, captured, 0) == cudaErrorNotSupported);
  cudaGraph_t clone = nullptr;
  EXPECT(cudaGraphClone(&clone, captured) == cudaErrorNotSupported);
  EXPECT(cudaGraphDestroyNode(nodes[2]) == cudaErrorNotSupported);
  cudaGraph_t parent = nullptr;
  CHECK(cudaGraphCreate(&parent, 0));
  cudaGraphNode_t child = nullptr;
  EXPECT(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, captured) == cudaErrorNotSupported);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphInstantiate(&exec, captured, 0));  // the only one again
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(captured));
  CHECK(cudaGraphDestroy(parent));
  // Neither the graph nor an instantiated graph holds it: freed on the GPU.
  EXPECT(GraphMemory(cudaGraphMemAttrReservedMemCurrent) == reserved_before);
  CHECK(cudaMemGetInfo(&free_now, &total));
  if (OnTheSim()) EXPECT(free_now == free_before);

  // 2. By hand: an allocation that outlives the graph. in -> buffer, buffer = 2 * buffer.
  cudaGraph_t producer = nullptr;
  CHECK(cudaGraphCreate(&producer, 0));
  cudaMemAllocNodeParams alloc = AllocParams(bytes);
  cudaGraphNode_t alloc_node = nullptr, upload = nullptr, twice = nullptr;
  CHECK(cudaGraphAddMemAllocNode(&alloc_node, producer, nullptr, 0, &alloc));
  float* buffer = static_cast<float*>(alloc.dptr);
  EXPECT(buffer != nullptr);
  CHECK(cudaGraphAddMemcpyNode1D(&upload, producer, &alloc_node, 1, buffer, in, bytes, cudaMemcpyHostToDevice));
  void* twice_args[] = {&buffer, &buffer, const_cast<int*>(&n)};
  cudaKernelNodeParams kernel = KernelNodeParams(reinterpret_cast<void*>(Twice), blocks, 256, twice_args);
  CHECK(cudaGraphAddKernelNode(&twice, producer, &upload, 1, &kernel));
  cudaGraphExec_t producer_exec = nullptr;
  CHECK(cudaGraphInstantiate(&producer_exec, producer, 0));
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  CHECK(cudaGraphLaunch(producer_exec, stream));
  // In use after the launch: stream work reads it.
  AddOne<<<blocks, 256, 0, stream>>>(buffer, d_out, n);
  CHECK(cudaMemcpyAsync(out, d_out, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  for (int i = 0; i < n; ++i) EXPECT(out[i] == 2.0f * i + 1);
  EXPECT(GraphMemory(cudaGraphMemAttrUsedMemCurrent) == bytes);
  // Not freed: the graph may not run again.
  EXPECT(cudaGraphLaunch(producer_exec, stream) == cudaErrorInvalidValue);
  CHECK(cudaFreeAsync(buffer, stream));
  EXPECT(GraphMemory(cudaGraphMemAttrUsedMemCurrent) == 0);
  CHECK(cudaGraphLaunch(producer_exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaFree(buffer));
  EXPECT(cudaFree(buffer) == cudaErrorInvalidValue);  // freed already

  // Freed by another graph's free node.
  cudaGraph_t consumer = nullptr;
  CHECK(cudaGraphCreate(&consumer, 0));
  cudaGraphNode_t free_node = nullptr, duplicate = nullptr, stray = nullptr;
  CHECK(cudaGraphAddMemFreeNode(&free_node, consumer, nullptr, 0, buffer));
  EXPECT(cudaGraphAddMemFreeNode(&duplicate, consumer, nullptr, 0, buffer) == cudaErrorInvalidValue);
  EXPECT(cudaGraphAddMemFreeNode(&stray, consumer, nullptr, 0, d_in) == cudaErrorInvalidValue);
  cudaGraphExec_t consumer_exec = nullptr;
  CHECK(cudaGraphInstantiate(&consumer_exec, consumer, 0));
  CHECK(cudaGraphLaunch(producer_exec, stream));
  CHECK(cudaGraphLaunch(consumer_exec, stream));
  CHECK(cudaGraphLaunch(producer_exec, stream));  // freed by the consumer
  CHECK(cudaGraphLaunch(consumer_exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(GraphMemory(cudaGraphMemAttrUsedMemCurrent) == 0);

  // Auto-free on launch: each launch frees what the one before left in use.
  CHECK(cudaGraphExecDestroy(producer_exec));
  CHECK(cudaGraphInstantiateWithFlags(&producer_exec, producer, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i + round);
    CHECK(cudaGraphLaunch(producer_exec, stream));
    CHECK(cudaMemcpyAsync(out, buffer, bytes, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < n; ++i) EXPECT(out[i] == 2.0f * (i + round));
  }
  EXPECT(GraphMemory(cudaGraphMemAttrUsedMemCurrent) == bytes);
  // A graph destroyed while its allocation is in use leaves it usable until it is freed.
  CHECK(cudaGraphExecDestroy(producer_exec));
  CHECK(cudaGraphDestroy(producer));
  CHECK(cudaMemcpy(out, buffer, bytes, cudaMemcpyDeviceToHost));
  EXPECT(out[n - 1] == 2.0f * (n - 1 + 2));
  CHECK(cudaFree(buffer));
  EXPECT(GraphMemory(cudaGraphMemAttrReservedMemCurrent) == reserved_before);
  CHECK(cudaMemGetInfo(&free_now, &total));
  if (OnTheSim()) EXPECT(free_now == free_before);
  CHECK(cudaGraphExecDestroy(consumer_exec));
  CHECK(cudaGraphDestroy(consumer));

  // Watermarks reset only to zero (then they are the current figure).
  unsigned long long zero = 0, one = 1;
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
  EXPECT(GraphMemory(cudaGraphMemAttrUsedMemHigh) == 0);
  EXPECT(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &one) == cudaErrorInvalidValue);
  EXPECT(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &zero) == cudaErrorInvalidValue);
  CHECK(cudaDeviceGraphMemTrim(0));

  // Bad parameters.
  cudaGraph_t bad = nullptr;
  CHECK(cudaGraphCreate(&bad, 0));
  cudaMemAllocNodeParams empty = AllocParams(0);
  cudaGraphNode_t none = nullptr;
  EXPECT(cudaGraphAddMemAllocNode(&none, bad, nullptr, 0, &empty) == cudaErrorInvalidValue);
  cudaMemAllocNodeParams elsewhere = AllocParams(bytes);
  elsewhere.poolProps.location.id = 7;
  EXPECT(cudaGraphAddMemAllocNode(&none, bad, nullptr, 0, &elsewhere) != cudaSuccess);
  CHECK(cudaGraphDestroy(bad));

  // Ordinary memory freed in a capture: refused, and the capture is invalidated.
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  EXPECT(cudaFreeAsync(d_in, stream) == cudaErrorInvalidValue);
  cudaGraph_t broken = nullptr;
  EXPECT(cudaStreamEndCapture(stream, &broken) == cudaErrorStreamCaptureInvalidated);
  EXPECT(broken == nullptr);
  cudaGetLastError();
  // d_in is still allocated and usable.
  CHECK(cudaMemcpy(d_in, in, bytes, cudaMemcpyHostToDevice));

  CHECK_FREE(d_in, d_out);
  CHECK(cudaStreamDestroy(stream));
  std::printf("graph_memory: ok\n");
  return 0;
}

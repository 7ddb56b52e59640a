// cuGetProcAddress: how the CUDA runtime finds every driver entry point.
//
// The runtime asks by base name and the CUDA version it was built for ("cuMemAlloc",
// 3020 -> cuMemAlloc_v2); a name may have several implementations by version, and the
// highest one not above the requested version wins. The per-thread-default-stream flag
// selects the same functions (we treat the per-thread default stream like the legacy one:
// each process talks to its GPU over one ordered connection anyway).
//
// Known driver names we do not implement get a stub that returns CUDA_ERROR_NOT_SUPPORTED
// and logs the name once; names we have never heard of get a generic stub of that kind.
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include <cudaProfiler.h>

#include "remote/client/core/api_common.h"

// cuda.h maps these unversioned names to their newest versions; the table needs both.
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuStreamGetCaptureInfo
#undef cuMemcpyBatchAsync
#undef cuStreamUpdateCaptureDependencies
#undef cuStreamBeginCaptureToGraph
#undef cuLinkCreate
#undef cuLinkAddData
#undef cuLinkAddFile
#undef cuGraphAddKernelNode
#undef cuGraphKernelNodeGetParams
#undef cuGraphKernelNodeSetParams
#undef cuGraphExecKernelNodeSetParams
#undef cuGraphGetEdges
#undef cuGraphNodeGetDependencies
#undef cuGraphNodeGetDependentNodes
#undef cuGraphAddDependencies
#undef cuGraphRemoveDependencies
#undef cuGraphAddNode
#undef cuGraphExecUpdate

using namespace gpupool::client;  // NOLINT

namespace {

struct Implementation {
  const char* name;
  int version;  // the first CUDA version whose runtime expects this implementation
  void* function;
};

#define IMPL(name, version, function) \
  { name, version, reinterpret_cast<void*>(&function) }

extern "C" CUresult CUDAAPI cuGetProcAddress(const char*, void**, int, cuuint64_t);
extern "C" CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec*, CUgraph, CUgraphNode*, char*,
                                                  size_t);  // graphs.cc; cuda.h hides it
extern "C" CUresult CUDAAPI cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

const Implementation kImplementations[] = {
    IMPL("cuInit", 2000, cuInit),
    IMPL("cuDriverGetVersion", 2020, cuDriverGetVersion),
    IMPL("cuGetProcAddress", 11030, cuGetProcAddress),
    IMPL("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    IMPL("cuGetExportTable", 3000, cuGetExportTable),
    IMPL("cuGetErrorString", 6000, cuGetErrorString),
    IMPL("cuGetErrorName", 6000, cuGetErrorName),
    IMPL("cuModuleGetLoadingMode", 11070, cuModuleGetLoadingMode),
    // Devices
    IMPL("cuDeviceGet", 2000, cuDeviceGet),
    IMPL("cuDeviceGetCount", 2000, cuDeviceGetCount),
    IMPL("cuDeviceGetName", 2000, cuDeviceGetName),
    IMPL("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    IMPL("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    IMPL("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    IMPL("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    IMPL("cuDeviceComputeCapability", 2000, cuDeviceComputeCapability),
    IMPL("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
    IMPL("cuDeviceGetByPCIBusId", 4010, cuDeviceGetByPCIBusId),
    IMPL("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    IMPL("cuDeviceGetP2PAttribute", 8000, cuDeviceGetP2PAttribute),
    // Primary contexts and the context stack
    IMPL("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    IMPL("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    IMPL("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    IMPL("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    IMPL("cuDevicePrimaryCtxSetFlags", 7000, cuDevicePrimaryCtxSetFlags),
    IMPL("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    IMPL("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    IMPL("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    IMPL("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    IMPL("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    IMPL("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    IMPL("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    IMPL("cuCtxGetDevice", 2000, cuCtxGetDevice),
    IMPL("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    IMPL("cuCtxSynchronize", 2000, cuCtxSynchronize),
    IMPL("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    IMPL("cuCtxRecordEvent", 12050, cuCtxRecordEvent),
    IMPL("cuCtxWaitEvent", 12050, cuCtxWaitEvent),
    IMPL("cuCtxGetFlags", 7000, cuCtxGetFlags),
    IMPL("cuCtxSetFlags", 12010, cuCtxSetFlags),
    IMPL("cuCtxGetApiVersion", 3020, cuCtxGetApiVersion),
    IMPL("cuCtxGetLimit", 3010, cuCtxGetLimit),
    IMPL("cuCtxSetLimit", 3010, cuCtxSetLimit),
    IMPL("cuCtxGetCacheConfig", 3020, cuCtxGetCacheConfig),
    IMPL("cuCtxSetCacheConfig", 3020, cuCtxSetCacheConfig),
    IMPL("cuCtxGetStreamPriorityRange", 5050, cuCtxGetStreamPriorityRange),
    IMPL("cuCtxCreate", 2000, cuCtxCreate),
    IMPL("cuCtxCreate", 3020, cuCtxCreate_v2),
    IMPL("cuCtxCreate", 11040, cuCtxCreate_v3),
    IMPL("cuCtxCreate", 12050, cuCtxCreate_v4),
    IMPL("cuCtxDestroy", 2000, cuCtxDestroy),
    IMPL("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    IMPL("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    IMPL("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    IMPL("cuCtxGetId", 12000, cuCtxGetId),
    IMPL("cuCtxGetSharedMemConfig", 4020, cuCtxGetSharedMemConfig),
    IMPL("cuCtxSetSharedMemConfig", 4020, cuCtxSetSharedMemConfig),
    IMPL("cuCtxResetPersistingL2Cache", 11000, cuCtxResetPersistingL2Cache),
    IMPL("cuProfilerInitialize", 4000, cuProfilerInitialize),
    IMPL("cuProfilerStart", 4000, cuProfilerStart),
    IMPL("cuProfilerStop", 4000, cuProfilerStop),
    // Memory
    IMPL("cuMemAlloc", 3020, cuMemAlloc_v2),
    IMPL("cuMemFree", 3020, cuMemFree_v2),
    IMPL("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    IMPL("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    IMPL("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    IMPL("cuMemHostAlloc", 2020, cuMemHostAlloc),
    IMPL("cuMemFreeHost", 2000, cuMemFreeHost),
    IMPL("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    IMPL("cuMemHostRegister", 4000, cuMemHostRegister),
    IMPL("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    IMPL("cuMemHostUnregister", 4000, cuMemHostUnregister),
    IMPL("cuMemcpy", 4000, cuMemcpy),
    IMPL("cuMemcpyAsync", 4000, cuMemcpyAsync),
    IMPL("cuMemcpyBatchAsync", 12080, cuMemcpyBatchAsync),
    IMPL("cuMemcpyBatchAsync", 13000, cuMemcpyBatchAsync_v2),
    IMPL("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    IMPL("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    IMPL("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    IMPL("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2),
    IMPL("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
    IMPL("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2),
    IMPL("cuMemsetD8", 3020, cuMemsetD8_v2),
    IMPL("cuMemsetD16", 3020, cuMemsetD16_v2),
    IMPL("cuMemsetD32", 3020, cuMemsetD32_v2),
    IMPL("cuMemsetD8Async", 3020, cuMemsetD8Async),
    IMPL("cuMemsetD16Async", 3020, cuMemsetD16Async),
    IMPL("cuMemsetD32Async", 3020, cuMemsetD32Async),
    IMPL("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    IMPL("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    IMPL("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    IMPL("cuMemcpyPeer", 4000, cuMemcpyPeer),
    IMPL("cuMemAllocAsync", 11020, cuMemAllocAsync),
    IMPL("cuMemAllocManaged", 6000, cuMemAllocManaged),
    IMPL("cuMemPrefetchAsync", 8000, cuMemPrefetchAsync),
    IMPL("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2),
    IMPL("cuMemAdvise", 8000, cuMemAdvise),
    IMPL("cuMemAdvise", 12020, cuMemAdvise_v2),
    IMPL("cuMemRangeGetAttribute", 8000, cuMemRangeGetAttribute),
    IMPL("cuMemRangeGetAttributes", 8000, cuMemRangeGetAttributes),
    IMPL("cuStreamAttachMemAsync", 6000, cuStreamAttachMemAsync),
    IMPL("cuMemFreeAsync", 11020, cuMemFreeAsync),
    // Virtual memory management (vmm.cc)
    IMPL("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    IMPL("cuMemAddressReserve", 10020, cuMemAddressReserve),
    IMPL("cuMemAddressFree", 10020, cuMemAddressFree),
    IMPL("cuMemCreate", 10020, cuMemCreate),
    IMPL("cuMemRelease", 10020, cuMemRelease),
    IMPL("cuMemMap", 10020, cuMemMap),
    IMPL("cuMemUnmap", 10020, cuMemUnmap),
    IMPL("cuMemSetAccess", 10020, cuMemSetAccess),
    IMPL("cuMemGetAccess", 10020, cuMemGetAccess),
    IMPL("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    IMPL("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    // Memory pools (mem_pools.cc)
    IMPL("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    IMPL("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    IMPL("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    IMPL("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    IMPL("cuMemGetDefaultMemPool", 13000, cuMemGetDefaultMemPool),
    IMPL("cuMemGetMemPool", 13000, cuMemGetMemPool),
    IMPL("cuMemSetMemPool", 13000, cuMemSetMemPool),
    IMPL("cuMemPoolCreate", 11020, cuMemPoolCreate),
    IMPL("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    IMPL("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    IMPL("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    IMPL("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    IMPL("cuMemPoolSetAccess", 11020, cuMemPoolSetAccess),
    IMPL("cuMemPoolGetAccess", 11020, cuMemPoolGetAccess),
    IMPL("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync),
    IMPL("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    IMPL("cuMemcpy2D", 3020, cuMemcpy2D_v2),
    IMPL("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2),
    IMPL("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2),
    IMPL("cuMemcpy3D", 3020, cuMemcpy3D_v2),
    IMPL("cuMemcpy3DAsync", 3020, cuMemcpy3DAsync_v2),
    // Arrays, texture and surface objects (api/api_array.cc)
    IMPL("cuArrayCreate", 3020, cuArrayCreate_v2),
    IMPL("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    IMPL("cuArrayGetDescriptor", 3020, cuArrayGetDescriptor_v2),
    IMPL("cuArray3DGetDescriptor", 3020, cuArray3DGetDescriptor_v2),
    IMPL("cuArrayDestroy", 2000, cuArrayDestroy),
    IMPL("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate),
    IMPL("cuMipmappedArrayGetLevel", 5000, cuMipmappedArrayGetLevel),
    IMPL("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy),
    IMPL("cuMemcpyHtoA", 3020, cuMemcpyHtoA_v2),
    IMPL("cuMemcpyHtoAAsync", 3020, cuMemcpyHtoAAsync_v2),
    IMPL("cuMemcpyAtoH", 3020, cuMemcpyAtoH_v2),
    IMPL("cuMemcpyAtoHAsync", 3020, cuMemcpyAtoHAsync_v2),
    IMPL("cuMemcpyDtoA", 3020, cuMemcpyDtoA_v2),
    IMPL("cuMemcpyAtoD", 3020, cuMemcpyAtoD_v2),
    IMPL("cuMemcpyAtoA", 3020, cuMemcpyAtoA_v2),
    IMPL("cuTexObjectCreate", 5000, cuTexObjectCreate),
    IMPL("cuTexObjectDestroy", 5000, cuTexObjectDestroy),
    IMPL("cuTexObjectGetResourceDesc", 5000, cuTexObjectGetResourceDesc),
    IMPL("cuTexObjectGetTextureDesc", 5000, cuTexObjectGetTextureDesc),
    IMPL("cuSurfObjectCreate", 5000, cuSurfObjectCreate),
    IMPL("cuSurfObjectDestroy", 5000, cuSurfObjectDestroy),
    IMPL("cuSurfObjectGetResourceDesc", 5000, cuSurfObjectGetResourceDesc),
    // Tensor maps (api/api_tensor_map.cc)
    IMPL("cuTensorMapEncodeTiled", 12000, cuTensorMapEncodeTiled),
    IMPL("cuTensorMapReplaceAddress", 12000, cuTensorMapReplaceAddress),
    IMPL("cuMemsetD2D8", 3020, cuMemsetD2D8_v2),
    IMPL("cuMemsetD2D16", 3020, cuMemsetD2D16_v2),
    IMPL("cuMemsetD2D32", 3020, cuMemsetD2D32_v2),
    IMPL("cuMemsetD2D8Async", 3020, cuMemsetD2D8Async),
    IMPL("cuMemsetD2D16Async", 3020, cuMemsetD2D16Async),
    IMPL("cuMemsetD2D32Async", 3020, cuMemsetD2D32Async),
    // Modules, libraries, kernels
    IMPL("cuModuleLoadData", 2000, cuModuleLoadData),
    IMPL("cuModuleLoadDataEx", 2010, cuModuleLoadDataEx),
    IMPL("cuModuleLoadFatBinary", 2000, cuModuleLoadFatBinary),
    IMPL("cuModuleUnload", 2000, cuModuleUnload),
    IMPL("cuModuleGetFunction", 2000, cuModuleGetFunction),
    IMPL("cuModuleLoad", 2000, cuModuleLoad),
    IMPL("cuModuleGetGlobal", 3020, cuModuleGetGlobal_v2),
    IMPL("cuLibraryGetGlobal", 12000, cuLibraryGetGlobal),
    IMPL("cuLibraryGetManaged", 12000, cuLibraryGetManaged),
    IMPL("cuLibraryLoadFromFile", 12000, cuLibraryLoadFromFile),
    IMPL("cuLibraryLoadData", 12000, cuLibraryLoadData),
    IMPL("cuLibraryUnload", 12000, cuLibraryUnload),
    IMPL("cuLibraryGetKernel", 12000, cuLibraryGetKernel),
    IMPL("cuLibraryGetModule", 12000, cuLibraryGetModule),
    IMPL("cuLibraryGetKernelCount", 12040, cuLibraryGetKernelCount),
    IMPL("cuModuleGetFunctionCount", 12040, cuModuleGetFunctionCount),
    IMPL("cuModuleEnumerateFunctions", 12040, cuModuleEnumerateFunctions),
    IMPL("cuLibraryEnumerateKernels", 12040, cuLibraryEnumerateKernels),
    IMPL("cuKernelGetFunction", 12000, cuKernelGetFunction),
    IMPL("cuKernelGetName", 12030, cuKernelGetName),
    IMPL("cuKernelGetParamInfo", 12040, cuKernelGetParamInfo),
    IMPL("cuKernelGetAttribute", 12000, cuKernelGetAttribute),
    IMPL("cuKernelSetAttribute", 12000, cuKernelSetAttribute),
    IMPL("cuKernelSetCacheConfig", 12000, cuKernelSetCacheConfig),
    IMPL("cuFuncGetName", 12030, cuFuncGetName),
    IMPL("cuFuncGetParamInfo", 12040, cuFuncGetParamInfo),
    IMPL("cuFuncGetAttribute", 2020, cuFuncGetAttribute),
    IMPL("cuFuncSetAttribute", 9000, cuFuncSetAttribute),
    IMPL("cuFuncSetCacheConfig", 3000, cuFuncSetCacheConfig),
    IMPL("cuFuncSetSharedMemConfig", 4020, cuFuncSetSharedMemConfig),
    IMPL("cuFuncGetModule", 11000, cuFuncGetModule),
    IMPL("cuFuncIsLoaded", 12040, cuFuncIsLoaded),
    IMPL("cuFuncLoad", 12040, cuFuncLoad),
    IMPL("cuOccupancyMaxPotentialBlockSize", 6050, cuOccupancyMaxPotentialBlockSize),
    IMPL("cuOccupancyMaxPotentialBlockSizeWithFlags", 7000, cuOccupancyMaxPotentialBlockSizeWithFlags),
    IMPL("cuOccupancyAvailableDynamicSMemPerBlock", 10020, cuOccupancyAvailableDynamicSMemPerBlock),
    IMPL("cuOccupancyMaxPotentialClusterSize", 11070, cuOccupancyMaxPotentialClusterSize),
    IMPL("cuOccupancyMaxActiveClusters", 11070, cuOccupancyMaxActiveClusters),
    IMPL("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, cuOccupancyMaxActiveBlocksPerMultiprocessor),
    IMPL("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,
         cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
    IMPL("cuLaunchKernel", 4000, cuLaunchKernel),
    IMPL("cuLinkCreate", 5050, cuLinkCreate),
    IMPL("cuLinkCreate", 6050, cuLinkCreate_v2),
    IMPL("cuLinkAddData", 5050, cuLinkAddData),
    IMPL("cuLinkAddData", 6050, cuLinkAddData_v2),
    IMPL("cuLinkAddFile", 5050, cuLinkAddFile),
    IMPL("cuLinkAddFile", 6050, cuLinkAddFile_v2),
    IMPL("cuLinkComplete", 5050, cuLinkComplete),
    IMPL("cuLinkDestroy", 5050, cuLinkDestroy),
    IMPL("cuLaunchKernelEx", 11060, cuLaunchKernelEx),
    IMPL("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel),
    // Streams and events
    IMPL("cuStreamCreate", 2000, cuStreamCreate),
    IMPL("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    IMPL("cuStreamDestroy", 2000, cuStreamDestroy),
    IMPL("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    IMPL("cuStreamSynchronize", 2000, cuStreamSynchronize),
    IMPL("cuStreamQuery", 2000, cuStreamQuery),
    IMPL("cuStreamWaitEvent", 3020, cuStreamWaitEvent),
    IMPL("cuStreamGetFlags", 5050, cuStreamGetFlags),
    IMPL("cuStreamGetPriority", 5050, cuStreamGetPriority),
    IMPL("cuStreamGetCtx", 9020, cuStreamGetCtx),
    IMPL("cuStreamGetId", 12000, cuStreamGetId),
    IMPL("cuStreamGetDevice", 12080, cuStreamGetDevice),
    IMPL("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    IMPL("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo),
    IMPL("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2),
    IMPL("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3),
    IMPL("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    IMPL("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    IMPL("cuStreamBeginCaptureToGraph", 12030, cuStreamBeginCaptureToGraph),
    IMPL("cuStreamUpdateCaptureDependencies", 11030, cuStreamUpdateCaptureDependencies),
    IMPL("cuStreamUpdateCaptureDependencies", 12030, cuStreamUpdateCaptureDependencies_v2),
    IMPL("cuStreamEndCapture", 10000, cuStreamEndCapture),
    // Graphs captured from streams (graphs.cc)
    IMPL("cuGraphInstantiate", 10000, cuGraphInstantiate_v2),
    IMPL("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
    IMPL("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    IMPL("cuGraphInstantiateWithParams", 12000, cuGraphInstantiateWithParams),
    IMPL("cuGraphLaunch", 10000, cuGraphLaunch),
    IMPL("cuGraphUpload", 11010, cuGraphUpload),
    IMPL("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    IMPL("cuGraphDestroy", 10000, cuGraphDestroy),
    IMPL("cuGraphClone", 10000, cuGraphClone),
    IMPL("cuUserObjectCreate", 11030, cuUserObjectCreate),
    IMPL("cuUserObjectRetain", 11030, cuUserObjectRetain),
    IMPL("cuUserObjectRelease", 11030, cuUserObjectRelease),
    IMPL("cuGraphRetainUserObject", 11030, cuGraphRetainUserObject),
    IMPL("cuGraphReleaseUserObject", 11030, cuGraphReleaseUserObject),
    IMPL("cuGraphAddMemAllocNode", 11040, cuGraphAddMemAllocNode),
    IMPL("cuGraphAddMemFreeNode", 11040, cuGraphAddMemFreeNode),
    IMPL("cuGraphMemAllocNodeGetParams", 11040, cuGraphMemAllocNodeGetParams),
    IMPL("cuGraphMemFreeNodeGetParams", 11040, cuGraphMemFreeNodeGetParams),
    IMPL("cuDeviceGraphMemTrim", 11040, cuDeviceGraphMemTrim),
    IMPL("cuDeviceGetGraphMemAttribute", 11040, cuDeviceGetGraphMemAttribute),
    IMPL("cuDeviceSetGraphMemAttribute", 11040, cuDeviceSetGraphMemAttribute),
    IMPL("cuGraphGetNodes", 10000, cuGraphGetNodes),
    // Graphs built node by node (graph_nodes.cc)
    IMPL("cuGraphCreate", 10000, cuGraphCreate),
    IMPL("cuGraphAddKernelNode", 10000, cuGraphAddKernelNode),
    IMPL("cuGraphAddKernelNode", 12000, cuGraphAddKernelNode_v2),
    IMPL("cuGraphKernelNodeGetParams", 10000, cuGraphKernelNodeGetParams),
    IMPL("cuGraphKernelNodeGetParams", 12000, cuGraphKernelNodeGetParams_v2),
    IMPL("cuGraphKernelNodeSetParams", 10000, cuGraphKernelNodeSetParams),
    IMPL("cuGraphKernelNodeSetParams", 12000, cuGraphKernelNodeSetParams_v2),
    IMPL("cuGraphExecKernelNodeSetParams", 10010, cuGraphExecKernelNodeSetParams),
    IMPL("cuGraphExecKernelNodeSetParams", 12000, cuGraphExecKernelNodeSetParams_v2),
    IMPL("cuGraphAddMemcpyNode", 10000, cuGraphAddMemcpyNode),
    IMPL("cuGraphMemcpyNodeGetParams", 10000, cuGraphMemcpyNodeGetParams),
    IMPL("cuGraphMemcpyNodeSetParams", 10000, cuGraphMemcpyNodeSetParams),
    IMPL("cuGraphExecMemcpyNodeSetParams", 10020, cuGraphExecMemcpyNodeSetParams),
    IMPL("cuGraphAddMemsetNode", 10000, cuGraphAddMemsetNode),
    IMPL("cuGraphMemsetNodeGetParams", 10000, cuGraphMemsetNodeGetParams),
    IMPL("cuGraphMemsetNodeSetParams", 10000, cuGraphMemsetNodeSetParams),
    IMPL("cuGraphExecMemsetNodeSetParams", 10020, cuGraphExecMemsetNodeSetParams),
    IMPL("cuGraphAddHostNode", 10000, cuGraphAddHostNode),
    IMPL("cuGraphHostNodeGetParams", 10000, cuGraphHostNodeGetParams),
    IMPL("cuGraphHostNodeSetParams", 10000, cuGraphHostNodeSetParams),
    IMPL("cuGraphExecHostNodeSetParams", 10020, cuGraphExecHostNodeSetParams),
    IMPL("cuGraphAddEmptyNode", 10000, cuGraphAddEmptyNode),
    IMPL("cuGraphAddChildGraphNode", 10000, cuGraphAddChildGraphNode),
    IMPL("cuGraphChildGraphNodeGetGraph", 10000, cuGraphChildGraphNodeGetGraph),
    IMPL("cuGraphExecChildGraphNodeSetParams", 11010, cuGraphExecChildGraphNodeSetParams),
    IMPL("cuGraphAddEventRecordNode", 11010, cuGraphAddEventRecordNode),
    IMPL("cuGraphEventRecordNodeGetEvent", 11010, cuGraphEventRecordNodeGetEvent),
    IMPL("cuGraphEventRecordNodeSetEvent", 11010, cuGraphEventRecordNodeSetEvent),
    IMPL("cuGraphExecEventRecordNodeSetEvent", 11010, cuGraphExecEventRecordNodeSetEvent),
    IMPL("cuGraphAddEventWaitNode", 11010, cuGraphAddEventWaitNode),
    IMPL("cuGraphEventWaitNodeGetEvent", 11010, cuGraphEventWaitNodeGetEvent),
    IMPL("cuGraphEventWaitNodeSetEvent", 11010, cuGraphEventWaitNodeSetEvent),
    IMPL("cuGraphExecEventWaitNodeSetEvent", 11010, cuGraphExecEventWaitNodeSetEvent),
    IMPL("cuGraphAddNode", 12020, cuGraphAddNode),
    IMPL("cuGraphAddNode", 12030, cuGraphAddNode_v2),
    IMPL("cuGraphConditionalHandleCreate", 12030, cuGraphConditionalHandleCreate),
    IMPL("cuGraphNodeSetParams", 12020, cuGraphNodeSetParams),
    IMPL("cuGraphExecNodeSetParams", 12020, cuGraphExecNodeSetParams),
    IMPL("cuGraphGetRootNodes", 10000, cuGraphGetRootNodes),
    IMPL("cuGraphGetEdges", 10000, cuGraphGetEdges),
    IMPL("cuGraphGetEdges", 12030, cuGraphGetEdges_v2),
    IMPL("cuGraphNodeGetDependencies", 10000, cuGraphNodeGetDependencies),
    IMPL("cuGraphNodeGetDependencies", 12030, cuGraphNodeGetDependencies_v2),
    IMPL("cuGraphNodeGetDependentNodes", 10000, cuGraphNodeGetDependentNodes),
    IMPL("cuGraphNodeGetDependentNodes", 12030, cuGraphNodeGetDependentNodes_v2),
    IMPL("cuGraphAddDependencies", 10000, cuGraphAddDependencies),
    IMPL("cuGraphAddDependencies", 12030, cuGraphAddDependencies_v2),
    IMPL("cuGraphRemoveDependencies", 10000, cuGraphRemoveDependencies),
    IMPL("cuGraphRemoveDependencies", 12030, cuGraphRemoveDependencies_v2),
    IMPL("cuGraphNodeGetType", 10000, cuGraphNodeGetType),
    IMPL("cuGraphDestroyNode", 10000, cuGraphDestroyNode),
    IMPL("cuGraphNodeFindInClone", 10000, cuGraphNodeFindInClone),
    IMPL("cuGraphNodeSetEnabled", 11060, cuGraphNodeSetEnabled),
    IMPL("cuGraphNodeGetEnabled", 11060, cuGraphNodeGetEnabled),
    IMPL("cuGraphExecUpdate", 10020, cuGraphExecUpdate),
    IMPL("cuGraphExecUpdate", 12000, cuGraphExecUpdate_v2),
    IMPL("cuGraphExecGetFlags", 12000, cuGraphExecGetFlags),
    IMPL("cuGraphDebugDotPrint", 11030, cuGraphDebugDotPrint),
    IMPL("cuGraphKernelNodeSetAttribute", 11000, cuGraphKernelNodeSetAttribute),
    IMPL("cuGraphKernelNodeGetAttribute", 11000, cuGraphKernelNodeGetAttribute),
    IMPL("cuGraphKernelNodeCopyAttributes", 11000, cuGraphKernelNodeCopyAttributes),
    IMPL("cuStreamGetAttribute", 11000, cuStreamGetAttribute),
    IMPL("cuStreamSetAttribute", 11000, cuStreamSetAttribute),
    IMPL("cuStreamCopyAttributes", 11000, cuStreamCopyAttributes),
    IMPL("cuLaunchHostFunc", 10000, cuLaunchHostFunc),
    IMPL("cuStreamAddCallback", 5000, cuStreamAddCallback),
    IMPL("cuEventCreate", 2000, cuEventCreate),
    IMPL("cuEventDestroy", 2000, cuEventDestroy),
    IMPL("cuEventDestroy", 4000, cuEventDestroy_v2),
    IMPL("cuEventRecord", 2000, cuEventRecord),
    IMPL("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags),
    IMPL("cuEventQuery", 2000, cuEventQuery),
    IMPL("cuEventSynchronize", 2000, cuEventSynchronize),
    IMPL("cuEventElapsedTime", 2000, cuEventElapsedTime),
    IMPL("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
};
#undef IMPL

// --- Stubs for every other driver entry point ----------------------------------------------

constexpr const char* kDriverNames[] = {
#define X(name) #name,
#include "remote/client/driver_names.inc"
#undef X
};
constexpr size_t kDriverNameCount = sizeof(kDriverNames) / sizeof(kDriverNames[0]);

template <size_t I>
CUresult CUDAAPI UnsupportedStub() {
  return static_cast<CUresult>(ReportUnsupported(kDriverNames[I]));
}

template <size_t... I>
std::array<void*, sizeof...(I)> MakeStubs(std::index_sequence<I...>) {
  return {reinterpret_cast<void*>(&UnsupportedStub<I>)...};
}

const std::array<void*, kDriverNameCount>& Stubs() {
  static const auto stubs = MakeStubs(std::make_index_sequence<kDriverNameCount>());
  return stubs;
}

// Names cuda.h of this toolkit does not know (a newer runtime's) get one of these stubs,
// each remembering the name it was handed out for, so that the error names it.
constexpr size_t kUnknownNameSlots = 64;
std::atomic<const char*> unknown_names[kUnknownNameSlots];

template <size_t I>
CUresult CUDAAPI UnknownNameStub() {
  const char* name = unknown_names[I].load();
  return static_cast<CUresult>(ReportUnsupported(name ? name : "an unknown driver entry point"));
}

template <size_t... I>
std::array<void*, sizeof...(I)> MakeUnknownStubs(std::index_sequence<I...>) {
  return {reinterpret_cast<void*>(&UnknownNameStub<I>)...};
}

CUresult CUDAAPI UnknownEntryPoint() {
  return static_cast<CUresult>(ReportUnsupported("one of more than 64 unknown driver entry points"));
}

// The stub for unknown `name`: the same one each time the name is asked for.
void* UnknownNameStubFor(std::string_view name) {
  static const auto stubs = MakeUnknownStubs(std::make_index_sequence<kUnknownNameSlots>());
  static std::mutex mu;
  static auto* slots = new std::map<std::string, size_t, std::less<>>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto found = slots->find(name); found != slots->end()) return stubs[found->second];
  if (slots->size() >= kUnknownNameSlots) return reinterpret_cast<void*>(&UnknownEntryPoint);
  size_t slot = slots->size();
  auto [entry, inserted] = slots->emplace(std::string(name), slot);
  unknown_names[slot].store(entry->first.c_str());  // map nodes do not move
  return stubs[slot];
}

CUresult Lookup(const char* symbol, void** function, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* result) {
  if (symbol == nullptr || function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::string_view name(symbol);
  const Implementation* best = nullptr;
  bool known_but_newer = false;
  for (const Implementation& implementation : kImplementations) {
    if (name != implementation.name) continue;
    if (implementation.version > version) {
      known_but_newer = true;
    } else if (best == nullptr || implementation.version > best->version) {
      best = &implementation;
    }
  }
  if (best != nullptr) {
    *function = best->function;
    if (result) *result = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (known_but_newer) {
    *function = nullptr;
    if (result) *result = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  for (size_t i = 0; i < kDriverNameCount; ++i) {
    if (name == kDriverNames[i]) {
      LogDebug(
          "cuGetProcAddress(%s, %d): not implemented: a stub answering "
          "CUDA_ERROR_NOT_SUPPORTED",
          symbol, version);
      *function = Stubs()[i];
      if (result) *result = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  if (name.rfind("cu", 0) != 0) {
    *function = nullptr;
    if (result) *result = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  LogDebug("cuGetProcAddress(%s, %d, %llu): unknown name, handing out a stub", symbol, version,
           static_cast<unsigned long long>(flags));
  *function = UnknownNameStubFor(name);
  if (result) *result = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** function, int version,
                                                      cuuint64_t flags, CUdriverProcAddressQueryResult* result) {
  GPUPOOL_BODY({ return Lookup(symbol, function, version, flags, result); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** function, int version, cuuint64_t flags) {
  GPUPOOL_BODY({ return Lookup(symbol, function, version, flags, nullptr); });
}

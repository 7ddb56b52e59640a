// cuGetExportTable: the undocumented tables the CUDA runtime and the math libraries (cuFFT,
// cuBLAS) ask the driver for.
//
// Clean-room implementation from public descriptions of their behaviour (e.g. the ZLUDA
// project's notes) and from watching which slots the libraries call, with what (a table
// whose every slot only logged its arguments); the layouts are those CUDA 13.0 uses (see
// shared/notes in the project's reference material and tests/remote, which run real
// nvcc-built programs against this library for the installed toolkit). A table is an array
// of pointers; most start with their own size in bytes. Slots we do not know answer
// CUDA_ERROR_NOT_SUPPORTED (logged once) instead of being null, so a runtime that calls
// one fails cleanly rather than jumping to address 0.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "remote/client/api/module_functions.h"
#include "remote/client/core/api_common.h"
#include "remote/client/core/md2.h"

using namespace gpupool::client;  // NOLINT

namespace {

struct TableId {
  uint8_t bytes[16];
  bool Matches(const CUuuid* id) const { return std::memcmp(bytes, id->bytes, 16) == 0; }
};

constexpr TableId kCudartInterface = {
    {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}};
constexpr TableId kToolsRuntimeCallbackHooks = {
    {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}};
constexpr TableId kToolsTls = {
    {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}};
constexpr TableId kContextLocalStorage = {
    {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}};
constexpr TableId kContextChecks = {
    {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}};
constexpr TableId kIntegrityCheck = {
    {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}};
constexpr TableId kContextIdentity = {
    {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}};
constexpr TableId kModuleIterator = {
    {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}};
// Asked by cuBLASLt 13's matmul heuristics for sm_90 devices, which call its fifth slot
// (with two out-pointers) without checking that the driver gave the table, and go their
// other way when the slot answers an error: every slot answers CUDA_ERROR_NOT_SUPPORTED.
constexpr TableId kLtHeuristicsQueries = {
    {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca}};

CUresult CUDAAPI UnknownSlot() {
  return static_cast<CUresult>(ReportUnsupported("an undocumented driver export-table entry"));
}

void* const kUnknown = reinterpret_cast<void*>(&UnknownSlot);

// --- CUDART_INTERFACE ----------------------------------------------------------------------

// Slot 2: the runtime's way to retain a device's primary context.
CUresult CUDAAPI CudartGetPrimaryContext(CUcontext* context, CUdevice device) {
  return cuDevicePrimaryCtxRetain(context, device);
}

void* cudart_interface[10] = {reinterpret_cast<void*>(sizeof(cudart_interface)),
                              kUnknown,
                              reinterpret_cast<void*>(&CudartGetPrimaryContext),
                              kUnknown,
                              kUnknown,
                              kUnknown,
                              kUnknown,
                              kUnknown,
                              kUnknown,
                              kUnknown};

// --- TOOLS_RUNTIME_CALLBACK_HOOKS: two scratch buffers the runtime's tool hooks use ------

uint32_t hooks_buffer1[1024];
uint32_t hooks_buffer2[14];

void CUDAAPI HooksBuffer1(void** pointer, size_t* size) {
  *pointer = hooks_buffer1;
  *size = sizeof(hooks_buffer1) / sizeof(hooks_buffer1[0]);
}
void CUDAAPI HooksBuffer2(void** pointer, size_t* size) {
  *pointer = hooks_buffer2;
  *size = sizeof(hooks_buffer2) / sizeof(hooks_buffer2[0]);
}

void* tools_runtime_callback_hooks[7] = {reinterpret_cast<void*>(sizeof(tools_runtime_callback_hooks)),
                                         kUnknown,
                                         reinterpret_cast<void*>(&HooksBuffer1),
                                         kUnknown,
                                         kUnknown,
                                         kUnknown,
                                         reinterpret_cast<void*>(&HooksBuffer2)};

// --- TOOLS_TLS: slot 2 gives the calling thread's current context (cuBLASLt asks) ----------

CUresult CUDAAPI ToolsCurrentContext(CUcontext* context) { return cuCtxGetCurrent(context); }

void* tools_tls[4] = {reinterpret_cast<void*>(sizeof(tools_tls)), kUnknown,
                      reinterpret_cast<void*>(&ToolsCurrentContext), kUnknown};

// --- CONTEXT_IDENTITY: the math libraries (cuFFT, cuBLAS) key their per-context state by ---
// slot 4, a context's unique id (as cuCtxGetId). The driver's table is longer; the slots
// nobody was seen to call answer CUDA_ERROR_NOT_SUPPORTED.

constexpr int kSparseSlots = 64;
void* context_identity[kSparseSlots] = {};

// Slots 51 and 39, which cuBLAS 13 calls before its level-1 and level-2 kernels to key its
// per-stream scratch buffers: slot 51 gives the execution context of (context, stream) (as
// with green contexts; here it is always the context itself: remote GPUs have no green
// contexts), slot 39 that execution context's unique id. The fourth argument of slot 51
// says whether the stream is the per-thread default stream.
Context* ContextOrCurrent(CUcontext context);  // below

CUresult CUDAAPI ExecutionContextOfStream(CUcontext context, CUstream stream, CUcontext* execution_context,
                                          int per_thread) {
  (void)stream;
  (void)per_thread;
  if (execution_context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = ContextOrCurrent(context);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *execution_context = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI ExecutionContextId(CUcontext, CUcontext execution_context, unsigned long long* id) {
  return cuCtxGetId(execution_context, id);
}

// --- MODULE_ITERATOR: slot 7 walks a module's functions (cuFFT finds its kernels so) --------
// (context, module, visit(opaque, function, owner), opaque) -> how many were visited.

uint64_t CUDAAPI IterateModuleFunctions(CUcontext, CUmodule module, void (*visit)(void*, void*, uint64_t),
                                        void* opaque) {
  return ForEachFunction(module, visit, opaque);
}

void* module_iterator[kSparseSlots] = {};
void* lt_heuristics_queries[kSparseSlots] = {};

// Tables whose known slots are few: every other slot answers CUDA_ERROR_NOT_SUPPORTED.
struct SparseTablesFilled {
  SparseTablesFilled() {
    for (void** table : {context_identity, module_iterator, lt_heuristics_queries}) {
      table[0] = reinterpret_cast<void*>(sizeof(void*) * kSparseSlots);
      for (int i = 1; i < kSparseSlots; ++i) table[i] = kUnknown;
    }
    context_identity[4] = reinterpret_cast<void*>(&cuCtxGetId);
    context_identity[39] = reinterpret_cast<void*>(&ExecutionContextId);
    context_identity[51] = reinterpret_cast<void*>(&ExecutionContextOfStream);
    module_iterator[7] = reinterpret_cast<void*>(&IterateModuleFunctions);
  }
} sparse_tables_filled;

// --- CONTEXT_LOCAL_STORAGE: per-context key/value slots of the runtime (no size slot) -------

Context* ContextOrCurrent(CUcontext context) { return context != nullptr ? AsContext(context) : CurrentContext(); }

CUresult CUDAAPI StoragePut(CUcontext context, void* key, void* value, void (*destructor)(CUcontext, void*, void*)) {
  Context* c = ContextOrCurrent(context);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(c->storage_mu);
  c->storage[key] = ContextStorageEntry{value, destructor};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI StorageDelete(CUcontext context, void* key) {
  Context* c = ContextOrCurrent(context);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(c->storage_mu);
  c->storage.erase(key);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI StorageGet(void** value, CUcontext context, void* key) {
  Context* c = ContextOrCurrent(context);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(c->storage_mu);
  auto found = c->storage.find(key);
  if (found == c->storage.end()) return CUDA_ERROR_INVALID_HANDLE;
  *value = found->second.value;
  return CUDA_SUCCESS;
}

void* context_local_storage[4] = {reinterpret_cast<void*>(&StoragePut), reinterpret_cast<void*>(&StorageDelete),
                                  reinterpret_cast<void*>(&StorageGet), kUnknown};

// --- CONTEXT_CHECKS --------------------------------------------------------------------------

CUresult CUDAAPI ContextCheck(CUcontext, uint32_t* result, const void**) {
  if (result) *result = 0;  // "nothing special about this context"
  return CUDA_SUCCESS;
}

uint32_t CUDAAPI ContextCheckFlags() { return 0; }

void* context_checks[4] = {reinterpret_cast<void*>(sizeof(context_checks)), kUnknown,
                           reinterpret_cast<void*>(&ContextCheck), reinterpret_cast<void*>(&ContextCheckFlags)};

// --- INTEGRITY_CHECK -------------------------------------------------------------------------
// The runtime checks it talks to a genuine driver: it asks for HMAC-MD2, under a fixed key,
// of values both sides can compute, and compares with its own result.

constexpr uint8_t kIntegrityKey[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                       0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

CUresult CUDAAPI IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t result[2]);

void* integrity_check[3] = {reinterpret_cast<void*>(sizeof(integrity_check)), reinterpret_cast<void*>(&IntegrityCheck),
                            kUnknown};

struct IntegrityInput {
  uint32_t driver_version;
  uint32_t version;
  uint32_t process;
  uint32_t thread;
  const void* cudart_table;
  const void* integrity_table;
  const void* function;
  uint64_t unix_seconds;
};
static_assert(sizeof(IntegrityInput) == 48);

struct DeviceIdentity {
  CUuuid uuid;
  int32_t pci_domain;
  int32_t pci_bus;
  int32_t pci_device;
};
static_assert(sizeof(DeviceIdentity) == 28);

CUresult CUDAAPI IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t result[2]) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The two oldest versions of the check expect constant answers.
  if (version % 10 == 0) {
    result[0] = 0x3341181C03CB675Cull;
    result[1] = 0x8ED383AA1F4CD1E8ull;
    return CUDA_SUCCESS;
  }
  if (version % 10 == 1) {
    result[0] = 0x1841181C03CB675Cull;
    result[1] = 0x8ED383AA1F4CD1E8ull;
    return CUDA_SUCCESS;
  }
  IntegrityInput input{};
  input.driver_version = CUDA_VERSION;
  input.version = version;
  input.process = static_cast<uint32_t>(getpid());
  input.thread = static_cast<uint32_t>(pthread_self());
  input.cudart_table = cudart_interface;
  input.integrity_table = integrity_check;
  input.function = reinterpret_cast<const void*>(&IntegrityCheck);
  input.unix_seconds = unix_seconds;
  std::vector<uint8_t> message(sizeof(input));
  std::memcpy(message.data(), &input, sizeof(input));
  Runtime& runtime = Runtime::Get();
  for (int i = 0; i < runtime.device_count(); ++i) {
    Device* device = runtime.device(i);
    DeviceIdentity identity{device->uuid_bytes, device->pci_domain, device->pci_bus, device->pci_device};
    const auto* raw = reinterpret_cast<const uint8_t*>(&identity);
    message.insert(message.end(), raw, raw + sizeof(identity));
  }
  auto digest = HmacMd2(kIntegrityKey, message.data(), message.size());
  std::memcpy(result, digest.data(), digest.size());
  return CUDA_SUCCESS;
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuGetExportTable(const void** table, const CUuuid* id) {
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const void* found = nullptr;
  if (kCudartInterface.Matches(id))
    found = cudart_interface;
  else if (kToolsRuntimeCallbackHooks.Matches(id))
    found = tools_runtime_callback_hooks;
  else if (kToolsTls.Matches(id))
    found = tools_tls;
  else if (kContextLocalStorage.Matches(id))
    found = context_local_storage;
  else if (kContextChecks.Matches(id))
    found = context_checks;
  else if (kLtHeuristicsQueries.Matches(id))
    found = lt_heuristics_queries;
  else if (kIntegrityCheck.Matches(id))
    found = integrity_check;
  else if (kContextIdentity.Matches(id))
    found = context_identity;
  else if (kModuleIterator.Matches(id))
    found = module_iterator;
  if (found == nullptr) {
    if (DebugEnabled()) {
      char hex[33];
      for (int i = 0; i < 16; ++i) {
        std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(id->bytes[i]));
      }
      LogDebug("cuGetExportTable(%s): not supported", hex);
    }
    *table = nullptr;
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  *table = found;
  return CUDA_SUCCESS;
}

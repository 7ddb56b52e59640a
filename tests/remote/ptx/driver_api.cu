// A driver-API program as users write them: cuInit, a context, cuModuleLoad of a .fatbin,
// a .ptx and a .cubin file (made by nvcc at build time from engine_kernels.cu),
// cuModuleGetGlobal, cuLaunchKernel, device printf, the JIT linker (cuLinkCreate ...
// cuLinkComplete) with one input and with several (PTX, a host object, libraries), and an
// out-of-bounds kernel whose CUDA_ERROR_ILLEGAL_ADDRESS stays on the context. Prints "driver_api:
// OK" when every check passed.
//
// GPUPOOL_EXPECT_SIM=1: the GPU is the sim, which runs PTX only: the cubin must be refused
// with CUDA_ERROR_NO_BINARY_FOR_GPU. Otherwise (a real GPU) the cubin must run too where
// it was built for the GPU (sm_75).
#include <cuda.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0;

#define CHECK_CU(call, expected)                                                                   \
  do {                                                                                             \
    CUresult got_ = (call);                                                                        \
    if (got_ != (expected)) {                                                                      \
      const char* name_ = nullptr;                                                                 \
      cuGetErrorName(got_, &name_);                                                                \
      std::fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d\n", __FILE__, __LINE__, #call, \
                   static_cast<int>(got_), name_ ? name_ : "?", static_cast<int>(expected));       \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)
#define EXPECT_TRUE(cond)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

std::string ModulePath(const char* name) { return std::string(GPUPOOL_MODULE_DIR) + "/" + name; }

// Runs poke(p, 5) and calls(in, out) from `module`: checks the results and the module's
// __constant__ and __device__ variables.
void RunKernels(CUmodule module, const char* what) {
  CUfunction poke = nullptr, calls = nullptr, hello = nullptr;
  CHECK_CU(cuModuleGetFunction(&poke, module, "poke"), CUDA_SUCCESS);
  CHECK_CU(cuModuleGetFunction(&calls, module, "calls"), CUDA_SUCCESS);
  CHECK_CU(cuModuleGetFunction(&hello, module, "hello"), CUDA_SUCCESS);
  CUfunction missing = nullptr;
  CHECK_CU(cuModuleGetFunction(&missing, module, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  // The module's kernels, listed (cuModuleGetFunctionCount, cuModuleEnumerateFunctions).
  unsigned kernels = 0;
  CHECK_CU(cuModuleGetFunctionCount(&kernels, module), CUDA_SUCCESS);
  std::vector<CUfunction> listed(kernels);
  if (kernels > 0) {
    CHECK_CU(cuModuleEnumerateFunctions(listed.data(), kernels, module), CUDA_SUCCESS);
  }
  int named = 0;
  for (CUfunction function : listed) {
    const char* name = nullptr;
    CHECK_CU(cuFuncGetName(&name, function), CUDA_SUCCESS);
    if (name == nullptr) continue;
    named += std::strcmp(name, "poke") == 0 || std::strcmp(name, "calls") == 0 || std::strcmp(name, "hello") == 0;
  }
  EXPECT_TRUE(named == 3);
  if (poke == nullptr || calls == nullptr || hello == nullptr) return;

  CUdeviceptr p = 0;
  CHECK_CU(cuMemAlloc(&p, 64), CUDA_SUCCESS);
  CHECK_CU(cuMemsetD32(p, 0, 16), CUDA_SUCCESS);
  long long offset = 5;
  void* poke_args[] = {&p, &offset};
  CHECK_CU(cuLaunchKernel(poke, 1, 1, 1, 1, 1, 1, 0, nullptr, poke_args, nullptr), CUDA_SUCCESS);
  int words[16] = {};
  CHECK_CU(cuMemcpyDtoH(words, p, sizeof(words)), CUDA_SUCCESS);
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(words[i] == (i == 5 ? 1 : 0));

  // __constant__ float c_coeffs[4]: read its initialiser, replace it.
  CUdeviceptr coeffs = 0;
  size_t size = 0;
  CHECK_CU(cuModuleGetGlobal(&coeffs, &size, module, "c_coeffs"), CUDA_SUCCESS);
  EXPECT_TRUE(size == 16);
  float initial[4] = {};
  CHECK_CU(cuMemcpyDtoH(initial, coeffs, sizeof(initial)), CUDA_SUCCESS);
  EXPECT_TRUE(initial[0] == 1.5f && initial[1] == -2.0f && initial[2] == 0.25f && initial[3] == 8.0f);
  const float fresh[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  CHECK_CU(cuMemcpyHtoD(coeffs, fresh, sizeof(fresh)), CUDA_SUCCESS);

  const int n = 32;
  std::vector<float> in(n), out(n);
  for (int i = 0; i < n; ++i) in[i] = 0.5f + i * 0.125f;
  CUdeviceptr din = 0, dout = 0;
  CHECK_CU(cuMemAlloc(&din, n * sizeof(float)), CUDA_SUCCESS);
  CHECK_CU(cuMemAlloc(&dout, n * sizeof(float)), CUDA_SUCCESS);
  CHECK_CU(cuMemcpyHtoD(din, in.data(), n * sizeof(float)), CUDA_SUCCESS);
  void* call_args[] = {&din, &dout};
  CHECK_CU(cuLaunchKernel(calls, 1, 1, 1, n, 1, 1, 0, nullptr, call_args, nullptr), CUDA_SUCCESS);
  CHECK_CU(cuMemcpyDtoH(out.data(), dout, n * sizeof(float)), CUDA_SUCCESS);
  for (int i = 0; i < n; ++i) {
    float r = 0;
    for (int k = 0; k <= i % 4; ++k) r = r * in[i] + fresh[k];
    EXPECT_TRUE(std::abs(out[i] - r) <= 1e-5f * std::abs(r));
  }
  CUdeviceptr counter = 0;
  CHECK_CU(cuModuleGetGlobal(&counter, &size, module, "d_counter"), CUDA_SUCCESS);
  int count = 0;
  CHECK_CU(cuMemcpyDtoH(&count, counter, sizeof(count)), CUDA_SUCCESS);
  EXPECT_TRUE(count == 7 + n * (n - 1) / 2);

  // Device printf: the text appears on our stdout at the next synchronisation.
  int base = 40;
  void* hello_args[] = {&base};
  std::printf("%s: printf follows\n", what);
  std::fflush(stdout);
  CHECK_CU(cuLaunchKernel(hello, 1, 1, 1, 2, 1, 1, 0, nullptr, hello_args, nullptr), CUDA_SUCCESS);
  CHECK_CU(cuCtxSynchronize(), CUDA_SUCCESS);
  std::fflush(stdout);

  CHECK_CU(cuMemFree(p), CUDA_SUCCESS);
  CHECK_CU(cuMemFree(din), CUDA_SUCCESS);
  CHECK_CU(cuMemFree(dout), CUDA_SUCCESS);
}

}  // namespace

// The JIT linker with several inputs, as programs that build device code at run time
// link it: link_main.cu's PTX calls into a host object (nvcc -dc) and an archive (nvcc
// -lib), and libcudadevrt.a comes along as CMake and nvcc's own link pass would add it.
// Without the object, the link leaves a function unresolved: a driver refuses such a link
// at cuLinkComplete, gpupool when a kernel that calls the function runs
// (CUDA_ERROR_NOT_SUPPORTED, "call of external function" in the agent's log).
static void RunSeveralLinkInputs(bool sim) {
  auto link_all = [](bool with_object, CUmodule* module) {
    CUlinkState link = nullptr;
    CHECK_CU(cuLinkCreate(0, nullptr, nullptr, &link), CUDA_SUCCESS);
    CHECK_CU(cuLinkAddFile(link, CU_JIT_INPUT_PTX, ModulePath("link_main.ptx").c_str(), 0, nullptr, nullptr),
             CUDA_SUCCESS);
    if (with_object) {
      CHECK_CU(cuLinkAddFile(link, CU_JIT_INPUT_OBJECT, ModulePath("link_helper.o").c_str(), 0, nullptr, nullptr),
               CUDA_SUCCESS);
    }
    CHECK_CU(cuLinkAddFile(link, CU_JIT_INPUT_LIBRARY, ModulePath("liblink_library.a").c_str(), 0, nullptr, nullptr),
             CUDA_SUCCESS);
    CHECK_CU(cuLinkAddFile(link, CU_JIT_INPUT_LIBRARY, GPUPOOL_CUDADEVRT, 0, nullptr, nullptr), CUDA_SUCCESS);
    void* image = nullptr;
    size_t size = 0;
    CHECK_CU(cuLinkComplete(link, &image, &size), CUDA_SUCCESS);
    CUresult loaded = image == nullptr ? CUDA_ERROR_INVALID_IMAGE : cuModuleLoadData(module, image);
    CHECK_CU(cuLinkDestroy(link), CUDA_SUCCESS);
    return loaded;
  };
  CUmodule unresolved = nullptr;
  if (!sim) {
    // A GPU's JIT refuses the unresolved function when it links (an H100 with driver 580:
    // CUDA_ERROR_INVALID_SOURCE through the agent; the driver's cuLinkComplete itself
    // answers CUDA_ERROR_UNKNOWN).
    EXPECT_TRUE(link_all(false, &unresolved) != CUDA_SUCCESS);
    if (unresolved != nullptr) CHECK_CU(cuModuleUnload(unresolved), CUDA_SUCCESS);
    unresolved = nullptr;
  } else {
    CHECK_CU(link_all(false, &unresolved), CUDA_SUCCESS);
  }
  if (unresolved != nullptr) {
    CUfunction calls_missing = nullptr;
    CHECK_CU(cuModuleGetFunction(&calls_missing, unresolved, "linked_kernel"), CUDA_SUCCESS);
    CUdeviceptr scratch = 0;
    CHECK_CU(cuMemAlloc(&scratch, 64), CUDA_SUCCESS);
    int one = 1;
    void* args[] = {&scratch, &scratch, &scratch, &one};
    CUresult launched = calls_missing == nullptr
                            ? CUDA_ERROR_INVALID_HANDLE
                            : cuLaunchKernel(calls_missing, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr);
    if (launched == CUDA_SUCCESS) launched = cuCtxSynchronize();
    CHECK_CU(launched, CUDA_ERROR_NOT_SUPPORTED);
    CHECK_CU(cuMemFree(scratch), CUDA_SUCCESS);
    CHECK_CU(cuModuleUnload(unresolved), CUDA_SUCCESS);
  }

  CUmodule module = nullptr;
  CHECK_CU(link_all(true, &module), CUDA_SUCCESS);
  if (module == nullptr) return;
  CUfunction kernel = nullptr;
  CHECK_CU(cuModuleGetFunction(&kernel, module, "linked_kernel"), CUDA_SUCCESS);
  CUdeviceptr calls = 0, factor = 0;
  size_t size = 0;
  CHECK_CU(cuModuleGetGlobal(&calls, &size, module, "helper_calls"), CUDA_SUCCESS);
  EXPECT_TRUE(size == sizeof(int));
  CHECK_CU(cuModuleGetGlobal(&factor, &size, module, "factor"), CUDA_SUCCESS);
  const float two = 2.0f;  // the helper unit's variable, changed from the host
  if (factor != 0) CHECK_CU(cuMemcpyHtoD(factor, &two, sizeof(two)), CUDA_SUCCESS);
  const int n = 100;
  std::vector<float> in(n), out(n);
  std::vector<int> offsets(n);
  for (int i = 0; i < n; ++i) in[i] = 0.25f * i - 3.0f;
  CUdeviceptr din = 0, dout = 0, doffsets = 0;
  CHECK_CU(cuMemAlloc(&din, n * sizeof(float)), CUDA_SUCCESS);
  CHECK_CU(cuMemAlloc(&dout, n * sizeof(float)), CUDA_SUCCESS);
  CHECK_CU(cuMemAlloc(&doffsets, n * sizeof(int)), CUDA_SUCCESS);
  CHECK_CU(cuMemcpyHtoD(din, in.data(), n * sizeof(float)), CUDA_SUCCESS);
  int count = n;
  void* args[] = {&din, &dout, &doffsets, &count};
  if (kernel != nullptr) {
    CHECK_CU(cuLaunchKernel(kernel, 4, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  }
  CHECK_CU(cuMemcpyDtoH(out.data(), dout, n * sizeof(float)), CUDA_SUCCESS);
  CHECK_CU(cuMemcpyDtoH(offsets.data(), doffsets, n * sizeof(int)), CUDA_SUCCESS);
  int called = 0;
  if (calls != 0) CHECK_CU(cuMemcpyDtoH(&called, calls, sizeof(called)), CUDA_SUCCESS);
  int wrong = 0;
  for (int i = 0; i < n; ++i) {
    if (out[i] != in[i] * 2.0f + 0.5f || offsets[i] != 1000 + 7 * i) ++wrong;
  }
  EXPECT_TRUE(wrong == 0);
  EXPECT_TRUE(called == n);
  CHECK_CU(cuMemFree(din), CUDA_SUCCESS);
  CHECK_CU(cuMemFree(dout), CUDA_SUCCESS);
  CHECK_CU(cuMemFree(doffsets), CUDA_SUCCESS);
  CHECK_CU(cuModuleUnload(module), CUDA_SUCCESS);
}

int main() {
  const bool sim = std::getenv("GPUPOOL_EXPECT_SIM") != nullptr;
  CHECK_CU(cuInit(0), CUDA_SUCCESS);
  CUdevice device = 0;
  CHECK_CU(cuDeviceGet(&device, 0), CUDA_SUCCESS);
  CUcontext context = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device), CUDA_SUCCESS);
  CHECK_CU(cuCtxSetCurrent(context), CUDA_SUCCESS);
  if (failures) return 1;

  for (const char* file : {"engine_kernels_zstd.fatbin", "engine_kernels.ptx"}) {
    CUmodule module = nullptr;
    CHECK_CU(cuModuleLoad(&module, ModulePath(file).c_str()), CUDA_SUCCESS);
    if (module != nullptr) {
      RunKernels(module, file);
      CHECK_CU(cuModuleUnload(module), CUDA_SUCCESS);
    }
  }
  // The cubin is SASS for nvcc's default target, sm_75: a GPU of another compute
  // capability has no binary in it either (an H100 answers CUDA_ERROR_NO_BINARY_FOR_GPU).
  int major = 0, minor = 0;
  CHECK_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), CUDA_SUCCESS);
  CHECK_CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), CUDA_SUCCESS);
  CUmodule cubin = nullptr;
  if (sim || major != 7 || minor != 5) {
    CHECK_CU(cuModuleLoad(&cubin, ModulePath("engine_kernels.cubin").c_str()), CUDA_ERROR_NO_BINARY_FOR_GPU);
  } else {
    CHECK_CU(cuModuleLoad(&cubin, ModulePath("engine_kernels.cubin").c_str()), CUDA_SUCCESS);
    if (cubin != nullptr) RunKernels(cubin, "engine_kernels.cubin");
  }
  CUmodule none = nullptr;
  CHECK_CU(cuModuleLoad(&none, ModulePath("no_such_file.ptx").c_str()), CUDA_ERROR_FILE_NOT_FOUND);

  // cuModuleLoadDataEx writes its JIT options' outputs as a driver does, into buffers the
  // program did not clear: an empty info log and a wall time after a load; a load that
  // fails names its error in the error log, NUL-terminated, its length in the size option.
  {
    std::string text;
    FILE* file = std::fopen(ModulePath("engine_kernels.ptx").c_str(), "rb");
    char chunk[4096];
    for (size_t got; file != nullptr && (got = std::fread(chunk, 1, sizeof(chunk), file)) > 0;) text.append(chunk, got);
    if (file != nullptr) std::fclose(file);
    char info[64], error[128];
    CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                              CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME};
    for (bool good : {true, false}) {
      std::memset(info, 'x', sizeof(info));
      std::memset(error, 'x', sizeof(error));
      void* values[] = {info, reinterpret_cast<void*>(sizeof(info)), error, reinterpret_cast<void*>(sizeof(error)),
                        reinterpret_cast<void*>(~0ull)};
      const char* image = good ? text.c_str()
                               : "\x7f"
                                 "ELF, or so it says";
      CUmodule loaded = nullptr;
      const CUresult status = cuModuleLoadDataEx(&loaded, image, 5, options, values);
      EXPECT_TRUE((status == CUDA_SUCCESS) == good);
      EXPECT_TRUE(info[0] == '\0' && values[1] == nullptr);
      float wall_ms = -1;
      std::memcpy(&wall_ms, &values[4], sizeof(wall_ms));
      EXPECT_TRUE(wall_ms >= 0 && wall_ms < 60000);
      const size_t written = reinterpret_cast<uintptr_t>(values[3]);
      if (good) {
        EXPECT_TRUE(error[0] == '\0' && written == 0);
        if (loaded != nullptr) CHECK_CU(cuModuleUnload(loaded), CUDA_SUCCESS);
      } else {
        const char* end = static_cast<const char*>(std::memchr(error, '\0', sizeof(error)));
        EXPECT_TRUE(end != nullptr && written == static_cast<size_t>(end - error) + 1);
        EXPECT_TRUE(std::strstr(error, "CUDA_ERROR_") != nullptr);
      }
    }
  }

  // The JIT linker with one input, as PTX-JIT programs use it: a file, then the same PTX
  // from memory without its NUL; the linked image loads and runs. Bytes that are no
  // library are refused when added, and an NVVM input is not supported.
  for (bool from_memory : {false, true}) {
    char info[64] = "unset", error[64] = "unset";
    CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                              CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* values[] = {info, reinterpret_cast<void*>(sizeof(info)), error, reinterpret_cast<void*>(sizeof(error))};
    CUlinkState link = nullptr;
    CHECK_CU(cuLinkCreate(4, options, values, &link), CUDA_SUCCESS);
    EXPECT_TRUE(info[0] == '\0' && error[0] == '\0');
    std::string path = ModulePath("engine_kernels.ptx");
    std::string text;
    if (from_memory) {
      FILE* file = std::fopen(path.c_str(), "rb");
      char chunk[4096];
      for (size_t got; file != nullptr && (got = std::fread(chunk, 1, sizeof(chunk), file)) > 0;)
        text.append(chunk, got);
      if (file != nullptr) std::fclose(file);
      CHECK_CU(cuLinkAddData(link, CU_JIT_INPUT_PTX, text.data(), text.size(), "kernels", 0, nullptr, nullptr),
               CUDA_SUCCESS);
    } else {
      CHECK_CU(cuLinkAddFile(link, CU_JIT_INPUT_PTX, path.c_str(), 0, nullptr, nullptr), CUDA_SUCCESS);
    }
    CHECK_CU(cuLinkAddData(link, CU_JIT_INPUT_LIBRARY, info, sizeof(info), "lib", 0, nullptr, nullptr),
             CUDA_ERROR_INVALID_IMAGE);
    CHECK_CU(cuLinkAddData(link, CU_JIT_INPUT_OBJECT, info, sizeof(info), "object", 0, nullptr, nullptr),
             CUDA_ERROR_INVALID_IMAGE);
    CHECK_CU(cuLinkAddData(link, CU_JIT_INPUT_NVVM, info, sizeof(info), "nvvm", 0, nullptr, nullptr),
             CUDA_ERROR_NOT_SUPPORTED);
    void* image = nullptr;
    size_t size = 0;
    CHECK_CU(cuLinkComplete(link, &image, &size), CUDA_SUCCESS);
    EXPECT_TRUE(image != nullptr && size > 0);
    CUmodule linked = nullptr;
    if (image != nullptr) CHECK_CU(cuModuleLoadData(&linked, image), CUDA_SUCCESS);
    if (linked != nullptr) {
      RunKernels(linked, from_memory ? "linked from memory" : "linked from a file");
      CHECK_CU(cuModuleUnload(linked), CUDA_SUCCESS);
    }
    CHECK_CU(cuLinkDestroy(link), CUDA_SUCCESS);
  }
  RunSeveralLinkInputs(sim);

  CUlinkState empty = nullptr;
  CHECK_CU(cuLinkCreate(0, nullptr, nullptr, &empty), CUDA_SUCCESS);
  void* nothing = nullptr;
  size_t nothing_size = 0;
  // Nothing to link: a module with nothing in it (a driver does this too).
  CHECK_CU(cuLinkComplete(empty, &nothing, &nothing_size), CUDA_SUCCESS);
  EXPECT_TRUE(nothing != nullptr && nothing_size > 0);
  CUmodule empty_module = nullptr;
  if (nothing != nullptr) CHECK_CU(cuModuleLoadData(&empty_module, nothing), CUDA_SUCCESS);
  unsigned int empty_count = 99;
  if (empty_module != nullptr) {
    CHECK_CU(cuModuleGetFunctionCount(&empty_count, empty_module), CUDA_SUCCESS);
    EXPECT_TRUE(empty_count == 0);
    CHECK_CU(cuModuleUnload(empty_module), CUDA_SUCCESS);
  }
  CHECK_CU(cuLinkComplete(empty, nullptr, &nothing_size), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cuLinkDestroy(empty), CUDA_SUCCESS);

  // An out-of-bounds store: CUDA_ERROR_ILLEGAL_ADDRESS, and the context stays unusable.
  CUmodule module = nullptr;
  CHECK_CU(cuModuleLoad(&module, ModulePath("engine_kernels.ptx").c_str()), CUDA_SUCCESS);
  CUfunction poke = nullptr;
  CHECK_CU(cuModuleGetFunction(&poke, module, "poke"), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  CHECK_CU(cuMemAlloc(&p, 64), CUDA_SUCCESS);
  long long offset = 1 << 26;
  void* args[] = {&p, &offset};
  CHECK_CU(cuLaunchKernel(poke, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  CHECK_CU(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUdeviceptr q = 0;
  CHECK_CU(cuMemAlloc(&q, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_CU(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);

  if (failures) {
    std::fprintf(stderr, "driver_api: %d checks failed\n", failures);
    return 1;
  }
  std::printf("driver_api: OK\n");
  return 0;
}

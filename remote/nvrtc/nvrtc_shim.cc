// libnvrtc.so.N for jobs on remote GPUs: every NVRTC function forwards to the real library;
// the cubins NVRTC hands out are remembered with their PTX (nvrtc_ptx.h), for the remoting
// libcuda.so.1 to run on a sim GPU.
//
// It sits beside the remoting libcuda.so.1, so a job's LD_LIBRARY_PATH finds it before the
// real libnvrtc. The real one is loaded by absolute path (loading it by its soname would
// find this library again), from the first of:
//   1. GPUPOOL_NVRTC_LIBRARY (a path);
//   2. the directories of LD_LIBRARY_PATH other than this library's own;
//   3. the directories of /etc/ld.so.conf (and the files it includes);
//   4. the toolkit this library was built against, then the usual system directories.
// When none is found, each call fails with NVRTC_ERROR_INTERNAL_ERROR and the first says
// why on stderr.
//
// Who may use it: the process that loaded it; nothing crosses a process boundary (the PTX
// goes to the agent as any module image does, and the agent parses it as untrusted input).
#include <dlfcn.h>
#include <glob.h>
#include <nvrtc.h>
#include <pthread.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "remote/nvrtc/nvrtc_ptx.h"

namespace {

// What the build saw: the real library's file name and the toolkit's library directory.
#ifndef GPUPOOL_NVRTC_SONAME
#error "GPUPOOL_NVRTC_SONAME must name the real library (libnvrtc.so.N)"
#endif
#ifndef GPUPOOL_NVRTC_TOOLKIT_DIR
#define GPUPOOL_NVRTC_TOOLKIT_DIR "/usr/local/cuda/lib64"
#endif

void* real_library = nullptr;
std::string load_error;

std::string OwnDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  char resolved[PATH_MAX];
  if (realpath(info.dli_fname, resolved) == nullptr) return "";
  std::string path = resolved;
  return path.substr(0, path.rfind('/'));
}

std::string Resolved(const std::string& directory) {
  char resolved[PATH_MAX];
  return realpath(directory.c_str(), resolved) != nullptr ? resolved : directory;
}

// The directories named by an ld.so.conf file and the files it includes.
void ConfDirectories(const std::string& file, int depth, std::vector<std::string>* out) {
  if (depth > 4) return;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    line = line.substr(start, line.find_last_not_of(" \t\r") - start + 1);
    if (line.rfind("include", 0) == 0 && line.size() > 7 && (line[7] == ' ' || line[7] == '\t')) {
      std::string pattern = line.substr(line.find_first_not_of(" \t", 7));
      if (!pattern.empty() && pattern[0] != '/') {
        pattern = file.substr(0, file.rfind('/') + 1) + pattern;
      }
      glob_t matches{};
      if (glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
        for (size_t i = 0; i < matches.gl_pathc; ++i) {
          ConfDirectories(matches.gl_pathv[i], depth + 1, out);
        }
      }
      globfree(&matches);
    } else if (line[0] == '/') {
      out->push_back(line);
    }
  }
}

void LoadRealLibrary() {
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("GPUPOOL_NVRTC_LIBRARY"); path != nullptr && *path) {
    candidates.push_back(path);
  }
  std::vector<std::string> directories;
  if (const char* path = std::getenv("LD_LIBRARY_PATH"); path != nullptr) {
    std::string list = path;
    for (size_t start = 0; start <= list.size();) {
      size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      if (end > start) directories.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  ConfDirectories("/etc/ld.so.conf", 0, &directories);
  for (const char* directory : {GPUPOOL_NVRTC_TOOLKIT_DIR, "/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                                "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"}) {
    directories.push_back(directory);
  }
  const std::string own = OwnDirectory();
  for (const std::string& directory : directories) {
    if (!own.empty() && Resolved(directory) == own) continue;
    candidates.push_back(directory + "/" + GPUPOOL_NVRTC_SONAME);
  }
  for (const std::string& candidate : candidates) {
    if (access(candidate.c_str(), R_OK) != 0) continue;
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) continue;
    // Not this library under another name (a copy or link of it elsewhere).
    if (dlsym(handle, GPUPOOL_NVRTC_PTX_FOR) != nullptr) {
      dlclose(handle);
      continue;
    }
    real_library = handle;
    return;
  }
  load_error = std::string("gpupool: the real ") + GPUPOOL_NVRTC_SONAME +
               " was not found (LD_LIBRARY_PATH, /etc/ld.so.conf, the CUDA toolkit); set "
               "GPUPOOL_NVRTC_LIBRARY to its path";
}

void* Real(const char* name) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, LoadRealLibrary);
  if (real_library == nullptr) {
    static std::once_flag told;
    std::call_once(told, [] { std::fprintf(stderr, "%s\n", load_error.c_str()); });
    return nullptr;
  }
  void* function = dlsym(real_library, name);
  if (function == nullptr) std::fprintf(stderr, "gpupool: the real NVRTC lacks %s\n", name);
  return function;
}

// The PTX of each cubin handed out, newest last; bounded, as a program may compile many.
struct Remembered {
  size_t size;
  uint64_t hash;
  std::string ptx;
};
constexpr size_t kRemembered = 256;
std::mutex remembered_mu;
std::deque<Remembered>* remembered = new std::deque<Remembered>;  // used until exit

uint64_t Hash(const void* bytes, size_t size) {  // FNV-1a
  uint64_t hash = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

}  // namespace

#define GPUPOOL_FORWARD(name, params, args)                                   \
  extern "C" __attribute__((visibility("default"))) nvrtcResult name params { \
    using Function = nvrtcResult(*) params;                                   \
    static auto real = reinterpret_cast<Function>(Real(#name));               \
    return real != nullptr ? real args : NVRTC_ERROR_INTERNAL_ERROR;          \
  }

extern "C" __attribute__((visibility("default"))) const char* nvrtcGetErrorString(nvrtcResult result) {
  using Function = const char* (*)(nvrtcResult);
  static auto real = reinterpret_cast<Function>(Real("nvrtcGetErrorString"));
  if (real != nullptr) return real(result);
  return result == NVRTC_SUCCESS ? "NVRTC_SUCCESS" : load_error.c_str();
}

GPUPOOL_FORWARD(nvrtcVersion, (int* major, int* minor), (major, minor))
GPUPOOL_FORWARD(nvrtcGetNumSupportedArchs, (int* count), (count))
GPUPOOL_FORWARD(nvrtcGetSupportedArchs, (int* archs), (archs))
GPUPOOL_FORWARD(nvrtcCreateProgram,
                (nvrtcProgram * program, const char* source, const char* name, int headers,
                 const char* const* header_sources, const char* const* header_names),
                (program, source, name, headers, header_sources, header_names))
GPUPOOL_FORWARD(nvrtcDestroyProgram, (nvrtcProgram * program), (program))
GPUPOOL_FORWARD(nvrtcCompileProgram, (nvrtcProgram program, int count, const char* const* options),
                (program, count, options))
GPUPOOL_FORWARD(nvrtcGetPTXSize, (nvrtcProgram program, size_t* size), (program, size))
GPUPOOL_FORWARD(nvrtcGetPTX, (nvrtcProgram program, char* ptx), (program, ptx))
GPUPOOL_FORWARD(nvrtcGetCUBINSize, (nvrtcProgram program, size_t* size), (program, size))
GPUPOOL_FORWARD(nvrtcGetLTOIRSize, (nvrtcProgram program, size_t* size), (program, size))
GPUPOOL_FORWARD(nvrtcGetLTOIR, (nvrtcProgram program, char* ir), (program, ir))
GPUPOOL_FORWARD(nvrtcGetOptiXIRSize, (nvrtcProgram program, size_t* size), (program, size))
GPUPOOL_FORWARD(nvrtcGetOptiXIR, (nvrtcProgram program, char* ir), (program, ir))
GPUPOOL_FORWARD(nvrtcGetProgramLogSize, (nvrtcProgram program, size_t* size), (program, size))
GPUPOOL_FORWARD(nvrtcGetProgramLog, (nvrtcProgram program, char* log), (program, log))
GPUPOOL_FORWARD(nvrtcAddNameExpression, (nvrtcProgram program, const char* const expression), (program, expression))
GPUPOOL_FORWARD(nvrtcGetLoweredName, (nvrtcProgram program, const char* const expression, const char** lowered),
                (program, expression, lowered))
GPUPOOL_FORWARD(nvrtcGetPCHHeapSize, (size_t * size), (size))
GPUPOOL_FORWARD(nvrtcSetPCHHeapSize, (size_t size), (size))
GPUPOOL_FORWARD(nvrtcGetPCHCreateStatus, (nvrtcProgram program), (program))
GPUPOOL_FORWARD(nvrtcGetPCHHeapSizeRequired, (nvrtcProgram program, size_t* size), (program, size))
GPUPOOL_FORWARD(nvrtcSetFlowCallback, (nvrtcProgram program, int (*callback)(void*, void*), void* payload),
                (program, callback, payload))

// The cubin, and its PTX remembered (a compile for sm_XX makes both).
extern "C" __attribute__((visibility("default"))) nvrtcResult nvrtcGetCUBIN(nvrtcProgram program, char* cubin) {
  using GetCubin = nvrtcResult (*)(nvrtcProgram, char*);
  static auto real = reinterpret_cast<GetCubin>(Real("nvrtcGetCUBIN"));
  if (real == nullptr) return NVRTC_ERROR_INTERNAL_ERROR;
  nvrtcResult result = real(program, cubin);
  if (result != NVRTC_SUCCESS || cubin == nullptr) return result;
  size_t cubin_size = 0, ptx_size = 0;
  if (nvrtcGetCUBINSize(program, &cubin_size) != NVRTC_SUCCESS ||
      nvrtcGetPTXSize(program, &ptx_size) != NVRTC_SUCCESS || ptx_size == 0) {
    return result;  // no PTX to remember (e.g. an LTO build): the cubin alone, as before
  }
  std::string ptx(ptx_size, '\0');
  if (nvrtcGetPTX(program, ptx.data()) != NVRTC_SUCCESS) return result;
  ptx.resize(std::strlen(ptx.c_str()));
  uint64_t hash = Hash(cubin, cubin_size);
  std::lock_guard<std::mutex> lock(remembered_mu);
  remembered->push_back(Remembered{cubin_size, hash, std::move(ptx)});
  if (remembered->size() > kRemembered) remembered->pop_front();
  return result;
}

extern "C" __attribute__((visibility("default"))) size_t gpupool_nvrtc_ptx_for(const void* cubin, size_t size,
                                                                               char* buffer, size_t capacity) {
  if (cubin == nullptr || size == 0) return 0;
  uint64_t hash = Hash(cubin, size);
  std::lock_guard<std::mutex> lock(remembered_mu);
  for (auto entry = remembered->rbegin(); entry != remembered->rend(); ++entry) {
    if (entry->size != size || entry->hash != hash) continue;
    size_t needed = entry->ptx.size() + 1;
    if (buffer != nullptr && capacity >= needed) std::memcpy(buffer, entry->ptx.c_str(), needed);
    return needed;
  }
  return 0;
}

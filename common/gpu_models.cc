#include "common/gpu_models.h"

#include <cstring>

namespace gpupool {
namespace {

// Figures from NVIDIA's data sheets, the CUDA programming guide's per-compute-capability
// limits and what cudaGetDeviceProperties reports on each model. More specific names
// first: the first entry whose `match` is in the name wins.
constexpr GpuModel kModels[] = {
    // match         cc      SMs  clock    mem clock bus   L2         smem/blk optin   smem/SM
    //   reserved regs/blk regs/SM thr/SM blk/SM sp:dp engines
    {"RTX PRO 6000 Blackwell", 12, 0, 188, 2617000, 14001000, 512, 134217728, 49152, 101376, 102400, 1024, 65536, 65536,
     1536, 24, 64, 2},
    {"H100-PCIE", 9, 0, 114, 1755000, 1593000, 5120, 52428800, 49152, 232448, 233472, 1024, 65536, 65536, 2048, 32, 2,
     3},
    {"H100", 9, 0, 132, 1980000, 2619000, 5120, 52428800, 49152, 232448, 233472, 1024, 65536, 65536, 2048, 32, 2, 3},
    // As the driver (580.159) answered on an H200: an H100's but for its memory and L2.
    {"H200", 9, 0, 132, 1980000, 3201000, 6016, 62914560, 49152, 232448, 233472, 1024, 65536, 65536, 2048, 32, 2, 3},
    {"A100", 8, 0, 108, 1410000, 1593000, 5120, 41943040, 49152, 166912, 167936, 1024, 65536, 65536, 2048, 32, 2, 3},
    {"L40S", 8, 9, 142, 2520000, 9001000, 384, 100663296, 49152, 101376, 102400, 1024, 65536, 65536, 1536, 24, 64, 2},
    {"L40", 8, 9, 142, 2490000, 9001000, 384, 100663296, 49152, 101376, 102400, 1024, 65536, 65536, 1536, 24, 64, 2},
    // "NVIDIA L4": after L40S and L40, which hold its name.
    {"L4", 8, 9, 58, 2040000, 6251000, 192, 50331648, 49152, 101376, 102400, 1024, 65536, 65536, 1536, 24, 64, 2},
};

// By generation, newest first, for models not in the table.
constexpr GpuModel kGenerations[] = {
    {nullptr, 12, 0, 188, 2617000, 14001000, 512, 134217728, 49152, 101376, 102400, 1024, 65536, 65536, 1536, 24, 64,
     2},
    {nullptr, 9, 0, 132, 1980000, 2619000, 5120, 52428800, 49152, 232448, 233472, 1024, 65536, 65536, 2048, 32, 2, 3},
    {nullptr, 8, 9, 142, 2520000, 9001000, 384, 100663296, 49152, 101376, 102400, 1024, 65536, 65536, 1536, 24, 64, 2},
    {nullptr, 8, 6, 84, 1740000, 9751000, 384, 6291456, 49152, 101376, 102400, 1024, 65536, 65536, 1536, 16, 64, 2},
    {nullptr, 8, 0, 108, 1410000, 1593000, 5120, 41943040, 49152, 166912, 167936, 1024, 65536, 65536, 2048, 32, 2, 3},
    {nullptr, 7, 0, 80, 1530000, 877000, 4096, 6291456, 49152, 98304, 98304, 0, 65536, 65536, 2048, 32, 2, 6},
};

}  // namespace

const GpuModel* FindGpuModel(const char* name) {
  if (name == nullptr) return nullptr;
  for (const GpuModel& model : kModels) {
    if (std::strstr(name, model.match) != nullptr) return &model;
  }
  return nullptr;
}

const GpuModel& GenerationModel(int cc_major, int cc_minor) {
  for (const GpuModel& candidate : kGenerations) {
    if (candidate.cc_major * 10 + candidate.cc_minor <= cc_major * 10 + cc_minor) return candidate;
  }
  return kGenerations[sizeof(kGenerations) / sizeof(kGenerations[0]) - 1];
}

}  // namespace gpupool

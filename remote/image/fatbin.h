// Module images: finds the kernels in a CUDA module image, their parameter layouts, and
// the PTX the image carries (what the sim GPU runs) and the targets of its SASS (which
// decide what a real GPU of a model would run: ChooseCode).
//
// cuLaunchKernel hands the driver an array of pointers to the arguments with no sizes;
// a remoting driver must know each parameter's offset and size to pack them. On a GPU host
// cuFuncGetParamInfo answers; here we read them offline from the image: the ELF cubin's
// `.nv.info.<kernel>` section holds one EIATTR_KPARAM_INFO record per parameter (attribute
// 0x45, its successor, for kernels of more than 4 KiB of parameters).
//
// Accepted images (what cuModuleLoadData / cuLibraryLoadData receive):
//   - a fatbin wrapper (__fatBinC_Wrapper_t, magic 0x466243b1) pointing to a fatbin,
//   - a fatbin (magic 0xBA55ED50) with one or more ELF and PTX entries,
//   - a bare ELF cubin,
//   - PTX text (NUL-terminated): layouts from its `.entry` declarations (ptx_signature.h).
// Fatbin entries may be compressed (flags at entry offset 40): 0x8000 = a zstd frame,
// 0x2000 = an LZ4 block (raw, no frame header; `nvcc --compress-mode=speed`), both with
// the decompressed size at entry offset 56. A kernel found in no entry is unknown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::image {

struct ParamSlot {
  uint32_t offset = 0;
  uint32_t size = 0;
};

struct KernelLayout {
  std::vector<ParamSlot> params;  // in parameter order
  uint32_t param_size = 0;        // bytes of the packed buffer
};

struct PtxEntry {
  std::string text;
  uint32_t arch = 0;  // the compute capability it targets, e.g. 75 (0: not known)
};

// The target of one SASS (ELF) entry: the fatbin entry header's architecture and whether
// it is arch-specific (sm_90a, sm_100a: entry flag 0x100000), or a bare cubin's e_flags.
struct SassTarget {
  uint32_t arch = 0;           // e.g. 80 for sm_80
  bool arch_specific = false;  // runs only on that very architecture
};

// True when a real GPU of compute capability `device_arch` runs SASS built for `target`:
// SASS is binary-compatible within a major version with GPUs of the same or a later minor
// one (sm_80 runs on 8.0, 8.6 and 8.9, not on 9.0), arch-specific SASS only on its own.
bool RunsSass(const SassTarget& target, uint32_t device_arch);

// The PTX a driver would compile for a GPU of compute capability `device_arch` (e.g. 80):
// the newest entry not newer than the GPU (an entry of unknown target counts as any).
// nullptr when every entry targets a newer GPU (CUDA_ERROR_NO_BINARY_FOR_GPU on a real
// driver). `device_arch` 0: the newest entry.
const PtxEntry* ChoosePtx(const std::vector<PtxEntry>& ptx, uint32_t device_arch);

// What a sim GPU of compute capability `device_arch` runs of an image whose PTX entries
// target `ptx_archs` and whose SASS entries `sass`: the code a real GPU of that model would
// run, in the PTX form the sim can execute.
//   - PTX not newer than the GPU: the newest such (what the driver JITs, or the source of
//     the SASS it runs), as ChoosePtx.
//   - Otherwise, where the image holds SASS the GPU runs (RunsSass) but PTX only for newer
//     GPUs (cuBLAS, cuSPARSE and cuRAND ship sm_80 SASS and compute_120 PTX): the oldest
//     newer PTX, the same kernels' source, which the sim runs in place of the SASS. A
//     driver would refuse that PTX; it never sees it, as it runs the SASS.
//   - Neither: nothing (found false: CUDA_ERROR_NO_BINARY_FOR_GPU for a fatbin, the JIT's
//     CUDA_ERROR_INVALID_PTX for PTX text, which has no SASS to prove it was built for
//     this GPU).
struct CodeChoice {
  bool found = false;
  uint32_t ptx_arch = 0;          // the PTX entries to run: those targeting this architecture
  uint32_t sass_arch = 0;         // the SASS a real GPU would run (0: none; it would JIT the PTX)
  bool in_place_of_sass = false;  // ptx_arch is newer than the GPU (the second case above)
};
CodeChoice ChooseCode(const std::vector<uint32_t>& ptx_archs, const std::vector<SassTarget>& sass,
                      uint32_t device_arch);

// The compressed entries of one image (or of one host object's fatbins) decompress to at
// most this many bytes together; an image whose headers say more is refused with
// InvalidArgument naming the cap, before the memory is taken.
inline constexpr uint64_t kMaxDecompressedBytes = uint64_t{1} << 30;

struct ModuleImage {
  const void* bytes = nullptr;  // what the server loads (fatbin, cubin or PTX text)
  size_t size = 0;
  std::map<std::string, KernelLayout> kernels;  // by mangled name
  // The same kernels' layouts as their PTX declares them, where the image holds PTX (a sim
  // GPU runs the PTX). The SASS's can differ: a parameter aligned to more than 16 bytes (a
  // __grid_constant__ CUtensorMap, .align 64 or 128) lies where the driver's constant bank
  // aligns it (at offset 112 on sm_90), in the PTX at the next multiple of its alignment.
  std::map<std::string, KernelLayout> ptx_kernels;
  std::vector<PtxEntry> ptx;     // the PTX entries (decompressed), or the PTX text itself
  std::vector<SassTarget> sass;  // the targets of its SASS (ELF) entries, or the cubin's
  // A fatbin wrapper of version 2 (nvcc -rdc=true: cudart's __cudaRegisterLinkedBinary)
  // also lists the relocatable fatbins of the program's translation units, whose PTX a
  // driver JIT-links when the linked image holds no code for the GPU: their addresses.
  std::vector<const uint8_t*> relocatable;
  uint64_t decompressed_bytes = 0;  // what its compressed entries inflated to, together

  // It holds at least one ELF (SASS) entry or is a cubin.
  bool has_sass() const { return !sass.empty(); }
};

// Parses an image given as an untyped pointer (its size is implied by its headers).
Result<ModuleImage> ParseModuleImage(const void* image);

// True when the `size` bytes at `image` start with a fatbin's magic word (not a cubin, not
// PTX text).
bool IsFatbin(const void* image, size_t size);

// Parses an image of exactly `size` bytes (e.g. received from a client): every offset is
// checked against `size`. Fails with InvalidArgument naming the problem.
Result<ModuleImage> ParseModuleImageBytes(const void* image, size_t size);

// `image` (a fatbin) with the PTX entries of its relocatable fatbins appended, as copies
// of their entries: one per translation unit and architecture, so that an architecture
// has several PTX entries, which the sim links into one module. Fails with
// InvalidArgument when `image` is not a fatbin or a relocatable fatbin cannot be read.
Result<std::vector<uint8_t>> WithRelocatablePtx(const ModuleImage& image);

// A fatbin of uncompressed PTX entries, one per unit in order, each marked as targeting
// its `arch`: what cuLinkComplete gives when it links several inputs, which the sim links
// into one module as it links an -rdc=true program's units (all must have one `arch`).
std::vector<uint8_t> FatbinOfPtx(const std::vector<PtxEntry>& units);

// True when PTX declares module-scope variables (.global, .const; printf's format strings,
// $str..., aside: constants that kernels reach by name only) or calls device malloc: state
// that a GPU's driver places itself, so a module reloaded elsewhere would not have it where
// the program left it.
bool PtxKeepsState(const std::vector<PtxEntry>& ptx);

// True when PTX names a thread block cluster's state: its special registers (%clusterid,
// %nclusterid, %cluster_ctarank, %is_explicit_cluster, ...), cluster barriers
// (barrier.cluster) or another block's shared memory (.shared::cluster: ld, st, atom, mapa,
// getctarank). A kernel of PTX that names none computes the same in a cluster launch and
// in a plain one. A .cluster scope alone (fence, atom, red) does not count: in a plain
// launch it is the block's own.
bool PtxNamesClusters(const std::vector<PtxEntry>& ptx);

// The thread block cluster a kernel was compiled for (__cluster_dims__: .reqnctapercluster
// X, Y, Z; 0, 0, 0: none) and whether it must be launched in clusters (.explicitcluster).
struct CompiledCluster {
  uint32_t dims[3] = {0, 0, 0};
  bool must_be_set = false;
};

// The CompiledCluster of each kernel of `ptx` that names one, by kernel name (a dimension
// outside 1 to 16 is left out: the driver would not load such a module).
std::map<std::string, CompiledCluster> CompiledClusters(const std::vector<PtxEntry>& ptx);

// The PTX entries of the fatbins a host object file embeds (what `nvcc -c` and `nvcc -dc`
// write: sections `.nv_fatbin` and `__nv_relfatbin`), in order: what cuLinkAddData's
// CU_JIT_INPUT_OBJECT gives. An ELF object without such sections has none. Fails with
// InvalidArgument naming the problem when `bytes` is not an ELF object or a fatbin in it
// cannot be read; every offset is checked against `size`.
Result<std::vector<PtxEntry>> PtxOfHostObject(const uint8_t* bytes, size_t size);

// The same for each member of an ar archive of host objects (`nvcc -lib`, libcudadevrt.a:
// CU_JIT_INPUT_LIBRARY), in member order; members that are not ELF objects (the symbol
// and name tables) are skipped. Thin archives are refused.
Result<std::vector<PtxEntry>> PtxOfArchive(const uint8_t* bytes, size_t size);

// Parses one ELF cubin of `size` bytes, adding its kernels to *kernels.
Status ParseCubin(const uint8_t* elf, size_t size, std::map<std::string, KernelLayout>* kernels);

}  // namespace gpupool::image

// The decoded kernel (remote/ptx/ir/): what the decoder (interp/decoder*.cc) makes of a
// parsed kernel and the interpreter runs: the instructions (Inst), their operation modes
// (modes.h), the opcodes (opcodes.def) and the limits a kernel is decoded under.
//
// Inst, DecodedKernel, WmmaOp and DeviceRuntimeCall are still defined in front/program.h
// ("Decoded kernel"), which this header includes: PtxModule keeps its decoded kernels and
// is destroyed in front/module.cc, so moving them here means editing front/ as well
// (docs/ptx-engine.md, "Rooms").
//
// Who may use it: remote/ptx/ only (tests/remote/layering.sh); ir/ includes front/ and
// nothing else of the engine.
#pragma once

#include <cstddef>
#include <cstdint>

#include "remote/ptx/front/program.h"
#include "remote/ptx/ir/modes.h"

namespace gpupool::sim {

// What the decoder sums local declarations up to before it refuses the kernel: far above
// what a launch allows, far below where a sum of declarations (each at most
// kMaxDeclarationBytes) could wrap.
inline constexpr uint64_t kMaxLocalSum = uint64_t{1} << 48;
// Bytes of an entry's parameters (CUDA 12.1 and later).
inline constexpr uint64_t kMaxParamBytes = 32764;
// Device functions are inlined at their call sites: calls nested deeper than this are a
// trap where they would run (recursion deeper than this, or a virtual call that could
// reach itself), and a kernel of more instructions than kMaxKernelInstructions once
// inlined (deep or branching recursion, or PTX made to be large) is refused at decode,
// so that no job's PTX holds the agent's memory.
inline constexpr int kMaxCallDepth = 16;
inline constexpr size_t kMaxKernelInstructions = size_t{1} << 17;

}  // namespace gpupool::sim

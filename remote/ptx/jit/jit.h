// The PTX engine's second tier: kernels whose threads meet only at barriers and warp-level
// operations, compiled to host code with LLVM (docs/ptx-engine.md, Design, "Compile").
//
// The interpreter (interp/) runs every kernel a warp at a time, 32 lanes in
// step. A kernel whose threads exchange data only across __syncthreads() (no load or
// atomic another thread could be waited for through) gives the same results whatever
// order its threads run in between barriers, so it may run one thread after another in
// compiled code; a warp-level operation is a stop like a barrier, run for the lanes the
// interpreter runs it with (jit/emit_warp.cc). This tier compiles those kernels, from their
// parsed PTX, into one host function per kernel that runs a CTA. Every global, shared and
// local access is checked as the interpreter checks it: a stray one ends the launch with
// CUDA_ERROR_ILLEGAL_ADDRESS and the same kind of detail. Calls of the module's device
// functions are inlined first, as the decoder inlines them (jit/inline.cc).
//
// A kernel the tier cannot take (an instruction outside its list, say) runs on the
// interpreter; `JitMode` says when the tier is tried at all.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "remote/ptx/ir/kernel.h"
#include "remote/ptx/launch.h"

namespace gpupool::sim {

struct LaunchSpec;  // ptx_engine.h
class CompiledKernel;

// When kernels are compiled (environment variable GPUPOOL_PTX_JIT of the process that runs
// the engine: the agent, gpupool-dataplane-testd):
//   off     never: every kernel runs on the interpreter;
//   auto    (default) a kernel the tier can take, once its launches, the one at hand
//           included, reach kJitAfterThreads threads, a launch counting as at least
//           kJitLaunchThreads (a kernel launched a few times on small grids is not worth
//           the compile, 0.02-1 s), on a thread of its own: launches go on on the
//           interpreter until the code is ready, so that no launch waits for LLVM (nor
//           looks hung to the agent's watchdog meanwhile) but one of kJitAfterThreads
//           threads or more, which waits up to kJitLaunchWaits;
//   always  at its first launch, which waits for it (the tests use it to run their kernels
//           through the tier).
// An unknown value counts as auto, and says so once on stderr.
enum class JitMode { kOff, kAuto, kAlways };
JitMode CurrentJitMode();       // read from the environment at the first call
void SetJitMode(JitMode mode);  // for tests and benchmarks
inline constexpr uint64_t kJitAfterThreads = uint64_t{1} << 20;
// What a launch costs the interpreter before its first thread runs (its CTA's set-up) is
// about 0.3 us more than compiled code's: an empty one-thread kernel costs the agent
// 0.48 us per launch interpreted, 0.19 us compiled (scripts/bench/remote's launches). A
// kernel launched often on one thread is then compiled after 65,536 launches, about where
// the 0.3 us saved pays for a small kernel's compile (20-50 ms).
inline constexpr uint64_t kJitLaunchThreads = 16;
// How long a launch of kJitAfterThreads threads or more waits for its kernel's compile in
// flight under auto before it runs on the interpreter instead.
inline constexpr std::chrono::milliseconds kJitLaunchWaits{2000};

// Bounds on the work of one compile (the compile thread is shared by every tenant of the
// process): a kernel over them runs on the interpreter, and *refused says which.
//  - registers saved and restored at barriers, summed over the barriers (the code it
//    makes grows with barriers x live registers);
//  - steps of the liveness analysis that finds them (passes x instructions x registers).
inline constexpr uint64_t kMaxBarrierSaves = uint64_t{1} << 15;
inline constexpr uint64_t kMaxLivenessWork = uint64_t{1} << 28;

// Compiles `entry` (an .entry of parsed module `module`, whose device functions it may
// call, and whose CTA's shared memory is `shared`) if the tier can take it; otherwise
// returns nullptr and says why in *refused. `param_size`: bytes of its parameters. Throws
// nothing (a failure is a refusal).
std::shared_ptr<CompiledKernel> CompileKernel(const ParsedModule& module, const RawFunction& entry,
                                              const SharedLayout& shared, uint32_t param_size, std::string* refused);

// Compiles `entry` for `slot` on the background compiler's thread (GPUPOOL_PTX_JIT=auto);
// the caller holds slot->mu and has set slot->tried. The entry (its calls inlined here, on
// the caller's thread) and the layout are copied: the module may be unloaded meanwhile.
void CompileInBackground(std::shared_ptr<JitSlot> slot, const ParsedModule& module, const RawFunction& entry,
                         const SharedLayout& shared, uint32_t param_size);

// Waits until no background compile of `slot` is pending (tests).
void WaitForCompile(JitSlot& slot);

// Whether `kernel` also has vector code (kernels without warp-level operations or local
// memory: 8 threads of a row at once), which launches whose blocks' x extent is a multiple
// of 8 run.
bool HasVectorCode(const CompiledKernel& kernel);

// Whether a thread of `kernel` stops before a load it may spin on (inside a loop), so that
// its CTA yields its worker to the CTAs it holds besides (scalar code only).
bool Yields(const CompiledKernel& kernel);
// How many registers of a thread its barriers and other stops save (each the live ones).
uint32_t SavedRegisters(const CompiledKernel& kernel);
// ... of them, how many vector code saves (it computes again what is the same at every
// point after its one definition: Emitter::Rematerialize).
uint32_t VectorSavedRegisters(const CompiledKernel& kernel);

// Whether GPUPOOL_PTX_JIT=auto leaves the launches of `kernel` on the interpreter, its
// compiled code being slower: kernels with warp-level operations and no loop free of them
// (each thread stops at every shuffle or vote; scripts/bench/ptx's WarpScan).
bool AutoInterpreted(const CompiledKernel& kernel);

// Whether compiled code runs launches of `threads` threads a block (a kernel whose
// shuffles read registers the interpreter computes before the CTA runs: whole warps only).
bool TakesBlock(const CompiledKernel& kernel, uint32_t threads);

// Runs a launch of a compiled kernel: its blocks split over `workers` threads as the
// interpreter splits them. Returns a CUresult as RunKernel does (success, or
// CUDA_ERROR_ILLEGAL_ADDRESS with spec.error_detail saying where).
int32_t RunCompiled(const CompiledKernel& kernel, const LaunchSpec& spec, uint32_t workers);

}  // namespace gpupool::sim

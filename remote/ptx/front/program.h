// The parsed module of the PTX engine (ptx_engine.h): what parser.cc and module.cc make of
// PTX text, and what both tiers start from (the decoder in interp/, the JIT in jit/). The
// decoded kernel the decoder makes of it is in ir/kernel.h, above this header: the front
// end includes neither tier nor ir/ (tests/remote/layering.sh).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim {

struct RawOperand {
  enum Kind : uint8_t { kNone, kName, kInt, kF32, kF64, kAddress, kVector, kList };
  Kind kind = kNone;
  std::string name;               // kName (register, symbol, label), kAddress base ("" for [imm])
  std::string pair;               // "a|b": the second destination (shfl's predicate)
  bool negated = false;           // !%p
  uint64_t bits = 0;              // kInt / kF32 / kF64 value, kAddress offset
  std::vector<RawOperand> items;  // kVector {a, b}, kList (a, b) of a call
};

struct RawStatement {
  enum Kind : uint8_t { kInstruction, kLabel, kRegister, kLocal, kShared, kParam };
  Kind kind = kInstruction;
  std::string opcode;  // "ld.global.f32"; label name for kLabel
  std::string guard;   // predicate register, "" if none
  bool guard_negated = false;
  std::vector<RawOperand> operands;
  // Declarations (kRegister/kLocal/kShared/kParam): unique name, size,
  // alignment.
  std::string name;
  uint64_t size = 0;
  uint32_t align = 1;
  int line = 0;
};

struct RawParam {
  std::string name;
  uint64_t size = 0;
  uint32_t align = 1;
};

struct RawFunction {
  std::string name;
  bool is_entry = false;
  bool has_body = false;
  // Threads per block the kernel was compiled for at most (.maxntid, or .reqntid: the
  // product of its dimensions); 0: no bound given (the device's 1024).
  uint32_t max_threads = 0;
  // Thread block clusters (sm_90): the shape it was compiled for (.reqnctapercluster, as
  // __cluster_dims__ gives; 0, 0, 0: none), and the most blocks a cluster of it may have
  // (.maxclusterrank; 0: no bound given). (.explicitcluster, which nvcc writes beside a
  // compiled shape, needs nothing more: a launch of such a kernel is in clusters.)
  uint32_t required_cluster[3] = {0, 0, 0};
  uint32_t max_cluster_rank = 0;
  // Its translation unit's .version (major * 10 + minor) and .target (sm_80: 80); 0: none.
  uint32_t ptx_version = 0;
  uint32_t target_arch = 0;
  std::vector<RawParam> params;
  std::vector<RawParam> returns;
  std::vector<RawStatement> body;
  // Declared width in bits of each register (1 for .pred): by its unique name, or for a
  // family %r<N> by the unique name its members' names (`name@k`) start with.
  std::map<std::string, uint32_t> register_bits;
};

struct SharedVariable {
  std::string name;
  uint64_t size = 0;  // 0 for `.extern .shared` (dynamic shared memory)
  uint32_t align = 1;
  bool is_extern = false;
};

struct ParsedModule {
  std::vector<ModuleVariable> variables;
  std::vector<SharedVariable> shared;
  std::vector<std::string> unsupported_symbols;  // .texref / .surfref / .samplerref
  std::map<std::string, RawFunction> functions;
  // Module-level names of this module's own (declared neither .visible, .weak, .common nor
  // .extern): another module's same name is another symbol.
  std::set<std::string> local_names;
};

// An opcode's dot-separated parts, the operation first: "ld.global.v2.f32" -> {"ld",
// "global", "v2", "f32"} (a qualifier with "::" stays one part). Both tiers decode opcodes
// from these; the views point into `opcode`.
std::vector<std::string_view> SplitOpcode(std::string_view opcode);

// Links the PTX of several translation units into one module (PtxModule::ParseLinked).
Result<std::unique_ptr<ParsedModule>> LinkPtxTexts(const std::vector<std::string_view>& texts);

// The address of device function `name` of `module` (its function pointers and virtual
// tables hold it): in kCodeWindow, by the function's place among the module's functions,
// so the same PTX gives the same addresses on any GPU. 0: no function of that name.
uint64_t FunctionAddress(const ParsedModule& module, const std::string& name);

}  // namespace gpupool::sim

// The opcode table (opcodes.def) as data, for the code that asks it about one opcode: the
// JIT tier's dispatch (jit/emit_control.cc) takes only the opcodes its column marks, and
// its tests check that column against what the tier compiles.
//
// Who may use it: remote/ptx/ only, as the rest of ir/.
#pragma once

#include <string_view>

namespace gpupool::sim {

struct OpcodeRow {
  std::string_view name;  // the opcode's first part ("ld")
  bool jit;               // the JIT tier has an emitter for it (opcodes.def's jit column)
};

inline constexpr OpcodeRow kOpcodeTable[] = {
#define GPUPOOL_PTX_OPCODE(name, family, jit) {name, jit},
#include "remote/ptx/ir/opcodes.def"
#undef GPUPOOL_PTX_OPCODE
};

// Whether the JIT tier has an emitter for opcode `name` (its first part): false for an
// opcode the table marks false and for one not in it (which the decoder refuses).
constexpr bool JitHasEmitter(std::string_view name) {
  for (const OpcodeRow& row : kOpcodeTable) {
    if (row.name == name) return row.jit;
  }
  return false;
}

}  // namespace gpupool::sim

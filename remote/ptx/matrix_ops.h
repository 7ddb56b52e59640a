// The warp matrix operations' arithmetic, shared by both tiers: the interpreter's handlers
// (interp/wmma.cc) and compiled code's Settle (jit/run.cc) parse mma.sync's forms, multiply
// a warp's fragments and place ldmatrix's elements with these functions, so that the two
// tiers agree bit for bit (the order of the products, f16 rounding of the sums, .satfinite)
// without a second implementation to keep in step.
//
// A fragment is a list of registers in every lane of the warp; here it is handed over as one
// row of 32 lane values per register (the interpreter's register file rows; the JIT's warp
// gathered into such rows), the values zero-extended to 64 bits as both tiers keep them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "remote/ptx/ir/kernel.h"

namespace gpupool::sim {

// The most registers a fragment of the shapes the decoder takes holds in one lane
// (wmma.m16n16k16's f16 a and b, f32 c and d).
constexpr uint32_t kMaxFragmentRegisters = 8;

// Bytes of one element of `t`, and elements of `t` in one register (16- and 8-bit ones are
// packed in a .b32).
uint32_t WmmaSize(WmmaType t);
uint32_t WmmaPerRegister(WmmaType t);
// The rows and columns of matrix `matrix` (a, b, c or d) of op's shape.
void WmmaShape(const WmmaOp& op, char matrix, uint32_t* rows, uint32_t* cols);

// The modifiers of a wmma or mma.sync instruction (parts: its opcode split at the dots):
// its shape (into op's m, n, k), its element types and layouts (true: row) in order, and
// .satfinite. False when it names a sub-byte type (s4, u4, b1), which the sim does not run.
bool MatrixModifiers(const std::vector<std::string>& parts, WmmaOp* op, std::vector<WmmaType>* types,
                     std::vector<bool>* row_layouts);

// mma.sync.aligned's forms the engine runs (m16n8k16 and m16n8k8 of f16/bf16 into f32, f16
// inputs also into f16; m16n8k8 of tf32; m8n8k4 of f64; a row-major, b column-major): true
// with op's shape, types (d, a, b, c), kMma and ptx_layout set; false for any other form.
bool MmaSyncForm(const std::vector<std::string>& parts, WmmaOp* op);

// D = A * B + C of wmma.mma and mma.sync (op: its shape, types, .satfinite and lane layout)
// over the whole warp: a, b and c each op's fragment registers' rows of 32 lanes (every
// lane's, whether it runs the instruction or not, as a GPU's tensor core reads them); d's
// rows are written for the lanes of `mask` (a packed register whole). The inputs are read
// before anything is written: d may be c.
void WarpMma(const WmmaOp& op, const uint64_t* const* a, const uint64_t* const* b, const uint64_t* const* c,
             uint64_t* const* d, uint32_t mask);

// ldmatrix.m8n8.b16's element h (0 or 1) of register j of lane `lane`: its address, given
// the 32 lanes' row addresses (`rows`: lane 8j + r gives row r of matrix j); with .trans
// (`transpose`) the matrix's transpose.
uint64_t LdmatrixAddress(const uint64_t* rows, uint32_t lane, uint32_t j, uint32_t h, bool transpose);

}  // namespace gpupool::sim

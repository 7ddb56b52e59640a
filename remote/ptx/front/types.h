// The PTX type table of the front end, which both tiers decode an instruction's types with:
// a type suffix of an opcode ("s32" of add.s32, "f16x2", "pred") -> its kind and width.
// Each tier then takes the types it computes in (the JIT tier: no halves). Includes neither
// tier (tests/remote/layering.sh).
#pragma once

#include <cstdint>
#include <string_view>

namespace gpupool::sim {

enum class PtxKind : uint8_t {
  kNone,      // not a type suffix
  kSigned,    // .s8 .s16 .s32 .s64
  kUnsigned,  // .u8 .u16 .u32 .u64
  kBits,      // .b8 .b16 .b32 .b64: untyped bits, unsigned where a value is needed
  kFloat,     // .f32 .f64 (IEEE binary32, binary64)
  kHalf,      // .f16, and .f16x2 (two in a .b32)
  kBFloat,    // .bf16, and .bf16x2
  kPred,      // .pred
};

struct PtxType {
  PtxKind kind = PtxKind::kNone;
  uint32_t bits = 0;      // of the whole value: .f16x2 is 32, .pred 1
  uint32_t elements = 1;  // values in it: 2 for .f16x2 and .bf16x2
  bool ok() const { return kind != PtxKind::kNone; }
  bool is_int() const { return kind == PtxKind::kSigned || kind == PtxKind::kUnsigned || kind == PtxKind::kBits; }
};

// The type a suffix names; kind kNone for a word that is no PTX type this engine knows (a
// qualifier such as "global", or .b128, .e4m3, .tf32).
PtxType ParsePtxType(std::string_view suffix);

}  // namespace gpupool::sim

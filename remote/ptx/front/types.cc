// The front end's PTX type table (types.h).
#include "remote/ptx/front/types.h"

#include <array>
#include <utility>

namespace gpupool::sim {

PtxType ParsePtxType(std::string_view suffix) {
  using K = PtxKind;
  static constexpr std::array<std::pair<std::string_view, PtxType>, 19> kTypes = {{
      {"s8", {K::kSigned, 8}},         {"s16", {K::kSigned, 16}},    {"s32", {K::kSigned, 32}},
      {"s64", {K::kSigned, 64}},       {"u8", {K::kUnsigned, 8}},    {"u16", {K::kUnsigned, 16}},
      {"u32", {K::kUnsigned, 32}},     {"u64", {K::kUnsigned, 64}},  {"b8", {K::kBits, 8}},
      {"b16", {K::kBits, 16}},         {"b32", {K::kBits, 32}},      {"b64", {K::kBits, 64}},
      {"f16", {K::kHalf, 16}},         {"f16x2", {K::kHalf, 32, 2}}, {"bf16", {K::kBFloat, 16}},
      {"bf16x2", {K::kBFloat, 32, 2}}, {"f32", {K::kFloat, 32}},     {"f64", {K::kFloat, 64}},
      {"pred", {K::kPred, 1}},
  }};
  for (const auto& [name, type] : kTypes) {
    if (name == suffix) return type;
  }
  return PtxType{};
}

}  // namespace gpupool::sim

// The front end's special-register decoder (special_registers.h).
#include "remote/ptx/front/special_registers.h"

#include <array>
#include <utility>

namespace gpupool::sim {

SpecialRegisterName DecodeSpecialRegister(std::string_view name) {
  using R = SpecialRegister;
  static constexpr std::array<std::pair<std::string_view, R>, 8> kAxial = {{
      {"%tid.", R::kTid},
      {"%ntid.", R::kNtid},
      {"%ctaid.", R::kCtaid},
      {"%nctaid.", R::kNctaid},
      {"%clusterid.", R::kClusterid},
      {"%nclusterid.", R::kNclusterid},
      {"%cluster_ctaid.", R::kClusterCtaid},
      {"%cluster_nctaid.", R::kClusterNctaid},
  }};
  for (const auto& [prefix, reg] : kAxial) {
    if (name.size() == prefix.size() + 1 && name.substr(0, prefix.size()) == prefix) {
      const char axis = name.back();
      if (axis >= 'x' && axis <= 'z') return {reg, static_cast<uint32_t>(axis - 'x')};
      return {};
    }
  }
  static constexpr std::array<std::pair<std::string_view, R>, 19> kScalar = {{
      {"%laneid", R::kLaneid},
      {"%warpid", R::kWarpid},
      {"%nwarpid", R::kNwarpid},
      {"%smid", R::kSmid},
      {"%nsmid", R::kNsmid},
      {"%gridid", R::kGridid},
      {"%lanemask_eq", R::kLanemaskEq},
      {"%lanemask_lt", R::kLanemaskLt},
      {"%lanemask_le", R::kLanemaskLe},
      {"%lanemask_gt", R::kLanemaskGt},
      {"%lanemask_ge", R::kLanemaskGe},
      {"%clock", R::kClock},
      {"%clock64", R::kClock64},
      {"%globaltimer", R::kGlobaltimer},
      {"%globaltimer_lo", R::kGlobaltimerLo},
      {"%globaltimer_hi", R::kGlobaltimerHi},
      {"%cluster_ctarank", R::kClusterCtarank},
      {"%cluster_nctarank", R::kClusterNctarank},
      {"%is_explicit_cluster", R::kIsExplicitCluster},
  }};
  for (const auto& [known, reg] : kScalar) {
    if (name == known) return {reg, 0};
  }
  // %envreg0 ... %envreg31, one or two digits.
  constexpr std::string_view kEnvreg = "%envreg";
  if (name.substr(0, kEnvreg.size()) == kEnvreg && name.size() > kEnvreg.size() && name.size() <= kEnvreg.size() + 2) {
    uint32_t n = 0;
    for (char c : name.substr(kEnvreg.size())) {
      if (c < '0' || c > '9') return {};
      n = n * 10 + static_cast<uint32_t>(c - '0');
    }
    if (n < 32) return {R::kEnvreg, n};
  }
  return {};
}

bool IsSpecialRegisterName(std::string_view name) {
  // The families of PTX ISA 8's special registers, by prefix.
  static constexpr std::array<std::string_view, 23> kFamilies = {
      "%tid",         "%ntid",        "%ctaid",     "%nctaid",        "%laneid",        "%warpid",
      "%clock",       "%lanemask",    "%smid",      "%nsmid",         "%nwarpid",       "%gridid",
      "%globaltimer", "%envreg",      "%pm",        "%dynamic_smem",  "%total_smem",    "%cluster",
      "%ncluster",    "%is_explicit", "%aggr_smem", "%reserved_smem", "%current_graph",
  };
  if (name.size() <= 1) return false;
  for (std::string_view family : kFamilies) {
    if (name.substr(0, family.size()) == family) return true;
  }
  return false;
}

}  // namespace gpupool::sim

// PTX's special registers (%tid.x, %laneid, %clock64, ...), decoded by the front end for
// both tiers: which one a name is, and whether a name lies in the special registers'
// namespace at all. A name there is never one of the kernel's registers, even when the
// tier at hand does not compute it (it then refuses the instruction: reading such a name
// as a register would read 0). Includes neither tier (tests/remote/layering.sh).
#pragma once

#include <cstdint>
#include <string_view>

namespace gpupool::sim {

enum class SpecialRegister : uint8_t {
  kNone,  // no special register either tier computes
  // .x .y .z: index 0, 1, 2
  kTid,
  kNtid,
  kCtaid,
  kNctaid,
  kLaneid,
  kWarpid,
  kNwarpid,
  kSmid,
  kNsmid,
  kGridid,
  kLanemaskEq,
  kLanemaskLt,
  kLanemaskLe,
  kLanemaskGt,
  kLanemaskGe,
  kClock,
  kClock64,
  kGlobaltimer,
  kGlobaltimerLo,
  kGlobaltimerHi,
  kEnvreg,  // %envreg0 ... %envreg31: index 0 ... 31
  // Clusters (sm_90): the interpreter runs each block as a cluster of one; the JIT tier
  // computes none of them. .x .y .z: index 0, 1, 2
  kClusterid,
  kNclusterid,
  kClusterCtaid,
  kClusterNctaid,
  kClusterCtarank,
  kClusterNctarank,
  kIsExplicitCluster,
};

struct SpecialRegisterName {
  SpecialRegister reg = SpecialRegister::kNone;
  uint32_t index = 0;  // the axis (%tid and the other three) or the %envreg number
};

// Which special register `name` is (with its leading %); reg kNone for any other name,
// among them special registers neither tier computes (%pm0, %dynamic_smem_size, ...).
SpecialRegisterName DecodeSpecialRegister(std::string_view name);

// Whether `name` lies in PTX's special-register namespace (every name DecodeSpecialRegister
// knows, and those of the same families it does not: %clusterid.x, %pm0, %envreg40, ...).
bool IsSpecialRegisterName(std::string_view name);

}  // namespace gpupool::sim

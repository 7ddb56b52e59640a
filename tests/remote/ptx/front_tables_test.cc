// The front end's tables both tiers decode with (remote/ptx/front/types.h,
// special_registers.h): every PTX type and special register the engine knows, and the
// names that are neither.
#include <gtest/gtest.h>

#include <iterator>
#include <string>
#include <vector>

#include "remote/ptx/front/param_layout.h"
#include "remote/ptx/front/special_registers.h"
#include "remote/ptx/front/types.h"

namespace gpupool::sim {
namespace {

TEST(PtxTypeTable, NamesEachIntegerTypeWithItsKindAndWidth) {
  for (uint32_t bits : {8u, 16u, 32u, 64u}) {
    const std::string width = std::to_string(bits);
    for (auto [prefix, kind] :
         {std::pair{"s", PtxKind::kSigned}, std::pair{"u", PtxKind::kUnsigned}, std::pair{"b", PtxKind::kBits}}) {
      const PtxType t = ParsePtxType(prefix + width);
      EXPECT_EQ(t.kind, kind) << prefix << width;
      EXPECT_EQ(t.bits, bits) << prefix << width;
      EXPECT_EQ(t.elements, 1u);
      EXPECT_TRUE(t.ok());
      EXPECT_TRUE(t.is_int());
    }
  }
}

TEST(PtxTypeTable, NamesFloatsHalvesPairsAndPredicates) {
  EXPECT_EQ(ParsePtxType("f32").kind, PtxKind::kFloat);
  EXPECT_EQ(ParsePtxType("f64").bits, 64u);
  EXPECT_EQ(ParsePtxType("f16").kind, PtxKind::kHalf);
  EXPECT_EQ(ParsePtxType("f16").bits, 16u);
  const PtxType pair = ParsePtxType("f16x2");
  EXPECT_EQ(pair.kind, PtxKind::kHalf);
  EXPECT_EQ(pair.bits, 32u);
  EXPECT_EQ(pair.elements, 2u);
  EXPECT_EQ(ParsePtxType("bf16").kind, PtxKind::kBFloat);
  EXPECT_EQ(ParsePtxType("bf16x2").elements, 2u);
  const PtxType pred = ParsePtxType("pred");
  EXPECT_EQ(pred.kind, PtxKind::kPred);
  EXPECT_EQ(pred.bits, 1u);
  EXPECT_FALSE(pred.is_int());
  EXPECT_FALSE(ParsePtxType("f32").is_int());
}

TEST(PtxTypeTable, KnowsNoQualifierOrUnsupportedTypeAsAType) {
  for (const char* word : {"", "global", "rn", "b128", "e4m3", "tf32", "s4", "u32 ", "U32", "f32x2"}) {
    EXPECT_FALSE(ParsePtxType(word).ok()) << "'" << word << "'";
  }
}

TEST(SpecialRegisters, DecodesTheFourAxialFamiliesWithTheirAxis) {
  const char axes[] = "xyz";
  for (auto [family, reg] :
       {std::pair{"%tid.", SpecialRegister::kTid}, std::pair{"%ntid.", SpecialRegister::kNtid},
        std::pair{"%ctaid.", SpecialRegister::kCtaid}, std::pair{"%nctaid.", SpecialRegister::kNctaid}}) {
    for (uint32_t axis = 0; axis < 3; ++axis) {
      const std::string name = family + std::string(1, axes[axis]);
      const SpecialRegisterName decoded = DecodeSpecialRegister(name);
      EXPECT_EQ(decoded.reg, reg) << name;
      EXPECT_EQ(decoded.index, axis) << name;
      EXPECT_TRUE(IsSpecialRegisterName(name)) << name;
    }
    // %tid.w, and %tid alone (the whole vector): no register either tier reads.
    EXPECT_EQ(DecodeSpecialRegister(family + std::string("w")).reg, SpecialRegister::kNone);
    EXPECT_EQ(DecodeSpecialRegister(family + std::string("xx")).reg, SpecialRegister::kNone);
  }
}

TEST(SpecialRegisters, DecodesLaneWarpClockAndTimerRegisters) {
  // In SpecialRegister's order, from kLaneid to kGlobaltimerHi.
  const char* const names[] = {"%laneid",      "%warpid",      "%nwarpid",        "%smid",
                               "%nsmid",       "%gridid",      "%lanemask_eq",    "%lanemask_lt",
                               "%lanemask_le", "%lanemask_gt", "%lanemask_ge",    "%clock",
                               "%clock64",     "%globaltimer", "%globaltimer_lo", "%globaltimer_hi"};
  for (size_t i = 0; i < std::size(names); ++i) {
    const auto expected = static_cast<SpecialRegister>(static_cast<size_t>(SpecialRegister::kLaneid) + i);
    EXPECT_EQ(DecodeSpecialRegister(names[i]).reg, expected) << names[i];
    EXPECT_TRUE(IsSpecialRegisterName(names[i])) << names[i];
  }
  EXPECT_EQ(static_cast<size_t>(SpecialRegister::kGlobaltimerHi) - static_cast<size_t>(SpecialRegister::kLaneid) + 1,
            std::size(names));
}

// The interpreter computes these (a block is a cluster of one); the JIT tier refuses them.
TEST(SpecialRegisters, DecodesTheClusterRegisters) {
  const char axes[] = "xyz";
  for (auto [family, reg] :
       {std::pair{"%clusterid.", SpecialRegister::kClusterid}, std::pair{"%nclusterid.", SpecialRegister::kNclusterid},
        std::pair{"%cluster_ctaid.", SpecialRegister::kClusterCtaid},
        std::pair{"%cluster_nctaid.", SpecialRegister::kClusterNctaid}}) {
    for (uint32_t axis = 0; axis < 3; ++axis) {
      const std::string name = family + std::string(1, axes[axis]);
      EXPECT_EQ(DecodeSpecialRegister(name).reg, reg) << name;
      EXPECT_EQ(DecodeSpecialRegister(name).index, axis) << name;
      EXPECT_TRUE(IsSpecialRegisterName(name)) << name;
    }
  }
  EXPECT_EQ(DecodeSpecialRegister("%cluster_ctarank").reg, SpecialRegister::kClusterCtarank);
  EXPECT_EQ(DecodeSpecialRegister("%cluster_nctarank").reg, SpecialRegister::kClusterNctarank);
  EXPECT_EQ(DecodeSpecialRegister("%is_explicit_cluster").reg, SpecialRegister::kIsExplicitCluster);
}

TEST(SpecialRegisters, DecodesEnvregZeroToThirtyOneOnly) {
  EXPECT_EQ(DecodeSpecialRegister("%envreg0").reg, SpecialRegister::kEnvreg);
  EXPECT_EQ(DecodeSpecialRegister("%envreg0").index, 0u);
  EXPECT_EQ(DecodeSpecialRegister("%envreg31").index, 31u);
  EXPECT_EQ(DecodeSpecialRegister("%envreg07").index, 7u);
  for (const char* name : {"%envreg", "%envreg32", "%envreg99", "%envreg100", "%envreg1x", "%envreg-1"}) {
    EXPECT_EQ(DecodeSpecialRegister(name).reg, SpecialRegister::kNone) << name;
    // Still a special register's name: never read as one of the kernel's registers.
    EXPECT_TRUE(IsSpecialRegisterName(name)) << name;
  }
}

TEST(SpecialRegisters, KeepsNamesNeitherTierComputesOutOfTheKernelsRegisters) {
  for (const char* name : {"%pm0", "%dynamic_smem_size", "%total_smem_size", "%clusterid", "%nclusterid",
                           "%cluster_ctaid.w", "%clusterid.x.y", "%cluster_rank", "%aggr_smem_size",
                           "%reserved_smem_offset_begin", "%current_graph_exec", "%tid"}) {
    EXPECT_EQ(DecodeSpecialRegister(name).reg, SpecialRegister::kNone) << name;
    EXPECT_TRUE(IsSpecialRegisterName(name)) << name;
  }
}

TEST(SpecialRegisters, TakesTheKernelsOwnRegistersForNoSpecialRegister) {
  for (const char* name : {"%r1", "%rd2", "%p1", "%f3", "%fd4", "%", "", "tid.x", "%t", "%ti"}) {
    EXPECT_EQ(DecodeSpecialRegister(name).reg, SpecialRegister::kNone) << name;
    EXPECT_FALSE(IsSpecialRegisterName(name)) << name;
  }
}

TEST(ParamLayout, PlacesEachParameterAtItsAlignmentInDeclarationOrder) {
  RawFunction entry;
  auto add = [&](const char* name, uint64_t size, uint32_t align) {
    RawParam param;
    param.name = name;
    param.size = size;
    param.align = align;
    entry.params.push_back(param);
  };
  add("flag", 1, 1);
  add("pointer", 8, 8);
  add("count", 4, 4);
  add("array", 12, 4);  // .align 4 .b8 array[12]
  add("wide", 16, 16);
  std::vector<uint64_t> offsets;
  EXPECT_EQ(LayOutParams(entry, &offsets), 48u);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 8, 16, 20, 32}));
  EXPECT_EQ(LayOutParams(entry, nullptr), 48u);
  EXPECT_EQ(LayOutParams(RawFunction{}, &offsets), 0u);
}

}  // namespace
}  // namespace gpupool::sim

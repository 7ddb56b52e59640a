#include "remote/image/fatbin.h"

#include <elf.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "tests/remote/test_fatbin.h"

namespace gpupool::image {
namespace {

// Builds a minimal 64-bit ELF with the given sections (name, bytes).
std::vector<uint8_t> MakeElf(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& sections) {
  std::string names(1, '\0');
  std::vector<uint32_t> name_offsets;
  for (const auto& [name, bytes] : sections) {
    name_offsets.push_back(static_cast<uint32_t>(names.size()));
    names += name + '\0';
  }
  uint32_t shstrtab_name = static_cast<uint32_t>(names.size());
  names += std::string(".shstrtab") + '\0';
  std::vector<uint8_t> elf(sizeof(Elf64_Ehdr));
  std::vector<Elf64_Shdr> headers(1);  // the null section
  for (size_t i = 0; i < sections.size(); ++i) {
    Elf64_Shdr header{};
    header.sh_name = name_offsets[i];
    header.sh_type = SHT_LOPROC;
    header.sh_offset = elf.size();
    header.sh_size = sections[i].second.size();
    elf.insert(elf.end(), sections[i].second.begin(), sections[i].second.end());
    headers.push_back(header);
  }
  Elf64_Shdr strtab{};
  strtab.sh_name = shstrtab_name;
  strtab.sh_type = SHT_STRTAB;
  strtab.sh_offset = elf.size();
  strtab.sh_size = names.size();
  elf.insert(elf.end(), names.begin(), names.end());
  headers.push_back(strtab);
  while (elf.size() % 8) elf.push_back(0);
  Elf64_Ehdr ehdr{};
  std::memcpy(ehdr.e_ident, ELFMAG, SELFMAG);
  ehdr.e_ident[EI_CLASS] = ELFCLASS64;
  ehdr.e_ident[EI_DATA] = ELFDATA2LSB;
  ehdr.e_shoff = elf.size();
  ehdr.e_shentsize = sizeof(Elf64_Shdr);
  ehdr.e_shnum = static_cast<uint16_t>(headers.size());
  ehdr.e_shstrndx = static_cast<uint16_t>(headers.size() - 1);
  ehdr.e_ehsize = sizeof(Elf64_Ehdr);
  for (const auto& header : headers) {
    const auto* raw = reinterpret_cast<const uint8_t*>(&header);
    elf.insert(elf.end(), raw, raw + sizeof(header));
  }
  std::memcpy(elf.data(), &ehdr, sizeof(ehdr));
  return elf;
}

// One EIATTR_KPARAM_INFO record: ordinal, offset, size.
void AddParam(std::vector<uint8_t>* info, uint16_t ordinal, uint16_t offset, uint32_t size) {
  uint8_t record[16] = {0x04, 0x17, 12, 0};
  uint32_t packed = (size << 18) | 0x1f000;
  std::memcpy(record + 8, &ordinal, 2);
  std::memcpy(record + 10, &offset, 2);
  std::memcpy(record + 12, &packed, 4);
  info->insert(info->end(), record, record + 16);
}

TEST(Fatbin, ReadsParameterLayoutsFromACubin) {
  std::vector<uint8_t> info = {0x03, 0x19, 0x1c, 0x00};  // an HVAL record to skip
  // Out of order on purpose: the parser sorts by ordinal.
  AddParam(&info, 1, 8, 8);
  AddParam(&info, 0, 0, 8);
  AddParam(&info, 2, 16, 4);
  auto elf = MakeElf({{".nv.info._Z1kPfS_i", info}, {".text._Z4noopv", {0, 0, 0, 0}}});
  auto image = ParseModuleImage(elf.data());
  ASSERT_TRUE(image.ok()) << image.status().message();
  ASSERT_EQ(image->kernels.count("_Z1kPfS_i"), 1u);
  const KernelLayout& layout = image->kernels["_Z1kPfS_i"];
  ASSERT_EQ(layout.params.size(), 3u);
  EXPECT_EQ(layout.params[0].offset, 0u);
  EXPECT_EQ(layout.params[1].offset, 8u);
  EXPECT_EQ(layout.params[2].offset, 16u);
  EXPECT_EQ(layout.params[2].size, 4u);
  EXPECT_EQ(layout.param_size, 20u);
  ASSERT_EQ(image->kernels.count("_Z4noopv"), 1u);
  EXPECT_TRUE(image->kernels["_Z4noopv"].params.empty());
  EXPECT_EQ(image->size, elf.size());
}

TEST(Fatbin, RejectsUnknownFormats) {
  const char junk[] = "\x01\x02\x03\x04 not an image";
  auto image = ParseModuleImage(junk);
  EXPECT_FALSE(image.ok());
  EXPECT_NE(image.status().message().find("unknown module image format"), std::string::npos);
  EXPECT_FALSE(ParseModuleImage(nullptr).ok());
  EXPECT_FALSE(ParseModuleImageBytes(junk, sizeof(junk)).ok());
  // A fatbin header whose sizes run past the bytes given.
  uint8_t truncated[16] = {0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0};
  auto short_image = ParseModuleImageBytes(truncated, sizeof(truncated));
  ASSERT_FALSE(short_image.ok());
  EXPECT_NE(short_image.status().message().find("exceed"), std::string::npos);
}

// PTX text: the layouts come from the .entry declarations (natural alignment, .align and
// arrays), as for a .ptx file given to cuModuleLoad.
TEST(Fatbin, ReadsParameterLayoutsFromPtx) {
  const char ptx[] =
      "// a comment mentioning .entry fake(\n"
      ".version 8.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry k1(\n .param .u64 k1_param_0,\n .param .u8 k1_param_1,\n"
      " .param .align 8 .b8 k1_param_2[24],\n .param .f32 k1_param_3\n)\n{\n ret;\n}\n"
      ".visible .entry k2()\n{\n ret;\n}\n";
  auto image = ParseModuleImage(ptx);
  ASSERT_TRUE(image.ok()) << image.status().message();
  ASSERT_EQ(image->kernels.size(), 2u);
  const KernelLayout& k1 = image->kernels["k1"];
  ASSERT_EQ(k1.params.size(), 4u);
  EXPECT_EQ(k1.params[0].offset, 0u);
  EXPECT_EQ(k1.params[1].offset, 8u);
  EXPECT_EQ(k1.params[1].size, 1u);
  EXPECT_EQ(k1.params[2].offset, 16u);
  EXPECT_EQ(k1.params[2].size, 24u);
  EXPECT_EQ(k1.params[3].offset, 40u);
  EXPECT_EQ(k1.param_size, 44u);
  EXPECT_TRUE(image->kernels["k2"].params.empty());
  EXPECT_EQ(image->size, sizeof(ptx));  // with its NUL
  ASSERT_EQ(image->ptx.size(), 1u);
  EXPECT_EQ(image->ptx[0].arch, 80u);  // from .target
  EXPECT_FALSE(image->has_sass());
  // A pointer parameter's .align (after .ptr) is its pointee's: the pointer stays at 8, as
  // the PTX engine reads it (cuRAND's kernels write theirs so); a parameter aligned to 128
  // bytes (a __grid_constant__ CUtensorMap) starts at a multiple of 128.
  auto pointers = ParseModuleImage(
      ".version 8.0\n.target sm_90\n.entry k4(.param .u32 a, .param .u64 .ptr .global .align 4 b,\n"
      " .param .u32 c, .param .align 128 .b8 map[128], .param .u8 d)\n{ret;}\n");
  ASSERT_TRUE(pointers.ok()) << pointers.status().message();
  const KernelLayout& k4 = pointers->kernels["k4"];
  ASSERT_EQ(k4.params.size(), 5u);
  EXPECT_EQ(k4.params[1].offset, 8u);
  EXPECT_EQ(k4.params[2].offset, 16u);
  EXPECT_EQ(k4.params[3].offset, 128u);
  EXPECT_EQ(k4.params[4].offset, 256u);
  EXPECT_EQ(k4.param_size, 257u);
  // A broken declaration is named.
  auto bad = ParseModuleImage(".version 8.0\n.entry k3(.param .u64 a, .param x)\n{ret;}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("k3"), std::string::npos);
}

// The PTX a GPU runs is what its driver would compile for it: the newest entry not newer
// than the GPU (CUB and Thrust check the version they get against what they were built for).
TEST(Fatbin, ChoosesThePtxADriverWouldCompileForTheGpu) {
  std::vector<PtxEntry> ptx = {{"a", 75}, {"b", 90}, {"c", 80}};
  EXPECT_EQ(ChoosePtx(ptx, 80)->text, "c");
  EXPECT_EQ(ChoosePtx(ptx, 86)->text, "c");
  EXPECT_EQ(ChoosePtx(ptx, 75)->text, "a");
  EXPECT_EQ(ChoosePtx(ptx, 100)->text, "b");
  EXPECT_EQ(ChoosePtx(ptx, 0)->text, "b");  // unknown GPU: the newest
  EXPECT_EQ(ChoosePtx(ptx, 70), nullptr);   // every entry is for a newer GPU
  EXPECT_EQ(ChoosePtx({{"any", 0}}, 70)->text, "any");
  EXPECT_EQ(ChoosePtx({}, 80), nullptr);
}

// SASS is binary-compatible within a major version, towards later minor versions;
// arch-specific SASS (sm_90a) runs on its own architecture only.
TEST(Fatbin, TellsWhichGpusRunSass) {
  EXPECT_TRUE(RunsSass({80, false}, 80));
  EXPECT_TRUE(RunsSass({80, false}, 86));
  EXPECT_TRUE(RunsSass({80, false}, 89));
  EXPECT_FALSE(RunsSass({86, false}, 80));
  EXPECT_FALSE(RunsSass({80, false}, 90));
  EXPECT_FALSE(RunsSass({75, false}, 80));
  EXPECT_TRUE(RunsSass({90, true}, 90));
  EXPECT_FALSE(RunsSass({100, true}, 103));
  EXPECT_TRUE(RunsSass({100, false}, 103));
  EXPECT_FALSE(RunsSass({120, false}, 100));
}

// The sim runs what a real GPU of its model runs. PTX not newer than the GPU: the newest
// such. SASS the GPU runs with PTX only for newer GPUs (cuBLAS: sm_75..sm_120 SASS,
// compute_120 PTX): the oldest newer PTX in the SASS's place. Neither: nothing.
TEST(Fatbin, RunsNewerPtxOnlyInPlaceOfSassTheGpuWouldRun) {
  const std::vector<SassTarget> libraries = {{75, false}, {80, false}, {86, false}, {90, false}, {120, false}};
  CodeChoice a100 = ChooseCode({120}, libraries, 80);
  EXPECT_TRUE(a100.found);
  EXPECT_TRUE(a100.in_place_of_sass);
  EXPECT_EQ(a100.ptx_arch, 120u);
  EXPECT_EQ(a100.sass_arch, 80u);
  CodeChoice l4 = ChooseCode({120}, libraries, 89);  // an 8.9 GPU runs the sm_86 SASS
  EXPECT_TRUE(l4.found);
  EXPECT_EQ(l4.sass_arch, 86u);
  CodeChoice blackwell = ChooseCode({120}, libraries, 120);
  EXPECT_TRUE(blackwell.found);
  EXPECT_FALSE(blackwell.in_place_of_sass);
  EXPECT_EQ(blackwell.sass_arch, 120u);
  // A Volta has no SASS here and PTX only for newer GPUs: no binary, as on a real one.
  EXPECT_FALSE(ChooseCode({120}, libraries, 70).found);
  // Arch-specific SASS proves it only for its own architecture.
  EXPECT_TRUE(ChooseCode({120}, {{90, true}}, 90).found);
  EXPECT_FALSE(ChooseCode({120}, {{100, true}}, 103).found);
  // No SASS at all (PTX only): newer PTX is never run.
  EXPECT_FALSE(ChooseCode({90, 120}, {}, 80).found);
  // Of several newer PTX entries, the nearest to the GPU.
  EXPECT_EQ(ChooseCode({120, 90, 100}, {{80, false}}, 86).ptx_arch, 90u);
  // PTX the GPU could JIT wins over newer PTX, even beside SASS.
  CodeChoice jit = ChooseCode({75, 120}, {{80, false}}, 80);
  EXPECT_FALSE(jit.in_place_of_sass);
  EXPECT_EQ(jit.ptx_arch, 75u);
  EXPECT_EQ(jit.sass_arch, 80u);
  // An unknown GPU (0): the newest PTX, as ChoosePtx.
  EXPECT_EQ(ChooseCode({75, 120}, {}, 0).ptx_arch, 120u);
}

// The SASS targets come from the fatbin's entry headers (arch-specific: flag 0x100000),
// or from a bare cubin's e_flags.
TEST(Fatbin, ReadsTheTargetsOfSassEntries) {
  const std::vector<uint8_t> elf = MakeElf({{".text.k", {0, 0, 0, 0}}});
  const std::string ptx = ".version 8.7\n.target sm_120\n.address_size 64\n.visible .entry k() { ret; }\n";
  std::vector<uint8_t> fatbin = fatbin_testing::FatbinOf(
      {{2, 80, 0x11, elf}, {2, 90, 0x100011, elf}, {1, 120, 0x11, fatbin_testing::PtxBytes(ptx)}});
  auto image = ParseModuleImageBytes(fatbin.data(), fatbin.size());
  ASSERT_TRUE(image.ok()) << image.status().message();
  ASSERT_EQ(image->sass.size(), 2u);
  EXPECT_EQ(image->sass[0].arch, 80u);
  EXPECT_FALSE(image->sass[0].arch_specific);
  EXPECT_EQ(image->sass[1].arch, 90u);
  EXPECT_TRUE(image->sass[1].arch_specific);
  ASSERT_EQ(image->ptx.size(), 1u);
  EXPECT_EQ(image->ptx[0].arch, 120u);
  EXPECT_TRUE(image->kernels.count("k"));

  // A bare cubin: CUDA 12.8's ELF ABI (OS ABI 0x41) keeps the architecture in e_flags bits
  // 8..15, the earlier one (0x33) in bits 0..7.
  std::vector<uint8_t> cubin = elf;
  cubin[EI_OSABI] = 0x41;
  const uint32_t flags_v2 = 0x6005004;  // as nvcc 13 writes for sm_80
  std::memcpy(cubin.data() + offsetof(Elf64_Ehdr, e_flags), &flags_v2, 4);
  auto bare = ParseModuleImageBytes(cubin.data(), cubin.size());
  ASSERT_TRUE(bare.ok()) << bare.status().message();
  ASSERT_EQ(bare->sass.size(), 1u);
  EXPECT_EQ(bare->sass[0].arch, 80u);
  cubin[EI_OSABI] = 0x33;
  const uint32_t flags_v1 = 0x500556;  // sm_86 in bits 0..7
  std::memcpy(cubin.data() + offsetof(Elf64_Ehdr, e_flags), &flags_v1, 4);
  bare = ParseModuleImageBytes(cubin.data(), cubin.size());
  ASSERT_TRUE(bare.ok()) << bare.status().message();
  EXPECT_EQ(bare->sass[0].arch, 86u);
}

constexpr char kUnitA[] =
    ".version 8.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry first(.param .u64 p, .param .u32 n) { ret; }\n";
constexpr char kUnitB[] = ".version 8.0\n.target sm_75\n.address_size 64\n.visible .func helper() { ret; }\n";

// An ELF host object with one section `section` holding `contents` (and the section names).
std::vector<uint8_t> HostObject(const std::string& section, const std::vector<uint8_t>& contents) {
  const std::string names = std::string("\0.shstrtab\0", 11) + section + '\0';
  std::vector<uint8_t> elf(sizeof(Elf64_Ehdr));
  auto append = [&](const void* p, size_t n) {
    const size_t at = elf.size();
    elf.insert(elf.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    elf.resize((elf.size() + 7) & ~size_t{7});
    return at;
  };
  const size_t names_at = append(names.data(), names.size());
  const size_t contents_at = append(contents.data(), contents.size());
  Elf64_Shdr sections[3] = {};
  sections[1].sh_name = 1;
  sections[1].sh_type = SHT_STRTAB;
  sections[1].sh_offset = names_at;
  sections[1].sh_size = names.size();
  sections[2].sh_name = 11;
  sections[2].sh_type = SHT_PROGBITS;
  sections[2].sh_offset = contents_at;
  sections[2].sh_size = contents.size();
  const size_t table_at = append(sections, sizeof(sections));
  Elf64_Ehdr header = {};
  std::memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = ELFCLASS64;
  header.e_type = ET_REL;
  header.e_shoff = table_at;
  header.e_shentsize = sizeof(Elf64_Shdr);
  header.e_shnum = 3;
  header.e_shstrndx = 1;
  std::memcpy(elf.data(), &header, sizeof(header));
  return elf;
}

// An ar archive of `members` (name, bytes).
std::vector<uint8_t> Archive(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& members) {
  std::string out = "!<arch>\n";
  for (const auto& [name, bytes] : members) {
    char header[61];
    std::snprintf(header, sizeof(header), "%-16s%-12d%-6d%-6d%-8s%-10zu`\n", name.c_str(), 0, 0, 0, "644",
                  bytes.size());
    out.append(header, 60);
    out.append(bytes.begin(), bytes.end());
    if (bytes.size() % 2) out += '\n';
  }
  return std::vector<uint8_t>(out.begin(), out.end());
}

// cuLinkComplete's output: the units read back as they went in, kernels' layouts included.
TEST(Fatbin, AFatbinOfPtxUnitsReadsBackAsItsUnits) {
  std::vector<uint8_t> fatbin = FatbinOfPtx({{kUnitA, 75}, {kUnitB, 75}});
  auto image = ParseModuleImageBytes(fatbin.data(), fatbin.size());
  ASSERT_TRUE(image.ok()) << image.status().message();
  ASSERT_EQ(image->ptx.size(), 2u);
  EXPECT_EQ(image->ptx[0].text, kUnitA);
  EXPECT_EQ(image->ptx[1].text, kUnitB);
  EXPECT_EQ(image->ptx[1].arch, 75u);
  EXPECT_FALSE(image->has_sass());
  ASSERT_TRUE(image->kernels.count("first"));
  EXPECT_EQ(image->kernels["first"].param_size, 12u);
  EXPECT_EQ(image->size, fatbin.size());
}

// CU_JIT_INPUT_OBJECT and CU_JIT_INPUT_LIBRARY: the PTX of the fatbins in a host object's
// .nv_fatbin / __nv_relfatbin sections, of each archive member; bad input named.
// What a GPU's driver places itself (failover on the cuda executor needs none of it):
// module variables and device malloc's heap; printf's format strings do not count.
TEST(Fatbin, TellsPtxThatKeepsStateOnTheGpu) {
  const std::string head = ".version 8.0\n.target sm_80\n.address_size 64\n";
  const std::string kernel = ".visible .entry k(.param .u64 p)\n{\n\t.reg .b64 %rd<2>;\n\tret;\n}\n";
  EXPECT_FALSE(PtxKeepsState({{head + kernel, 80}}));
  EXPECT_FALSE(PtxKeepsState({{head + ".global .align 1 .b8 $str[4] = {104, 105, 10, 0};\n" + kernel, 80}}));
  EXPECT_TRUE(PtxKeepsState({{head + ".visible .global .align 4 .u32 counter;\n" + kernel, 80}}));
  EXPECT_TRUE(PtxKeepsState({{head + ".const .align 4 .b8 c_coeffs[16];\n" + kernel, 80}}));
  EXPECT_TRUE(PtxKeepsState({{head + ".extern .global .align 8 .u64 shared_table;\n" + kernel, 80}}));
  EXPECT_TRUE(PtxKeepsState(
      {{head + ".extern .func (.param .b64 func_retval0) malloc\n(\n\t.param .b64 p\n);\n" + kernel, 80}}));
  // Any unit of several.
  EXPECT_TRUE(PtxKeepsState({{head + kernel, 80}, {head + ".global .u32 x;\n", 80}}));
}

// A kernel of PTX that names no cluster state cannot tell a cluster launch from a plain
// one; names and .cluster scopes are not cluster state.
TEST(Fatbin, TellsPtxThatNamesItsCluster) {
  const std::string head = ".version 8.0\n.target sm_90\n.address_size 64\n";
  for (const char* named :
       {"mov.u32 %r1, %cluster_ctarank;", "mov.u32 %r1, %clusterid.x;", "mov.u32 %r1, %nclusterid.y;",
        "mov.pred %p1, %is_explicit_cluster;", "barrier.cluster.arrive;", "mapa.shared::cluster.u32 %r2, %r1, 1;",
        "ld.shared::cluster.u32 %r2, [%r1];", "\tmapa.u64 %rd2, %rd1, %r1;", "getctarank.u64 %r1, %rd1;"}) {
    EXPECT_TRUE(PtxNamesClusters({{head + named + "\n", 90}})) << named;
  }
  for (const char* plain : {".visible .entry kmeans_cluster_step() { ret; }", "fence.acq_rel.cluster;",
                            "red.release.cluster.global.add.u32 [%rd1], 1;", "// clusters"}) {
    EXPECT_FALSE(PtxNamesClusters({{head + plain + "\n", 90}})) << plain;
  }
  EXPECT_TRUE(PtxNamesClusters({{head, 80}, {head + "barrier.cluster.wait;\n", 90}}));
  EXPECT_FALSE(PtxNamesClusters({}));
}

// The clusters kernels were compiled for (__cluster_dims__), as nvcc writes them, by kernel;
// kernels without one, and shapes a driver would not load, are left out.
TEST(Fatbin, ReadsTheClustersKernelsWereCompiledFor) {
  const std::string head = ".version 8.0\n.target sm_90\n.address_size 64\n";
  const std::string text = head +
                           ".visible .entry pairs(\n\t.param .u64 pairs_param_0\n)\n.explicitcluster\n"
                           ".reqnctapercluster 2, 1, 1\n{\n\tret;\n}\n"
                           ".visible .entry plain(.param .u64 p) .maxntid 128, 1, 1\n{\n\tret;\n}\n"
                           ".visible .entry squares() .reqnctapercluster 4,4 { ret; }\n"
                           ".visible .entry must() .explicitcluster { ret; }\n"
                           ".visible .entry too_large() .reqnctapercluster 32, 1, 1 { ret; }\n"
                           ".visible .entry declared(.param .u64 p) .reqnctapercluster 8;\n";
  const std::map<std::string, CompiledCluster> clusters = CompiledClusters({{text, 90}});
  auto shape = [&](const std::string& name) {
    auto found = clusters.find(name);
    if (found == clusters.end()) return std::vector<uint32_t>{};
    return std::vector<uint32_t>{found->second.dims[0], found->second.dims[1], found->second.dims[2],
                                 found->second.must_be_set ? 1u : 0u};
  };
  EXPECT_EQ(shape("pairs"), (std::vector<uint32_t>{2, 1, 1, 1}));
  EXPECT_EQ(shape("squares"), (std::vector<uint32_t>{4, 4, 1, 0}));
  EXPECT_EQ(shape("must"), (std::vector<uint32_t>{0, 0, 0, 1}));
  EXPECT_EQ(shape("declared"), (std::vector<uint32_t>{8, 1, 1, 0}));
  EXPECT_EQ(clusters.count("plain"), 0u);
  EXPECT_EQ(clusters.count("too_large"), 0u);
  EXPECT_EQ(clusters.size(), 4u);
  EXPECT_TRUE(CompiledClusters({}).empty());
}

TEST(Fatbin, FindsThePtxOfHostObjectsAndArchives) {
  std::vector<uint8_t> two = FatbinOfPtx({{kUnitA, 75}});
  std::vector<uint8_t> b = FatbinOfPtx({{kUnitB, 80}});
  two.insert(two.end(), b.begin(), b.end());  // two fatbins back to back
  std::vector<uint8_t> object = HostObject("__nv_relfatbin", two);
  auto ptx = PtxOfHostObject(object.data(), object.size());
  ASSERT_TRUE(ptx.ok()) << ptx.status().message();
  ASSERT_EQ(ptx->size(), 2u);
  EXPECT_EQ((*ptx)[0].text, kUnitA);
  EXPECT_EQ((*ptx)[1].arch, 80u);
  std::vector<uint8_t> other = HostObject(".text", two);  // not where nvcc puts fatbins
  ptx = PtxOfHostObject(other.data(), other.size());
  ASSERT_TRUE(ptx.ok());
  EXPECT_TRUE(ptx->empty());
  std::vector<uint8_t> text(kUnitA, kUnitA + sizeof(kUnitA));
  EXPECT_EQ(PtxOfHostObject(text.data(), text.size()).status().message(), "not an ELF object file");
  std::vector<uint8_t> cut = HostObject(".nv_fatbin", two);
  cut.resize(cut.size() - 3 * sizeof(Elf64_Shdr));  // the section table is gone
  EXPECT_FALSE(PtxOfHostObject(cut.data(), cut.size()).ok());
  std::vector<uint8_t> broken = two;
  broken[8] = 0xff;  // the first fatbin claims more bytes than its section holds
  object = HostObject(".nv_fatbin", broken);
  EXPECT_FALSE(PtxOfHostObject(object.data(), object.size()).ok());

  std::vector<uint8_t> archive = Archive({{"/", {0, 0, 0, 0}},
                                          {"a.o/", HostObject(".nv_fatbin", two)},
                                          {"odd/", {1, 2, 3}},
                                          {"b.o/", HostObject("__nv_relfatbin", b)}});
  ptx = PtxOfArchive(archive.data(), archive.size());
  ASSERT_TRUE(ptx.ok()) << ptx.status().message();
  ASSERT_EQ(ptx->size(), 3u);
  EXPECT_EQ((*ptx)[2].text, kUnitB);
  std::vector<uint8_t> truncated(archive.begin(), archive.end() - 10);
  EXPECT_NE(PtxOfArchive(truncated.data(), truncated.size()).status().message().find("runs past"), std::string::npos);
  std::vector<uint8_t> bad_size = archive;
  bad_size[8 + 48] = 'x';  // the first member's size
  EXPECT_NE(PtxOfArchive(bad_size.data(), bad_size.size()).status().message().find("not a number"), std::string::npos);
  const char thin[] = "!<thin>\n";
  EXPECT_NE(PtxOfArchive(reinterpret_cast<const uint8_t*>(thin), 8).status().message().find("thin"), std::string::npos);
  EXPECT_EQ(PtxOfArchive(text.data(), text.size()).status().message(), "not an ar archive");
}

// Compressed entries' decompressed sizes are untrusted: more than kMaxDecompressedBytes,
// or more than an LZ4 payload can inflate to, is refused before any memory is taken.
TEST(Fatbin, RefusesDecompressedSizesOverTheCapOrBeyondThePayload) {
  std::vector<uint8_t> fatbin = FatbinOfPtx({{".version 8.0\n.target sm_80\n", 80}});
  constexpr size_t kEntry = 16;  // after the fatbin header
  auto compressed = [&](uint64_t flags, uint64_t size) {
    std::vector<uint8_t> bytes = fatbin;
    std::memcpy(bytes.data() + kEntry + 40, &flags, 8);
    std::memcpy(bytes.data() + kEntry + 56, &size, 8);
    return bytes;
  };
  const uint64_t kLz4 = 0x2000, kZstd = 0x8000;
  for (uint64_t flags : {kLz4, kZstd}) {
    std::vector<uint8_t> bytes = compressed(flags, kMaxDecompressedBytes + 1);
    auto image = ParseModuleImageBytes(bytes.data(), bytes.size());
    ASSERT_FALSE(image.ok());
    EXPECT_NE(image.status().message().find("more than 1073741824 bytes"), std::string::npos)
        << image.status().message();
  }
  // 32 bytes of LZ4 cannot make 512 MiB; nor is that zstd frame's size (it is no frame).
  std::vector<uint8_t> bytes = compressed(kLz4, uint64_t{512} << 20);
  auto image = ParseModuleImageBytes(bytes.data(), bytes.size());
  ASSERT_FALSE(image.ok());
  EXPECT_NE(image.status().message().find("cannot decompress to 536870912"), std::string::npos)
      << image.status().message();
  bytes = compressed(kZstd, uint64_t{512} << 20);
  image = ParseModuleImageBytes(bytes.data(), bytes.size());
  ASSERT_FALSE(image.ok());
  EXPECT_NE(image.status().message().find("zstd fatbin entry"), std::string::npos) << image.status().message();
}

// Kernel parameter layouts read from PTX are checked: sizes that wrapped 32 bits once
// packed parameters over each other.
TEST(Fatbin, RefusesPtxParameterLayoutsThatWouldWrap) {
  const std::string head = ".version 8.0\n.target sm_80\n.address_size 64\n";
  for (const std::string params :
       {".param .u64 a, .param .align 8 .b8 b[4294967296]", ".param .align 8 .b8 a[4294967295], .param .u64 b",
        ".param .align 8 .b8 a[32768]", ".param .align 3 .b8 a[4]"}) {
    SCOPED_TRACE(params);
    const std::string text = head + ".visible .entry k(" + params + ")\n{\n  ret;\n}\n";
    auto image = ParseModuleImageBytes(text.c_str(), text.size() + 1);
    EXPECT_FALSE(image.ok());
  }
  const std::string fits = head + ".visible .entry k(.param .u64 a, .param .align 8 .b8 b[16])\n{\n  ret;\n}\n";
  auto image = ParseModuleImageBytes(fits.c_str(), fits.size() + 1);
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(image->kernels["k"].param_size, 24u);
}

#ifdef GPUPOOL_TEST_CUDA_PROGRAM
// The real thing: the fatbin nvcc embedded in the vector_add test program.
TEST(Fatbin, ReadsTheFatbinNvccEmbeds) {
  std::ifstream file(GPUPOOL_TEST_CUDA_PROGRAM, std::ios::binary);
  ASSERT_TRUE(file.good());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const uint32_t magic = 0xBA55ED50;
  bool found = false;
  for (size_t at = 0; at + 16 < bytes.size(); at += 8) {  // fatbins are 8-aligned
    if (std::memcmp(bytes.data() + at, &magic, 4) != 0) continue;
    auto image = ParseModuleImage(bytes.data() + at);
    ASSERT_TRUE(image.ok()) << image.status().message();
    auto kernel = image->kernels.find("_Z6vecAddPKfS0_Pfi");
    if (kernel == image->kernels.end()) continue;
    found = true;
    ASSERT_EQ(kernel->second.params.size(), 4u);
    EXPECT_EQ(kernel->second.params[0].offset, 0u);
    EXPECT_EQ(kernel->second.params[0].size, 8u);
    EXPECT_EQ(kernel->second.params[3].offset, 24u);
    EXPECT_EQ(kernel->second.params[3].size, 4u);
    EXPECT_EQ(kernel->second.param_size, 28u);
  }
  EXPECT_TRUE(found) << "no fatbin with vecAdd in " << GPUPOOL_TEST_CUDA_PROGRAM;
}
#endif

}  // namespace
}  // namespace gpupool::image

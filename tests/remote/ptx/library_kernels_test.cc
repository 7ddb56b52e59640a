// The sim runs the math libraries' kernels from the PTX they ship (cuBLAS, cuBLASLt and
// cuSPARSE for compute_120, cuRAND for compute_121; EXECUTORS in gpupool-remote(7)): every
// kernel of every PTX entry of every fatbin in the toolkit's shared library decodes, and
// none is marked unsupported (a launch of it would answer CUDA_ERROR_NOT_SUPPORTED, and
// cuSPARSE, which does not check its launches, would leave its output unwritten). A new
// instruction in a toolkit's libraries fails this test, naming the instruction and a kernel.
// The parameter is the library's file under GPUPOOL_CUDA_LIB64.
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "remote/image/fatbin.h"
#include "remote/ptx/ir/kernel.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50u;

// A read-only mapping of a file (empty if it cannot be read).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return;
    struct stat st {};
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
      void* bytes = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (bytes != MAP_FAILED) {
        bytes_ = static_cast<const uint8_t*>(bytes);
        size_ = static_cast<size_t>(st.st_size);
      }
    }
    close(fd);
  }
  ~MappedFile() {
    if (bytes_ != nullptr) munmap(const_cast<uint8_t*>(bytes_), size_);
  }
  const uint8_t* bytes() const { return bytes_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
};

// The PTX entries of each fatbin in the library's .nv_fatbin section, read fatbin by
// fatbin as the runtime registers them (a library's fatbins together exceed what one image
// may inflate to). *fatbins counts them.
std::vector<image::PtxEntry> LibraryPtx(const MappedFile& file, int* fatbins, std::string* error) {
  std::vector<image::PtxEntry> all;
  const uint8_t* bytes = file.bytes();
  Elf64_Ehdr header;
  std::memcpy(&header, bytes, sizeof(header));
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_shoff == 0 ||
      header.e_shoff + uint64_t{header.e_shnum} * sizeof(Elf64_Shdr) > file.size()) {
    *error = "not an ELF file with section headers";
    return all;
  }
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  std::memcpy(sections.data(), bytes + header.e_shoff, sections.size() * sizeof(Elf64_Shdr));
  const Elf64_Shdr& names = sections.at(header.e_shstrndx);
  for (const Elf64_Shdr& section : sections) {
    if (section.sh_offset + section.sh_size > file.size() || section.sh_name >= names.sh_size) continue;
    if (std::strcmp(reinterpret_cast<const char*>(bytes + names.sh_offset + section.sh_name), ".nv_fatbin") != 0) {
      continue;
    }
    for (uint64_t at = section.sh_offset, end = section.sh_offset + section.sh_size; at + 16 <= end;) {
      uint32_t magic;
      uint16_t header_size;
      uint64_t body_size;
      std::memcpy(&magic, bytes + at, 4);
      if (magic != kFatbinMagic) {
        at += 8;  // fatbins are 8-byte aligned in the section
        continue;
      }
      std::memcpy(&header_size, bytes + at + 6, 2);
      std::memcpy(&body_size, bytes + at + 8, 8);
      const uint64_t total = header_size + body_size;
      if (total > end - at) {
        *error = "a fatbin runs past its section";
        return all;
      }
      auto image = image::ParseModuleImageBytes(bytes + at, total);
      if (!image.ok()) {
        *error = "fatbin " + std::to_string(*fatbins) + ": " + image.status().message();
        return all;
      }
      ++*fatbins;
      for (image::PtxEntry& entry : image->ptx) all.push_back(std::move(entry));
      at += (total + 7) / 8 * 8;
    }
  }
  return all;
}

class LibraryKernels : public ::testing::TestWithParam<const char*> {};

TEST_P(LibraryKernels, EveryKernelOfItsPtxRunsOnTheSim) {
  const std::string path = std::string(GPUPOOL_CUDA_LIB64) + "/" + GetParam();
  MappedFile file(path);
  ASSERT_NE(file.bytes(), nullptr) << "cannot read " << path;
  int fatbins = 0;
  std::string error;
  const std::vector<image::PtxEntry> ptx = LibraryPtx(file, &fatbins, &error);
  ASSERT_TRUE(error.empty()) << path << ": " << error;
  ASSERT_GT(ptx.size(), 0u) << path << " ships no PTX";
  size_t kernels = 0;
  std::map<std::string, std::string> refused;  // why -> a kernel
  for (const image::PtxEntry& entry : ptx) {
    auto module = sim::PtxModule::Parse(entry.text);
    ASSERT_TRUE(module.ok()) << "a PTX entry of " << path << ": " << module.status().message();
    std::map<std::string, uint64_t> addresses;  // module variables, apart (only decoded here)
    uint64_t next = uint64_t{1} << 40;
    for (const sim::ModuleVariable& variable : (*module)->variables()) {
      addresses[variable.name] = next;
      next += (variable.size + 255) / 256 * 256 + 256;
    }
    for (const std::string& name : (*module)->KernelNames()) {
      ++kernels;
      auto kernel = (*module)->Decode(name, addresses);
      std::string why = !kernel.ok() ? kernel.status().message() : (*kernel)->unsupported;
      if (why.empty()) continue;
      // One entry per reason, the PTX line left out.
      if (const size_t line = why.find("PTX line "); line != std::string::npos) {
        const size_t end = why.find_first_not_of("0123456789", line + 9);
        why.erase(line, (end == std::string::npos ? why.size() : end) - line);
      }
      refused.emplace(why, name);
    }
  }
  EXPECT_GT(kernels, 0u);
  for (const auto& [why, kernel] : refused) ADD_FAILURE() << GetParam() << ": " << why << " (e.g. " << kernel << ")";
  std::printf("%s: %d fatbins, %zu PTX entries, %zu kernels, %zu reasons refused\n", GetParam(), fatbins, ptx.size(),
              kernels, refused.size());
}

INSTANTIATE_TEST_SUITE_P(MathLibraries, LibraryKernels,
                         ::testing::Values("libcublas.so", "libcublasLt.so", "libcusparse.so", "libcurand.so"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           name = name.substr(3, name.find('.') - 3);
                           return name;
                         });

}  // namespace
}  // namespace gpupool

// Module images as the replacement libcuda.so.1 parses them (remote/image/fatbin.cc):
// whatever a CUDA program hands cuModuleLoadData / cuLibraryLoadData -- a fatbin wrapper,
// a fatbin, a bare ELF cubin, or NUL-terminated PTX text -- is read to find its kernels'
// parameter layouts.
//
// ParseModuleImage takes an untyped pointer: the image's size is what its headers say, as
// with the real driver. The target therefore gives it only images whose headers claim no
// more bytes than the input holds, in a buffer of exactly that size. Byte 0 picks the way:
//   0: the rest is a cubin for ParseCubin (explicit size; any bytes at all)
//   1: the rest is an image for ParseModuleImage (fatbin, ELF, or anything else as PTX
//      text, NUL-terminated)
//   2: the rest is a fatbin, reached through a fatbin wrapper pointing at it
// Two values of byte 0 read the rest as cuLinkAddData's inputs (explicit size):
//   0xf0: a host object for PtxOfHostObject, 0xf1: an ar archive for PtxOfArchive
#include "remote/image/fatbin.h"

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cl = gpupool::image;

namespace {

constexpr uint32_t kFatbinWrapperMagic = 0x466243b1;
constexpr uint32_t kFatbinMagic = 0xBA55ED50;

template <typename T>
T ReadAt(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// The bytes the image's headers say it has (what the driver would read), or 0 when the
// headers cannot be read from `size` bytes or claim more than that.
size_t ClaimedSize(const uint8_t* p, size_t size) {
  // The format is told from the first bytes, up to an ELF header's worth.
  if (size < sizeof(Elf64_Ehdr)) return 0;
  uint32_t magic = ReadAt<uint32_t>(p);
  if (magic == kFatbinMagic) {
    uint64_t header_size = ReadAt<uint16_t>(p + 6);
    uint64_t files_size = ReadAt<uint64_t>(p + 8);
    if (header_size > size || files_size > size - header_size) return 0;
    return size;
  }
  if (std::memcmp(p, ELFMAG, SELFMAG) == 0 && p[EI_CLASS] == ELFCLASS64) {
    // ElfSize reads the section header table to add up the sections.
    auto header = ReadAt<Elf64_Ehdr>(p);
    uint64_t table_end = uint64_t{header.e_shnum} * header.e_shentsize;
    if (header.e_shoff > size || table_end > size - header.e_shoff) return 0;
    if (header.e_shnum > 0 && header.e_shentsize < sizeof(Elf64_Shdr)) return 0;
    if (header.e_phoff > size || uint64_t{header.e_phnum} * header.e_phentsize > size - header.e_phoff) {
      return 0;
    }
    for (int i = 0; i < header.e_shnum; ++i) {
      auto section = ReadAt<Elf64_Shdr>(p + header.e_shoff + static_cast<size_t>(i) * header.e_shentsize);
      if (section.sh_type == SHT_NOBITS) continue;
      if (section.sh_offset > size || section.sh_size > size - section.sh_offset) return 0;
    }
    return size;
  }
  return magic == kFatbinWrapperMagic ? 0 : size;  // other formats: refused from the magic
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  uint8_t mode = selector % 3;
  ++data;
  --size;
  // An exact-size copy, so that a read past the end is caught.
  std::unique_ptr<uint8_t[]> image(new uint8_t[size]);
  if (size > 0) std::memcpy(image.get(), data, size);

  if (selector == 0xf0 || selector == 0xf1) {
    gpupool::Result<std::vector<cl::PtxEntry>> ptx =
        selector == 0xf0 ? cl::PtxOfHostObject(image.get(), size) : cl::PtxOfArchive(image.get(), size);
    if (!ptx.ok() && ptx.status().message().empty()) __builtin_trap();
    return 0;
  }

  if (mode == 0) {
    std::map<std::string, cl::KernelLayout> kernels;
    gpupool::Status status = cl::ParseCubin(image.get(), size, &kernels);
    if (!status.ok() && status.message().empty()) __builtin_trap();
    return 0;
  }
  if (ClaimedSize(image.get(), size) == 0) return 0;
  if (mode == 1) {
    uint32_t magic = size >= 4 ? ReadAt<uint32_t>(image.get()) : 0;
    if (magic != kFatbinMagic && std::memcmp(image.get(), ELFMAG, SELFMAG) != 0) {
      // Anything else is read as PTX text, which the driver API takes NUL-terminated: the
      // exact-size copy gets its terminator, and a read past it is still caught.
      std::unique_ptr<uint8_t[]> text(new uint8_t[size + 1]);
      std::memcpy(text.get(), image.get(), size);
      text[size] = 0;
      (void)cl::ParseModuleImage(text.get());
      return 0;
    }
    (void)cl::ParseModuleImage(image.get());
    return 0;
  }
  if (ReadAt<uint32_t>(image.get()) != kFatbinMagic) return 0;
  struct {
    uint32_t magic;
    uint32_t version;
    const uint8_t* data;
    const void* filename_or_fatbins;
  } wrapper{kFatbinWrapperMagic, 1, image.get(), nullptr};
  gpupool::Result<cl::ModuleImage> parsed = cl::ParseModuleImage(&wrapper);
  if (parsed.ok()) {
    for (const auto& [name, layout] : parsed->kernels) {
      for (const cl::ParamSlot& slot : layout.params) {
        if (slot.offset + uint64_t{slot.size} > layout.param_size) __builtin_trap();
      }
    }
  }
  return 0;
}

#include "remote/image/fatbin.h"

#include <elf.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <sstream>
#include <string_view>

#include "remote/image/ptx_signature.h"

namespace gpupool::image {
namespace {

constexpr uint32_t kFatbinWrapperMagic = 0x466243b1;
constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint16_t kEntryKindPtx = 1;
constexpr uint16_t kEntryKindElf = 2;
// Entry flags of compressed payloads.
constexpr uint64_t kEntryLz4 = 0x2000;   // an LZ4 block (no frame)
constexpr uint64_t kEntryZstd = 0x8000;  // a zstd frame
// Entry flag of arch-specific SASS (sm_90a, sm_100a), which runs only on its own architecture.
constexpr uint64_t kEntryArchSpecific = 0x100000;
// A cubin's ELF OS ABI byte from CUDA 12.8 on (its architecture in e_flags bits 8..15;
// before, ELFOSABI_CUDA 0x33 and bits 0..7).
constexpr uint8_t kElfOsAbiCudaV2 = 0x41;
// Offset of the decompressed size in entry headers of compressed entries.
constexpr size_t kDecompressedSizeOffset = 56;

// What an LZ4 block inflates to at most, per byte of it (a match of 255 + 15 bytes from
// a few bytes of sequence): a larger decompressed size in a header is a lie.
constexpr uint64_t kLz4MaxRatio = 256;

// At most this many translation units' fatbins are read from a version-2 wrapper.
constexpr size_t kMaxRelocatableFatbins = 65536;

// EIATTR record formats and the attribute we need.
constexpr uint8_t kFormatSizedValue = 0x04;  // u16 size follows, then `size` bytes
constexpr uint8_t kAttrKernelParamInfo = 0x17;
// Its successor for kernels of more than 4 KiB of parameters (CUDA 12.1 on allow 32,764
// bytes): u32 index, u16 ordinal, u16 offset, u32 size in bytes.
constexpr uint8_t kAttrKernelParamInfoV2 = 0x45;

struct FatbinWrapper {
  uint32_t magic;
  uint32_t version;
  const uint8_t* data;
  const void* filename_or_fatbins;
};

struct FatbinHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  uint64_t files_size;  // bytes of entries after this header
};

struct FatbinEntryHeader {
  uint16_t kind;
  uint16_t version;
  uint32_t header_size;
  uint32_t padded_payload_size;
  uint32_t unknown0;
  uint32_t payload_size;  // 0 in uncompressed ELF entries of CUDA 13 fatbins
  uint32_t unknown1;
  uint32_t unknown2;
  uint32_t sm_version;  // the architecture, e.g. 75
  uint32_t bit_width;
  uint32_t unknown3;
  uint64_t flags;
};
static_assert(sizeof(FatbinEntryHeader) == 48);

template <typename T>
T Read(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

size_t ElfSize(const uint8_t* elf) {
  auto header = Read<Elf64_Ehdr>(elf);
  size_t size = header.e_shoff + size_t{header.e_shnum} * header.e_shentsize;
  size = std::max<size_t>(size, header.e_phoff + size_t{header.e_phnum} * header.e_phentsize);
  for (int i = 0; i < header.e_shnum; ++i) {
    auto section = Read<Elf64_Shdr>(elf + header.e_shoff + static_cast<size_t>(i) * header.e_shentsize);
    if (section.sh_type != SHT_NOBITS) {
      size = std::max<size_t>(size, section.sh_offset + section.sh_size);
    }
  }
  return size;
}

bool IsElf(const uint8_t* p) { return std::memcmp(p, ELFMAG, SELFMAG) == 0 && p[EI_CLASS] == ELFCLASS64; }

// The architecture a bare cubin (an ELF of at least a header) was built for, from its
// e_flags. Whether it is arch-specific is not read: a cubin has no PTX to choose.
SassTarget CubinTarget(const uint8_t* elf) {
  const auto header = Read<Elf64_Ehdr>(elf);
  const uint32_t arch =
      header.e_ident[EI_OSABI] == kElfOsAbiCudaV2 ? (header.e_flags >> 8) & 0xff : header.e_flags & 0xff;
  return SassTarget{arch, false};
}

// Inflates a compressed entry payload into *out. `*total`: bytes the image's entries
// inflated to so far, which this one's must not take over kMaxDecompressedBytes. The size
// in the header is untrusted: checked against the cap and against what the payload can
// inflate to before any memory is taken for it.
Status Decompress(const uint8_t* entry, uint32_t header_size, uint64_t flags, const uint8_t* payload,
                  uint64_t payload_size, uint64_t* total, std::string* out) {
  if (header_size < kDecompressedSizeOffset + 8) {
    return Status::InvalidArgument("compressed fatbin entry without a decompressed size");
  }
  uint64_t size = Read<uint64_t>(entry + kDecompressedSizeOffset);
  if (size == 0) {
    return Status::InvalidArgument("compressed fatbin entry with a bad decompressed size");
  }
  if (size > kMaxDecompressedBytes || *total > kMaxDecompressedBytes - size) {
    return Status::InvalidArgument("compressed fatbin entry of " + std::to_string(size) +
                                   " bytes decompressed: the image's entries would take more than " +
                                   std::to_string(kMaxDecompressedBytes) + " bytes");
  }
  if (flags & kEntryZstd) {
    // The frame says its own size: one that disagrees with the header is refused.
    const unsigned long long content = ZSTD_getFrameContentSize(payload, payload_size);
    if (content == ZSTD_CONTENTSIZE_ERROR || (content != ZSTD_CONTENTSIZE_UNKNOWN && content != size)) {
      return Status::InvalidArgument("zstd fatbin entry: its frame does not hold " + std::to_string(size) + " bytes");
    }
  } else if (size / kLz4MaxRatio > payload_size) {
    // An LZ4 block inflates at most about 255 times.
    return Status::InvalidArgument("LZ4 fatbin entry: " + std::to_string(payload_size) +
                                   " bytes cannot decompress to " + std::to_string(size));
  }
  *total += size;
  out->assign(size, '\0');
  if (flags & kEntryZstd) {
    size_t got = ZSTD_decompress(out->data(), size, payload, payload_size);
    if (ZSTD_isError(got)) {
      return Status::InvalidArgument(std::string("zstd fatbin entry: ") + ZSTD_getErrorName(got));
    }
    out->resize(got);
    return Status::OK();
  }
  if (payload_size > static_cast<uint64_t>(INT32_MAX) || size > static_cast<uint64_t>(INT32_MAX)) {
    return Status::InvalidArgument("LZ4 fatbin entry too large");
  }
  int got = LZ4_decompress_safe(reinterpret_cast<const char*>(payload), out->data(), static_cast<int>(payload_size),
                                static_cast<int>(size));
  if (got < 0) return Status::InvalidArgument("LZ4 fatbin entry does not decompress");
  out->resize(static_cast<size_t>(got));
  return Status::OK();
}

// `limit`: bytes available at `fatbin` (SIZE_MAX when the caller trusts the headers).
Status ParseFatbin(const uint8_t* fatbin, size_t limit, ModuleImage* image) {
  if (limit < sizeof(FatbinHeader)) return Status::InvalidArgument("fatbin truncated");
  auto header = Read<FatbinHeader>(fatbin);
  if (header.magic != kFatbinMagic) return Status::InvalidArgument("not a fatbin");
  if (header.header_size < sizeof(FatbinHeader) || header.header_size > limit ||
      header.files_size > limit - header.header_size) {
    return Status::InvalidArgument("fatbin sizes exceed the image");
  }
  image->bytes = fatbin;
  image->size = header.header_size + header.files_size;
  // Offsets, not pointers: sizes in the headers are untrusted and may be huge.
  const uint8_t* entries = fatbin + header.header_size;
  const uint64_t total = header.files_size;
  uint64_t at = 0;
  while (total - at >= sizeof(FatbinEntryHeader)) {
    auto entry = Read<FatbinEntryHeader>(entries + at);
    if (entry.header_size < sizeof(FatbinEntryHeader)) {
      return Status::InvalidArgument("fatbin entry header too small");
    }
    uint64_t payload_size = entry.payload_size ? entry.payload_size : entry.padded_payload_size;
    if (entry.header_size > total - at || payload_size > total - at - entry.header_size) {
      return Status::InvalidArgument("fatbin entry overruns");
    }
    const uint8_t* payload = entries + at + entry.header_size;
    std::string inflated;
    bool compressed = entry.flags & (kEntryLz4 | kEntryZstd);
    if (compressed && (entry.kind == kEntryKindElf || entry.kind == kEntryKindPtx)) {
      GPUPOOL_RETURN_IF_ERROR(Decompress(entries + at, entry.header_size, entry.flags, payload, payload_size,
                                         &image->decompressed_bytes, &inflated));
      payload = reinterpret_cast<const uint8_t*>(inflated.data());
      payload_size = inflated.size();
    }
    if (entry.kind == kEntryKindElf && payload_size >= sizeof(Elf64_Ehdr) && IsElf(payload)) {
      image->sass.push_back(SassTarget{entry.sm_version, (entry.flags & kEntryArchSpecific) != 0});
      GPUPOOL_RETURN_IF_ERROR(ParseCubin(payload, payload_size, &image->kernels));
    } else if (entry.kind == kEntryKindPtx) {
      const char* text = reinterpret_cast<const char*>(payload);
      image->ptx.push_back(PtxEntry{std::string(text, strnlen(text, payload_size)), entry.sm_version});
    }
    uint64_t step = uint64_t{entry.header_size} + entry.padded_payload_size;
    if (step > total - at) break;  // the last entry's padding runs past the end
    at += step;
  }
  // Kernels only in PTX (no ELF entry for them): layouts from the .entry declarations.
  for (const PtxEntry& ptx : image->ptx) {
    auto layouts = ParsePtxSignatures(ptx.text);
    if (!layouts.ok()) continue;  // the sim reports bad PTX when it loads it
    for (auto& [name, layout] : *layouts) {
      image->kernels.emplace(name, layout);
      image->ptx_kernels.emplace(name, std::move(layout));
    }
  }
  return Status::OK();
}

bool LooksLikePtx(const uint8_t* p, size_t limit) {
  // PTX text starts with comments, blank space or a directive.
  for (size_t i = 0; i < limit && i < 4096; ++i) {
    char c = static_cast<char>(p[i]);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    return c == '/' || c == '.';
  }
  return false;
}

Status ParsePtxImage(const uint8_t* p, size_t limit, ModuleImage* image) {
  size_t length = strnlen(reinterpret_cast<const char*>(p), limit);
  std::string text(reinterpret_cast<const char*>(p), length);
  if (text.find(".entry") == std::string::npos && text.find(".version") == std::string::npos) {
    return Status::InvalidArgument("not a PTX module");
  }
  auto layouts = ParsePtxSignatures(text);
  if (!layouts.ok()) return layouts.status();
  image->bytes = p;
  image->size = length < limit ? length + 1 : length;
  image->kernels = std::move(*layouts);
  image->ptx_kernels = image->kernels;
  uint32_t arch = 0;  // from `.target sm_XX[a|f]`, as the fatbin header would say
  if (size_t target = text.find(".target"); target != std::string::npos) {
    size_t sm = text.find("sm_", target);
    size_t line_end = text.find('\n', target);
    if (sm != std::string::npos && sm < line_end) {
      for (size_t i = sm + 3; i < text.size() && text[i] >= '0' && text[i] <= '9' && arch < 10000; ++i) {
        arch = arch * 10 + static_cast<uint32_t>(text[i] - '0');
      }
    }
  }
  image->ptx.push_back(PtxEntry{std::move(text), arch});
  return Status::OK();
}

// Parses the EIATTR records of one `.nv.info.<kernel>` section.
KernelLayout ParseKernelInfo(const uint8_t* p, size_t size) {
  KernelLayout layout;
  struct Indexed {
    uint16_t ordinal;
    ParamSlot slot;
  };
  std::vector<Indexed> params;
  size_t at = 0;
  while (at + 4 <= size) {
    uint8_t format = p[at];
    uint8_t attribute = p[at + 1];
    if (format != kFormatSizedValue) {
      at += 4;  // the other formats carry at most a u16 inline
      continue;
    }
    uint16_t length = Read<uint16_t>(p + at + 2);
    const uint8_t* value = p + at + 4;
    if (at + 4 + length > size) break;
    if (attribute == kAttrKernelParamInfo && length >= 12) {
      // u32 index, u16 ordinal, u16 offset, u32 packed (size in bits 18..31).
      uint16_t ordinal = Read<uint16_t>(value + 4);
      uint16_t offset = Read<uint16_t>(value + 6);
      uint32_t packed = Read<uint32_t>(value + 8);
      params.push_back({ordinal, ParamSlot{offset, (packed >> 18) & 0x3fff}});
    } else if (attribute == kAttrKernelParamInfoV2 && length >= 12) {
      uint16_t ordinal = Read<uint16_t>(value + 4);
      uint16_t offset = Read<uint16_t>(value + 6);
      uint32_t bytes = Read<uint32_t>(value + 8) & 0xffff;
      params.push_back({ordinal, ParamSlot{offset, bytes}});
    }
    at += 4 + length;
  }
  std::sort(params.begin(), params.end(), [](const Indexed& a, const Indexed& b) { return a.ordinal < b.ordinal; });
  for (const Indexed& param : params) {
    layout.params.push_back(param.slot);
    layout.param_size = std::max(layout.param_size, param.slot.offset + param.slot.size);
  }
  return layout;
}

// Calls visit(name, section) for each section of the ELF file `elf` of `size` bytes whose
// name can be read; `what` names the file in errors. The section table and the names'
// section are checked against `size`; each section's own range is the caller's to check.
// A file without sections has nothing to visit.
template <typename Visit>
Status ForEachElfSection(const uint8_t* elf, size_t size, const char* what, Visit visit) {
  if (size < sizeof(Elf64_Ehdr) || !IsElf(elf)) {
    return Status::InvalidArgument(std::string("not an ELF ") + what);
  }
  auto header = Read<Elf64_Ehdr>(elf);
  if (header.e_shnum == 0) return Status::OK();
  // Every offset and size below comes from the file: compare without overflowing.
  if (header.e_shstrndx >= header.e_shnum || header.e_shentsize < sizeof(Elf64_Shdr) || header.e_shoff > size ||
      uint64_t{header.e_shnum} * header.e_shentsize > size - header.e_shoff) {
    return Status::InvalidArgument(std::string(what) + " section table out of range");
  }
  auto section_at = [&](int i) {
    return Read<Elf64_Shdr>(elf + header.e_shoff + static_cast<size_t>(i) * header.e_shentsize);
  };
  Elf64_Shdr names = section_at(header.e_shstrndx);
  if (names.sh_offset > size || names.sh_size > size - names.sh_offset) {
    return Status::InvalidArgument(std::string(what) + " section names out of range");
  }
  for (int i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr section = section_at(i);
    if (section.sh_name >= names.sh_size) continue;
    const char* name = reinterpret_cast<const char*>(elf + names.sh_offset + section.sh_name);
    GPUPOOL_RETURN_IF_ERROR(visit(std::string_view(name, strnlen(name, names.sh_size - section.sh_name)), section));
  }
  return Status::OK();
}

}  // namespace

Status ParseCubin(const uint8_t* elf, size_t size, std::map<std::string, KernelLayout>* kernels) {
  constexpr std::string_view kInfoPrefix = ".nv.info.";
  constexpr std::string_view kTextPrefix = ".text.";
  return ForEachElfSection(elf, size, "cubin", [&](std::string_view name, const Elf64_Shdr& section) {
    if (section.sh_offset > size || section.sh_size > size - section.sh_offset) {
      return Status::OK();  // out of the image's bounds: skipped, as it always was
    }
    if (name.substr(0, kInfoPrefix.size()) == kInfoPrefix) {
      (*kernels)[std::string(name.substr(kInfoPrefix.size()))] =
          ParseKernelInfo(elf + section.sh_offset, section.sh_size);
    } else if (name.substr(0, kTextPrefix.size()) == kTextPrefix) {
      // A kernel without parameters may have no .nv.info section of its own.
      kernels->emplace(std::string(name.substr(kTextPrefix.size())), KernelLayout{});
    }
    return Status::OK();
  });
}

Result<ModuleImage> ParseModuleImage(const void* image_pointer) {
  if (image_pointer == nullptr) return Status::InvalidArgument("null module image");
  const auto* p = static_cast<const uint8_t*>(image_pointer);
  ModuleImage image;
  uint32_t magic = Read<uint32_t>(p);
  if (magic == kFatbinWrapperMagic) {
    auto wrapper = Read<FatbinWrapper>(p);
    if (wrapper.data == nullptr) return Status::InvalidArgument("fatbin wrapper without data");
    GPUPOOL_RETURN_IF_ERROR(ParseFatbin(wrapper.data, SIZE_MAX, &image));
    if (wrapper.version == 2 && wrapper.filename_or_fatbins != nullptr) {
      // A NULL-terminated array of the translation units' fatbins (crt/link.stub).
      const auto* list = static_cast<const uint8_t* const*>(wrapper.filename_or_fatbins);
      for (size_t i = 0; list[i] != nullptr && i < kMaxRelocatableFatbins; ++i) {
        image.relocatable.push_back(list[i]);
      }
    }
  } else if (magic == kFatbinMagic) {
    GPUPOOL_RETURN_IF_ERROR(ParseFatbin(p, SIZE_MAX, &image));
  } else if (IsElf(p)) {
    image.bytes = p;
    image.size = ElfSize(p);
    image.sass.push_back(CubinTarget(p));
    GPUPOOL_RETURN_IF_ERROR(ParseCubin(p, image.size, &image.kernels));
  } else if (LooksLikePtx(p, SIZE_MAX)) {
    GPUPOOL_RETURN_IF_ERROR(ParsePtxImage(p, SIZE_MAX, &image));
  } else {
    return Status::InvalidArgument("unknown module image format (not a fatbin, cubin or PTX)");
  }
  return image;
}

Result<ModuleImage> ParseModuleImageBytes(const void* image_pointer, size_t size) {
  if (image_pointer == nullptr || size < 4) {
    return Status::InvalidArgument("module image too short");
  }
  const auto* p = static_cast<const uint8_t*>(image_pointer);
  ModuleImage image;
  uint32_t magic = Read<uint32_t>(p);
  if (magic == kFatbinMagic) {
    GPUPOOL_RETURN_IF_ERROR(ParseFatbin(p, size, &image));
  } else if (size >= sizeof(Elf64_Ehdr) && IsElf(p)) {
    image.bytes = p;
    image.size = size;
    image.sass.push_back(CubinTarget(p));
    GPUPOOL_RETURN_IF_ERROR(ParseCubin(p, size, &image.kernels));
  } else if (LooksLikePtx(p, size)) {
    GPUPOOL_RETURN_IF_ERROR(ParsePtxImage(p, size, &image));
  } else {
    return Status::InvalidArgument("unknown module image format (not a fatbin, cubin or PTX)");
  }
  return image;
}

Result<std::vector<uint8_t>> WithRelocatablePtx(const ModuleImage& image) {
  const auto* fatbin = static_cast<const uint8_t*>(image.bytes);
  if (fatbin == nullptr || image.size < sizeof(FatbinHeader) || Read<FatbinHeader>(fatbin).magic != kFatbinMagic) {
    return Status::InvalidArgument("not a fatbin");
  }
  std::vector<uint8_t> out(fatbin, fatbin + image.size);
  for (const uint8_t* unit : image.relocatable) {
    auto header = Read<FatbinHeader>(unit);
    if (header.magic != kFatbinMagic || header.header_size < sizeof(FatbinHeader)) {
      return Status::InvalidArgument("a relocatable fatbin of the program is not a fatbin");
    }
    const uint8_t* entries = unit + header.header_size;
    uint64_t at = 0;
    while (header.files_size - at >= sizeof(FatbinEntryHeader)) {
      auto entry = Read<FatbinEntryHeader>(entries + at);
      const uint64_t step = uint64_t{entry.header_size} + entry.padded_payload_size;
      if (entry.header_size < sizeof(FatbinEntryHeader)) {
        return Status::InvalidArgument("a relocatable fatbin's entry header is too small");
      }
      if (step > header.files_size - at) break;  // the last entry's padding, as in ParseFatbin
      if (entry.kind == kEntryKindPtx) out.insert(out.end(), entries + at, entries + at + step);
      at += step;
    }
  }
  FatbinHeader merged = Read<FatbinHeader>(out.data());
  merged.files_size = out.size() - merged.header_size;
  std::memcpy(out.data(), &merged, sizeof(merged));
  return out;
}

std::vector<uint8_t> FatbinOfPtx(const std::vector<PtxEntry>& units) {
  constexpr uint64_t kEntryHeaderSize = 64;  // as nvcc writes them
  std::vector<uint8_t> out(sizeof(FatbinHeader));
  for (const PtxEntry& unit : units) {
    const uint64_t text_size = unit.text.size() + 1;  // with its NUL
    const uint64_t padded = (text_size + 7) & ~uint64_t{7};
    FatbinEntryHeader entry{};
    entry.kind = kEntryKindPtx;
    entry.version = 0x0101;
    entry.header_size = kEntryHeaderSize;
    entry.padded_payload_size = static_cast<uint32_t>(padded);
    entry.payload_size = static_cast<uint32_t>(text_size);
    entry.sm_version = unit.arch;
    entry.flags = 0x11;  // 64-bit code, as nvcc's entries say; no compression
    const size_t at = out.size();
    out.resize(at + kEntryHeaderSize + padded, 0);
    std::memcpy(out.data() + at, &entry, sizeof(entry));
    std::memcpy(out.data() + at + kEntryHeaderSize, unit.text.data(), unit.text.size());
  }
  FatbinHeader header{kFatbinMagic, 1, sizeof(FatbinHeader), out.size() - sizeof(FatbinHeader)};
  std::memcpy(out.data(), &header, sizeof(header));
  return out;
}

bool IsFatbin(const void* image, size_t size) {
  return size >= sizeof(uint32_t) && Read<uint32_t>(static_cast<const uint8_t*>(image)) == kFatbinMagic;
}

bool PtxKeepsState(const std::vector<PtxEntry>& ptx) {
  for (const PtxEntry& entry : ptx) {
    std::istringstream lines(entry.text);
    std::string line;
    while (std::getline(lines, line)) {
      const size_t at = line.find_first_not_of(" \t");
      if (at == std::string::npos) continue;
      std::string_view text(line.c_str() + at);
      // Module-scope declarations start the line; a linkage directive may come first.
      for (std::string_view linkage : {".visible ", ".extern ", ".weak ", ".common "}) {
        if (text.substr(0, linkage.size()) == linkage) text.remove_prefix(linkage.size());
      }
      const bool variable = text.substr(0, 8) == ".global " || text.substr(0, 7) == ".const ";
      if (variable && text.find(" $str") == std::string_view::npos) return true;
      if (text.find("malloc") != std::string_view::npos) return true;  // the device heap
    }
  }
  return false;
}

bool PtxNamesClusters(const std::vector<PtxEntry>& ptx) {
  constexpr std::string_view kWord = "cluster";
  for (const PtxEntry& entry : ptx) {
    const std::string_view text = entry.text;
    for (size_t at = text.find(kWord); at != std::string_view::npos; at = text.find(kWord, at + kWord.size())) {
      const std::string_view before = text.substr(0, at);
      for (std::string_view prefix : {"%", "%n", "%is_explicit_", "barrier.", "::"}) {
        if (before.size() >= prefix.size() && before.substr(before.size() - prefix.size()) == prefix) return true;
      }
    }
    // Generic addresses of another block's shared memory, and the rank that owns one.
    for (std::string_view opcode : {"mapa.", "getctarank."}) {
      for (size_t at = text.find(opcode); at != std::string_view::npos; at = text.find(opcode, at + 1)) {
        if (at == 0 || std::isspace(static_cast<unsigned char>(text[at - 1]))) return true;
      }
    }
  }
  return false;
}

std::map<std::string, CompiledCluster> CompiledClusters(const std::vector<PtxEntry>& ptx) {
  std::map<std::string, CompiledCluster> clusters;
  constexpr std::string_view kEntry = ".entry";
  auto is_name = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; };
  for (const PtxEntry& entry : ptx) {
    const std::string_view text = entry.text;
    for (size_t at = text.find(kEntry); at != std::string_view::npos; at = text.find(kEntry, at + kEntry.size())) {
      size_t name_start = at + kEntry.size();
      while (name_start < text.size() && std::isspace(static_cast<unsigned char>(text[name_start]))) ++name_start;
      size_t name_end = name_start;
      while (name_end < text.size() && is_name(text[name_end])) ++name_end;
      if (name_end == name_start) continue;
      // The directives between the parameter list and the body (or the declaration's end).
      const size_t params_end = text.find(')', name_end);
      if (params_end == std::string_view::npos) break;
      const size_t body = text.find_first_of("{;", params_end);
      const std::string_view directives =
          text.substr(params_end, body == std::string_view::npos ? text.npos : body - params_end);
      CompiledCluster cluster;
      cluster.must_be_set = directives.find(".explicitcluster") != std::string_view::npos;
      constexpr std::string_view kShape = ".reqnctapercluster";
      if (const size_t shape = directives.find(kShape); shape != std::string_view::npos) {
        std::string_view rest = directives.substr(shape + kShape.size());
        bool valid = true;
        int axis = 0;
        for (; axis < 3; ++axis) {
          while (!rest.empty() && (std::isspace(static_cast<unsigned char>(rest[0])) || (axis > 0 && rest[0] == ','))) {
            rest.remove_prefix(1);
          }
          uint32_t value = 0;
          size_t digits = 0;
          while (digits < rest.size() && digits < 3 && std::isdigit(static_cast<unsigned char>(rest[digits]))) {
            value = value * 10 + static_cast<uint32_t>(rest[digits] - '0');
            ++digits;
          }
          if (digits == 0) break;
          if (value == 0 || value > 16) valid = false;
          cluster.dims[axis] = value;
          rest.remove_prefix(digits);
        }
        if (axis == 0) valid = false;
        for (; axis < 3; ++axis) cluster.dims[axis] = 1;
        if (!valid) continue;
      }
      if (cluster.dims[0] != 0 || cluster.must_be_set)
        clusters[std::string(text.substr(name_start, name_end - name_start))] = cluster;
    }
  }
  return clusters;
}

Result<std::vector<PtxEntry>> PtxOfHostObject(const uint8_t* elf, size_t size) {
  std::vector<PtxEntry> ptx;
  uint64_t decompressed = 0;
  Status read = ForEachElfSection(elf, size, "object file", [&](std::string_view name, const Elf64_Shdr& section) {
    if (section.sh_type == SHT_NOBITS) return Status::OK();
    if (name != ".nv_fatbin" && name != "__nv_relfatbin") return Status::OK();
    if (section.sh_offset > size || section.sh_size > size - section.sh_offset) {
      return Status::InvalidArgument("object file section " + std::string(name) + " out of range");
    }
    // One or more fatbins back to back, each 8-byte aligned.
    const uint8_t* fatbins = elf + section.sh_offset;
    uint64_t at = 0;
    while (section.sh_size - at >= sizeof(FatbinHeader) && Read<uint32_t>(fatbins + at) == kFatbinMagic) {
      ModuleImage image;
      image.decompressed_bytes = decompressed;  // one cap for the object's fatbins
      GPUPOOL_RETURN_IF_ERROR(ParseFatbin(fatbins + at, section.sh_size - at, &image));
      decompressed = image.decompressed_bytes;
      for (PtxEntry& entry : image.ptx) ptx.push_back(std::move(entry));
      at += (image.size + 7) & ~uint64_t{7};
    }
    return Status::OK();
  });
  if (!read.ok()) return read;
  return ptx;
}

Result<std::vector<PtxEntry>> PtxOfArchive(const uint8_t* bytes, size_t size) {
  constexpr std::string_view kMagic = "!<arch>\n";
  constexpr size_t kMemberHeaderSize = 60;  // name[16] date[12] uid[6] gid[6] mode[8] size[10] "`\n"
  if (size >= 8 && std::memcmp(bytes, "!<thin>\n", 8) == 0) {
    return Status::InvalidArgument("a thin archive (its members are files elsewhere)");
  }
  if (size < kMagic.size() || std::memcmp(bytes, kMagic.data(), kMagic.size()) != 0) {
    return Status::InvalidArgument("not an ar archive");
  }
  std::vector<PtxEntry> ptx;
  uint64_t at = kMagic.size();
  while (size - at >= kMemberHeaderSize) {
    const uint8_t* member = bytes + at;
    if (member[58] != '`' || member[59] != '\n') {
      return Status::InvalidArgument("archive member header at byte " + std::to_string(at) + " is malformed");
    }
    uint64_t member_size = 0;
    for (int i = 48; i < 58 && member[i] != ' '; ++i) {
      if (member[i] < '0' || member[i] > '9') {
        return Status::InvalidArgument("archive member size at byte " + std::to_string(at) + " is not a number");
      }
      member_size = member_size * 10 + (member[i] - '0');
    }
    at += kMemberHeaderSize;
    if (member_size > size - at) {
      return Status::InvalidArgument("archive member at byte " + std::to_string(at) + " runs past the archive");
    }
    if (member_size >= sizeof(Elf64_Ehdr) && IsElf(bytes + at)) {
      auto found = PtxOfHostObject(bytes + at, member_size);
      if (!found.ok()) {
        return Status::InvalidArgument("archive member at byte " + std::to_string(at) + ": " +
                                       found.status().message());
      }
      for (PtxEntry& entry : *found) ptx.push_back(std::move(entry));
    }
    at += member_size + (member_size & 1);  // members are 2-byte aligned
    if (at > size) break;
  }
  return ptx;
}

const PtxEntry* ChoosePtx(const std::vector<PtxEntry>& ptx, uint32_t device_arch) {
  const PtxEntry* chosen = nullptr;
  for (const PtxEntry& entry : ptx) {
    if (device_arch != 0 && entry.arch > device_arch) continue;
    if (chosen == nullptr || entry.arch > chosen->arch) chosen = &entry;
  }
  return chosen;
}

bool RunsSass(const SassTarget& target, uint32_t device_arch) {
  if (target.arch_specific) return target.arch == device_arch;
  return target.arch / 10 == device_arch / 10 && target.arch <= device_arch;
}

CodeChoice ChooseCode(const std::vector<uint32_t>& ptx_archs, const std::vector<SassTarget>& sass,
                      uint32_t device_arch) {
  CodeChoice choice;
  for (const SassTarget& target : sass) {
    if (device_arch != 0 && RunsSass(target, device_arch)) choice.sass_arch = std::max(choice.sass_arch, target.arch);
  }
  for (uint32_t arch : ptx_archs) {
    if (device_arch != 0 && arch > device_arch) continue;
    if (!choice.found || arch > choice.ptx_arch) choice.ptx_arch = arch;
    choice.found = true;
  }
  if (choice.found || choice.sass_arch == 0) return choice;
  // The GPU runs the image's SASS; the sim runs the PTX nearest to it in its place.
  for (uint32_t arch : ptx_archs) {
    if (!choice.found || arch < choice.ptx_arch) choice.ptx_arch = arch;
    choice.found = true;
  }
  choice.in_place_of_sass = choice.found;
  return choice;
}

}  // namespace gpupool::image

#include "remote/image/ptx_signature.h"

#include <bit>
#include <cctype>
#include <cstdlib>

namespace gpupool::image {
namespace {

// Bytes of a kernel's parameters at most (CUDA 12.1 and later).
constexpr uint64_t kMaxParamBytes = 32764;

// Skips blanks and comments.
size_t SkipSpace(std::string_view text, size_t at) {
  while (at < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[at]))) {
      ++at;
    } else if (text.substr(at, 2) == "//") {
      size_t end = text.find('\n', at);
      at = end == std::string_view::npos ? text.size() : end + 1;
    } else if (text.substr(at, 2) == "/*") {
      size_t end = text.find("*/", at + 2);
      at = end == std::string_view::npos ? text.size() : end + 2;
    } else {
      break;
    }
  }
  return at;
}

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.' || c == '%';
}

std::string_view Word(std::string_view text, size_t* at) {
  *at = SkipSpace(text, *at);
  size_t start = *at;
  while (*at < text.size() && IsNameChar(text[*at])) ++*at;
  return text.substr(start, *at - start);
}

uint32_t ScalarSize(std::string_view type) {
  if (type == ".pred") return 1;
  if (type.size() < 3) return 0;
  std::string_view bits = type.substr(2);
  if (type == ".f16x2" || type == ".bf16x2") return 4;
  if (type == ".bf16") return 2;
  if (bits == "8") return 1;
  if (bits == "16") return 2;
  if (bits == "32") return 4;
  if (bits == "64") return 8;
  return 0;
}

}  // namespace

Result<std::map<std::string, KernelLayout>> ParsePtxSignatures(std::string_view ptx) {
  std::map<std::string, KernelLayout> kernels;
  size_t at = 0;
  while ((at = ptx.find(".entry", at)) != std::string_view::npos) {
    at += 6;
    if (at < ptx.size() && IsNameChar(ptx[at])) continue;  // ".entryfoo"
    // A comment mentioning .entry is no declaration: check the line's start.
    size_t line_start = ptx.rfind('\n', at - 6);
    line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
    if (ptx.substr(line_start, at - 6 - line_start).find("//") != std::string_view::npos) continue;
    std::string name(Word(ptx, &at));
    if (name.empty()) return Status::InvalidArgument("PTX: .entry without a name");
    KernelLayout layout;
    at = SkipSpace(ptx, at);
    if (at < ptx.size() && ptx[at] == '(') {
      ++at;
      uint32_t offset = 0;
      while (true) {
        at = SkipSpace(ptx, at);
        if (at >= ptx.size()) return Status::InvalidArgument("PTX: unterminated parameters of " + name);
        if (ptx[at] == ')') {
          ++at;
          break;
        }
        if (ptx[at] == ',') {
          ++at;
          continue;
        }
        std::string_view space = Word(ptx, &at);
        if (space != ".param") return Status::InvalidArgument("PTX: bad parameter of " + name);
        uint32_t align = 0, size = 0;
        bool pointer = false;  // after .ptr, an .align is the pointee's, not the parameter's
        std::string_view word;
        while (!(word = Word(ptx, &at)).empty() && word[0] == '.') {
          if (word == ".align") {
            at = SkipSpace(ptx, at);
            const auto value = static_cast<uint32_t>(std::strtoul(ptx.data() + at, nullptr, 10));
            if (!pointer) align = value;
            while (at < ptx.size() && std::isdigit(static_cast<unsigned char>(ptx[at]))) ++at;
          } else if (word == ".ptr") {
            pointer = true;
          } else if (word == ".global" || word == ".const" || word == ".shared" || word == ".local") {
            // the state space of a pointer parameter's pointee
          } else if (ScalarSize(word) != 0) {
            size = ScalarSize(word);
          } else if (word == ".texref" || word == ".samplerref" || word == ".surfref") {
            size = 8;
          }
        }
        if (word.empty() || size == 0) return Status::InvalidArgument("PTX: bad parameter of " + name);
        uint64_t count = 1;
        at = SkipSpace(ptx, at);
        if (at < ptx.size() && ptx[at] == '[') {
          count = std::strtoull(ptx.data() + at + 1, nullptr, 10);
          size_t close = ptx.find(']', at);
          if (close == std::string_view::npos || count == 0) {
            return Status::InvalidArgument("PTX: bad array parameter of " + name);
          }
          at = close + 1;
        }
        if (align == 0) align = size;
        // Checked in 64 bits: sizes and alignments come from a job's PTX, and a layout
        // that wrapped would pack parameters over each other. A kernel's parameters take
        // at most kMaxParamBytes (CUDA 12.1 on), so nothing here comes near wrapping.
        if (!std::has_single_bit(align) || align > kMaxParamBytes || count > kMaxParamBytes / size) {
          return Status::InvalidArgument("PTX: parameter of " + name + " too large or misaligned");
        }
        uint64_t start = (uint64_t{offset} + align - 1) / align * align;
        if (start + size * count > kMaxParamBytes) {
          return Status::InvalidArgument("PTX: the parameters of " + name + " take more than " +
                                         std::to_string(kMaxParamBytes) + " bytes");
        }
        offset = static_cast<uint32_t>(start);
        layout.params.push_back(ParamSlot{offset, static_cast<uint32_t>(size * count)});
        offset += static_cast<uint32_t>(size * count);
      }
      layout.param_size = offset;
    }
    kernels[name] = std::move(layout);
  }
  return kernels;
}

}  // namespace gpupool::image

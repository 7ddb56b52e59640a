// PtxModule's front end: a module parsed and linked from PTX text (parser.cc), with its
// variables, their initial bytes and its kernels' names. Decoding a kernel for the tiers is
// in interp/decoder.cc (PtxModule::Decode).
#include <algorithm>
#include <bit>
#include <iterator>

#include "remote/ptx/front/error_strings.h"
#include "remote/ptx/front/program.h"

namespace gpupool::sim {

std::vector<std::string_view> SplitOpcode(std::string_view opcode) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= opcode.size()) {
    size_t dot = opcode.find('.', start);
    if (dot == std::string_view::npos) dot = opcode.size();
    parts.push_back(opcode.substr(start, dot - start));
    start = dot + 1;
  }
  return parts;
}

uint64_t FunctionAddress(const ParsedModule& module, const std::string& name) {
  auto found = module.functions.find(name);
  if (found == module.functions.end() || !found->second.has_body) return 0;
  return kCodeWindow + 16 * (static_cast<uint64_t>(std::distance(module.functions.begin(), found)) + 1);
}

Result<std::unique_ptr<PtxModule>> PtxModule::Parse(std::string_view text, uint64_t device_heap) {
  return ParseLinked({text}, device_heap);
}

Result<std::unique_ptr<PtxModule>> PtxModule::ParseLinked(const std::vector<std::string_view>& texts,
                                                          uint64_t device_heap) {
  if (device_heap == 0 || device_heap > kMaxDeviceHeapBytes) {
    return Status::InvalidArgument("a device heap of " + std::to_string(device_heap) + " bytes: must be 1 to " +
                                   std::to_string(kMaxDeviceHeapBytes));
  }
  auto parsed = LinkPtxTexts(texts);
  if (!parsed.ok()) return parsed.status();
  std::unique_ptr<PtxModule> module(new PtxModule());
  module->parsed_ = std::move(*parsed);
  // A module that calls device-side malloc or free, or the device runtime's launch or
  // allocation (its parameter buffers live there too), gets its heap as a variable of its own.
  for (const char* name : {"malloc", "free", "__cudaCDP2GetParameterBufferV2", "__cudaCDP2LaunchDeviceV2",
                           "__cudaCDP2Malloc", "__cudaCDP2Free"}) {
    auto found = module->parsed_->functions.find(name);
    if (found != module->parsed_->functions.end() && !found->second.has_body) {
      ModuleVariable heap;
      heap.name = kDeviceHeapVariable;
      heap.size = std::max<uint64_t>((device_heap + 15) / 16 * 16, 64);
      heap.align = 16;
      module->parsed_->variables.push_back(std::move(heap));
      break;
    }
  }
  for (const char* name : {"__cudaCDP2GetErrorString", "__cudaCDP2GetErrorName"}) {
    auto found = module->parsed_->functions.find(name);
    if (found != module->parsed_->functions.end() && !found->second.has_body) {
      ModuleVariable strings;
      strings.name = kErrorStringsVariable;
      strings.init = ErrorStringsImage();
      strings.size = strings.init.size();
      strings.align = 8;
      module->parsed_->variables.push_back(std::move(strings));
      break;
    }
  }
  return module;
}

const std::vector<ModuleVariable>& PtxModule::variables() const { return parsed_->variables; }

Result<std::vector<uint8_t>> PtxModule::InitialBytes(const ModuleVariable& variable,
                                                     const std::map<std::string, uint64_t>& addresses) const {
  std::vector<uint8_t> bytes = variable.init;
  for (const Relocation& relocation : variable.relocations) {
    uint64_t address = FunctionAddress(*parsed_, relocation.symbol);
    if (auto found = addresses.find(relocation.symbol); found != addresses.end()) {
      address = found->second;
    }
    if (address == 0) {
      return Status::InvalidArgument("the initialiser of " + variable.name + " holds the address of " +
                                     relocation.symbol + ", which is no variable or function of the module");
    }
    uint64_t value = address + static_cast<uint64_t>(relocation.addend);
    if (relocation.mask != ~uint64_t{0}) {
      value = (value & relocation.mask) >> std::countr_zero(relocation.mask);
    }
    if (relocation.size > 8 || relocation.offset > bytes.size() || relocation.size > bytes.size() - relocation.offset) {
      return Status::Internal("a relocation outside the initialiser of " + variable.name);
    }
    for (uint32_t k = 0; k < relocation.size; ++k) {
      bytes[relocation.offset + k] = static_cast<uint8_t>(value >> (8 * k));
    }
  }
  return bytes;
}

bool PtxModule::HasKernel(const std::string& name) const {
  auto found = parsed_->functions.find(name);
  return found != parsed_->functions.end() && found->second.is_entry && found->second.has_body;
}

std::vector<std::string> PtxModule::KernelNames() const {
  std::vector<std::string> names;
  for (const auto& [name, function] : parsed_->functions) {
    if (function.is_entry && function.has_body) names.push_back(name);
  }
  return names;
}

}  // namespace gpupool::sim

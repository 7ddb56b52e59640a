#include "remote/device/fault.h"

#include <charconv>

namespace gpupool::device {

const char* FaultModeName(FaultMode mode) {
  switch (mode) {
    case FaultMode::kNone:
      return "none";
    case FaultMode::kFail:
      return "fail";
    case FaultMode::kFailAfter:
      return "fail_after";
    case FaultMode::kHang:
      return "hang";
  }
  return "none";
}

Result<FaultMode> ParseFaultMode(const std::string& name) {
  if (name == "none" || name == "clear") return FaultMode::kNone;
  if (name == "fail") return FaultMode::kFail;
  if (name == "fail_after" || name == "fail-after") return FaultMode::kFailAfter;
  if (name == "hang") return FaultMode::kHang;
  return Status::InvalidArgument("unknown fault mode '" + name + "' (expected fail, fail_after, hang or clear)");
}

Result<Fault> ParseFaultSpec(const std::string& text) {
  std::string mode_text = text;
  std::string arg;
  bool has_arg = false;
  if (size_t eq = text.find('='); eq != std::string::npos) {
    mode_text = text.substr(0, eq);
    arg = text.substr(eq + 1);
    has_arg = true;
  }
  Result<FaultMode> mode = ParseFaultMode(mode_text);
  if (!mode.ok()) return mode.status();
  Fault fault;
  fault.mode = *mode;
  switch (fault.mode) {
    case FaultMode::kFail:
      if (has_arg && arg.empty()) return Status::InvalidArgument("fault '" + text + "': empty reason");
      fault.reason = has_arg ? arg : "injected";
      return fault;
    case FaultMode::kFailAfter: {
      if (!has_arg) return Status::InvalidArgument("fault '" + text + "': fail-after needs =N");
      uint64_t n = 0;
      auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), n);
      if (arg.empty() || ec != std::errc() || end != arg.data() + arg.size()) {
        return Status::InvalidArgument("fault '" + text + "': '" + arg + "' is not a non-negative operation count");
      }
      fault.ops = n;
      fault.reason = "injected: failed after " + arg + " operations";
      return fault;
    }
    case FaultMode::kHang:
    case FaultMode::kNone:
      if (has_arg) return Status::InvalidArgument("fault '" + text + "': '" + mode_text + "' takes no value");
      return fault;
  }
  return fault;
}

}  // namespace gpupool::device

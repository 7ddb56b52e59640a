// Fault: a fault injected into one GPU of a backend (the sim backend implements them).
//
// Modes:
//   fail        the GPU is FAILED at once, with a reason (default "injected").
//   fail_after  the next `ops` calls of BeforeOperation succeed; the one after fails the GPU.
//   hang        BeforeOperation blocks until the fault is cleared or the agent stops.
//   none        no fault (setting it is "clear": the GPU recovers).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gpupool::device {

enum class FaultMode { kNone, kFail, kFailAfter, kHang };

struct Fault {
  FaultMode mode = FaultMode::kNone;
  uint64_t ops = 0;    // kFailAfter: operations that still succeed
  std::string reason;  // kFail/kFailAfter: why the GPU failed (e.g. "Xid 79")
};

// "none", "fail", "fail_after", "hang": the names of the control API.
const char* FaultModeName(FaultMode mode);
// Accepts the control API names, plus "clear" (= none) and "fail-after".
Result<FaultMode> ParseFaultMode(const std::string& name);

// The command-line form after "INDEX:": "fail", "fail=REASON", "fail-after=N", "hang",
// "clear". Errors name the text and what is wrong.
Result<Fault> ParseFaultSpec(const std::string& text);

}  // namespace gpupool::device

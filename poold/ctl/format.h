// Formatting of gpupoold's JSON answers (docs/api.md) as scontrol-style text.
//
// A record is printed as its first line of Key=Value fields, then continuation lines
// indented three spaces, then a blank line; with -o (oneliner) each record is one line.
// Values with blanks or quotes are double-quoted with backslash escapes; absent or empty
// values print as (null); times print as local ISO 8601 (2026-11-21T23:20:00).
// Everything here is pure and never throws, whatever the shape of the JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "poold/ctl/args.h"

namespace gpupool::ctl {

struct Field {
  std::string key;
  std::string value;  // already rendered (quoted if needed)
};
using Line = std::vector<Field>;
using Record = std::vector<Line>;

Record PoolRecord(const nlohmann::json& pool);
Record GpuRecord(const nlohmann::json& gpu);
Record LeaseRecord(const nlohmann::json& lease);
Record EventRecord(const nlohmann::json& event);

std::string RenderRecord(const Record& record, bool oneliner);

// Value renderers, exposed for tests.
std::string QuoteValue(const std::string& text);  // "" → (null); quotes when needed
std::string FormatTime(int64_t epoch_seconds);    // 0 → (null)
std::string FormatMemoryMib(uint64_t mib);        // 81920 → 80G, 1000 → 1000M

// The text gpupoolctl prints for the API answer to `args` (sent to `server`). NotFound when a
// named object (pool NAME, GPU ID, lease=ID) is absent from the answer; Internal when the
// answer lacks the list it must carry.
Result<std::string> FormatAnswer(const CtlArgs& args, const nlohmann::json& answer, const std::string& server);

}  // namespace gpupool::ctl

// CtlArgs: gpupoolctl's command line, parsed and checked before any request is sent.
//
// The parser is a pure function so that every bad-input case (unknown command, misspelt
// key, bad state name, non-numeric job) is unit-tested without a daemon. Options may
// appear anywhere on the line (`gpupoolctl show gpus -o` works like scontrol's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::ctl {

enum class Verb {
  kHelp,     // --help: print usage, exit 0
  kVersion,  // --version
  kPing,
  kShowPools,
  kShowGpus,
  kShowLeases,
  kShowEvents,
  kUpdateGpu,
  kRelease,
  kMigrate,  // migrate lease=L [gpu=ID] [to=ID] [reason=...]
};

struct CtlArgs {
  // Global options; empty/false when not given.
  std::string server;       // --server URL
  std::string config_path;  // -f CONF
  bool oneliner = false;    // -o / --oneliner
  bool json = false;        // --json

  Verb verb = Verb::kHelp;

  // Filters and targets; which ones a verb accepts is checked by ParseArgs.
  std::string pool;                   // show pools NAME, show gpus pool=P
  std::string gpu;                    // show gpus ID, show events gpu=, update gpu=
  std::string lease;                  // show leases lease=, release lease=
  std::optional<int64_t> job;         // job=N (N >= 1)
  std::optional<int64_t> since;       // since=SEQ (>= 0)
  std::optional<int64_t> limit;       // limit=K (>= 1)
  std::string state;                  // update: "drain", "resume" or "fail" (lower case)
  std::string to;                     // migrate to=ID
  std::optional<std::string> reason;  // update, release: reason="..."
};

// Parses argv[1..] (the program name excluded). InvalidArgument with a one-line message
// naming the offending word otherwise.
Result<CtlArgs> ParseArgs(const std::vector<std::string>& args);

// The text printed by --help.
std::string UsageText();

}  // namespace gpupool::ctl

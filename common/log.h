// Log: leveled logging for the daemons and tools, Slurm style ("error: ...", "debug: ...").
// Goes to stderr unless OpenLogFile() was called. Thread-safe.
#pragma once

#include <string>

namespace gpupool::log {

enum class Level { kError = 0, kWarning = 1, kInfo = 2, kVerbose = 3, kDebug = 4 };

void SetLevel(Level level);
Level GetLevel();
// Appends to `path` from now on; returns false (and keeps stderr) when it cannot open it.
bool OpenLogFile(const std::string& path);
// The descriptor log lines go to now (the log file's, else stderr's): a child process that
// should log to the same place gets it as its stderr.
int LogFileDescriptor();
void SetProgramName(const std::string& name);

void Write(Level level, const std::string& message);
inline bool Enabled(Level level) { return static_cast<int>(level) <= static_cast<int>(GetLevel()); }

inline void Error(const std::string& m) { Write(Level::kError, m); }
inline void Warning(const std::string& m) { Write(Level::kWarning, m); }
inline void Info(const std::string& m) { Write(Level::kInfo, m); }
inline void Verbose(const std::string& m) {
  if (Enabled(Level::kVerbose)) Write(Level::kVerbose, m);
}
inline void Debug(const std::string& m) {
  if (Enabled(Level::kDebug)) Write(Level::kDebug, m);
}

}  // namespace gpupool::log

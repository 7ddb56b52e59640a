#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <sys/time.h>

namespace gpupool::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::mutex g_mu;
FILE* g_file = nullptr;             // GUARDED_BY(g_mu); nullptr means stderr
std::string g_program = "gpupool";  // GUARDED_BY(g_mu)

const char* Prefix(Level level) {
  switch (level) {
    case Level::kError:
      return "error: ";
    case Level::kWarning:
      return "warning: ";
    case Level::kInfo:
      return "";
    case Level::kVerbose:
      return "verbose: ";
    case Level::kDebug:
      return "debug: ";
  }
  return "";
}

}  // namespace

void SetLevel(Level level) { g_level = static_cast<int>(level); }
Level GetLevel() { return static_cast<Level>(g_level.load()); }

int LogFileDescriptor() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_file != nullptr ? fileno(g_file) : STDERR_FILENO;
}

bool OpenLogFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return false;
  std::setvbuf(f, nullptr, _IOLBF, 0);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_file != nullptr) std::fclose(g_file);
  g_file = f;
  return true;
}

void SetProgramName(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_program = name;
}

void Write(Level level, const std::string& message) {
  if (!Enabled(level)) return;
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  localtime_r(&tv.tv_sec, &tm);
  char stamp[40];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(g_mu);
  FILE* out = g_file != nullptr ? g_file : stderr;
  std::fprintf(out, "[%s.%03ld] %s: %s%s\n", stamp, static_cast<long>(tv.tv_usec / 1000), g_program.c_str(),
               Prefix(level), message.c_str());
}

}  // namespace gpupool::log

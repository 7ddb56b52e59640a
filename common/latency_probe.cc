#include "common/latency_probe.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace gpupool::probe {
namespace internal {
std::atomic<int> enabled_state{-1};
}  // namespace internal

namespace {

// Leaked on purpose: the report runs at exit, after static destructors may have run.
struct Registry {
  std::mutex mu;
  std::vector<Site*> sites;
  uint64_t start_ticks = 0;
  uint64_t start_ns = 0;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

void ReportAtExit() {
  // A forked child inherits the handler, and may have turned the probes off since.
  if (internal::enabled_state.load() != 1) return;
  for (const std::string& line : ReportLines()) std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

uint64_t SteadyNanoseconds() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

int internal::ReadEnabled() {
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  int state = enabled_state.load();
  if (state >= 0) return state;
  const char* value = std::getenv("GPUPOOL_LATENCY_PROBES");
  state = value != nullptr && std::strcmp(value, "1") == 0 ? 1 : 0;
  if (state == 1) {
    registry.start_ticks = Ticks();
    registry.start_ns = SteadyNanoseconds();
    std::atexit(ReportAtExit);
  }
  enabled_state.store(state);
  return state;
}

Site::Site(const char* name) : name_(name) {
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  registry.sites.push_back(this);
}

double NanosecondsPerTick() {
#if defined(__x86_64__) || defined(__i386__)
  Registry& registry = TheRegistry();
  uint64_t start_ticks, start_ns;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    start_ticks = registry.start_ticks;
    start_ns = registry.start_ns;
  }
  if (start_ns == 0) {  // never enabled: measure now, over a short interval
    start_ticks = Ticks();
    start_ns = SteadyNanoseconds();
  }
  // The counter against the clock over at least 20 ms, for a rate good to a fraction of 1%.
  uint64_t elapsed = SteadyNanoseconds() - start_ns;
  if (elapsed < 20'000'000) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(20'000'000 - elapsed));
  }
  const uint64_t ticks = Ticks() - start_ticks;
  const uint64_t ns = SteadyNanoseconds() - start_ns;
  return ticks > 0 ? static_cast<double>(ns) / static_cast<double>(ticks) : 1.0;
#else
  return 1.0;
#endif
}

std::vector<std::string> ReportLines() {
  std::vector<Site*> sites;
  {
    Registry& registry = TheRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    sites = registry.sites;
  }
  std::vector<std::string> lines;
  double ns_per_tick = 0;
  for (const Site* site : sites) {
    const uint64_t spans = site->spans();
    if (spans == 0) continue;
    if (ns_per_tick == 0) ns_per_tick = NanosecondsPerTick();
    char line[256];
    std::snprintf(line, sizeof(line), "gpupool-probe: Site=%s Spans=%llu MeanNs=%.1f", site->name(),
                  static_cast<unsigned long long>(spans),
                  static_cast<double>(site->ticks()) * ns_per_tick / static_cast<double>(spans));
    lines.emplace_back(line);
  }
  return lines;
}

}  // namespace gpupool::probe

// Latency probes: where the time of a data-path call goes, layer by layer.
//
// Off unless the process starts with GPUPOOL_LATENCY_PROBES=1 in its environment (read once,
// when the probes are first used). Then each probe site adds up the time of the spans it
// measures (from the CPU's time-stamp counter, a few nanoseconds a read), and the process
// writes one line per site to stderr as it exits, in the style of the other Key=Value
// output:
//   gpupool-probe: Site=client.call.wait Spans=842337 MeanNs=973.6
// Off, a span costs a load and a couple of predictable branches (1.4 ns against 0.6 ns for
// an empty loop on the 2-core development VM); on, about 23 ns (two counter reads and two
// atomic additions). Spans of several threads add up in one site.
// Each shared object keeps its own sites (the replacement libcuda.so.1 and the transport
// module it loads report separately, each at its own exit). scripts/bench/remote
// --breakdown runs the synchronous round trip and the launch benchmark with them on.
//
// Who may use it: whoever starts the process sets its environment; the lines go only to
// that process's own stderr, and carry timings, never data.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace gpupool::probe {

namespace internal {
extern std::atomic<int> enabled_state;  // -1: not read yet; 0: off; 1: on
int ReadEnabled();                      // reads the environment once; sets up the report
}  // namespace internal

// Whether this process measures (GPUPOOL_LATENCY_PROBES=1 when first asked).
inline bool Enabled() {
  int state = internal::enabled_state.load(std::memory_order_relaxed);
  return (state < 0 ? internal::ReadEnabled() : state) == 1;
}

uint64_t SteadyNanoseconds();

// The current tick: the time-stamp counter where there is one, else steady-clock ns.
inline uint64_t Ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return SteadyNanoseconds();
#endif
}

// One measured place. Static storage only (sites register themselves and are reported at
// exit, after static destructors may have run: a Site is trivially destructible).
class Site {
 public:
  explicit Site(const char* name);
  void Add(uint64_t ticks) {
    ticks_.fetch_add(ticks, std::memory_order_relaxed);
    spans_.fetch_add(1, std::memory_order_relaxed);
  }
  const char* name() const { return name_; }
  uint64_t spans() const { return spans_.load(std::memory_order_relaxed); }
  uint64_t ticks() const { return ticks_.load(std::memory_order_relaxed); }

 private:
  const char* name_;
  std::atomic<uint64_t> ticks_{0};
  std::atomic<uint64_t> spans_{0};
};

// Measures from its construction to its destruction into `site`, when probes are on.
class Span {
 public:
  explicit Span(Site& site) : site_(site), start_(Enabled() ? Ticks() : 0) {}
  ~Span() {
    if (start_ != 0) site_.Add(Ticks() - start_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Site& site_;
  uint64_t start_;
};

// Ticks() when probes are on, else 0: for a span that begins in one function and ends in
// another (AddSince).
inline uint64_t StartTicks() { return Enabled() ? Ticks() : 0; }
inline void AddSince(Site& site, uint64_t start) {
  if (start != 0) site.Add(Ticks() - start);
}

// Nanoseconds per tick, measured against the steady clock since probes were enabled (1 on
// machines without a time-stamp counter).
double NanosecondsPerTick();
// The report lines, one per site that measured anything, in registration order.
std::vector<std::string> ReportLines();

}  // namespace gpupool::probe

// A span over the rest of the enclosing scope, reported as `name` (a string literal).
#define GPUPOOL_PROBE_SCOPE(var, name)            \
  static ::gpupool::probe::Site var##_site{name}; \
  ::gpupool::probe::Span var { var##_site }

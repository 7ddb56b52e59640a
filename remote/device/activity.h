// What a GPU's device reports about its own activity, for the job's NVML
// (protocol.h, kOpGpuStatus): utilisation over the last sample period, the driver's
// version, and temperature and power where the device knows them.
//
// BusyMeter is how a device that runs its work itself (the sim) measures utilisation:
// the executor tells it each span of wall time its engine ran kernels or copies, and
// Read answers the fraction of the last period each engine was busy. A span counts for
// the time it took, split over 10 ms buckets, so a long kernel that began before the
// period counts only for its part inside it.
// Thread-safe.
//
// A Span (one per kernel launch, copy or memset) reads the kernel's coarse monotonic clock
// (CLOCK_MONOTONIC_COARSE: the same clock as steady_clock, advanced once a timer tick of
// 1-4 ms) at its start and end: a few ns where the exact clock costs ~30 ns twice, on a
// launch path of ~150 ns. A span counts for the ticks it crosses: a long one within a
// tick of its length, and one shorter than a tick a whole tick in the proportion of its
// length to the tick, so the many short launches of a busy engine add up to their time
// (an idle engine reads 0: a span that crosses no tick adds nothing, and costs no lock).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include <time.h>

namespace gpupool::device {

struct GpuActivity {
  bool has_utilization = false;
  uint32_t gpu_percent = 0;     // of the sample period: kernels ran
  uint32_t memory_percent = 0;  // of the sample period: device memory read or written
  uint32_t sample_period_ms = 0;
  bool has_temperature = false;
  uint32_t temperature_c = 0;
  bool has_power = false;
  uint32_t power_mw = 0;
  int32_t cuda_driver_version = 0;  // 0: unknown
  std::string driver_version;       // "": unknown
  std::string why_not;              // what is unknown, and why ("" : nothing)
};

class BusyMeter {
 public:
  enum Engine { kKernels = 0, kCopies = 1 };
  static constexpr int64_t kBucketNs = 10'000'000;     // 10 ms
  static constexpr size_t kBuckets = 512;              // 5.12 s of history
  static constexpr int64_t kPeriodNs = 1'000'000'000;  // NVML's longest sample period

  explicit BusyMeter(int64_t created_ns = NowNs()) : created_ns_(created_ns) {}

  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // The same clock as NowNs, to the last timer tick (see above): what a Span reads.
  static int64_t CoarseNowNs() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
  }

  // `engine` was busy from start_ns to end_ns (steady clock).
  void Add(Engine engine, int64_t start_ns, int64_t end_ns);

  struct Reading {
    uint32_t kernels_percent = 0;
    uint32_t copies_percent = 0;
    int64_t window_ns = 0;  // the period the percentages cover (shorter for a young meter)
  };
  // The busy fraction of each engine over the last `period_ns` (at most kBuckets buckets)
  // up to `now_ns`, rounded to whole percents, at most 100.
  Reading Read(int64_t now_ns, int64_t period_ns = kPeriodNs);

  // Marks a span for its whole scope: Add(engine, construction, destruction) on the
  // coarse clock; nothing to add (no call, no lock) while no tick passed.
  class Span {
   public:
    Span(BusyMeter* meter, Engine engine) : meter_(meter), engine_(engine) {
      if (meter_ != nullptr) start_ns_ = CoarseNowNs();
    }
    ~Span() {
      if (meter_ == nullptr) return;
      const int64_t end_ns = CoarseNowNs();
      if (end_ns != start_ns_) meter_->Add(engine_, start_ns_, end_ns);
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    BusyMeter* meter_;
    Engine engine_;
    int64_t start_ns_ = 0;
  };

 private:
  struct Bucket {
    int64_t index = -1;  // which 10 ms of the clock it holds now
    std::array<uint64_t, 2> busy_ns{};
  };
  std::mutex mu_;
  const int64_t created_ns_;
  std::array<Bucket, kBuckets> buckets_{};  // guarded by mu_
};

}  // namespace gpupool::device

#include "remote/device/activity.h"

#include <algorithm>

namespace gpupool::device {

void BusyMeter::Add(Engine engine, int64_t start_ns, int64_t end_ns) {
  if (end_ns <= start_ns || end_ns < 0) return;
  // Older than the history keeps: nothing to record.
  start_ns = std::max({start_ns, end_ns - static_cast<int64_t>(kBuckets - 1) * kBucketNs, int64_t{0}});
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t b = start_ns / kBucketNs; b * kBucketNs < end_ns; ++b) {
    const int64_t lo = std::max(start_ns, b * kBucketNs);
    const int64_t hi = std::min(end_ns, (b + 1) * kBucketNs);
    Bucket& bucket = buckets_[static_cast<size_t>(b) % kBuckets];
    if (bucket.index != b) bucket = Bucket{b, {}};
    bucket.busy_ns[engine] += static_cast<uint64_t>(hi - lo);
  }
}

BusyMeter::Reading BusyMeter::Read(int64_t now_ns, int64_t period_ns) {
  Reading reading;
  period_ns = std::clamp<int64_t>(period_ns, kBucketNs, (kBuckets - 1) * kBucketNs);
  if (now_ns <= 0) return reading;
  // Whole buckets from the first that starts at or after now - period up to now's: the
  // window is between period - 10 ms and period long (or since the meter began).
  const int64_t first = std::max<int64_t>((now_ns - period_ns + kBucketNs - 1) / kBucketNs, 0);
  const int64_t last = now_ns / kBucketNs;
  const int64_t window_start = std::max(first * kBucketNs, created_ns_);
  if (now_ns <= window_start) return reading;
  uint64_t busy[2] = {0, 0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t b = first; b <= last; ++b) {
      const Bucket& bucket = buckets_[static_cast<size_t>(b) % kBuckets];
      if (bucket.index != b) continue;
      busy[0] += bucket.busy_ns[0];
      busy[1] += bucket.busy_ns[1];
    }
  }
  reading.window_ns = now_ns - window_start;
  const auto window = static_cast<uint64_t>(reading.window_ns);
  auto percent = [window](uint64_t busy_ns) {
    busy_ns = std::min(busy_ns, window);  // a span before the meter began, or overlapping
    return static_cast<uint32_t>((busy_ns * 100 + window / 2) / window);
  };
  reading.kernels_percent = percent(busy[kKernels]);
  reading.copies_percent = percent(busy[kCopies]);
  return reading;
}

}  // namespace gpupool::device

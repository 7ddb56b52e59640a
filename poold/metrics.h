// Metrics: request counters and latency histograms for gpupoold's /metrics endpoint
// (Prometheus text format). Lock-free on the request path.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace gpupool::poold {

// A latency histogram with fixed buckets, from 100 us to 1 s.
class LatencyHistogram {
 public:
  // Upper bounds of the buckets, in seconds.
  static constexpr std::array<double, 12> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                      0.01,   0.025,   0.05,   0.1,   0.5,    1.0};
  void Observe(double seconds);
  // Appends the histogram `name` (its _bucket, _sum and _count series) with its HELP text.
  void Render(const char* name, const char* help, std::string* out) const;

 private:
  std::array<std::atomic<uint64_t>, kBuckets.size() + 1> buckets_{};  // last = +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

class RequestMetrics {
 public:
  void Observe(int http_code, double seconds);
  // Appends this object's metrics in Prometheus text format.
  void Render(std::string* out) const;

 private:
  LatencyHistogram duration_;
  std::atomic<uint64_t> ok_{0}, client_errors_{0}, server_errors_{0};
};

}  // namespace gpupool::poold

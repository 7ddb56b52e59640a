#include "poold/metrics.h"

#include <cstdio>

namespace gpupool::poold {

void LatencyHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBuckets.size() && seconds > kBuckets[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

void LatencyHistogram::Render(const char* name, const char* help, std::string* out) const {
  char line[192];
  std::snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  *out += line;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    cumulative += buckets_[i].load();
    std::snprintf(line, sizeof(line), "%s_bucket{le=\"%g\"} %lu\n", name, kBuckets[i], cumulative);
    *out += line;
  }
  cumulative += buckets_[kBuckets.size()].load();
  std::snprintf(line, sizeof(line), "%s_bucket{le=\"+Inf\"} %lu\n", name, cumulative);
  *out += line;
  std::snprintf(line, sizeof(line), "%s_sum %.9f\n", name, sum_ns_.load() / 1e9);
  *out += line;
  std::snprintf(line, sizeof(line), "%s_count %lu\n", name, count_.load());
  *out += line;
}

void RequestMetrics::Observe(int http_code, double seconds) {
  duration_.Observe(seconds);
  if (http_code < 400)
    ok_.fetch_add(1, std::memory_order_relaxed);
  else if (http_code < 500)
    client_errors_.fetch_add(1, std::memory_order_relaxed);
  else
    server_errors_.fetch_add(1, std::memory_order_relaxed);
}

void RequestMetrics::Render(std::string* out) const {
  char line[160];
  *out += "# HELP gpupool_requests_total API requests by outcome.\n# TYPE gpupool_requests_total counter\n";
  std::snprintf(line, sizeof(line), "gpupool_requests_total{outcome=\"ok\"} %lu\n", ok_.load());
  *out += line;
  std::snprintf(line, sizeof(line), "gpupool_requests_total{outcome=\"client_error\"} %lu\n", client_errors_.load());
  *out += line;
  std::snprintf(line, sizeof(line), "gpupool_requests_total{outcome=\"server_error\"} %lu\n", server_errors_.load());
  *out += line;
  duration_.Render("gpupool_request_duration_seconds", "API request latency.", out);
}

}  // namespace gpupool::poold

#include "stats/request_metrics.h"

#include <algorithm>
#include <cmath>

namespace moetier {

std::string_view RequestOutcomeName(RequestOutcome outcome) {
  switch (outcome) {
    case RequestOutcome::kOk:
      return "ok";
    case RequestOutcome::kInvalid:
      return "invalid";
    case RequestOutcome::kUnauthorized:
      return "unauthorized";
    case RequestOutcome::kRejected:
      return "rejected";
    case RequestOutcome::kCancelled:
      return "cancelled";
    case RequestOutcome::kError:
      return "error";
  }
  return "error";
}

RequestMetrics::Histogram::Histogram(std::vector<double> bounds)
    : upper_bounds(std::move(bounds)), bucket_counts(upper_bounds.size() + 1, 0) {}

void RequestMetrics::Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  value = std::max(value, 0.0);
  // Buckets are "less than or equal": a value on a bound falls into it.
  const auto bucket = std::lower_bound(upper_bounds.begin(), upper_bounds.end(), value);
  ++bucket_counts[static_cast<size_t>(bucket - upper_bounds.begin())];
  ++count;
  sum += value;
}

HistogramSnapshot RequestMetrics::Histogram::Snapshot() const {
  HistogramSnapshot out;
  out.upper_bounds = upper_bounds;
  out.cumulative_counts.reserve(bucket_counts.size());
  uint64_t running = 0;
  for (uint64_t n : bucket_counts) {
    running += n;
    out.cumulative_counts.push_back(running);
  }
  out.count = count;
  out.sum = sum;
  return out;
}

RequestMetrics::RequestMetrics()
    : time_to_first_token_s_({kTimeToFirstTokenBoundsS.begin(), kTimeToFirstTokenBoundsS.end()}),
      inter_token_latency_s_({kInterTokenLatencyBoundsS.begin(), kInterTokenLatencyBoundsS.end()}),
      request_duration_s_({kRequestDurationBoundsS.begin(), kRequestDurationBoundsS.end()}) {}

void RequestMetrics::RecordRequest(std::string_view transport, RequestOutcome outcome,
                                   double duration_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{std::string(transport), std::string(RequestOutcomeName(outcome))}];
  request_duration_s_.Observe(duration_s);
}

void RequestMetrics::AddTokens(uint64_t prompt_tokens, uint64_t generated_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt_tokens;
  generated_tokens_ += generated_tokens;
}

void RequestMetrics::ObserveTimeToFirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  time_to_first_token_s_.Observe(seconds);
}

void RequestMetrics::ObserveInterTokenLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  inter_token_latency_s_.Observe(seconds);
}

RequestMetricsSnapshot RequestMetrics::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  RequestMetricsSnapshot out;
  out.requests = requests_;
  out.generated_tokens = generated_tokens_;
  out.prompt_tokens = prompt_tokens_;
  out.time_to_first_token_s = time_to_first_token_s_.Snapshot();
  out.inter_token_latency_s = inter_token_latency_s_.Snapshot();
  out.request_duration_s = request_duration_s_.Snapshot();
  return out;
}

}  // namespace moetier

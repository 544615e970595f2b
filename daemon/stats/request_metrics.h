// Counters and latency histograms of the requests the front door serves,
// shared by every transport (HTTP, gRPC) and read by GET /metrics.
// Thread-safe: request handlers record from their own threads while a
// scrape takes a snapshot.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moetier {

enum class RequestOutcome { kOk, kInvalid, kUnauthorized, kRejected, kCancelled, kError };

// "ok", "invalid", "unauthorized", "rejected", "cancelled", "error".
std::string_view RequestOutcomeName(RequestOutcome outcome);

inline constexpr std::array<RequestOutcome, 6> kAllRequestOutcomes = {
    RequestOutcome::kOk,       RequestOutcome::kInvalid,   RequestOutcome::kUnauthorized,
    RequestOutcome::kRejected, RequestOutcome::kCancelled, RequestOutcome::kError};

// Bucket upper bounds (seconds), fixed so that dashboards and alerts written
// against one daemon hold for every other. Time to first token spans a
// cached short prompt on a GPU (5 ms) to a long prefill streamed from disk
// (60 s); inter-token latency spans fast GPU decode (1 ms) to a CPU worker
// waiting on expert reads (5 s); a whole request runs up to ten minutes.
inline constexpr std::array<double, 14> kTimeToFirstTokenBoundsS = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
inline constexpr std::array<double, 13> kInterTokenLatencyBoundsS = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5};
inline constexpr std::array<double, 14> kRequestDurationBoundsS = {
    0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};

struct HistogramSnapshot {
  std::vector<double> upper_bounds;
  // Observations <= each bound, then one more for +Inf (== count).
  std::vector<uint64_t> cumulative_counts;
  uint64_t count = 0;
  double sum = 0;
};

struct RequestMetricsSnapshot {
  std::map<std::pair<std::string, std::string>, uint64_t>
      requests;  // (transport, outcome) -> count
  uint64_t generated_tokens = 0;
  uint64_t prompt_tokens = 0;
  HistogramSnapshot time_to_first_token_s;
  HistogramSnapshot inter_token_latency_s;
  HistogramSnapshot request_duration_s;
};

class RequestMetrics {
 public:
  RequestMetrics();

  // `transport` is "http" or "grpc". Durations are seconds; a negative one
  // counts as 0 and a NaN one is left out of the histogram (the request
  // itself still counts), so a clock glitch never poisons the sums.
  void RecordRequest(std::string_view transport, RequestOutcome outcome, double duration_s);
  void AddTokens(uint64_t prompt_tokens, uint64_t generated_tokens);
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);

  RequestMetricsSnapshot Snapshot() const;

 private:
  // Per-bucket (not cumulative) counts; the last bucket is +Inf.
  struct Histogram {
    explicit Histogram(std::vector<double> bounds);
    void Observe(double value);
    HistogramSnapshot Snapshot() const;

    std::vector<double> upper_bounds;
    std::vector<uint64_t> bucket_counts;
    uint64_t count = 0;
    double sum = 0;
  };

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, uint64_t> requests_;
  uint64_t generated_tokens_ = 0;
  uint64_t prompt_tokens_ = 0;
  Histogram time_to_first_token_s_;
  Histogram inter_token_latency_s_;
  Histogram request_duration_s_;
};

}  // namespace moetier

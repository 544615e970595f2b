// The front door's request counters and latency histograms: outcome names,
// bucket edges, token sums and updates from many threads at once.
#include "stats/request_metrics.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace moetier {
namespace {

TEST(RequestMetricsTest, OutcomeNamesAreTheMetricLabels) {
  EXPECT_EQ(RequestOutcomeName(RequestOutcome::kOk), "ok");
  EXPECT_EQ(RequestOutcomeName(RequestOutcome::kInvalid), "invalid");
  EXPECT_EQ(RequestOutcomeName(RequestOutcome::kUnauthorized), "unauthorized");
  EXPECT_EQ(RequestOutcomeName(RequestOutcome::kRejected), "rejected");
  EXPECT_EQ(RequestOutcomeName(RequestOutcome::kCancelled), "cancelled");
  EXPECT_EQ(RequestOutcomeName(RequestOutcome::kError), "error");
}

TEST(RequestMetricsTest, EmptySnapshotHasEveryBucketAtZero) {
  RequestMetrics metrics;
  const RequestMetricsSnapshot s = metrics.Snapshot();
  EXPECT_TRUE(s.requests.empty());
  EXPECT_EQ(s.generated_tokens, 0u);
  EXPECT_EQ(s.prompt_tokens, 0u);
  ASSERT_EQ(s.time_to_first_token_s.upper_bounds.size(), kTimeToFirstTokenBoundsS.size());
  EXPECT_EQ(s.time_to_first_token_s.cumulative_counts.size(), kTimeToFirstTokenBoundsS.size() + 1);
  EXPECT_EQ(s.inter_token_latency_s.cumulative_counts.size(), kInterTokenLatencyBoundsS.size() + 1);
  EXPECT_EQ(s.request_duration_s.cumulative_counts.size(), kRequestDurationBoundsS.size() + 1);
  for (uint64_t n : s.request_duration_s.cumulative_counts) EXPECT_EQ(n, 0u);
  EXPECT_EQ(s.request_duration_s.count, 0u);
  EXPECT_EQ(s.request_duration_s.sum, 0.0);
}

TEST(RequestMetricsTest, BoundsSpanLlmServingLatencies) {
  EXPECT_DOUBLE_EQ(kTimeToFirstTokenBoundsS.front(), 0.005);
  EXPECT_DOUBLE_EQ(kTimeToFirstTokenBoundsS.back(), 60);
  EXPECT_DOUBLE_EQ(kInterTokenLatencyBoundsS.front(), 0.001);
  EXPECT_DOUBLE_EQ(kInterTokenLatencyBoundsS.back(), 5);
  for (size_t i = 1; i < kTimeToFirstTokenBoundsS.size(); ++i) {
    EXPECT_LT(kTimeToFirstTokenBoundsS[i - 1], kTimeToFirstTokenBoundsS[i]);
  }
  for (size_t i = 1; i < kInterTokenLatencyBoundsS.size(); ++i) {
    EXPECT_LT(kInterTokenLatencyBoundsS[i - 1], kInterTokenLatencyBoundsS[i]);
  }
  for (size_t i = 1; i < kRequestDurationBoundsS.size(); ++i) {
    EXPECT_LT(kRequestDurationBoundsS[i - 1], kRequestDurationBoundsS[i]);
  }
}

TEST(RequestMetricsTest, RequestsAreCountedByTransportAndOutcome) {
  RequestMetrics metrics;
  metrics.RecordRequest("http", RequestOutcome::kOk, 0.2);
  metrics.RecordRequest("http", RequestOutcome::kOk, 0.3);
  metrics.RecordRequest("http", RequestOutcome::kUnauthorized, 0.001);
  metrics.RecordRequest("grpc", RequestOutcome::kRejected, 0.002);
  const RequestMetricsSnapshot s = metrics.Snapshot();
  ASSERT_EQ(s.requests.size(), 3u);
  EXPECT_EQ(s.requests.at({"http", "ok"}), 2u);
  EXPECT_EQ(s.requests.at({"http", "unauthorized"}), 1u);
  EXPECT_EQ(s.requests.at({"grpc", "rejected"}), 1u);
  EXPECT_EQ(s.request_duration_s.count, 4u);
  EXPECT_NEAR(s.request_duration_s.sum, 0.503, 1e-12);
}

TEST(RequestMetricsTest, ValueOnABoundFallsIntoThatBucket) {
  RequestMetrics metrics;
  metrics.ObserveTimeToFirstToken(0.005);  // == first bound
  metrics.ObserveTimeToFirstToken(0.006);  // second bucket (<= 0.01)
  metrics.ObserveTimeToFirstToken(0.01);   // == second bound
  metrics.ObserveTimeToFirstToken(61);     // only +Inf
  const HistogramSnapshot h = metrics.Snapshot().time_to_first_token_s;
  EXPECT_EQ(h.cumulative_counts[0], 1u);
  EXPECT_EQ(h.cumulative_counts[1], 3u);
  EXPECT_EQ(h.cumulative_counts[kTimeToFirstTokenBoundsS.size() - 1], 3u);  // <= 60
  EXPECT_EQ(h.cumulative_counts.back(), 4u);
  EXPECT_EQ(h.count, 4u);
  EXPECT_NEAR(h.sum, 0.005 + 0.006 + 0.01 + 61, 1e-12);
}

TEST(RequestMetricsTest, NegativeCountsAsZeroAndNanIsDropped) {
  RequestMetrics metrics;
  metrics.ObserveInterTokenLatency(-0.5);
  metrics.ObserveInterTokenLatency(std::numeric_limits<double>::quiet_NaN());
  metrics.RecordRequest("grpc", RequestOutcome::kError, std::nan(""));
  const RequestMetricsSnapshot s = metrics.Snapshot();
  EXPECT_EQ(s.inter_token_latency_s.count, 1u);
  EXPECT_EQ(s.inter_token_latency_s.cumulative_counts[0], 1u);
  EXPECT_EQ(s.inter_token_latency_s.sum, 0.0);
  EXPECT_EQ(s.requests.at({"grpc", "error"}), 1u);
  EXPECT_EQ(s.request_duration_s.count, 0u);
  EXPECT_FALSE(std::isnan(s.request_duration_s.sum));
}

TEST(RequestMetricsTest, TokensAccumulate) {
  RequestMetrics metrics;
  metrics.AddTokens(10, 3);
  metrics.AddTokens(5, 7);
  const RequestMetricsSnapshot s = metrics.Snapshot();
  EXPECT_EQ(s.prompt_tokens, 15u);
  EXPECT_EQ(s.generated_tokens, 10u);
}

TEST(RequestMetricsTest, ConcurrentUpdatesAreNotLost) {
  RequestMetrics metrics;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics, t] {
      const char* transport = t % 2 == 0 ? "http" : "grpc";
      for (int i = 0; i < kPerThread; ++i) {
        metrics.RecordRequest(transport, RequestOutcome::kOk, 0.25);
        metrics.AddTokens(2, 1);
        metrics.ObserveTimeToFirstToken(0.1);
        metrics.ObserveInterTokenLatency(0.02);
      }
    });
  }
  // Scrapes while the writers run must always see a consistent histogram.
  for (int i = 0; i < 200; ++i) {
    const HistogramSnapshot h = metrics.Snapshot().inter_token_latency_s;
    ASSERT_EQ(h.cumulative_counts.back(), h.count);
    for (size_t b = 1; b < h.cumulative_counts.size(); ++b) {
      ASSERT_LE(h.cumulative_counts[b - 1], h.cumulative_counts[b]);
    }
  }
  for (std::thread& t : threads) t.join();
  const RequestMetricsSnapshot s = metrics.Snapshot();
  constexpr uint64_t kTotal = uint64_t{kThreads} * kPerThread;
  EXPECT_EQ(s.requests.at({"http", "ok"}), kTotal / 2);
  EXPECT_EQ(s.requests.at({"grpc", "ok"}), kTotal / 2);
  EXPECT_EQ(s.prompt_tokens, 2 * kTotal);
  EXPECT_EQ(s.generated_tokens, kTotal);
  EXPECT_EQ(s.time_to_first_token_s.count, kTotal);
  EXPECT_EQ(s.inter_token_latency_s.count, kTotal);
  EXPECT_EQ(s.request_duration_s.count, kTotal);
  EXPECT_NEAR(s.request_duration_s.sum, 0.25 * kTotal, 1e-6);
  // 0.02 s is in the (0.01, 0.025] bucket: index 4.
  EXPECT_EQ(s.inter_token_latency_s.cumulative_counts[3], 0u);
  EXPECT_EQ(s.inter_token_latency_s.cumulative_counts[4], kTotal);
}

}  // namespace
}  // namespace moetier

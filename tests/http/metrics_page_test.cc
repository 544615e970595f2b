// GET /metrics: the Prometheus text the daemon's status and request metrics
// render to (values, labels, escaping, histogram buckets) and the route
// that serves it.
#include "http/metrics_page.h"

#include <httplib.h>

#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "fake_status.h"
#include "gtest/gtest.h"
#include "http/prometheus_text.h"

namespace moetier {
namespace {

using http_test::FakeStatus;

bool HasLine(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

std::string Render(const v1::Status& status, const RequestMetrics& metrics) {
  return RenderPrometheusText(status, metrics.Snapshot());
}

TEST(PrometheusTextTest, LabelValuesAndHelpAreEscaped) {
  EXPECT_EQ(EscapePrometheusLabelValue(R"(a"b\c)"
                                       "\n"),
            R"(a\"b\\c\n)");
  EXPECT_EQ(EscapePrometheusHelp("x \"quoted\" \\ line\nnext"), R"(x "quoted" \\ line\nnext)");
}

TEST(PrometheusTextTest, ValuesReadBackExactly) {
  EXPECT_EQ(FormatPrometheusValue(0.005), "0.005");
  EXPECT_EQ(FormatPrometheusValue(60), "60");
  EXPECT_EQ(FormatPrometheusValue(-2.5), "-2.5");
  EXPECT_EQ(FormatPrometheusValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatPrometheusValue(HUGE_VAL), "+Inf");
  EXPECT_EQ(FormatPrometheusValue(-HUGE_VAL), "-Inf");
  EXPECT_EQ(std::stod(FormatPrometheusValue(0.1 + 0.2)), 0.1 + 0.2);
}

TEST(MetricsPageTest, EveryFamilyHasHelpAndTypeBeforeItsSamples) {
  RequestMetrics metrics;
  metrics.ObserveTimeToFirstToken(0.3);
  const std::string text = Render(FakeStatus(0), metrics);
  std::set<std::string> helped;
  std::set<std::string> typed;
  std::istringstream in(text);
  int samples = 0;
  for (std::string line; std::getline(in, line);) {
    ASSERT_FALSE(line.empty());
    std::istringstream words(line);
    std::string first, second, name;
    words >> first;
    if (first == "#") {
      words >> second >> name;
      ASSERT_TRUE(second == "HELP" || second == "TYPE") << line;
      ASSERT_EQ(name.rfind("moetier_", 0), 0u) << line;
      (second == "HELP" ? helped : typed).insert(name);
      continue;
    }
    ++samples;
    std::string family = first.substr(0, first.find('{'));
    if (!typed.count(family)) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string s(suffix);
        if (family.size() > s.size() && family.ends_with(s)) {
          family.resize(family.size() - s.size());
          break;
        }
      }
    }
    EXPECT_TRUE(typed.count(family)) << "sample before its # TYPE: " << line;
    EXPECT_TRUE(helped.count(family)) << "sample before its # HELP: " << line;
  }
  EXPECT_EQ(helped, typed);
  EXPECT_GT(samples, 100);
  for (const std::string& name : typed) {
    if (text.find("# TYPE " + name + " counter") != std::string::npos) {
      EXPECT_TRUE(name.ends_with("_total")) << name;
    }
  }
}

TEST(MetricsPageTest, RequestsTokensAndHistograms) {
  RequestMetrics metrics;
  metrics.RecordRequest("http", RequestOutcome::kOk, 1.5);
  metrics.RecordRequest("http", RequestOutcome::kOk, 0.2);
  metrics.RecordRequest("grpc", RequestOutcome::kCancelled, 0.01);
  metrics.AddTokens(120, 48);
  metrics.ObserveTimeToFirstToken(0.004);
  metrics.ObserveTimeToFirstToken(0.3);
  metrics.ObserveInterTokenLatency(0.02);
  const std::string text = Render(FakeStatus(0), metrics);
  EXPECT_TRUE(HasLine(text, R"(moetier_requests_total{transport="http",outcome="ok"} 2)"));
  EXPECT_TRUE(HasLine(text, R"(moetier_requests_total{transport="grpc",outcome="cancelled"} 1)"));
  // Outcomes never seen still have a series, at zero.
  EXPECT_TRUE(
      HasLine(text, R"(moetier_requests_total{transport="grpc",outcome="unauthorized"} 0)"));
  EXPECT_TRUE(HasLine(text, "moetier_prompt_tokens_total 120"));
  EXPECT_TRUE(HasLine(text, "moetier_generated_tokens_total 48"));
  EXPECT_TRUE(HasLine(text, "# TYPE moetier_time_to_first_token_seconds histogram"));
  EXPECT_TRUE(HasLine(text, R"(moetier_time_to_first_token_seconds_bucket{le="0.005"} 1)"));
  EXPECT_TRUE(HasLine(text, R"(moetier_time_to_first_token_seconds_bucket{le="0.25"} 1)"));
  EXPECT_TRUE(HasLine(text, R"(moetier_time_to_first_token_seconds_bucket{le="0.5"} 2)"));
  EXPECT_TRUE(HasLine(text, R"(moetier_time_to_first_token_seconds_bucket{le="+Inf"} 2)"));
  EXPECT_TRUE(HasLine(text, "moetier_time_to_first_token_seconds_sum 0.304"));
  EXPECT_TRUE(HasLine(text, "moetier_time_to_first_token_seconds_count 2"));
  EXPECT_TRUE(HasLine(text, R"(moetier_inter_token_latency_seconds_bucket{le="0.025"} 1)"));
  EXPECT_TRUE(HasLine(text, R"(moetier_request_duration_seconds_bucket{le="+Inf"} 3)"));
  EXPECT_TRUE(HasLine(text, "moetier_request_duration_seconds_count 3"));
}

TEST(MetricsPageTest, QueueTiersAndStore) {
  const v1::Status status = FakeStatus(1);
  const std::string text = Render(status, RequestMetrics());
  EXPECT_TRUE(HasLine(text, "moetier_queue_waiting_requests 1"));
  EXPECT_TRUE(HasLine(text, "moetier_queue_active_sequences 2"));
  EXPECT_TRUE(HasLine(text, "moetier_queue_max_waiting_requests 64"));
  EXPECT_TRUE(HasLine(text, "moetier_queue_max_active_sequences 4"));
  EXPECT_TRUE(HasLine(text, R"(moetier_queue_finished_requests_total{result="rejected"} 7)"));
  EXPECT_TRUE(HasLine(text, "moetier_tier_resident_experts{tier=\"vram\"} " +
                                std::to_string(status.vram().resident_experts())));
  EXPECT_TRUE(HasLine(text, "moetier_tier_resident_bytes{tier=\"ram\"} " +
                                std::to_string(status.ram().resident_bytes())));
  EXPECT_TRUE(HasLine(text, R"(moetier_tier_hits_total{tier="ram"} 90040)"));
  EXPECT_TRUE(HasLine(text, R"(moetier_tier_misses_total{tier="vram"} 9005)"));
  EXPECT_TRUE(HasLine(
      text, "moetier_disk_read_bytes_total " + std::to_string(status.bytes_read_from_disk())));
  EXPECT_TRUE(HasLine(text, "moetier_evictions_total 1203"));
  EXPECT_TRUE(HasLine(text, "moetier_uptime_seconds 3601.5"));
  EXPECT_TRUE(HasLine(text, "moetier_model_layers 24"));
  EXPECT_TRUE(HasLine(text, R"(moetier_model_info{model_path="/models/qwen3-30b-a3b-q4_k_m.gguf",)"
                            R"(architecture="qwen3moe",store_mode="cache"} 1)"));
}

TEST(MetricsPageTest, PerWorkerSeries) {
  const std::string text = Render(FakeStatus(0), RequestMetrics());
  EXPECT_TRUE(HasLine(text, R"(moetier_worker_state{worker="1",device="cuda:0",state="ready"} 1)"));
  EXPECT_TRUE(
      HasLine(text, R"(moetier_worker_state{worker="1",device="cuda:0",state="loading"} 0)"));
  EXPECT_TRUE(HasLine(text, R"(moetier_worker_restarts_total{worker="1",device="cuda:0"} 1)"));
  EXPECT_TRUE(HasLine(text, R"(moetier_worker_restarts_total{worker="0",device="cpu"} 0)"));
  EXPECT_TRUE(
      HasLine(text, R"(moetier_worker_decode_tokens_per_second{worker="1",device="cuda:0"} 42)"));
  EXPECT_TRUE(HasLine(
      text,
      R"(moetier_worker_cache_hit_ratio{worker="0",device="cpu",tier="ram"} 0.9523809523809523)"));
  // A cpu worker without a device cache has no vram hit ratio.
  EXPECT_EQ(text.find(R"(moetier_worker_cache_hit_ratio{worker="0",device="cpu",tier="vram"})"),
            std::string::npos);
  EXPECT_TRUE(
      HasLine(text, R"(moetier_worker_prefetch_issued_total{worker="1",device="cuda:0"} 6000)"));
  EXPECT_TRUE(
      HasLine(text, R"(moetier_worker_prefetch_used_total{worker="1",device="cuda:0"} 4500)"));
  EXPECT_TRUE(
      HasLine(text, R"(moetier_worker_prefetch_wasted_total{worker="1",device="cuda:0"} 1400)"));
  EXPECT_TRUE(HasLine(
      text, R"(moetier_worker_copied_bytes_total{worker="1",device="cuda:0"} 21474836480)"));
  EXPECT_TRUE(HasLine(
      text, R"(moetier_worker_copy_bytes_per_second{worker="1",device="cuda:0"} 1.18e+10)"));
  EXPECT_TRUE(
      HasLine(text, R"(moetier_worker_heartbeat_age_seconds{worker="0",device="cpu"} 0.12)"));
}

TEST(MetricsPageTest, UnknownWorkerStateIsStillReported) {
  v1::Status status = FakeStatus(0);
  status.mutable_workers(0)->set_state("draining");
  const std::string text = Render(status, RequestMetrics());
  EXPECT_TRUE(HasLine(text, R"(moetier_worker_state{worker="0",device="cpu",state="draining"} 1)"));
  EXPECT_TRUE(HasLine(text, R"(moetier_worker_state{worker="0",device="cpu",state="ready"} 0)"));
}

TEST(MetricsPageTest, HostileLabelValuesAreEscaped) {
  v1::Status status = FakeStatus(0);
  status.set_model_path("/m/\"odd\"\\dir\nname.gguf");
  status.mutable_workers(0)->set_device("cpu\"0");
  const std::string text = Render(status, RequestMetrics());
  EXPECT_NE(text.find(R"(model_path="/m/\"odd\"\\dir\nname.gguf")"), std::string::npos);
  EXPECT_TRUE(HasLine(text, R"(moetier_worker_restarts_total{worker="0",device="cpu\"0"} 0)"));
}

TEST(MetricsPageTest, EmptyStatusStillRendersEveryFixedFamily) {
  const std::string text = RenderPrometheusText(v1::Status(), RequestMetricsSnapshot());
  EXPECT_TRUE(HasLine(text, R"(moetier_time_to_first_token_seconds_bucket{le="+Inf"} 0)"));
  EXPECT_TRUE(HasLine(text, "moetier_queue_waiting_requests 0"));
  EXPECT_TRUE(HasLine(text, "# TYPE moetier_worker_state gauge"));
}

TEST(MetricsPageTest, RouteServesTheTextWithItsContentType) {
  httplib::Server server;
  RequestMetrics metrics;
  metrics.AddTokens(3, 9);
  int calls = 0;
  RegisterMetricsRoute(
      server, [&calls] { return FakeStatus(static_cast<uint64_t>(calls++)); }, &metrics);
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread listener([&server] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::yield();
  httplib::Client client("127.0.0.1", port);
  const httplib::Result first = client.Get("/metrics");
  const httplib::Result second = client.Get("/metrics");
  server.stop();
  listener.join();
  ASSERT_TRUE(first) << httplib::to_string(first.error());
  ASSERT_TRUE(second);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_TRUE(HasLine(first->body, "moetier_generated_tokens_total 9"));
  EXPECT_TRUE(HasLine(first->body, "moetier_evictions_total 1200"));
  // The status is read on every scrape, not once.
  EXPECT_TRUE(HasLine(second->body, "moetier_evictions_total 1203"));
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace moetier

#include "http/metrics_page.h"

#include <httplib.h>

#include <array>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "http/prometheus_text.h"

namespace moetier {
namespace {

// Every known transport and outcome is written, zero or not, so a rate()
// over a series that has just started counting is defined from the start.
constexpr std::array<std::string_view, 2> kTransports = {"http", "grpc"};
// The states WorkerStatus.state takes; a state outside this list is written too.
constexpr std::array<std::string_view, 5> kWorkerStates = {"waiting", "starting", "loading",
                                                           "ready", "stopped"};

struct TierOf {
  std::string_view name;
  const v1::TierCounters& counters;
};

void WriteRequests(PrometheusTextWriter& w, const RequestMetricsSnapshot& m) {
  std::map<std::pair<std::string, std::string>, uint64_t> requests = m.requests;
  for (std::string_view transport : kTransports) {
    for (RequestOutcome outcome : kAllRequestOutcomes) {
      requests.try_emplace({std::string(transport), std::string(RequestOutcomeName(outcome))}, 0);
    }
  }
  w.Family("moetier_requests_total", "counter",
           "Requests answered, by transport (http, grpc) and outcome.");
  for (const auto& [key, count] : requests) {
    w.Sample({{"transport", key.first}, {"outcome", key.second}}, count);
  }
  w.Family("moetier_prompt_tokens_total", "counter", "Prompt tokens of the requests served.");
  w.Sample({}, m.prompt_tokens);
  w.Family("moetier_generated_tokens_total", "counter", "Tokens generated for the requests.");
  w.Sample({}, m.generated_tokens);
  w.Family("moetier_time_to_first_token_seconds", "histogram",
           "From a request's arrival to its first generated token.");
  w.Histogram({}, m.time_to_first_token_s);
  w.Family("moetier_inter_token_latency_seconds", "histogram",
           "Between consecutive generated tokens of one request.");
  w.Histogram({}, m.inter_token_latency_s);
  w.Family("moetier_request_duration_seconds", "histogram",
           "From a request's arrival to its last byte, whatever the outcome.");
  w.Histogram({}, m.request_duration_s);
}

void WriteQueue(PrometheusTextWriter& w, const v1::QueueStatus& q) {
  w.Family("moetier_queue_waiting_requests", "gauge", "Requests waiting for a worker.");
  w.Sample({}, uint64_t{q.queued_requests()});
  w.Family("moetier_queue_active_sequences", "gauge", "Sequences being generated now.");
  w.Sample({}, uint64_t{q.active_requests()});
  w.Family("moetier_queue_max_waiting_requests", "gauge",
           "Waiting requests allowed before new ones are rejected.");
  w.Sample({}, uint64_t{q.max_queued_requests()});
  w.Family("moetier_queue_max_active_sequences", "gauge",
           "Sequences the workers generate at once, at most.");
  w.Sample({}, uint64_t{q.max_active_sequences()});
  w.Family("moetier_queue_finished_requests_total", "counter",
           "Requests the scheduler finished, by result (completed, rejected, cancelled).");
  w.Sample({{"result", "completed"}}, q.requests_completed());
  w.Sample({{"result", "rejected"}}, q.requests_rejected());
  w.Sample({{"result", "cancelled"}}, q.requests_cancelled());
}

void WriteModelAndStore(PrometheusTextWriter& w, const v1::Status& s) {
  w.Family("moetier_model_info", "gauge", "The model served; the value is always 1.");
  w.Sample({{"model_path", s.model_path()},
            {"architecture", s.architecture()},
            {"store_mode", s.store_mode()}},
           uint64_t{1});
  w.Family("moetier_model_layers", "gauge", "Layers of the model.");
  w.Sample({}, uint64_t{s.n_layer()});
  w.Family("moetier_model_experts", "gauge", "Experts per MoE layer.");
  w.Sample({}, uint64_t{s.n_expert()});
  w.Family("moetier_model_experts_used", "gauge", "Experts routed to per token and layer.");
  w.Sample({}, uint64_t{s.n_expert_used()});
  w.Family("moetier_model_expert_bytes", "gauge", "Bytes of every expert of the model.");
  w.Sample({}, s.expert_bytes_total());
  w.Family("moetier_uptime_seconds", "gauge", "Time since the daemon started.");
  w.Sample({}, s.uptime_s());
  w.Family("moetier_ram_budget_bytes", "gauge", "Size of the pinned RAM expert store.");
  w.Sample({}, s.ram_budget_bytes());
  w.Family("moetier_preload_ratio", "gauge", "Fraction of the preload done, 0..1.");
  w.Sample({}, s.preload_fraction());

  const std::array<TierOf, 2> tiers = {TierOf{"ram", s.ram()}, TierOf{"vram", s.vram()}};
  w.Family("moetier_tier_resident_experts", "gauge", "Experts resident in the tier.");
  for (const TierOf& t : tiers)
    w.Sample({{"tier", std::string(t.name)}}, t.counters.resident_experts());
  w.Family("moetier_tier_resident_bytes", "gauge", "Bytes of the experts resident in the tier.");
  for (const TierOf& t : tiers)
    w.Sample({{"tier", std::string(t.name)}}, t.counters.resident_bytes());
  w.Family("moetier_tier_hits_total", "counter",
           "Expert lookups the tier answered, summed over the workers.");
  for (const TierOf& t : tiers) w.Sample({{"tier", std::string(t.name)}}, t.counters.hits());
  w.Family("moetier_tier_misses_total", "counter",
           "Expert lookups the tier could not answer, summed over the workers.");
  for (const TierOf& t : tiers) w.Sample({{"tier", std::string(t.name)}}, t.counters.misses());

  w.Family("moetier_disk_read_bytes_total", "counter", "Bytes read from the model file.");
  w.Sample({}, s.bytes_read_from_disk());
  w.Family("moetier_disk_read_bytes_per_second", "gauge",
           "Read rate from the model file over the last interval.");
  w.Sample({}, s.read_bytes_per_s());
  w.Family("moetier_evictions_total", "counter", "Experts evicted from the RAM store.");
  w.Sample({}, s.evictions());
}

PrometheusLabels WorkerLabels(const v1::WorkerStatus& worker) {
  return {{"worker", std::to_string(worker.index())}, {"device", worker.device()}};
}

PrometheusLabels With(PrometheusLabels labels, std::string name, std::string value) {
  labels.emplace_back(std::move(name), std::move(value));
  return labels;
}

// One family with one sample per worker, read by `value`.
template <typename Value>
void PerWorker(PrometheusTextWriter& w, const v1::Status& s, std::string_view name,
               std::string_view type, std::string_view help, Value value) {
  w.Family(name, type, help);
  for (const v1::WorkerStatus& worker : s.workers()) w.Sample(WorkerLabels(worker), value(worker));
}

void WriteWorkerStateAndCaches(PrometheusTextWriter& w, const v1::Status& s) {
  w.Family("moetier_worker_state", "gauge",
           "1 for the worker's current state (waiting, starting, loading, ready, stopped), "
           "0 for the others.");
  for (const v1::WorkerStatus& worker : s.workers()) {
    std::set<std::string> states(kWorkerStates.begin(), kWorkerStates.end());
    states.insert(worker.state());
    for (const std::string& state : states) {
      w.Sample(With(WorkerLabels(worker), "state", state), uint64_t{state == worker.state()});
    }
  }
  w.Family("moetier_worker_cache_hit_ratio", "gauge",
           "Hits over lookups of the worker's tier (ram: its store acquires; vram: its device "
           "expert cache), since start; absent before the first lookup.");
  for (const v1::WorkerStatus& worker : s.workers()) {
    for (const TierOf& t : {TierOf{"ram", worker.ram()}, TierOf{"vram", worker.vram()}}) {
      const uint64_t lookups = t.counters.hits() + t.counters.misses();
      if (lookups == 0) continue;
      w.Sample(With(WorkerLabels(worker), "tier", std::string(t.name)),
               static_cast<double>(t.counters.hits()) / static_cast<double>(lookups));
    }
  }
  w.Family("moetier_worker_cache_hits_total", "counter",
           "Expert lookups the worker's tier answered.");
  for (const v1::WorkerStatus& worker : s.workers()) {
    w.Sample(With(WorkerLabels(worker), "tier", "ram"), worker.ram().hits());
    w.Sample(With(WorkerLabels(worker), "tier", "vram"), worker.vram().hits());
  }
  w.Family("moetier_worker_cache_misses_total", "counter",
           "Expert lookups the worker's tier could not answer.");
  for (const v1::WorkerStatus& worker : s.workers()) {
    w.Sample(With(WorkerLabels(worker), "tier", "ram"), worker.ram().misses());
    w.Sample(With(WorkerLabels(worker), "tier", "vram"), worker.vram().misses());
  }
}

void WriteWorkers(PrometheusTextWriter& w, const v1::Status& s) {
  WriteWorkerStateAndCaches(w, s);
  using W = const v1::WorkerStatus&;
  PerWorker(w, s, "moetier_worker_restarts_total", "counter",
            "Worker processes started beyond the first.",
            [](W x) { return uint64_t{x.restarts()}; });
  PerWorker(w, s, "moetier_worker_decode_tokens_per_second", "gauge",
            "Decode rate of the worker's last generation.", [](W x) { return x.tokens_per_s(); });
  PerWorker(w, s, "moetier_worker_requests_served_total", "counter",
            "Requests the worker process finished.", [](W x) { return x.requests_served(); });
  PerWorker(w, s, "moetier_worker_expert_cache_bytes", "gauge",
            "The worker's device expert cache (slot pool); 0 without one.",
            [](W x) { return x.expert_cache_bytes(); });
  PerWorker(w, s, "moetier_worker_prefetch_hints_total", "counter",
            "Prefetch requests the worker sent to the store.",
            [](W x) { return x.prefetch_hints(); });
  PerWorker(w, s, "moetier_worker_prefetch_issued_total", "counter",
            "Copies the worker started for predicted experts.",
            [](W x) { return x.prefetch_issued(); });
  PerWorker(w, s, "moetier_worker_prefetch_used_total", "counter",
            "Prefetched experts routed to before being evicted.",
            [](W x) { return x.prefetch_used(); });
  PerWorker(w, s, "moetier_worker_prefetch_wasted_total", "counter",
            "Prefetched experts evicted unused.", [](W x) { return x.prefetch_wasted(); });
  PerWorker(w, s, "moetier_worker_copied_bytes_total", "counter",
            "Host to device expert bytes copied.", [](W x) { return x.bytes_copied(); });
  PerWorker(w, s, "moetier_worker_copy_bytes_per_second", "gauge",
            "Host to device copy rate while a copy is in flight; 0 before any copy.",
            [](W x) { return x.copy_bytes_per_s(); });
  w.Family("moetier_worker_heartbeat_age_seconds", "gauge",
           "Time since the worker's last heartbeat; absent before the first.");
  for (const v1::WorkerStatus& worker : s.workers()) {
    if (worker.heartbeat_age_ms() < 0) continue;
    w.Sample(WorkerLabels(worker), static_cast<double>(worker.heartbeat_age_ms()) / 1000.0);
  }
}

}  // namespace

std::string RenderPrometheusText(const v1::Status& status, const RequestMetricsSnapshot& m) {
  PrometheusTextWriter writer;
  WriteRequests(writer, m);
  WriteQueue(writer, status.queue());
  WriteModelAndStore(writer, status);
  WriteWorkers(writer, status);
  return writer.text();
}

void RegisterMetricsRoute(httplib::Server& server, std::function<v1::Status()> status_source,
                          const RequestMetrics* metrics) {
  server.Get("/metrics", [status_source = std::move(status_source), metrics](
                             const httplib::Request&, httplib::Response& response) {
    const v1::Status status = status_source ? status_source() : v1::Status();
    // Without metrics, an empty set still carries the buckets' bounds.
    const RequestMetricsSnapshot snapshot =
        metrics != nullptr ? metrics->Snapshot() : RequestMetrics().Snapshot();
    response.set_content(RenderPrometheusText(status, snapshot),
                         std::string(kPrometheusContentType));
  });
}

}  // namespace moetier

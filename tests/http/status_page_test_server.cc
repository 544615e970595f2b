// Serves the status page, /api/* and /metrics on 127.0.0.1 at a free port,
// with a fake status whose numbers move on every call; prints the port on
// the first line of stdout and runs until killed. For the browser test.
//   status_page_test_server [--api-keys-configured] [--no-budget]
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "fake_status.h"
#include "http/metrics_page.h"
#include "http/status_page.h"

namespace {

// Like the daemon's worker on cuda:0: whole 3 MiB slots, NOT_FOUND elsewhere.
absl::StatusOr<moetier::v1::SetBudgetResponse> FakeSetBudget(
    const moetier::v1::SetBudgetRequest& request) {
  if (request.device() == "cpu") {
    return absl::FailedPreconditionError("the worker on cpu was started without a cache");
  }
  if (request.device() != "cuda:0") {
    return absl::NotFoundError("no worker runs on device " + request.device());
  }
  if (request.expert_cache_mib() < 48) {
    return absl::InvalidArgumentError("expert_cache_mib must be at least 48 (8 slots per layer)");
  }
  moetier::v1::SetBudgetResponse response;
  response.set_expert_cache_mib(request.expert_cache_mib() / 3 * 3);
  response.set_expert_cache_bytes(response.expert_cache_mib() << 20);
  return response;
}

}  // namespace

int main(int argc, char** argv) {
  bool api_keys_configured = false;
  bool budget = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--api-keys-configured") == 0) {
      api_keys_configured = true;
    } else if (std::strcmp(argv[i], "--no-budget") == 0) {
      budget = false;
    } else {
      std::fprintf(stderr, "usage: %s [--api-keys-configured] [--no-budget]\n", argv[0]);
      return 2;
    }
  }
  auto tick = std::make_shared<std::atomic<uint64_t>>(0);
  auto status_source = [tick] { return moetier::http_test::FakeStatus((*tick)++); };

  moetier::RequestMetrics metrics;
  metrics.RecordRequest("http", moetier::RequestOutcome::kOk, 1.2);
  metrics.RecordRequest("grpc", moetier::RequestOutcome::kRejected, 0.001);
  metrics.AddTokens(512, 128);
  metrics.ObserveTimeToFirstToken(0.35);
  metrics.ObserveInterTokenLatency(0.024);

  httplib::Server server;
  moetier::StatusPageOptions options;
  options.status_source = status_source;
  if (budget) options.set_budget = FakeSetBudget;
  options.api_keys_configured = api_keys_configured;
  moetier::RegisterStatusPage(server, std::move(options));
  moetier::RegisterMetricsRoute(server, status_source, &metrics);

  const int port = server.bind_to_any_port("127.0.0.1");
  if (port <= 0) {
    std::fprintf(stderr, "cannot bind a port on 127.0.0.1\n");
    return 1;
  }
  std::printf("%d\n", port);
  std::fflush(stdout);
  return server.listen_after_bind() ? 0 : 1;
}

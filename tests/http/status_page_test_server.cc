// Serves the status page, /api/* and /metrics on 127.0.0.1 at a free port,
// with a fake status whose numbers move on every call; prints the port on
// the first line of stdout and runs until killed. For the browser test.
//   status_page_test_server [--api-keys-configured] [--no-budget] [--require-key=KEY]
// --require-key answers /api/* without "Authorization: Bearer KEY" with 401,
// as the daemon's HTTP server does when API keys are configured.
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

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
  std::string required_key;
  constexpr std::string_view kRequireKey = "--require-key=";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--api-keys-configured") == 0) {
      api_keys_configured = true;
    } else if (std::strcmp(argv[i], "--no-budget") == 0) {
      budget = false;
    } else if (std::string_view(argv[i]).starts_with(kRequireKey)) {
      required_key = std::string(argv[i] + kRequireKey.size());
    } else {
      std::fprintf(stderr, "usage: %s [--api-keys-configured] [--no-budget] [--require-key=KEY]\n",
                   argv[0]);
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
  if (!required_key.empty()) {
    server.set_pre_routing_handler(
        [required_key](const httplib::Request& request, httplib::Response& response) {
          if (!request.path.starts_with("/api/") ||
              request.get_header_value("Authorization") == "Bearer " + required_key) {
            return httplib::Server::HandlerResponse::Unhandled;
          }
          response.status = 401;
          response.set_content(R"({"error":{"message":"a valid API key is required",)"
                               R"("type":"invalid_request_error","code":"invalid_api_key"}})",
                               "application/json");
          return httplib::Server::HandlerResponse::Handled;
        });
  }
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

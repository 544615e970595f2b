#include "http/http_api.h"

#include <httplib.h>

#include "http/anthropic_routes.h"
#include "http/metrics_page.h"
#include "http/status_page.h"
#include "http/openai_routes.h"

namespace moetier {

absl::StatusOr<std::unique_ptr<HttpServer>> StartHttpApi(HttpServerOptions options,
                                                         const HttpModel& model,
                                                         HttpPagesSource pages) {
  const bool api_keys_configured = !options.api_keys.empty();
  options.metrics = model.metrics;
  return HttpServer::Start(
      std::move(options), [&model, pages = std::move(pages), api_keys_configured](
                              httplib::Server& server, std::function<bool()> server_stopping) {
        RegisterOpenAiRoutes(server, model, server_stopping);
        RegisterAnthropicRoutes(server, model, server_stopping);
        RegisterMetricsRoute(server, pages.status, model.metrics);
        StatusPageOptions page;
        page.status_source = pages.status;
        // Budgets change from the page only where a key guards who may.
        if (api_keys_configured) page.set_budget = pages.set_budget;
        page.api_keys_configured = api_keys_configured;
        RegisterStatusPage(server, std::move(page));
      });
}

}  // namespace moetier

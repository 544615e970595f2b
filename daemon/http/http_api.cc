#include "http/http_api.h"

#include <httplib.h>

#include "http/anthropic_routes.h"
#include "http/openai_routes.h"

namespace moetier {

absl::StatusOr<std::unique_ptr<HttpServer>> StartHttpApi(HttpServerOptions options,
                                                         const HttpModel& model,
                                                         HttpPagesSource pages) {
  return HttpServer::Start(
      std::move(options),
      [&model, pages = std::move(pages)](httplib::Server& server,
                                         std::function<bool()> server_stopping) {
        RegisterOpenAiRoutes(server, model, server_stopping);
        RegisterAnthropicRoutes(server, model, server_stopping);
        (void)pages;
      });
}

}  // namespace moetier

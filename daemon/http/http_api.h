// Everything moetierd serves over HTTP, on one listener: the OpenAI routes,
// Anthropic's /v1/messages, /health, /metrics and the status page.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "http/http_model.h"
#include "http/http_server.h"
#include "moetier/v1/moetier.pb.h"

namespace moetier {

struct HttpPagesSource {
  std::function<v1::Status()> status;
  // Empty: budgets cannot be changed over HTTP.
  std::function<absl::StatusOr<v1::SetBudgetResponse>(const v1::SetBudgetRequest&)> set_budget;
};

// `model` must outlive the server.
absl::StatusOr<std::unique_ptr<HttpServer>> StartHttpApi(HttpServerOptions options,
                                                         const HttpModel& model,
                                                         HttpPagesSource pages);

}  // namespace moetier

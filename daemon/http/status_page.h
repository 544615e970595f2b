// The live status page: GET / (one self-contained HTML page, built into the
// binary), GET /api/status (the Status message as JSON, which the page
// polls about once a second) and POST /api/budget (resizes a worker's
// expert cache). The server authenticates /api/* before these routes run.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "moetier/v1/moetier.pb.h"

namespace httplib {
class Server;
}

namespace moetier {

struct StatusPageOptions {
  std::function<v1::Status()> status_source;
  // Empty when budgets cannot be changed from the page; else called with the worker device
  // and MiB, returns the new size or an error message.
  std::function<absl::StatusOr<v1::SetBudgetResponse>(const v1::SetBudgetRequest&)> set_budget;
  // The page then asks for an API key and sends it as a Bearer token.
  bool api_keys_configured = false;
};

void RegisterStatusPage(httplib::Server& server, StatusPageOptions options);

// The page as served: the embedded HTML with its settings (key field,
// budget form) filled in.
std::string RenderStatusPageHtml(bool api_keys_configured, bool budget_editable);

}  // namespace moetier

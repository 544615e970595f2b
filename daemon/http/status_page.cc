#include "http/status_page.h"

#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "http/status_page_html.h"

namespace moetier {
namespace {

constexpr std::string_view kPageSettingsPlaceholder = "__MOETIER_PAGE_SETTINGS__";
constexpr const char* kJsonType = "application/json";

// The OpenAI-style error body: {"error":{"message":...,"type":...,"code":...}}.
void SendError(httplib::Response& response, int http_status, std::string_view type,
               std::string_view code, std::string_view message) {
  nlohmann::json body;
  body["error"] = {{"message", message}, {"type", type}, {"code", code}};
  response.status = http_status;
  response.set_content(body.dump(), kJsonType);
}

void SendStatusError(httplib::Response& response, const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      SendError(response, 400, "invalid_request_error", "invalid_argument", message);
      return;
    case absl::StatusCode::kNotFound:
      SendError(response, 404, "invalid_request_error", "not_found", message);
      return;
    case absl::StatusCode::kFailedPrecondition:
      SendError(response, 409, "invalid_request_error", "failed_precondition", message);
      return;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kResourceExhausted:
      SendError(response, 503, "server_error", "unavailable", message);
      return;
    default:
      SendError(response, 500, "server_error", "internal", message);
      return;
  }
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return absl::InternalError(std::string(status.message()));
  return json;
}

// {"device": "cuda:0", "expert_cache_mib": N}; the error names the field.
absl::StatusOr<v1::SetBudgetRequest> ParseBudgetRequest(const std::string& body) {
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(
        "the body must be a JSON object: {\"device\": \"cuda:0\", \"expert_cache_mib\": 4096}");
  }
  const auto device = json.find("device");
  if (device == json.end() || !device->is_string() || device->get<std::string>().empty()) {
    return absl::InvalidArgumentError("\"device\" must be a worker's device, e.g. \"cuda:0\"");
  }
  const auto mib = json.find("expert_cache_mib");
  if (mib == json.end() || !mib->is_number_unsigned()) {
    return absl::InvalidArgumentError(
        "\"expert_cache_mib\" must be a whole, non-negative number of MiB");
  }
  v1::SetBudgetRequest request;
  request.set_device(device->get<std::string>());
  request.set_expert_cache_mib(mib->get<uint64_t>());
  return request;
}

}  // namespace

std::string RenderStatusPageHtml(bool api_keys_configured, bool budget_editable) {
  const nlohmann::json settings = {{"apiKeysConfigured", api_keys_configured},
                                   {"budgetEditable", budget_editable}};
  std::string html(kStatusPageHtml);
  const size_t at = html.find(kPageSettingsPlaceholder);
  if (at != std::string::npos) html.replace(at, kPageSettingsPlaceholder.size(), settings.dump());
  return html;
}

void RegisterStatusPage(httplib::Server& server, StatusPageOptions options) {
  auto shared = std::make_shared<const StatusPageOptions>(std::move(options));
  auto html = std::make_shared<const std::string>(
      RenderStatusPageHtml(shared->api_keys_configured, static_cast<bool>(shared->set_budget)));

  server.Get("/", [html](const httplib::Request&, httplib::Response& response) {
    // The page changes with the daemon binary only; the data comes from /api/status.
    response.set_header("Cache-Control", "no-cache");
    response.set_content(*html, "text/html; charset=utf-8");
  });

  server.Get("/api/status", [shared](const httplib::Request&, httplib::Response& response) {
    if (!shared->status_source) {
      SendError(response, 503, "server_error", "unavailable", "no status source is configured");
      return;
    }
    const absl::StatusOr<std::string> json = ToJson(shared->status_source());
    if (!json.ok()) {
      SendStatusError(response, json.status());
      return;
    }
    response.set_header("Cache-Control", "no-store");
    response.set_content(*json, kJsonType);
  });

  server.Post(
      "/api/budget", [shared](const httplib::Request& request, httplib::Response& response) {
        if (!shared->set_budget) {
          SendError(response, 403, "permission_error", "budget_change_disabled",
                    "this daemon does not allow changing expert cache budgets over HTTP");
          return;
        }
        const absl::StatusOr<v1::SetBudgetRequest> parsed = ParseBudgetRequest(request.body);
        if (!parsed.ok()) {
          SendStatusError(response, parsed.status());
          return;
        }
        const absl::StatusOr<v1::SetBudgetResponse> resized = shared->set_budget(*parsed);
        if (!resized.ok()) {
          SendStatusError(response, resized.status());
          return;
        }
        const absl::StatusOr<std::string> json = ToJson(*resized);
        if (!json.ok()) {
          SendStatusError(response, json.status());
          return;
        }
        response.set_content(*json, kJsonType);
      });
}

}  // namespace moetier

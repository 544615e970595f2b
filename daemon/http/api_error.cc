#include "http/api_error.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "scheduler/request_scheduler.h"


namespace moetier {
namespace {

// OpenAI's error types, by HTTP status (what its SDKs and docs use).
std::string_view OpenAiType(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 499: return "cancelled";
    case 503: return "service_unavailable";
    default: return status < 500 ? "invalid_request_error" : "server_error";
  }
}

// Anthropic's error types (docs: "Errors"); 503 is its "overloaded_error"
// family as well: a client retries either.
std::string_view AnthropicType(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
  }
}

std::string_view OpenAiCode(int status) {
  switch (status) {
    case 401: return "invalid_api_key";
    case 413: return "request_too_large";
    case 429: return "queue_full";
    case 503: return "no_worker_ready";
    default: return {};
  }
}

}  // namespace

HttpError BadRequest(std::string message, std::string param) {
  HttpError error;
  error.status = 400;
  error.message = std::move(message);
  error.param = std::move(param);
  return error;
}

HttpError HttpErrorFromStatus(const absl::Status& status) {
  HttpError error;
  error.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      error.status = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      error.status = 401;
      break;
    case absl::StatusCode::kPermissionDenied:
      error.status = 403;
      break;
    case absl::StatusCode::kNotFound:
      error.status = 404;
      break;
    case absl::StatusCode::kResourceExhausted:
      if (status.GetPayload(kContextTooLongPayload).has_value()) {
        // No worker's context holds it: retrying cannot help.
        error.status = 400;
        error.code = "context_length_exceeded";
        break;
      }
      // A full queue.
      error.status = 429;
      error.retry_after_s = 1;
      break;
    case absl::StatusCode::kUnavailable:
      error.status = 503;
      error.retry_after_s = 5;
      break;
    case absl::StatusCode::kCancelled:
      error.status = 499;
      break;
    default:
      error.status = 500;
  }
  return error;
}

std::string ErrorBody(const HttpError& error, ErrorShape shape) {
  nlohmann::ordered_json body;
  if (shape == ErrorShape::kAnthropic) {
    body = {{"type", "error"},
            {"error", {{"type", AnthropicType(error.status)}, {"message", error.message}}}};
  } else {
    const std::string_view code = error.code.empty() ? OpenAiCode(error.status) : error.code;
    body = {{"error",
             {{"message", error.message},
              {"type", OpenAiType(error.status)},
              {"param", error.param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.param)},
              {"code", code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(code)}}}};
  }
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void WriteError(const HttpError& error, ErrorShape shape, httplib::Response* response) {
  response->status = error.status;
  if (error.retry_after_s > 0) {
    response->set_header("Retry-After", std::to_string(error.retry_after_s));
  }
  response->set_content(ErrorBody(error, shape), "application/json");
}

ErrorShape ErrorShapeForPath(std::string_view path) {
  return path.substr(0, 12) == "/v1/messages" ? ErrorShape::kAnthropic : ErrorShape::kOpenAi;
}

}  // namespace moetier

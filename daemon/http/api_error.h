// Errors as the HTTP clients we serve expect them: OpenAI's
// {"error": {"message", "type", "param", "code"}} on the /v1 OpenAI routes
// and Anthropic's {"type": "error", "error": {"type", "message"}} on
// /v1/messages, with the HTTP status each SDK maps to its own exception.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace httplib {
struct Response;
}

namespace moetier {

enum class ErrorShape { kOpenAi, kAnthropic };

struct HttpError {
  int status = 500;
  std::string message;
  std::string param;  // the request field at fault; empty when none
  // Seconds a client should wait before retrying; 0: no Retry-After.
  int retry_after_s = 0;
  // OpenAI's error.code; empty: the one the status implies.
  std::string code;
};

// 400 for bad input (with the field in `param` when known).
HttpError BadRequest(std::string message, std::string param = {});

// INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION: 400; UNAUTHENTICATED:
// 401; PERMISSION_DENIED: 403; NOT_FOUND: 404; RESOURCE_EXHAUSTED: 400
// with code context_length_exceeded for a request no context holds
// (kContextTooLongPayload), else 429 with Retry-After (the scheduler's full
// queue); UNAVAILABLE: 503 with
// Retry-After; CANCELLED: 499; others: 500.
HttpError HttpErrorFromStatus(const absl::Status& status);

// The JSON body for `error` in a shape.
std::string ErrorBody(const HttpError& error, ErrorShape shape);

// Fills a response: status, JSON body, Retry-After.
void WriteError(const HttpError& error, ErrorShape shape, httplib::Response* response);

// The shape a path's clients expect.
ErrorShape ErrorShapeForPath(std::string_view path);

}  // namespace moetier

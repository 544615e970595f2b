// The part every generation route shares: prepare (answering a refusal as
// an HTTP error before anything is streamed), then either stream the
// events as server-sent events or collect them into one body, and count
// the request in the metrics. The routes add only their request parsing
// and their response shape.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "http/api_error.h"
#include "http/generation_stream.h"
#include "http/http_model.h"

namespace httplib {
struct Response;
}

namespace moetier {

struct GenerationResponder {
  // Streams: events that write each chunk through `write` (false: gone).
  std::function<std::unique_ptr<ResponseEvents>(std::function<bool(std::string_view)> write)>
      streamer;
  // Whole answers: events that collect, then the body they make (or the
  // error that ended the generation).
  std::function<std::unique_ptr<ResponseEvents>()> collector;
  std::function<void(ResponseEvents& collected, httplib::Response& response)> respond;
};

void ServeGeneration(const HttpModel& model, const std::function<bool()>& server_stopping,
                     const GenerationRequest& request, bool chat, ErrorShape shape,
                     const GenerationResponder& responder, httplib::Response& response);

// Answers an error and counts it.
void RespondError(const HttpModel& model, const HttpError& error, ErrorShape shape,
                  httplib::Response& response);

RequestOutcome OutcomeOfStatus(int http_status);

}  // namespace moetier

#include "http/anthropic_routes.h"

#include <httplib.h>

#include "http/anthropic_response.h"
#include "http/generation_route.h"
#include "http/openai_request.h"

namespace moetier {

void RegisterAnthropicRoutes(httplib::Server& server, const HttpModel& model,
                             std::function<bool()> server_stopping) {
  server.Post("/v1/messages", [&model, server_stopping](const httplib::Request& http_request,
                                                        httplib::Response& response) {
    nlohmann::ordered_json body;
    GenerationRequest request;
    std::optional<HttpError> error = ParseJsonBody(http_request.body, &body);
    if (!error.has_value()) error = ReadAnthropicMessagesRequest(body, &request);
    if (error.has_value()) {
      RespondError(model, *error, ErrorShape::kAnthropic, response);
      return;
    }
    const AnthropicResponseInfo info{NewMessageId(), model.model_id};
    GenerationResponder responder;
    responder.streamer = [info](std::function<bool(std::string_view)> write) {
      return std::make_unique<AnthropicStreamer>(info, std::move(write));
    };
    responder.collector = [info] { return std::make_unique<AnthropicCollector>(info); };
    responder.respond = [](ResponseEvents& events, httplib::Response& res) {
      auto& collected = static_cast<AnthropicCollector&>(events);
      if (collected.failed()) {
        WriteError(collected.error(), ErrorShape::kAnthropic, &res);
        return;
      }
      res.set_content(collected.json().dump(-1, ' ', false,
                                            nlohmann::ordered_json::error_handler_t::replace),
                      "application/json");
    };
    ServeGeneration(model, server_stopping, request, /*chat=*/true, ErrorShape::kAnthropic,
                    responder, response);
  });
}

}  // namespace moetier

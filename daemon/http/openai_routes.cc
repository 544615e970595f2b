#include "http/openai_routes.h"

#include <httplib.h>

#include <ctime>

#include "http/generation_route.h"
#include "http/openai_response.h"

namespace moetier {
namespace {

using Json = nlohmann::ordered_json;

OpenAiResponseInfo InfoFor(const HttpModel& model, const GenerationRequest& request,
                           OpenAiRoute route) {
  OpenAiResponseInfo info;
  info.route = route;
  info.id = NewResponseId(route);
  info.model = model.model_id;
  info.created_unix_s = static_cast<int64_t>(std::time(nullptr));
  info.logprobs = request.top_logprobs.has_value();
  info.include_usage = request.include_usage;
  return info;
}

void ServeOpenAi(const HttpModel& model, const std::function<bool()>& stopping,
                 const httplib::Request& http_request, httplib::Response& response,
                 OpenAiRoute route) {
  Json body;
  GenerationRequest request;
  std::optional<HttpError> error = ParseJsonBody(http_request.body, &body);
  if (!error.has_value()) {
    error = route == OpenAiRoute::kChat ? ReadChatCompletionRequest(body, &request)
                                        : ReadCompletionRequest(body, &request);
  }
  if (error.has_value()) {
    RespondError(model, *error, ErrorShape::kOpenAi, response);
    return;
  }
  const OpenAiResponseInfo info = InfoFor(model, request, route);
  GenerationResponder responder;
  responder.streamer = [info](std::function<bool(std::string_view)> write) {
    return std::make_unique<OpenAiStreamer>(info, std::move(write));
  };
  responder.collector = [info] { return std::make_unique<OpenAiCollector>(info); };
  responder.respond = [](ResponseEvents& events, httplib::Response& res) {
    auto& collected = static_cast<OpenAiCollector&>(events);
    if (collected.failed()) {
      WriteError(collected.error(), ErrorShape::kOpenAi, &res);
      return;
    }
    res.set_content(collected.json().dump(-1, ' ', false, Json::error_handler_t::replace),
                    "application/json");
  };
  ServeGeneration(model, stopping, request, route == OpenAiRoute::kChat, ErrorShape::kOpenAi,
                  responder, response);
}

}  // namespace

void RegisterOpenAiRoutes(httplib::Server& server, const HttpModel& model,
                          std::function<bool()> server_stopping) {
  server.Get("/health", [&model](const httplib::Request&, httplib::Response& res) {
    const std::string reason = model.not_serving_reason ? model.not_serving_reason() : "";
    if (reason.empty()) {
      res.set_content(Json{{"status", "ok"}}.dump(), "application/json");
    } else {
      res.status = 503;
      res.set_content(Json{{"status", "unavailable"}, {"reason", reason}}.dump(),
                      "application/json");
    }
  });
  server.Get("/v1/models", [&model](const httplib::Request&, httplib::Response& res) {
    const Json entry = {{"id", model.model_id},
                        {"object", "model"},
                        {"created", model.created_unix_s},
                        {"owned_by", "moetier"}};
    res.set_content(Json{{"object", "list"}, {"data", Json::array({entry})}}.dump(),
                    "application/json");
  });
  server.Get(R"(/v1/models/(.+))", [&model](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != model.model_id) {
      HttpError error;
      error.status = 404;
      error.message = "no model '" + std::string(req.matches[1]) + "'; this server has '" +
                      model.model_id + "'";
      WriteError(error, ErrorShape::kOpenAi, &res);
      return;
    }
    res.set_content(Json{{"id", model.model_id},
                         {"object", "model"},
                         {"created", model.created_unix_s},
                         {"owned_by", "moetier"}}
                        .dump(),
                    "application/json");
  });
  server.Post("/v1/chat/completions",
              [&model, server_stopping](const httplib::Request& req, httplib::Response& res) {
                ServeOpenAi(model, server_stopping, req, res, OpenAiRoute::kChat);
              });
  server.Post("/v1/completions",
              [&model, server_stopping](const httplib::Request& req, httplib::Response& res) {
                ServeOpenAi(model, server_stopping, req, res, OpenAiRoute::kCompletion);
              });
}

}  // namespace moetier

// POST /v1/messages: Anthropic's Messages API on the same generation path
// as the OpenAI routes (scheduler, limits, cancellation, tool calls).
#pragma once

#include <functional>

#include "http/http_model.h"

namespace httplib {
class Server;
}

namespace moetier {

void RegisterAnthropicRoutes(httplib::Server& server, const HttpModel& model,
                             std::function<bool()> server_stopping);

}  // namespace moetier

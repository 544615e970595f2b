// The OpenAI-compatible routes: POST /v1/chat/completions, POST
// /v1/completions, GET /v1/models, and GET /health (200 once a worker
// serves, 503 with the reason before).
#pragma once

#include <functional>

#include "http/http_model.h"

namespace httplib {
class Server;
}

namespace moetier {

void RegisterOpenAiRoutes(httplib::Server& server, const HttpModel& model,
                          std::function<bool()> server_stopping);

}  // namespace moetier

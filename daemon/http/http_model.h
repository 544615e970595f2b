// What the HTTP routes serve from: the model's tokenizer and chat template,
// the scheduler, the front door's limits and the request metrics. One per
// daemon; every pointer outlives the HTTP server.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "frontdoor/generation_call.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"
#include "scheduler/request_scheduler.h"
#include "stats/request_metrics.h"

namespace moetier {

struct HttpModel {
  // The name /v1/models lists and responses carry (the model file's stem).
  std::string model_id;
  int64_t created_unix_s = 0;
  // Null when the model cannot handle text; text_unavailable says why.
  const Tokenizer* tokenizer = nullptr;
  absl::Status text_unavailable;
  // Null when chat requests cannot be rendered; chat_unavailable says why.
  const ChatTemplate* chat_template = nullptr;
  absl::Status chat_unavailable;
  RequestScheduler* scheduler = nullptr;
  FrontDoorLimits limits;
  RequestMetrics* metrics = nullptr;  // may be null
  // Empty while requests can be computed; else why not ("the expert store
  // is loading", "no worker is ready"), answered as 503.
  std::function<std::string()> not_serving_reason;
};

}  // namespace moetier

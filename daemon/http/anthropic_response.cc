#include "http/anthropic_response.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moetier {
namespace {

using Json = nlohmann::ordered_json;

std::string Dump(const Json& json) { return json.dump(-1, ' ', false, Json::error_handler_t::replace); }

const char* StopReasonName(const GenerationSummary& s) {
  if (!s.matched_stop.empty()) return "stop_sequence";
  switch (s.finish) {
    case FinishReason::kLength: return "max_tokens";
    case FinishReason::kToolCalls: return "tool_use";
    case FinishReason::kStop: break;
  }
  return "end_turn";
}

Json StopSequence(const GenerationSummary& s) {
  return s.matched_stop.empty() ? Json() : Json(s.matched_stop);
}

// Arguments arrive as JSON text; a block's input is the object itself.
Json InputOf(const std::string& arguments) {
  Json input = Json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return input.is_object() ? input : Json::object();
}

}  // namespace

std::string NewMessageId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("msg_%016x%08x", rng(), static_cast<uint32_t>(rng()));
}

bool AnthropicCollector::OnPiece(const OutputPiece& piece, const std::vector<TokenLogprobEntry>&) {
  thinking_ += piece.reasoning;
  text_ += piece.content;
  calls_.Add(piece.tool_calls);
  return true;
}

void AnthropicCollector::OnEnd(const GenerationSummary& summary) {
  Json content = Json::array();
  if (!thinking_.empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", thinking_}, {"signature", ""}});
  }
  if (!text_.empty() || calls_.calls.empty()) content.push_back({{"type", "text"}, {"text", text_}});
  for (const CollectedToolCalls::Call& c : calls_.calls) {
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name},
                       {"input", InputOf(c.arguments)}});
  }
  body_ = {{"id", info_.id},
           {"type", "message"},
           {"role", "assistant"},
           {"model", info_.model},
           {"content", std::move(content)},
           {"stop_reason", StopReasonName(summary)},
           {"stop_sequence", StopSequence(summary)},
           {"usage",
            {{"input_tokens", summary.prompt_tokens},
             {"output_tokens", summary.completion_tokens},
             {"cache_read_input_tokens", summary.cached_prompt_tokens}}}};
}

bool AnthropicStreamer::Event(std::string_view type, const Json& data) {
  if (!ok_) return false;
  ok_ = write_(absl::StrCat("event: ", std::string(type), "\ndata: ", Dump(data), "\n\n"));
  return ok_;
}

void AnthropicStreamer::OnStart(int32_t prompt_tokens) {
  prompt_tokens_ = prompt_tokens;
  Event("message_start",
        {{"type", "message_start"},
         {"message",
          {{"id", info_.id},
           {"type", "message"},
           {"role", "assistant"},
           {"model", info_.model},
           {"content", Json::array()},
           {"stop_reason", nullptr},
           {"stop_sequence", nullptr},
           {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}}}});
}

bool AnthropicStreamer::CloseBlock() {
  if (open_ == Block::kNone) return true;
  open_ = Block::kNone;
  return Event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

bool AnthropicStreamer::Enter(Block kind, const ToolCallPiece* call) {
  if (open_ == kind && kind != Block::kToolUse) return true;
  if (kind == Block::kToolUse && open_ == Block::kToolUse && call->id.empty()) return true;
  if (!CloseBlock()) return false;
  ++index_;
  open_ = kind;
  Json block;
  switch (kind) {
    case Block::kThinking:
      block = {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
      break;
    case Block::kText:
      block = {{"type", "text"}, {"text", ""}};
      break;
    default:
      block = {{"type", "tool_use"}, {"id", call->id}, {"name", call->name},
               {"input", Json::object()}};
  }
  return Event("content_block_start",
               {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
}

bool AnthropicStreamer::OnPiece(const OutputPiece& piece, const std::vector<TokenLogprobEntry>&) {
  auto delta = [this](const Json& d) {
    return Event("content_block_delta",
                 {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  };
  if (!piece.reasoning.empty() &&
      !(Enter(Block::kThinking, nullptr) &&
        delta({{"type", "thinking_delta"}, {"thinking", piece.reasoning}}))) {
    return false;
  }
  if (!piece.content.empty() &&
      !(Enter(Block::kText, nullptr) && delta({{"type", "text_delta"}, {"text", piece.content}}))) {
    return false;
  }
  for (const ToolCallPiece& call : piece.tool_calls) {
    if (!Enter(Block::kToolUse, &call)) return false;
    if (!call.arguments.empty() &&
        !delta({{"type", "input_json_delta"}, {"partial_json", call.arguments}})) {
      return false;
    }
  }
  return ok_;
}

void AnthropicStreamer::OnEnd(const GenerationSummary& summary) {
  // A message has at least one block.
  if (index_ < 0) Enter(Block::kText, nullptr);
  CloseBlock();
  Event("message_delta",
        {{"type", "message_delta"},
         {"delta", {{"stop_reason", StopReasonName(summary)},
                    {"stop_sequence", StopSequence(summary)}}},
         {"usage", {{"output_tokens", summary.completion_tokens}}}});
  Event("message_stop", {{"type", "message_stop"}});
}

void AnthropicStreamer::OnError(const HttpError& error) {
  if (!ok_) return;
  ok_ = write_(absl::StrCat("event: error\ndata: ", ErrorBody(error, ErrorShape::kAnthropic),
                            "\n\n"));
}

}  // namespace moetier

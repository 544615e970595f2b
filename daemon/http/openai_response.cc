#include "http/openai_response.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moetier {
namespace {

using Json = nlohmann::ordered_json;

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json BytesJson(const std::string& bytes) {
  Json out = Json::array();
  for (unsigned char c : bytes) out.push_back(static_cast<int>(c));
  return out;
}

Json ChatLogprobEntry(const TokenLogprobEntry& e) {
  Json top = Json::array();
  for (const TokenText& t : e.top) {
    top.push_back({{"token", t.text}, {"logprob", t.logprob}, {"bytes", BytesJson(t.bytes)}});
  }
  return {{"token", e.token.text},
          {"logprob", e.token.logprob},
          {"bytes", BytesJson(e.token.bytes)},
          {"top_logprobs", std::move(top)}};
}

// The legacy completions shape: parallel arrays.
Json CompletionLogprobs(const std::vector<TokenLogprobEntry>& entries, size_t text_offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  for (const TokenLogprobEntry& e : entries) {
    tokens.push_back(e.token.text);
    token_logprobs.push_back(e.token.logprob);
    Json alternatives = Json::object();
    for (const TokenText& t : e.top) alternatives[t.text] = t.logprob;
    top.push_back(std::move(alternatives));
    offsets.push_back(text_offset);
    text_offset += e.token.text.size();
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

}  // namespace

std::string NewResponseId(OpenAiRoute route) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%s-%016x%08x", route == OpenAiRoute::kChat ? "chatcmpl" : "cmpl", rng(),
                         static_cast<uint32_t>(rng()));
}

std::string SseData(const Json& json) { return absl::StrCat("data: ", Dump(json), "\n\n"); }

std::string_view FinishReasonName(FinishReason finish) {
  switch (finish) {
    case FinishReason::kLength: return "length";
    case FinishReason::kToolCalls: return "tool_calls";
    case FinishReason::kStop: break;
  }
  return "stop";
}

Json UsageJson(const GenerationSummary& s) {
  return {{"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.completion_tokens},
          {"total_tokens", s.prompt_tokens + s.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", s.cached_prompt_tokens}}}};
}

bool OpenAiCollector::OnPiece(const OutputPiece& piece,
                              const std::vector<TokenLogprobEntry>& logprobs) {
  reasoning_ += piece.reasoning;
  content_ += piece.content;
  calls_.Add(piece.tool_calls);
  logprobs_.insert(logprobs_.end(), logprobs.begin(), logprobs.end());
  return true;
}

void OpenAiCollector::OnEnd(const GenerationSummary& summary) {
  Json choice;
  choice["index"] = 0;
  if (info_.route == OpenAiRoute::kChat) {
    Json message = {{"role", "assistant"}};
    message["content"] = content_.empty() && !calls_.calls.empty() ? Json() : Json(content_);
    if (!reasoning_.empty()) message["reasoning_content"] = reasoning_;
    if (!calls_.calls.empty()) {
      Json calls = Json::array();
      for (const CollectedToolCalls::Call& c : calls_.calls) {
        calls.push_back({{"id", c.id},
                         {"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    choice["message"] = std::move(message);
    if (info_.logprobs) {
      Json content = Json::array();
      for (const TokenLogprobEntry& e : logprobs_) content.push_back(ChatLogprobEntry(e));
      choice["logprobs"] = {{"content", std::move(content)}};
    } else {
      choice["logprobs"] = nullptr;
    }
  } else {
    choice["text"] = content_;
    choice["logprobs"] = info_.logprobs ? CompletionLogprobs(logprobs_, 0) : Json();
  }
  choice["finish_reason"] = FinishReasonName(summary.finish);
  body_ = {{"id", info_.id},
           {"object", info_.route == OpenAiRoute::kChat ? "chat.completion" : "text_completion"},
           {"created", info_.created_unix_s},
           {"model", info_.model},
           {"choices", Json::array({std::move(choice)})},
           {"usage", UsageJson(summary)}};
}

Json OpenAiStreamer::Chunk() const {
  Json chunk = {{"id", info_.id},
                {"object",
                 info_.route == OpenAiRoute::kChat ? "chat.completion.chunk" : "text_completion"},
                {"created", info_.created_unix_s},
                {"model", info_.model}};
  if (info_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

bool OpenAiStreamer::Send(const Json& chunk) { return write_(SseData(chunk)); }

bool OpenAiStreamer::OnPiece(const OutputPiece& piece,
                             const std::vector<TokenLogprobEntry>& logprobs) {
  Json choice = {{"index", 0}};
  if (info_.route == OpenAiRoute::kChat) {
    Json delta = Json::object();
    if (!role_sent_) {
      delta["role"] = "assistant";
      role_sent_ = true;
    }
    if (!piece.reasoning.empty()) delta["reasoning_content"] = piece.reasoning;
    if (!piece.content.empty() || piece.tool_calls.empty()) delta["content"] = piece.content;
    if (!piece.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCallPiece& p : piece.tool_calls) {
        Json call = {{"index", p.index}};
        Json function = Json::object();
        if (!p.id.empty()) {
          call["id"] = p.id;
          call["type"] = "function";
          function["name"] = p.name;
        }
        function["arguments"] = p.arguments;
        call["function"] = std::move(function);
        calls.push_back(std::move(call));
      }
      delta["tool_calls"] = std::move(calls);
    }
    choice["delta"] = std::move(delta);
    if (info_.logprobs) {
      Json content = Json::array();
      for (const TokenLogprobEntry& e : logprobs) content.push_back(ChatLogprobEntry(e));
      choice["logprobs"] = {{"content", std::move(content)}};
    } else {
      choice["logprobs"] = nullptr;
    }
  } else {
    choice["text"] = piece.content;
    choice["logprobs"] = info_.logprobs ? CompletionLogprobs(logprobs, 0) : Json();
  }
  choice["finish_reason"] = nullptr;
  Json chunk = Chunk();
  chunk["choices"] = Json::array({std::move(choice)});
  return Send(chunk);
}

void OpenAiStreamer::OnEnd(const GenerationSummary& summary) {
  Json choice = {{"index", 0}};
  if (info_.route == OpenAiRoute::kChat) {
    choice["delta"] = Json::object();
    if (!role_sent_) choice["delta"]["role"] = "assistant";
  } else {
    choice["text"] = "";
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = FinishReasonName(summary.finish);
  Json chunk = Chunk();
  chunk["choices"] = Json::array({std::move(choice)});
  if (!Send(chunk)) return;
  if (info_.include_usage) {
    Json usage = Chunk();
    usage["choices"] = Json::array();
    usage["usage"] = UsageJson(summary);
    if (!Send(usage)) return;
  }
  write_("data: [DONE]\n\n");
}

void OpenAiStreamer::OnError(const HttpError& error) {
  // The status line went out with the first byte: the error travels as an
  // event, as OpenAI's own stream reports one.
  if (write_(absl::StrCat("data: ", ErrorBody(error, ErrorShape::kOpenAi), "\n\n"))) {
    write_("data: [DONE]\n\n");
  }
}

}  // namespace moetier

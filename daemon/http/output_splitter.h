// Splits a chat model's generated text into what the APIs report apart:
// the reasoning of its <think> block, the answer, and tool calls, for the
// template families whose models write them (Qwen3: JSON in <tool_call>;
// Qwen3.5/3.6: XML <function=...>), streaming: markup is never handed on
// as content, and text that may still be markup waits for the next piece.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/tokenizer/chat_template.h"
#include "http/generation_stream_types.h"

namespace moetier {

class OutputSplitter {
 public:
  // `chat_style`: the template the prompt was rendered with; nullopt for a
  // plain completion (all text is content). `thinking`: the prompt let the
  // model think. `tools`: the request's tools (their schemas type the
  // arguments of XML calls); none: tool markup is content.
  OutputSplitter(std::optional<ChatTemplateStyle> chat_style, bool thinking,
                 std::vector<nlohmann::ordered_json> tools);
  ~OutputSplitter();

  OutputPiece Push(std::string_view text);
  // End of generation: what was held back.
  OutputPiece Finish();
  int tool_call_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moetier

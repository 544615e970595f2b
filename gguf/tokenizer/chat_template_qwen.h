// The Qwen3 and Qwen3.5 chat templates rendered natively, tools included:
// the parts of chat_template.cc's Render for ChatTemplateStyle::kQwen3 and
// kQwen35. Messages have been checked for their roles already.
#pragma once

#include <span>
#include <string>

#include "absl/status/status.h"
#include "gguf/tokenizer/chat_template.h"

namespace moetier {

// Qwen3's template (Qwen3-0.6B ... Qwen3-235B-A22B): tools as JSON lines in
// the system turn, tool calls as <tool_call> JSON, tool results grouped in
// a user turn, thinking of assistant turns kept after the last user query.
absl::Status RenderQwen3(std::span<const ChatMessage> messages, const ChatRenderOptions& options,
                         std::string* out);

// Qwen3.5/3.6's template: the same structure with XML function calls,
// content trimmed, and the exceptions its template raises.
absl::Status RenderQwen35(std::span<const ChatMessage> messages, const ChatRenderOptions& options,
                          std::string* out);

}  // namespace moetier

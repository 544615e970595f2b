// Splits a chat model's generated text, as it streams in, into the three
// parts an OpenAI-compatible API returns: reasoning_content (the model's
// <think> block), content, and tool_calls. Raw tool-call markup never
// reaches content unless the call is malformed.
//
// What is stripped, as the Qwen templates render a turn ("<think>\n" +
// reasoning.strip() + "\n</think>\n\n" + content) and llama.cpp's reasoning
// parser takes it apart: the whitespace at both ends of the reasoning, the
// whitespace between </think> and the content, the whitespace before each
// tool call, and text after a call that is only whitespace (other text after
// a call is content, its leading whitespace included).
//
// <think> opens reasoning only at the start of the output (after optional
// whitespace); anywhere later it is ordinary content, as is a </think> once
// the reasoning has ended. <tool_call> is recognised in content, not inside
// the reasoning.
//
// A call is emitted whole, when its </tool_call> arrives: only then is it
// known to be well formed, and a malformed one goes to content as the raw
// text it was (with a warning), so nothing already streamed as a tool call
// could have to be taken back. Calls are short next to the text around them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_schemas.h"

namespace moetier {

enum class ChatOutputFormat {
  // Everything is content.
  kPlain,
  // Qwen3 (Qwen3-30B-A3B, Qwen3-235B-A22B): JSON tool calls.
  kQwen3,
  // Qwen3.5/3.6 (Qwen3.6-35B-A3B): XML tool calls; the generation prompt
  // usually opens the think block itself.
  kQwen35,
};
// Both Qwen formats accept either tool-call body, since Qwen3-Coder (a
// qwen3moe model) writes the XML form.

struct ToolCallDelta {
  int index = 0;  // 0, 1, ... in the order the calls were written
  std::string id;  // "call_..." unique within the response
  std::string name;
  // A fragment of the JSON arguments object; the fragments of one index
  // concatenated are the whole object. This parser sends the whole object
  // in the call's first (and only) delta.
  std::string arguments;
};

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;

  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// Bytes held for one unfinished tool call before it is given up as
// malformed and released as content: a bound on what the parser holds.
inline constexpr size_t kDefaultMaxToolCallBytes = size_t{256} << 10;

class ChatOutputParser {
 public:
  // starts_in_reasoning: the prompt already opened the think block (the
  // Qwen3.5 generation prompt ends with "<think>\n"), so the output begins
  // inside the reasoning. tools: the request's OpenAI tool objects, whose
  // parameter schemas type XML arguments.
  ChatOutputParser(ChatOutputFormat format, bool starts_in_reasoning,
                   const std::vector<nlohmann::ordered_json>& tools,
                   size_t max_tool_call_bytes = kDefaultMaxToolCallBytes);

  // The next piece of generated text (split anywhere); returns what can be
  // emitted now. Holds back only what may still turn out to be markup: the
  // start of a marker, the whitespace before it, or an unfinished tool call.
  // Text is cut only before an ASCII byte or at the end of a piece, so
  // pieces that end on character boundaries give deltas that do too.
  ChatDelta Push(std::string_view text);
  // End of generation: what was held back, decided. Later calls to Push or
  // Finish return nothing (Push records a warning).
  ChatDelta Finish();

  // The tool calls emitted so far (finish_reason "tool_calls" when > 0).
  int tool_call_count() const { return tool_call_count_; }
  // Malformed calls released as content, and oddities in accepted ones.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  enum class State { kOpening, kReasoning, kContent, kToolCall, kFinished };

  // Each returns true when it changed state and the next step may proceed,
  // false when it needs more text.
  bool StepOpening();
  bool StepReasoning(ChatDelta& out);
  bool StepContent(ChatDelta& out);
  bool StepToolCall(ChatDelta& out);
  void Advance(ChatDelta& out);
  // Consumes the call body held in pending_[0, body_size) and the end_size
  // bytes of its closing marker.
  void CompleteToolCall(size_t body_size, size_t end_size, ChatDelta& out);
  void RejectToolCall(size_t raw_size, std::string_view why, ChatDelta& out);
  std::string NextCallId();

  const ChatOutputFormat format_;
  const ToolSchemas schemas_;
  const size_t max_tool_call_bytes_;
  State state_;
  // Received and not yet emitted: in kToolCall the call body after <tool_call>.
  std::string pending_;
  // Whitespace at the start of pending_ is not part of the output.
  bool drop_leading_whitespace_ = false;
  // No content since the last tool call: whitespace alone is dropped.
  bool after_tool_call_ = false;
  // The whitespace dropped before the current <tool_call>, given back with
  // the call's raw text if the call turns out malformed.
  std::string call_leading_whitespace_;
  // Where the search for the end of the current tool call resumes.
  size_t call_scan_from_ = 0;
  int tool_call_count_ = 0;
  std::string call_id_prefix_;
  std::vector<std::string> warnings_;
};

// A whole response, as a non-streaming reply carries it.
struct ParsedChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};
struct ParsedChatOutput {
  std::string reasoning;
  std::string content;
  std::vector<ParsedChatToolCall> tool_calls;
  std::vector<std::string> warnings;
};

// Folds one delta into a response: text appended, calls by index.
void AppendDelta(const ChatDelta& delta, ParsedChatOutput& response);

// The whole text at once: Push then Finish on a fresh parser.
ParsedChatOutput ParseChatOutput(ChatOutputFormat format, bool starts_in_reasoning,
                                 const std::vector<nlohmann::ordered_json>& tools,
                                 std::string_view text);

}  // namespace moetier

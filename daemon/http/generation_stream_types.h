// The pieces a generation hands to an API shape's writer: text split into
// reasoning, content and tool-call fragments, token logprobs, and the
// summary at the end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moetier/v1/moetier.pb.h"

namespace moetier {

struct TokenText {
  std::string text;  // the token's piece, invalid UTF-8 replaced
  std::string bytes;  // the piece's raw bytes
  float logprob = 0;
};

struct TokenLogprobEntry {
  TokenText token;
  std::vector<TokenText> top;
};

struct ToolCallPiece {
  int index = 0;
  std::string id;    // first piece of a call only
  std::string name;  // first piece of a call only
  std::string arguments;  // a fragment of the arguments' JSON text
};

struct OutputPiece {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallPiece> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// The calls of a whole answer, put together from their pieces.
struct CollectedToolCalls {
  struct Call {
    std::string id, name, arguments;
  };
  std::vector<Call> calls;

  void Add(const std::vector<ToolCallPiece>& pieces) {
    for (const ToolCallPiece& p : pieces) {
      if (p.index >= static_cast<int>(calls.size())) calls.resize(p.index + 1);
      Call& call = calls[p.index];
      if (!p.id.empty()) call.id = p.id;
      if (!p.name.empty()) call.name = p.name;
      call.arguments += p.arguments;
    }
  }
};

enum class FinishReason { kStop, kLength, kToolCalls };

struct GenerationSummary {
  FinishReason finish = FinishReason::kStop;
  std::string matched_stop;  // the stop string that ended it, if one did
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  int32_t completion_tokens = 0;
  v1::GenerationStats stats;
};

}  // namespace moetier

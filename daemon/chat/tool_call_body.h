// One tool call as the Qwen models write it between <tool_call> and
// </tool_call>, in either of their two forms:
//  - JSON (Qwen3): {"name": "get_weather", "arguments": {"city": "Paris"}}
//  - XML (Qwen3.5/3.6, Qwen3-Coder):
//      <function=get_weather>
//      <parameter=city>
//      Paris
//      </parameter>
//      </function>
//    Each value loses exactly one leading and one trailing newline: the
//    template writes "<parameter=K>\n" + value + "\n</parameter>".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "chat/tool_schemas.h"

namespace moetier {

struct ParsedToolCall {
  std::string name;
  // A JSON object, serialised compactly: JSON calls re-serialise the model's
  // "arguments" (in its key order); XML calls build it from the parameters
  // in the order written, each typed by the tool's schema.
  std::string arguments;
};

// INVALID_ARGUMENT saying what is wrong when the body is neither form, or a
// malformed one. Oddities that still leave a usable call (a function the
// request does not offer, a parameter its schema does not list, a repeated
// parameter) are appended to notes.
absl::StatusOr<ParsedToolCall> ParseToolCallBody(std::string_view body,
                                                 const ToolSchemas& schemas,
                                                 std::vector<std::string>& notes);

}  // namespace moetier

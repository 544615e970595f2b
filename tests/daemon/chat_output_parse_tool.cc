// chat_output_parse: the chat output parser behind a pipe, for the check
// against the real chat templates (tests/interop/check_chat_output_parse.py).
// stdin: {"format": "plain"|"qwen3"|"qwen3.5", "starts_in_reasoning": bool,
//         "tools": [...], "text": "...", "piece_bytes": N}
// stdout: {"reasoning", "content", "tool_calls": [{"id", "name",
//          "arguments" (parsed)}], "warnings"}
// The text is pushed in pieces of piece_bytes (the whole text when 0).
#include <algorithm>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "chat/chat_output_parser.h"

namespace {

using Json = nlohmann::ordered_json;

int Fail(const std::string& message) {
  std::cerr << "chat_output_parse: " << message << "\n";
  return 2;
}

}  // namespace

int main() {
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  const Json request = Json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.value("text", Json()).is_string()) {
    return Fail("stdin must be a JSON object with a \"text\" string");
  }
  const std::string format_name = request.value("format", std::string("qwen3"));
  moetier::ChatOutputFormat format;
  if (format_name == "plain") {
    format = moetier::ChatOutputFormat::kPlain;
  } else if (format_name == "qwen3") {
    format = moetier::ChatOutputFormat::kQwen3;
  } else if (format_name == "qwen3.5") {
    format = moetier::ChatOutputFormat::kQwen35;
  } else {
    return Fail("unknown format '" + format_name + "' (plain, qwen3, qwen3.5)");
  }
  std::vector<Json> tools;
  if (const Json listed = request.value("tools", Json::array()); listed.is_array()) {
    tools.assign(listed.begin(), listed.end());
  }
  const std::string text = request["text"].get<std::string>();
  const size_t piece_bytes = request.value("piece_bytes", size_t{0});

  moetier::ChatOutputParser parser(format, request.value("starts_in_reasoning", false), tools);
  moetier::ParsedChatOutput response;
  const size_t step = piece_bytes == 0 ? std::max<size_t>(text.size(), 1) : piece_bytes;
  for (size_t at = 0; at < text.size(); at += step) {
    moetier::AppendDelta(parser.Push(std::string_view(text).substr(at, step)), response);
  }
  moetier::AppendDelta(parser.Finish(), response);

  Json out = {{"reasoning", response.reasoning}, {"content", response.content},
              {"tool_calls", Json::array()}, {"warnings", parser.warnings()}};
  for (const moetier::ParsedChatToolCall& call : response.tool_calls) {
    out["tool_calls"].push_back({{"id", call.id},
                                 {"name", call.name},
                                 {"arguments", Json::parse(call.arguments, nullptr, false)}});
  }
  std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  return 0;
}

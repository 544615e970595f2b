#include "http/output_splitter.h"

#include "chat/chat_output_parser.h"
#include "log/daemon_log.h"

namespace moetier {
namespace {

ChatOutputFormat FormatOf(std::optional<ChatTemplateStyle> style) {
  if (!style.has_value()) return ChatOutputFormat::kPlain;
  switch (*style) {
    case ChatTemplateStyle::kQwen3:
      return ChatOutputFormat::kQwen3;
    case ChatTemplateStyle::kQwen35:
      return ChatOutputFormat::kQwen35;
    default:
      return ChatOutputFormat::kPlain;
  }
}

OutputPiece PieceOf(ChatDelta delta) {
  OutputPiece piece;
  piece.reasoning = std::move(delta.reasoning);
  piece.content = std::move(delta.content);
  for (ToolCallDelta& call : delta.tool_calls) {
    piece.tool_calls.push_back(
        {call.index, std::move(call.id), std::move(call.name), std::move(call.arguments)});
  }
  return piece;
}

}  // namespace

struct OutputSplitter::Impl {
  explicit Impl(std::optional<ChatTemplateStyle> style, bool thinking,
                const std::vector<nlohmann::ordered_json>& tools)
      // Qwen3.5's generation prompt opens the think block itself; Qwen3's
      // model writes "<think>" as its first token.
      : parser(FormatOf(style), thinking && style == ChatTemplateStyle::kQwen35, tools) {}
  ChatOutputParser parser;
};

OutputSplitter::OutputSplitter(std::optional<ChatTemplateStyle> chat_style, bool thinking,
                               std::vector<nlohmann::ordered_json> tools)
    : impl_(std::make_unique<Impl>(chat_style, thinking, tools)) {}

OutputSplitter::~OutputSplitter() = default;

OutputPiece OutputSplitter::Push(std::string_view text) {
  if (text.empty()) return {};
  return PieceOf(impl_->parser.Push(text));
}

OutputPiece OutputSplitter::Finish() {
  OutputPiece piece = PieceOf(impl_->parser.Finish());
  // A malformed call went out as content; the log says why.
  for (const std::string& warning : impl_->parser.warnings()) {
    LogWarning("model output: %s", warning);
  }
  return piece;
}

int OutputSplitter::tool_call_count() const { return impl_->parser.tool_call_count(); }

}  // namespace moetier

#include "http/output_splitter.h"

namespace moetier {

struct OutputSplitter::Impl {
  std::optional<ChatTemplateStyle> style;
  bool thinking = false;
  std::vector<nlohmann::ordered_json> tools;
};

OutputSplitter::OutputSplitter(std::optional<ChatTemplateStyle> chat_style, bool thinking,
                               std::vector<nlohmann::ordered_json> tools)
    : impl_(std::make_unique<Impl>()) {
  impl_->style = chat_style;
  impl_->thinking = thinking;
  impl_->tools = std::move(tools);
}

OutputSplitter::~OutputSplitter() = default;

OutputPiece OutputSplitter::Push(std::string_view text) {
  OutputPiece piece;
  piece.content = std::string(text);
  return piece;
}

OutputPiece OutputSplitter::Finish() { return {}; }

int OutputSplitter::tool_call_count() const { return 0; }

}  // namespace moetier

#include "chat/chat_output_parser.h"

#include <random>

#include "chat/tool_call_body.h"

namespace moetier {
namespace {

constexpr std::string_view kWhitespace = " \t\r\n";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";

bool IsWhitespace(char c) { return kWhitespace.find(c) != std::string_view::npos; }

std::string_view TrimmedRight(std::string_view text) {
  const size_t last = text.find_last_not_of(kWhitespace);
  return last == std::string_view::npos ? std::string_view{} : text.substr(0, last + 1);
}

void EraseLeadingWhitespace(std::string& text) {
  text.erase(0, std::min(text.find_first_not_of(kWhitespace), text.size()));
}

// The longest end of text that is a proper beginning of marker: what may
// still become the marker when more text arrives.
size_t PartialMarkerSize(std::string_view text, std::string_view marker) {
  for (size_t size = std::min(text.size(), marker.size() - 1); size > 0; --size) {
    if (text.ends_with(marker.substr(0, size))) return size;
  }
  return 0;
}

// What must wait for the next piece: a partial marker and the whitespace
// before it, which is dropped if the marker completes.
size_t HeldTailSize(std::string_view text, std::string_view marker) {
  size_t kept = text.size() - PartialMarkerSize(text, marker);
  while (kept > 0 && IsWhitespace(text[kept - 1])) --kept;
  return text.size() - kept;
}

// Unique within the response by its counter suffix; the random part keeps
// ids of different responses in one conversation apart.
std::string RandomCallIdPrefix() {
  constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  constexpr int kRandomChars = 16;
  std::random_device device;
  std::mt19937_64 generator((uint64_t{device()} << 32) ^ device());
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string prefix = "call_";
  for (int i = 0; i < kRandomChars; ++i) prefix += kAlphabet[pick(generator)];
  prefix += '_';
  return prefix;
}

}  // namespace

ChatOutputParser::ChatOutputParser(ChatOutputFormat format, bool starts_in_reasoning,
                                   const std::vector<nlohmann::ordered_json>& tools,
                                   size_t max_tool_call_bytes)
    : format_(format),
      schemas_(tools),
      max_tool_call_bytes_(max_tool_call_bytes),
      state_(format == ChatOutputFormat::kPlain ? State::kContent
             : starts_in_reasoning              ? State::kReasoning
                                                : State::kOpening),
      drop_leading_whitespace_(state_ == State::kReasoning),
      call_id_prefix_(RandomCallIdPrefix()) {}

ChatDelta ChatOutputParser::Push(std::string_view text) {
  if (state_ == State::kFinished) {
    warnings_.push_back("text pushed after the end of the output was ignored");
    return {};
  }
  pending_.append(text);
  ChatDelta out;
  Advance(out);
  return out;
}

ChatDelta ChatOutputParser::Finish() {
  ChatDelta out;
  if (state_ == State::kFinished) return out;
  if (drop_leading_whitespace_) EraseLeadingWhitespace(pending_);
  switch (state_) {
    case State::kOpening:
      out.content += pending_;
      break;
    case State::kContent:
      if (!after_tool_call_ || !TrimmedRight(pending_).empty()) out.content += pending_;
      break;
    case State::kReasoning:
      out.reasoning += TrimmedRight(pending_);
      break;
    case State::kToolCall:
      RejectToolCall(pending_.size(), "no </tool_call> before the end of the output", out);
      break;
    case State::kFinished:
      break;
  }
  pending_.clear();
  state_ = State::kFinished;
  return out;
}

void ChatOutputParser::Advance(ChatDelta& out) {
  bool progressed = true;
  while (progressed) {
    switch (state_) {
      case State::kOpening:
        progressed = StepOpening();
        break;
      case State::kReasoning:
        progressed = StepReasoning(out);
        break;
      case State::kContent:
        progressed = StepContent(out);
        break;
      case State::kToolCall:
        progressed = StepToolCall(out);
        break;
      case State::kFinished:
        progressed = false;
        break;
    }
  }
}

bool ChatOutputParser::StepOpening() {
  const size_t start = pending_.find_first_not_of(kWhitespace);
  if (start == std::string::npos) return false;
  const std::string_view rest = std::string_view(pending_).substr(start);
  if (rest.starts_with(kThinkOpen)) {
    pending_.erase(0, start + kThinkOpen.size());
    state_ = State::kReasoning;
    drop_leading_whitespace_ = true;
    return true;
  }
  if (kThinkOpen.starts_with(rest)) return false;
  state_ = State::kContent;
  return true;
}

bool ChatOutputParser::StepReasoning(ChatDelta& out) {
  if (drop_leading_whitespace_) {
    EraseLeadingWhitespace(pending_);
    if (pending_.empty()) return false;
    drop_leading_whitespace_ = false;
  }
  const size_t close = pending_.find(kThinkClose);
  if (close != std::string::npos) {
    out.reasoning += TrimmedRight(std::string_view(pending_).substr(0, close));
    pending_.erase(0, close + kThinkClose.size());
    state_ = State::kContent;
    drop_leading_whitespace_ = true;
    return true;
  }
  const size_t ready = pending_.size() - HeldTailSize(pending_, kThinkClose);
  out.reasoning.append(pending_, 0, ready);
  pending_.erase(0, ready);
  return false;
}

bool ChatOutputParser::StepContent(ChatDelta& out) {
  if (format_ == ChatOutputFormat::kPlain) {
    out.content += pending_;
    pending_.clear();
    return false;
  }
  if (drop_leading_whitespace_) {
    EraseLeadingWhitespace(pending_);
    if (pending_.empty()) return false;
    drop_leading_whitespace_ = false;
  }
  const size_t open = pending_.find(kToolCallOpen);
  if (open != std::string::npos) {
    const std::string_view before = TrimmedRight(std::string_view(pending_).substr(0, open));
    out.content += before;
    call_leading_whitespace_.assign(pending_, before.size(), open - before.size());
    pending_.erase(0, open + kToolCallOpen.size());
    after_tool_call_ = false;
    state_ = State::kToolCall;
    call_scan_from_ = 0;
    return true;
  }
  const size_t ready = pending_.size() - HeldTailSize(pending_, kToolCallOpen);
  if (ready > 0) after_tool_call_ = false;
  out.content.append(pending_, 0, ready);
  pending_.erase(0, ready);
  return false;
}

bool ChatOutputParser::StepToolCall(ChatDelta& out) {
  const size_t close = pending_.find(kToolCallClose, call_scan_from_);
  const size_t next_open = pending_.find(kToolCallOpen, call_scan_from_);
  if (next_open != std::string::npos && (close == std::string::npos || next_open < close)) {
    // The whitespace before the next call is its separator, not this call's.
    const size_t raw_size = TrimmedRight(std::string_view(pending_).substr(0, next_open)).size();
    RejectToolCall(raw_size, "not closed before the next <tool_call>", out);
    return true;
  }
  if (close != std::string::npos) {
    CompleteToolCall(close, kToolCallClose.size(), out);
    return true;
  }
  if (pending_.size() > max_tool_call_bytes_) {
    RejectToolCall(pending_.size(),
                   "longer than " + std::to_string(max_tool_call_bytes_) + " bytes", out);
    return true;
  }
  // Both markers may have begun in the last bytes received.
  call_scan_from_ = pending_.size() - std::min(pending_.size(), kToolCallClose.size() - 1);
  return false;
}

void ChatOutputParser::CompleteToolCall(size_t body_size, size_t end_size, ChatDelta& out) {
  std::vector<std::string> notes;
  absl::StatusOr<ParsedToolCall> call =
      ParseToolCallBody(std::string_view(pending_).substr(0, body_size), schemas_, notes);
  if (!call.ok()) {
    RejectToolCall(body_size + end_size, std::string(call.status().message()), out);
    return;
  }
  warnings_.insert(warnings_.end(), notes.begin(), notes.end());
  out.tool_calls.push_back(ToolCallDelta{tool_call_count_, NextCallId(), std::move(call->name),
                                         std::move(call->arguments)});
  ++tool_call_count_;
  pending_.erase(0, body_size + end_size);
  call_leading_whitespace_.clear();
  state_ = State::kContent;
  after_tool_call_ = true;
}

void ChatOutputParser::RejectToolCall(size_t raw_size, std::string_view why, ChatDelta& out) {
  warnings_.push_back("malformed tool call returned as content: " + std::string(why));
  out.content += call_leading_whitespace_;
  out.content += kToolCallOpen;
  out.content.append(pending_, 0, raw_size);
  pending_.erase(0, raw_size);
  call_leading_whitespace_.clear();
  state_ = State::kContent;
  drop_leading_whitespace_ = false;
}

std::string ChatOutputParser::NextCallId() {
  return call_id_prefix_ + std::to_string(tool_call_count_);
}

void AppendDelta(const ChatDelta& delta, ParsedChatOutput& response) {
  response.reasoning += delta.reasoning;
  response.content += delta.content;
  for (const ToolCallDelta& call : delta.tool_calls) {
    if (call.index < 0) continue;
    const size_t index = static_cast<size_t>(call.index);
    if (index >= response.tool_calls.size()) response.tool_calls.resize(index + 1);
    ParsedChatToolCall& into = response.tool_calls[index];
    if (!call.id.empty()) into.id = call.id;
    if (!call.name.empty()) into.name = call.name;
    into.arguments += call.arguments;
  }
}

ParsedChatOutput ParseChatOutput(ChatOutputFormat format, bool starts_in_reasoning,
                                 const std::vector<nlohmann::ordered_json>& tools,
                                 std::string_view text) {
  ChatOutputParser parser(format, starts_in_reasoning, tools);
  ParsedChatOutput response;
  AppendDelta(parser.Push(text), response);
  AppendDelta(parser.Finish(), response);
  response.warnings = parser.warnings();
  return response;
}

}  // namespace moetier

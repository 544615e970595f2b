#include "chat/chat_session.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace moetier::client {
namespace {

constexpr const char* kCommandList = "/bye, /clear, /set, /think, /help";
constexpr const char* kSettingList = "temp, top_p, top_k, min_p, seed, max_tokens, system";

absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string_view Trim(std::string_view s) {
  const absl::string_view t = absl::StripAsciiWhitespace(Absl(s));
  return std::string_view(t.data(), t.size());
}

// "name rest of line" -> {"name", "rest of line"}.
std::pair<std::string_view, std::string_view> FirstWord(std::string_view s) {
  s = Trim(s);
  const size_t space = s.find_first_of(" \t");
  if (space == std::string_view::npos) return {s, {}};
  return {s.substr(0, space), Trim(s.substr(space))};
}

ChatInput Info(std::string text) { return {ChatInput::Kind::kInfo, std::move(text)}; }
ChatInput Error(std::string text) { return {ChatInput::Kind::kError, std::move(text)}; }

v1::ChatMessage Message(const char* role, std::string content) {
  v1::ChatMessage m;
  m.set_role(role);
  m.set_content(std::move(content));
  return m;
}

// Sampling values are only parsed here: the daemon checks their ranges, for
// every client alike, and its error names the field.
bool ParseFloat(std::string_view v, float* out) {
  float f = 0;
  if (!absl::SimpleAtof(Absl(v), &f) || !std::isfinite(f)) return false;
  *out = f;
  return true;
}

bool ParseInt32(std::string_view v, int32_t min, int32_t* out) {
  int32_t i = 0;
  if (!absl::SimpleAtoi(Absl(v), &i) || i < min) return false;
  *out = i;
  return true;
}

}  // namespace

ChatSession::ChatSession(v1::ChatRequest settings, std::string system)
    : settings_(std::move(settings)), system_(std::move(system)) {
  settings_.clear_messages();
  Clear();
}

ChatInput ChatSession::Take(std::string_view line) {
  std::string_view text = Trim(line);
  if (text.empty()) return {};
  if (text.substr(0, 2) == "//") {
    text.remove_prefix(1);
  } else if (text.front() == '/') {
    const auto [name, argument] = FirstWord(text);
    return Command(name, argument);
  }
  messages_.push_back(Message("user", std::string(text)));
  return {ChatInput::Kind::kSend, {}};
}

ChatInput ChatSession::Command(std::string_view name, std::string_view argument) {
  const bool bare = argument.empty();
  if (name == "/bye" || name == "/exit" || name == "/quit") {
    if (!bare) return Error(absl::StrFormat("%s takes no argument", name));
    return {ChatInput::Kind::kQuit, {}};
  }
  if (name == "/clear" || name == "/reset") {
    if (!bare) return Error(absl::StrFormat("%s takes no argument", name));
    Clear();
    return Info("(conversation forgotten)");
  }
  if (name == "/set") return Set(argument);
  if (name == "/think") return Think(argument);
  if (name == "/help" || name == "/?") return Info(Help());
  return Error(absl::StrFormat("unknown command '%s'; the commands are %s (/help explains them)",
                               name, kCommandList));
}

ChatInput ChatSession::Set(std::string_view argument) {
  if (argument.empty()) return Info(DescribeSettings());
  const auto [name, value] = FirstWord(argument);
  if (value.empty()) return Error(absl::StrFormat("/set %s needs a value", name));
  v1::SamplingParams* s = settings_.mutable_sampling();
  const auto bad = [name = name, value = value](const char* what) {
    return Error(absl::StrFormat("/set %s: '%s' is not %s", name, value, what));
  };
  if (name == "temp" || name == "temperature") {
    float t = 0;
    if (!ParseFloat(value, &t)) return bad("a number");
    s->set_temperature(t);
  } else if (name == "top_p") {
    float p = 0;
    if (!ParseFloat(value, &p)) return bad("a number");
    s->set_top_p(p);
  } else if (name == "min_p") {
    float m = 0;
    if (!ParseFloat(value, &m)) return bad("a number");
    s->set_min_p(m);
  } else if (name == "top_k") {
    int32_t k = 0;
    if (!ParseInt32(value, std::numeric_limits<int32_t>::min(), &k)) return bad("an integer");
    s->set_top_k(k);
  } else if (name == "max_tokens") {
    int32_t n = 0;
    if (!ParseInt32(value, 0, &n)) return bad("a non-negative integer");
    settings_.set_max_new_tokens(n);
  } else if (name == "seed") {
    uint64_t seed = 0;
    if (value == "random") {
      s->clear_seed();
    } else if (absl::SimpleAtoi(Absl(value), &seed)) {
      s->set_seed(seed);
    } else {
      return bad("a non-negative integer or random");
    }
  } else if (name == "system") {
    system_ = std::string(value);
    if (!messages_.empty() && messages_.front().role() == "system") {
      messages_.front().set_content(system_);
    } else {
      messages_.insert(messages_.begin(), Message("system", system_));
    }
    return Info("(system message set)");
  } else {
    return Error(absl::StrFormat("unknown setting '%s'; one of %s", name, kSettingList));
  }
  return Info(absl::StrFormat("(%s %s)", name, value));
}

ChatInput ChatSession::Think(std::string_view argument) {
  if (argument == "on") {
    settings_.set_enable_thinking(true);
  } else if (argument == "off") {
    settings_.set_enable_thinking(false);
  } else if (!argument.empty()) {
    return Error(absl::StrFormat("/think takes on or off, not '%s'", argument));
  }
  return Info(settings_.enable_thinking() ? "(thinking on)" : "(thinking off)");
}

v1::ChatRequest ChatSession::Request() const {
  v1::ChatRequest request = settings_;
  for (const v1::ChatMessage& m : messages_) *request.add_messages() = m;
  return request;
}

void ChatSession::AddReply(std::string text) {
  messages_.push_back(Message("assistant", std::move(text)));
}

void ChatSession::DropLastUserMessage() {
  if (!messages_.empty() && messages_.back().role() == "user") messages_.pop_back();
}

void ChatSession::Clear() {
  messages_.clear();
  if (!system_.empty()) messages_.push_back(Message("system", system_));
}

std::string ChatSession::DescribeSettings() const {
  const v1::SamplingParams& s = settings_.sampling();
  const std::string seed = s.has_seed() ? absl::StrFormat("%d", s.seed()) : "random";
  const std::string max_tokens = settings_.max_new_tokens() == 0
                                     ? "0 (the daemon's default)"
                                     : absl::StrFormat("%d", settings_.max_new_tokens());
  return absl::StrFormat(
      "temp %g, top_p %g, top_k %d, min_p %g, seed %s, max_tokens %s, thinking %s, system %s",
      s.temperature(), s.top_p(), s.top_k(), s.min_p(), seed, max_tokens,
      settings_.enable_thinking() ? "on" : "off", system_.empty() ? "none" : "'" + system_ + "'");
}

std::string ChatSession::Help() {
  return "/bye              end the chat (also /exit, /quit, Ctrl-D, Ctrl-C at the prompt)\n"
         "/clear            forget the conversation (also /reset; the system message stays)\n"
         "/set              show the settings\n"
         "/set NAME VALUE   change one for the next turns: temp, top_p, top_k, min_p,\n"
         "                  seed (a number, or random), max_tokens (0: the daemon's\n"
         "                  default), system (the rest of the line)\n"
         "/think on|off     let the model think before it answers (Qwen3 templates)\n"
         "/help             this text\n"
         "Ctrl-C stops the answer being written; what was written stays in the\n"
         "conversation. A line starting with // is sent as a message, one / shorter.";
}

}  // namespace moetier::client

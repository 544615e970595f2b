// One conversation as the interactive chat keeps it: the messages so far,
// the settings of every turn, and the slash commands that change them. No
// I/O and no daemon, so every command is unit-tested on its own.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "moetier/v1/moetier.pb.h"

namespace moetier::client {

// What one line of input asks for.
struct ChatInput {
  enum class Kind {
    kNothing,  // an empty line
    kSend,     // a user message was added: send Request()
    kInfo,     // a command did its work; `text` says what
    kError,    // a command was wrong; `text` is the one-line error
    kQuit,     // /bye
  };
  Kind kind = Kind::kNothing;
  std::string text;
};

class ChatSession {
 public:
  // `settings` carries max_new_tokens, sampling and enable_thinking for
  // every turn (its messages are ignored); `system` (may be empty) heads the
  // conversation and survives /clear.
  ChatSession(v1::ChatRequest settings, std::string system);

  // A line as typed: a slash command, or (trimmed) the next user message.
  ChatInput Take(std::string_view line);

  // The next turn's request: the settings and the whole conversation, which
  // the daemon renders through the model's chat template.
  v1::ChatRequest Request() const;

  // The answer to the last user message, whole or stopped part way.
  void AddReply(std::string text);
  // Forgets the last user message: its turn failed or gave no text.
  void DropLastUserMessage();

  const std::vector<v1::ChatMessage>& messages() const { return messages_; }
  const v1::ChatRequest& settings() const { return settings_; }

  // The commands, one a line.
  static std::string Help();

 private:
  ChatInput Command(std::string_view name, std::string_view argument);
  ChatInput Set(std::string_view argument);
  ChatInput Think(std::string_view argument);
  void Clear();
  std::string DescribeSettings() const;

  v1::ChatRequest settings_;
  std::string system_;
  std::vector<v1::ChatMessage> messages_;
};

}  // namespace moetier::client

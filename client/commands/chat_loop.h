// The interactive chat of `moetier chat` and `moetier run`: one user
// message per line, each turn sent with the whole conversation through the
// Chat RPC (the daemon renders the chat template and reuses what the worker
// kept of the previous turn), the answer streamed as it comes.
//
// At a terminal: a ">>> " prompt, a banner, and "[N tokens, X tok/s]" on
// stderr after each answer (dimmed where colour is on). From a pipe: no
// prompt, banner or counts, and any error ends the chat (status 1, or 2 for
// a bad command), as a script expects.
//
// Ctrl-C while an answer is written cancels its call: the part already
// written stays in the conversation as the assistant's message (the user
// saw it and may refer to it; the templates need user and assistant turns
// to alternate), unless there was none, when the user message is dropped
// too. Ctrl-C at the prompt ends the chat with status 130; /bye and end of
// input end it with 0.
#pragma once

#include <string>

#include "chat/chat_session.h"
#include "commands/command_context.h"

namespace moetier::client {

inline constexpr const char* kChatPrompt = ">>> ";

struct ChatLoopOptions {
  std::string command;      // "chat" or "run": error lines start "moetier COMMAND: "
  std::string banner;       // shown at a terminal before the first prompt
  bool full_stats = false;  // --stats: FormatGenerationStats after every answer, also in a pipe
};

int RunChatLoop(ChatSession& session, const ChatLoopOptions& options, const CommandContext& ctx);

// "[42 tokens, 12.3 tok/s]", "[3 tokens, 8.0 tok/s; stopped]".
std::string FormatTurnCounts(int32_t tokens, double tokens_per_s, bool stopped);

}  // namespace moetier::client

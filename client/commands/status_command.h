// `moetier status`: the residency map once, or live with --watch; --json
// for scripts.
#pragma once

#include <string>

#include "cli/command_line.h"
#include "commands/command_context.h"
#include "moetier/v1/moetier.pb.h"

namespace moetier::client {

// One GetStatus call.
grpc::Status FetchStatus(const CommandContext& ctx, v1::Status* status);

// The message as JSON, field names as in the .proto; `one_line` for a
// stream of objects (one per line).
std::string StatusJson(const v1::Status& status, bool one_line);

int RunStatus(const StatusOptions& options, const CommandContext& ctx);

}  // namespace moetier::client

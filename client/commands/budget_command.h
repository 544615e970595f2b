// `moetier budget`: resize a GPU worker's VRAM expert cache at run time.
#pragma once

#include "cli/command_line.h"
#include "commands/command_context.h"

namespace moetier::client {

int RunBudget(const BudgetOptions& options, const CommandContext& ctx);

}  // namespace moetier::client

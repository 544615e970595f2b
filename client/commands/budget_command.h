// `moetier budget`: resize a running worker's expert cache; prints the size in effect.
#pragma once

#include "cli/command_line.h"
#include "commands/command_context.h"

namespace moetier::client {

int RunBudget(const BudgetOptions& options, const CommandContext& ctx);

}  // namespace moetier::client

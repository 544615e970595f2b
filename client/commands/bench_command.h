// `moetier bench`: prefill and decode throughput of the running service,
// with the hit rates and bytes moved while it ran, as JSON.
#pragma once

#include <vector>

#include "cli/command_line.h"
#include "commands/command_context.h"

namespace moetier::client {

// The middle value (mean of the two middle ones for an even count); NaN for
// none.
double Median(std::vector<double> values);

int RunBench(const BenchOptions& options, const CommandContext& ctx);

}  // namespace moetier::client

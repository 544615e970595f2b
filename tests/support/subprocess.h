// Running the project's programs from tests and collecting what they print.
#pragma once

#include <string>
#include <vector>

namespace moetier::testing {

struct ProgramResult {
  // The exit status; 128 + N when signal N killed it; -1 when it could not
  // be started.
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `program` with `args` directly (no shell, stdin from /dev/null) and
// waits for it; stdout and stderr are collected apart.
ProgramResult RunProgram(const std::string& program, const std::vector<std::string>& args);

struct CommandResult {
  int exit_code = -1;  // as ProgramResult's
  std::string output;  // stdout and stderr interleaved as written
};

// Runs `command_line` through /bin/sh with stderr joined to stdout.
CommandResult RunCommand(const std::string& command_line);

// MOETIER_BINARY_DIR + "/" + relative_path + " " + args, through RunCommand.
CommandResult RunBuiltProgram(const std::string& relative_path, const std::string& args);

}  // namespace moetier::testing

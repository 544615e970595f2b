// The whole client behind main(): parse the command line, find the daemon,
// run the subcommand. Everything it reads from the process (streams,
// terminal, environment) comes in through ClientIo, so tests drive it.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace moetier::client {

struct ClientIo {
  std::istream* in = nullptr;
  int in_fd = -1;  // the descriptor behind `in`, when there is one (see CommandContext)
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  bool in_is_terminal = false;
  bool out_is_terminal = false;
  bool err_is_terminal = false;
  int terminal_columns = 0;  // 0: unknown
  // Environment values; null when unset.
  const char* env_socket = nullptr;  // $MOETIER_SOCKET
  const char* env_no_color = nullptr;
  const char* env_term = nullptr;
  const char* env_locale = nullptr;  // the first of $LC_ALL, $LC_CTYPE, $LANG that is set
};

// args[0] is the program name. Returns the exit status.
int RunMoetier(const std::vector<std::string>& args, const ClientIo& io);

}  // namespace moetier::client

// moetier: the command-line client of moetierd (see `moetier --help`).
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "commands/dispatch.h"
#include "connection/interrupt.h"

namespace {

const char* FirstSet(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = getenv(name);
    if (value != nullptr && value[0] != '\0') return value;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  // Before gRPC starts any thread, so they all inherit the blocked signals.
  moetier::client::InstallInterruptHandler();

  moetier::client::ClientIo io;
  io.in = &std::cin;
  io.in_fd = STDIN_FILENO;
  io.out = &std::cout;
  io.err = &std::cerr;
  io.in_is_terminal = isatty(STDIN_FILENO) == 1;
  io.out_is_terminal = isatty(STDOUT_FILENO) == 1;
  io.err_is_terminal = isatty(STDERR_FILENO) == 1;
  winsize size{};
  if (io.out_is_terminal && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0) {
    io.terminal_columns = size.ws_col;
  }
  io.env_socket = getenv("MOETIER_SOCKET");
  io.env_no_color = getenv("NO_COLOR");
  io.env_term = getenv("TERM");
  io.env_locale = FirstSet({"LC_ALL", "LC_CTYPE", "LANG"});
  return moetier::client::RunMoetier(std::vector<std::string>(argv, argv + argc), io);
}

// A stand-in for moetierd in `moetier run` tests: takes the daemon's flags,
// serves the fake front door on --api_socket_path, and stops on SIGTERM.
// Test-only flags (passed with moetier run --daemon-arg):
//   --args_out=FILE              write "pid N" and every argument, one a line
//   --serving_delay_ms=MS        report NOT_SERVING this long first
//   --exit_before_serving=CODE   log a line and exit with CODE at once
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "fake_moetier_service.h"

namespace {

std::string Value(const std::string& arg, const std::string& flag) {
  const std::string prefix = flag + "=";
  return arg.rfind(prefix, 0) == 0 ? arg.substr(prefix.size()) : "";
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::string socket_path, args_out;
  int serving_delay_ms = 0;
  int exit_code = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (std::string v = Value(arg, "--api_socket_path"); !v.empty()) socket_path = v;
    if (std::string v = Value(arg, "--args_out"); !v.empty()) args_out = v;
    if (std::string v = Value(arg, "--serving_delay_ms"); !v.empty())
      serving_delay_ms = std::atoi(v.c_str());
    if (std::string v = Value(arg, "--exit_before_serving"); !v.empty())
      exit_code = std::atoi(v.c_str());
  }
  if (!args_out.empty()) {
    std::ofstream out(args_out);
    out << "pid " << getpid() << "\n";
    for (int i = 1; i < argc; ++i) out << argv[i] << "\n";
  }
  if (exit_code >= 0) {
    std::cout << "fake moetierd: failing on purpose" << std::endl;
    return exit_code;
  }
  if (socket_path.empty()) {
    std::cerr << "fake moetierd: --api_socket_path is required" << std::endl;
    return 2;
  }
  std::cout << "fake moetierd: preloading experts" << std::endl;
  auto server = std::make_unique<moetier::client::testing::FakeServer>(socket_path);
  server->SetServing(serving_delay_ms == 0);
  std::cout << "fake moetierd: listening on " << socket_path << std::endl;
  if (serving_delay_ms > 0) {
    const timespec delay{serving_delay_ms / 1000, (serving_delay_ms % 1000) * 1'000'000L};
    if (sigtimedwait(&stop, nullptr, &delay) < 0) {
      server->SetServing(true);
      std::cout << "fake moetierd: ready" << std::endl;
      int signal_number = 0;
      sigwait(&stop, &signal_number);
    }
  } else {
    int signal_number = 0;
    sigwait(&stop, &signal_number);
  }
  std::cout << "fake moetierd: stopping" << std::endl;
  server.reset();
  unlink(socket_path.c_str());
  return 0;
}

// Helpers for the client's tests: run `moetier ...` in-process with captured
// streams, and temporary directories short enough for unix socket paths.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "commands/dispatch.h"
#include "gtest/gtest.h"

namespace moetier::client::testing {

struct ClientRun {
  int status = -1;
  std::string out;
  std::string err;
};

inline ClientRun RunClient(std::vector<std::string> args, const std::string& stdin_text = "",
                           bool in_is_terminal = false) {
  args.insert(args.begin(), "moetier");
  std::istringstream in(stdin_text);
  std::ostringstream out, err;
  ClientIo io;
  io.in = &in;
  io.out = &out;
  io.err = &err;
  io.in_is_terminal = in_is_terminal;
  ClientRun run;
  run.status = RunMoetier(args, io);
  run.out = out.str();
  run.err = err.str();
  return run;
}

// Under /tmp (not $TMPDIR, which may be long): sockets live here.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/moetier-client-test-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace moetier::client::testing

// Where the chat's lines come from. Without readline: a terminal in its
// usual cooked mode already gives line editing and Ctrl-D. The process's
// stdin is read through poll() next to the interrupt descriptor, because
// Ctrl-C arrives on a signal thread of its own and cannot wake a read().
#pragma once

#include <istream>
#include <string>

namespace moetier::client {

enum class LineRead {
  kLine,         // *line holds the next line, without its '\n'
  kEnd,          // end of input (Ctrl-D at a terminal)
  kInterrupted,  // Ctrl-C while waiting for a line
};

class LineInput {
 public:
  virtual ~LineInput() = default;
  virtual LineRead Read(std::string* line) = 0;
};

// A std::istream (the tests' input); it cannot notice Ctrl-C while it waits.
class StreamLineInput : public LineInput {
 public:
  explicit StreamLineInput(std::istream* in) : in_(in) {}
  LineRead Read(std::string* line) override;

 private:
  std::istream* in_;
};

// A file descriptor (stdin), polled together with InterruptWakeFd(). A last
// line without '\n' still counts as a line.
class FdLineInput : public LineInput {
 public:
  explicit FdLineInput(int fd) : fd_(fd) {}
  LineRead Read(std::string* line) override;

 private:
  int fd_;
  std::string buffered_;  // read, not yet returned
  bool ended_ = false;
};

}  // namespace moetier::client

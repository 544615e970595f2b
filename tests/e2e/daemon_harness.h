// Runs a real moetierd (with real moetier-worker processes) on a model for
// end-to-end tests, in a private directory, and talks to it over gRPC.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "moetier/v1/moetier.grpc.pb.h"

namespace moetier::e2e {

struct DaemonSetup {
  std::string model_path;
  int worker_threads = 2;
  std::vector<std::string> extra_config;  // text-format lines appended to the config
  std::vector<std::string> worker_flags;  // moetier-worker flags, one worker_extra_args each
};

class RunningDaemon {
 public:
  // Starts moetierd and waits until a worker is ready (empty error) or
  // returns the reason it did not get there, with the daemon's log.
  static std::unique_ptr<RunningDaemon> Start(const DaemonSetup& setup, std::string* error);
  // Only starts moetierd, for tests of how it fails to start.
  static std::unique_ptr<RunningDaemon> Launch(const DaemonSetup& setup, std::string* error);
  ~RunningDaemon();  // SIGKILL if still running; removes the directory

  v1::Moetier::Stub& stub() { return *stub_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  const std::string& socket_path() const { return socket_path_; }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return pid_; }
  std::string Log() const;

  v1::Status GetStatus();
  // Waits until worker 0 reports `state` (e.g. "ready"), up to timeout_ms.
  bool WaitForWorkerState(const std::string& state, int64_t timeout_ms);
  // Sends SIGTERM and waits; returns the wait status, or -1 on timeout.
  int Terminate(int64_t timeout_ms);
  // Waits for the daemon to exit on its own; the wait status, or -1 on timeout.
  int WaitForExit(int64_t timeout_ms);

 private:
  RunningDaemon() = default;
  std::string dir_;
  std::string socket_path_;
  pid_t pid_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Moetier::Stub> stub_;
};

// The whole text and token ids of a streamed generation, and how it ended.
struct Generation {
  grpc::Status status;
  std::string text;
  std::vector<int32_t> token_ids;
  v1::GenerationStats stats;
};
Generation Generate(v1::Moetier::Stub& stub, const v1::GenerateRequest& request);
// The same for a Chat call.
Generation Chat(v1::Moetier::Stub& stub, const v1::ChatRequest& request);

// A file of tests/data/vectors, and the first max_ids ids of STEM.ids there.
std::string VectorPath(const std::string& file);
std::vector<int32_t> VectorPromptIds(const std::string& stem, size_t max_ids = SIZE_MAX);

}  // namespace moetier::e2e

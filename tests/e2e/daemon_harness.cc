#include "daemon_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace moetier::e2e {
namespace {

bool WaitUntil(const std::function<bool()>& done, int64_t timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

}  // namespace

std::unique_ptr<RunningDaemon> RunningDaemon::Launch(const DaemonSetup& setup, std::string* error) {
  std::unique_ptr<RunningDaemon> d(new RunningDaemon());
  char tmpl[] = "/tmp/moetier_e2e_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    *error = "mkdtemp failed";
    return nullptr;
  }
  d->dir_ = tmpl;
  d->socket_path_ = d->dir_ + "/api.sock";
  {
    std::ofstream config(d->dir_ + "/moetierd.conf");
    config << "model_path: \"" << setup.model_path << "\"\n"
           << "devices: \"cpu\"\n"
           << "worker_executable_path: \"" << MOETIER_WORKER << "\"\n"
           << "worker_socket_path: \"" << d->dir_ << "/worker.sock\"\n"
           << "api_socket_path: \"" << d->socket_path_ << "\"\n"
           << "api_socket_group: \"\"\n"
           << "allow_unlocked_memory: true\n"
           << "worker_extra_args: \"--threads=" << setup.worker_threads << "\"\n"
           << "worker_restart_backoff_initial_ms: 50\n";
    for (const std::string& line : setup.extra_config) config << line << "\n";
    for (const std::string& flag : setup.worker_flags) {
      config << "worker_extra_args: \"" << flag << "\"\n";
    }
  }
  std::string daemon = MOETIERD;
  std::string config_flag = "--config=" + d->dir_ + "/moetierd.conf";
  char* argv[] = {daemon.data(), config_flag.data(), nullptr};
  const std::string log = d->dir_ + "/log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const int rc = posix_spawn(&d->pid_, argv[0], &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    *error = "cannot start moetierd";
    return nullptr;
  }
  return d;
}

std::unique_ptr<RunningDaemon> RunningDaemon::Start(const DaemonSetup& setup, std::string* error) {
  std::unique_ptr<RunningDaemon> d = Launch(setup, error);
  if (d == nullptr) return nullptr;
  // A channel that fails to connect backs off for seconds; connect only once
  // the daemon has created its socket.
  if (!WaitUntil([&] { return std::filesystem::exists(d->socket_path_); }, 60000)) {
    *error = "moetierd never created its API socket; log:\n" + d->Log();
    return nullptr;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  d->channel_ = grpc::CreateCustomChannel("unix:" + d->socket_path_,
                                          grpc::InsecureChannelCredentials(), args);
  d->stub_ = v1::Moetier::NewStub(d->channel_);
  if (!d->WaitForWorkerState("ready", 60000)) {
    *error = "no worker became ready; daemon log:\n" + d->Log();
    return nullptr;
  }
  return d;
}

RunningDaemon::~RunningDaemon() {
  if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  // Reap any worker the killed daemon left behind: it notices the daemon's
  // silence and exits on its own; the directory can go now.
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

std::string RunningDaemon::Log() const {
  std::ifstream in(dir_ + "/log");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

v1::Status RunningDaemon::GetStatus() {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::Status status;
  stub_->GetStatus(&context, v1::GetStatusRequest(), &status);
  return status;
}

bool RunningDaemon::WaitForWorkerState(const std::string& state, int64_t timeout_ms) {
  return WaitUntil(
      [&] {
        if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
          pid_ = 0;
          return true;  // gone: checked below
        }
        const v1::Status s = GetStatus();
        return s.workers_size() > 0 && s.workers(0).state() == state;
      },
      timeout_ms) &&
         pid_ != 0;
}

int RunningDaemon::Terminate(int64_t timeout_ms) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  return WaitForExit(timeout_ms);
}

int RunningDaemon::WaitForExit(int64_t timeout_ms) {
  if (pid_ <= 0) return -1;
  int status = 0;
  const bool done = WaitUntil([&] { return waitpid(pid_, &status, WNOHANG) == pid_; },
                              timeout_ms);
  if (!done) return -1;
  pid_ = 0;
  return status;
}

namespace {

// Reads a streamed generation to its end (its context outlives the reader).
Generation ReadGeneration(std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader) {
  Generation g;
  v1::GenerateResponse piece;
  while (reader->Read(&piece)) {
    g.text += piece.text();
    g.token_ids.insert(g.token_ids.end(), piece.token_ids().begin(), piece.token_ids().end());
    if (piece.has_final_stats()) g.stats = piece.final_stats();
  }
  g.status = reader->Finish();
  return g;
}

}  // namespace

Generation Generate(v1::Moetier::Stub& stub, const v1::GenerateRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  return ReadGeneration(stub.Generate(&context, request));
}

Generation Chat(v1::Moetier::Stub& stub, const v1::ChatRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  return ReadGeneration(stub.Chat(&context, request));
}

std::string VectorPath(const std::string& file) {
  return std::string(MOETIER_TEST_DATA_DIR) + "/vectors/" + file;
}

std::vector<int32_t> VectorPromptIds(const std::string& stem, size_t max_ids) {
  std::ifstream in(VectorPath(stem + ".ids"));
  std::vector<int32_t> ids;
  std::string part;
  while (ids.size() < max_ids && std::getline(in, part, ',')) ids.push_back(std::stoi(part));
  return ids;
}

}  // namespace moetier::e2e

#include "supervisor/worker_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "log/daemon_log.h"
#include "store/shared_futex.h"
#include "base/check.h"
#include "store/worker_channel.h"
#include "util/subprocess.h"

extern char** environ;

namespace moetier {
namespace {

constexpr int64_t kHelloTimeoutMs = 2000;

absl::Status ErrnoStatus(int error, std::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrFormat("%s: %s", what, std::strerror(error)));
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrFormat("exited with status %d", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrFormat("was killed by signal %d (%s)%s", WTERMSIG(status),
                           strsignal(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
  }
  return absl::StrFormat("ended with wait status 0x%x", status);
}

uint64_t MsToNs(int64_t ms) { return static_cast<uint64_t>(std::max<int64_t>(ms, 0)) * 1'000'000; }

}  // namespace

std::string_view WorkerPhaseName(WorkerPhase phase) {
  switch (phase) {
    case WorkerPhase::kWaiting: return "waiting";
    case WorkerPhase::kStarting: return "starting";
    case WorkerPhase::kRunning: return "running";
    case WorkerPhase::kStopped: return "stopped";
  }
  return "invalid";
}

absl::StatusOr<std::unique_ptr<WorkerSupervisor>> WorkerSupervisor::Create(
    SupervisorOptions options) {
  if (options.devices.size() > store::kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d devices configured; at most %d workers are supported", options.devices.size(),
        store::kMaxWorkers));
  }
  const std::string& path = options.control_socket_path;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "worker control socket path '%s' must be 1 to %d bytes", path,
        sizeof(address.sun_path) - 1));
  }
  std::memcpy(address.sun_path, path.data(), path.size());

  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(errno, "creating the worker control socket");
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      close(fd);
      return absl::AlreadyExistsError(absl::StrFormat(
          "%s exists and is not a socket; choose another worker_socket_path", path));
    }
    if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
      close(fd);
      return absl::AlreadyExistsError(absl::StrFormat(
          "another moetierd is listening on %s; stop it or choose another worker_socket_path",
          path));
    }
    unlink(path.c_str());  // left behind by a daemon that did not exit cleanly
  }
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoStatus(error, absl::StrFormat("binding the worker control socket %s", path));
  }
  // No connection is accepted before listen(), so the mode is set in time.
  if (chmod(path.c_str(), 0600) != 0 || listen(fd, 16) != 0) {
    const int error = errno;
    close(fd);
    unlink(path.c_str());
    return ErrnoStatus(error, absl::StrFormat("preparing the worker control socket %s", path));
  }

  std::unique_ptr<WorkerSupervisor> s(new WorkerSupervisor());
  s->options_ = std::move(options);
  s->listen_fd_ = fd;
  for (size_t i = 0; i < s->options_.devices.size(); ++i) {
    Worker w;
    w.info.index = static_cast<uint32_t>(i);
    w.info.device = s->options_.devices[i];
    s->workers_.push_back(std::move(w));
  }
  return s;
}

WorkerSupervisor::~WorkerSupervisor() { Stop(); }

void WorkerSupervisor::Start(ExpertStore* store) {
  MOETIER_CHECK(store != nullptr && !thread_.joinable() && !stopped_);
  store_ = store;
  thread_ = std::thread([this] { Loop(); });
}

std::vector<WorkerSnapshot> WorkerSupervisor::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<WorkerSnapshot> out;
  for (const Worker& w : workers_) out.push_back(w.info);
  return out;
}

void WorkerSupervisor::Loop() {
  std::vector<pollfd> fds;
  std::vector<size_t> owners;  // worker index per control fd entry
  while (!stop_.load()) {
    fds.clear();
    owners.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < workers_.size(); ++i) {
        if (workers_[i].control_fd >= 0 && !workers_[i].kill_sent) {
          // With a listener the data is not ours to read; watch for hang-up.
          const short events = options_.on_admitted ? POLLRDHUP : POLLIN;
          fds.push_back({workers_[i].control_fd, events, 0});
          owners.push_back(i);
        }
      }
    }
    const int ready = poll(fds.data(), fds.size(), static_cast<int>(options_.poll_interval_ms));
    if (ready > 0) {
      if (fds[0].revents & POLLIN) AcceptConnection();
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t k = 1; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        Worker& w = workers_[owners[k - 1]];
        if (w.control_fd != fds[k].fd) continue;
        if (options_.on_admitted) {
          if (fds[k].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
            Kill(w, "closed its control channel");
          }
          continue;
        }
        // Nobody listens: anything is drained; end of stream means the
        // worker has ended its term.
        uint8_t buffer[512];
        const ssize_t got = recv(w.control_fd, buffer, sizeof(buffer), MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
          Kill(w, "closed its control channel");
        }
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    Tick(store::MonotonicNowNs());
  }
}

void WorkerSupervisor::Tick(uint64_t now_ns) {
  for (Worker& w : workers_) {
    switch (w.info.phase) {
      case WorkerPhase::kWaiting:
        if (now_ns >= w.next_start_ns) Spawn(w, now_ns);
        break;
      case WorkerPhase::kStarting:
      case WorkerPhase::kRunning:
        CheckWorker(w, now_ns);
        break;
      case WorkerPhase::kStopped:
        break;
    }
  }
}

void WorkerSupervisor::Spawn(Worker& w, uint64_t now_ns) {
  std::vector<std::string> args = {
      options_.worker_executable_path,
      std::string(store::kWorkerFlagDaemonMode),
      absl::StrFormat("%s=%s", store::kWorkerFlagControlSocket, options_.control_socket_path),
      absl::StrFormat("%s=%d", store::kWorkerFlagWorkerIndex, w.info.index),
      absl::StrFormat("%s=%s", store::kWorkerFlagDevice, w.info.device),
      absl::StrFormat("%s=%s", store::kWorkerFlagModel, options_.model_path),
  };
  args.insert(args.end(), options_.worker_extra_args.begin(), options_.worker_extra_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // A worker starts with clean signal state, in its own process group, so
  // a terminal's Ctrl-C reaches only the daemon, which then stops the
  // workers in order.
  posix_spawnattr_t attr;
  InitChildSpawnAttributes(&attr, /*own_process_group=*/true);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  ++w.info.starts;
  if (rc != 0) {
    LogError("cannot start worker %d (%s): %s: %s", w.info.index, w.info.device,
             options_.worker_executable_path, std::strerror(rc));
    w.info.last_exit = absl::StrFormat("could not be started: %s", std::strerror(rc));
    w.info.pid = 0;
    OnExit(w, -1, now_ns);
    return;
  }
  w.info.pid = pid;
  w.info.phase = WorkerPhase::kStarting;
  w.spawned_ns = now_ns;
  w.kill_sent = false;
  LogInfo("started worker %d (%s) as pid %d", w.info.index, w.info.device, pid);
}

void WorkerSupervisor::CheckWorker(Worker& w, uint64_t now_ns) {
  int status = 0;
  const pid_t r = waitpid(w.info.pid, &status, WNOHANG);
  if (r == w.info.pid) {
    OnExit(w, status, now_ns);
    return;
  }
  if (w.kill_sent) return;
  if (w.info.phase == WorkerPhase::kStarting) {
    if (now_ns - w.spawned_ns > MsToNs(options_.handshake_timeout_ms)) {
      Kill(w, absl::StrFormat("did not connect within handshake_timeout_ms=%d",
                              options_.handshake_timeout_ms));
    }
    return;
  }
  const uint64_t beat = store_->WorkerHeartbeatNs(w.info.index);
  if (now_ns > beat && now_ns - beat > MsToNs(options_.heartbeat_timeout_ms)) {
    Kill(w, absl::StrFormat("stopped heartbeating (last beat %d ms ago, heartbeat_timeout_ms=%d)",
                            (now_ns - beat) / 1'000'000, options_.heartbeat_timeout_ms));
    return;
  }
  if (w.consecutive_failures > 0 && now_ns - w.admitted_ns > MsToNs(options_.stable_after_ms)) {
    w.consecutive_failures = 0;  // healthy long enough: the next failure starts over
  }
}

void WorkerSupervisor::Kill(Worker& w, std::string_view why) {
  if (w.info.pid <= 0 || w.kill_sent) return;
  LogWarning("worker %d (%s, pid %d) %s; killing it", w.info.index, w.info.device, w.info.pid,
             why);
  kill(w.info.pid, SIGKILL);
  w.kill_sent = true;
  w.info.last_exit = std::string(why);
}

void WorkerSupervisor::OnExit(Worker& w, int wait_status, uint64_t now_ns) {
  if (wait_status >= 0) {
    const std::string how = DescribeWaitStatus(wait_status);
    w.info.last_exit = w.kill_sent ? absl::StrFormat("%s and %s", w.info.last_exit, how) : how;
  }
  if (w.control_fd >= 0) {
    close(w.control_fd);
    w.control_fd = -1;
  }
  // Its pins and rings go; the experts it used stay resident.
  if (w.admitted_ns != 0) store_->ReleaseWorker(w.info.index);
  const pid_t pid = w.info.pid;
  w.info.pid = 0;
  w.kill_sent = false;
  w.admitted_ns = 0;
  if (stop_.load()) {
    w.info.phase = WorkerPhase::kStopped;
    return;
  }
  ++w.consecutive_failures;
  int64_t delay = options_.restart_backoff_initial_ms;
  for (uint32_t i = 1; i < w.consecutive_failures && delay < options_.restart_backoff_max_ms; ++i) {
    delay *= 2;
  }
  delay = std::min(delay, options_.restart_backoff_max_ms);
  w.info.backoff_history_ms.push_back(delay);
  w.next_start_ns = now_ns + MsToNs(delay);
  w.info.phase = WorkerPhase::kWaiting;
  LogWarning("worker %d (%s, pid %d) %s; restarting it in %d ms (failure %d in a row)",
             w.info.index, w.info.device, pid, w.info.last_exit, delay, w.consecutive_failures);
}

void WorkerSupervisor::AcceptConnection() {
  const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
    LogWarning("refused a control connection: SO_PEERCRED failed: %s", std::strerror(errno));
    ++rejected_connections_;
    close(fd);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Worker* match = nullptr;
  for (Worker& w : workers_) {
    if (w.info.phase == WorkerPhase::kStarting && w.info.pid == cred.pid && !w.kill_sent) {
      match = &w;
    }
  }
  const char* reason = nullptr;
  if (match == nullptr) {
    reason = "it is not a worker this daemon started and is waiting for";
  } else if (cred.uid != geteuid()) {
    reason = "its uid differs from the daemon's";
  }
  if (reason != nullptr) {
    LogWarning("refused a control connection from pid %d (uid %d): %s", cred.pid, cred.uid,
               reason);
    ++rejected_connections_;
    close(fd);
    return;
  }
  Worker& w = *match;
  store::WorkerHello hello{};
  absl::StatusOr<int> extra = store::ReceiveChannelMessage(
      fd, {reinterpret_cast<uint8_t*>(&hello), sizeof(hello)}, kHelloTimeoutMs);
  if (extra.ok() && *extra >= 0) close(*extra);  // workers send no descriptors
  std::string refusal;
  if (!extra.ok()) {
    refusal = std::string(extra.status().message());
  } else if (hello.magic != store::kWorkerHelloMagic) {
    refusal = absl::StrFormat("its hello has magic 0x%08x", hello.magic);
  } else if (hello.layout_version != store::kLayoutVersion) {
    refusal = absl::StrFormat(
        "it was built for store layout version %d, the daemon for %d; install both from one "
        "release",
        hello.layout_version, store::kLayoutVersion);
  } else if (hello.worker_index != w.info.index ||
             std::string_view(hello.device, strnlen(hello.device, sizeof(hello.device))) !=
                 w.info.device) {
    refusal = absl::StrFormat("it introduced itself as worker %d on '%.*s', expected worker %d "
                              "on '%s'",
                              hello.worker_index, static_cast<int>(sizeof(hello.device)),
                              hello.device, w.info.index, w.info.device);
  }
  if (refusal.empty()) {
    const uint32_t epoch = store_->AdmitWorker(w.info.index, cred.pid, w.info.device);
    w.admitted_ns = store::MonotonicNowNs();
    store::DaemonWelcome welcome{};
    welcome.magic = store::kDaemonWelcomeMagic;
    welcome.layout_version = store::kLayoutVersion;
    welcome.worker_index = w.info.index;
    welcome.epoch = epoch;
    welcome.segment_bytes = store_->segment_bytes();
    welcome.model_fingerprint = store_->manifest().fingerprint;
    const absl::Status sent = store::SendChannelMessage(
        fd, {reinterpret_cast<const uint8_t*>(&welcome), sizeof(welcome)}, store_->segment_fd());
    if (sent.ok()) {
      w.control_fd = fd;
      w.info.phase = WorkerPhase::kRunning;
      w.info.epoch = epoch;
      ++w.info.admissions;
      LogInfo("worker %d (%s, pid %d) admitted (epoch %d)", w.info.index, w.info.device,
              cred.pid, epoch);
      if (options_.on_admitted) {
        const int listener_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (listener_fd < 0) {
          Kill(w, absl::StrFormat("could not be handed to the front door (dup: %s)",
                                  std::strerror(errno)));
          return;
        }
        options_.on_admitted(
            AdmittedWorker{w.info.index, w.info.device, cred.pid, epoch, listener_fd});
      }
      return;
    }
    refusal = absl::StrFormat("sending it the store failed: %s", sent.message());
  } else {
    store::DaemonWelcome no{};
    no.magic = store::kDaemonWelcomeMagic;
    no.layout_version = store::kLayoutVersion;
    no.worker_index = w.info.index;
    no.error = EPROTO;
    std::snprintf(no.message, sizeof(no.message), "%s", refusal.c_str());
    store::SendChannelMessage(fd, {reinterpret_cast<const uint8_t*>(&no), sizeof(no)}, -1)
        .IgnoreError();
  }
  close(fd);
  ++rejected_connections_;
  Kill(w, absl::StrFormat("was refused: %s", refusal));
}

void WorkerSupervisor::StopWorkers() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Worker& w : workers_) {
    if (w.info.pid > 0) kill(w.info.pid, SIGTERM);
  }
  const uint64_t deadline = store::MonotonicNowNs() + MsToNs(options_.stop_grace_ms);
  while (true) {
    bool alive = false;
    for (Worker& w : workers_) {
      if (w.info.pid <= 0) continue;
      int status = 0;
      if (waitpid(w.info.pid, &status, WNOHANG) == w.info.pid) {
        OnExit(w, status, store::MonotonicNowNs());
      } else {
        alive = true;
      }
    }
    if (!alive) break;
    if (store::MonotonicNowNs() >= deadline) {
      for (Worker& w : workers_) {
        if (w.info.pid <= 0) continue;
        LogWarning("worker %d (pid %d) ignored SIGTERM for %d ms; killing it", w.info.index,
                   w.info.pid, options_.stop_grace_ms);
        kill(w.info.pid, SIGKILL);
        int status = 0;
        waitpid(w.info.pid, &status, 0);
        OnExit(w, status, store::MonotonicNowNs());
      }
      break;
    }
    usleep(5000);
  }
  for (Worker& w : workers_) w.info.phase = WorkerPhase::kStopped;
}

void WorkerSupervisor::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  StopWorkers();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    unlink(options_.control_socket_path.c_str());
  }
}

}  // namespace moetier

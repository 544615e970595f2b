#include "connection/interrupt.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "base/check.h"

namespace moetier::client {
namespace {

constexpr int kInterruptedExitStatus = 130;

struct InterruptState {
  InterruptState() { MOETIER_CHECK(pipe2(wake, O_CLOEXEC | O_NONBLOCK) == 0); }

  std::mutex mutex;
  int wake[2] = {-1, -1};                 // holds a byte while interrupted
  grpc::ClientContext* active = nullptr;  // the call in flight
  int deferrals = 0;
  int signals = 0;  // since ClearInterrupt
  std::atomic<bool> interrupted{false};
};

InterruptState& State() {
  static InterruptState* state = new InterruptState();
  return *state;
}

[[noreturn]] void ExitInterrupted() {
  std::fflush(stdout);
  std::_Exit(kInterruptedExitStatus);
}

}  // namespace

void InstallInterruptHandler() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  MOETIER_CHECK(pthread_sigmask(SIG_BLOCK, &signals, nullptr) == 0);
  std::thread([signals] {
    while (true) {
      int signal_number = 0;
      if (sigwait(&signals, &signal_number) == 0) DeliverInterrupt();
    }
  }).detach();
}

void DeliverInterrupt() {
  InterruptState& s = State();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.signals;
  s.interrupted.store(true);
  const char byte = 1;
  // Full only when a byte is already there, which is all a reader needs.
  [[maybe_unused]] const ssize_t written = write(s.wake[1], &byte, 1);
  if (s.signals > 1) ExitInterrupted();
  if (s.active != nullptr) {
    s.active->TryCancel();
    return;
  }
  if (s.deferrals == 0) ExitInterrupted();
}

bool Interrupted() { return State().interrupted.load(); }

void ClearInterrupt() {
  InterruptState& s = State();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.signals = 0;
  s.interrupted.store(false);
  char bytes[64];
  while (read(s.wake[0], bytes, sizeof(bytes)) > 0) {
  }
}

int InterruptWakeFd() { return State().wake[0]; }

CancelOnInterrupt::CancelOnInterrupt(grpc::ClientContext* context) {
  InterruptState& s = State();
  std::lock_guard<std::mutex> lock(s.mutex);
  MOETIER_CHECK(s.active == nullptr);
  s.active = context;
  if (s.interrupted.load()) context->TryCancel();
}

CancelOnInterrupt::~CancelOnInterrupt() {
  InterruptState& s = State();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.active = nullptr;
}

DeferInterrupt::DeferInterrupt() {
  InterruptState& s = State();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.deferrals;
}

DeferInterrupt::~DeferInterrupt() {
  InterruptState& s = State();
  std::lock_guard<std::mutex> lock(s.mutex);
  --s.deferrals;
}

}  // namespace moetier::client

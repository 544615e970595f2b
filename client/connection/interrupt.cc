#include "connection/interrupt.h"

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
  std::mutex mutex;
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
}

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

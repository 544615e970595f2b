// Ctrl-C: the first SIGINT (or SIGTERM) cancels the call in flight, which
// makes the daemon stop its generation and free the sequence. With no call
// in flight and nothing to clean up, or on a second signal, the process
// exits at once with status 130.
#pragma once

#include "grpcpp/client_context.h"

namespace moetier::client {

// Blocks SIGINT and SIGTERM in every thread and waits for them on a thread
// of its own. Call once, first thing in main, before any other thread starts.
void InstallInterruptHandler();

// What that thread does on a signal; tests call it directly.
void DeliverInterrupt();

// Whether a signal arrived since the last ClearInterrupt().
bool Interrupted();
void ClearInterrupt();

// A descriptor that is readable from an interrupt until ClearInterrupt(),
// so a thread blocked on input (the chat's prompt) can poll it with stdin:
// the signal thread cannot interrupt a read() of another thread.
int InterruptWakeFd();

// While it lives, an interrupt cancels `context` instead of exiting.
class CancelOnInterrupt {
 public:
  explicit CancelOnInterrupt(grpc::ClientContext* context);
  ~CancelOnInterrupt();
  CancelOnInterrupt(const CancelOnInterrupt&) = delete;
  CancelOnInterrupt& operator=(const CancelOnInterrupt&) = delete;
};

// While it lives, an interrupt only sets Interrupted(): the owner polls it
// and cleans up (moetier run stops its private daemon). A second interrupt
// still exits.
class DeferInterrupt {
 public:
  DeferInterrupt();
  ~DeferInterrupt();
  DeferInterrupt(const DeferInterrupt&) = delete;
  DeferInterrupt& operator=(const DeferInterrupt&) = delete;
};

}  // namespace moetier::client

// Ending a server-streaming call whose Read() returned false.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "grpcpp/support/sync_stream.h"

namespace moetier::client {

// How long Finish() may take once Read() has returned false. A stream that
// ended has its status at hand; the wait only runs out in the case below.
inline constexpr int kFinishGraceMs = 2000;

// Read() also returns false when a message arrives that does not parse (a
// proto3 string that is not valid UTF-8, say); gRPC then never delivers the
// call's status and Finish() would wait forever. So Finish() gets
// kFinishGraceMs, after which the call is cancelled and the error says why.
template <typename R>
grpc::Status FinishStream(grpc::ClientContext* call, grpc::ClientReader<R>* reader) {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  bool gave_up = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mutex);
    if (!finished.wait_for(lock, std::chrono::milliseconds(kFinishGraceMs), [&] { return done; })) {
      gave_up = true;
      call->TryCancel();
    }
  });
  grpc::Status status = reader->Finish();
  {
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
  }
  finished.notify_one();
  watchdog.join();
  if (gave_up) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "the daemon sent a message this client cannot parse (see the protobuf "
                        "error above); the stream was cancelled");
  }
  return status;
}

}  // namespace moetier::client

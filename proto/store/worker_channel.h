// How a worker joins the daemon. The daemon listens on a unix socket
// (SOCK_SEQPACKET, mode 0600); a worker it spawned connects, sends a
// WorkerHello, and receives a DaemonWelcome with the store segment's fd
// attached (SCM_RIGHTS). The daemon checks the connecting process with
// SO_PEERCRED first: its pid must be a worker the daemon spawned and is
// waiting for, its uid the daemon's. A socketpair cannot carry that check
// (SO_PEERCRED on a socketpair names its creator, the daemon itself), which
// is why the socket is a named one. The connection stays open as the
// worker's control channel; either side closing it ends the worker's term.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/store_layout.h"

namespace moetier::store {

// Command line the daemon gives every worker it spawns (the worker's
// daemon mode parses exactly these; extra configured arguments follow).
inline constexpr std::string_view kWorkerFlagDaemonMode = "--daemon";
inline constexpr std::string_view kWorkerFlagControlSocket = "--control-socket";  // =PATH
inline constexpr std::string_view kWorkerFlagWorkerIndex = "--worker-index";      // =N
inline constexpr std::string_view kWorkerFlagDevice = "--device";                 // =cpu|cuda:N
inline constexpr std::string_view kWorkerFlagModel = "--model";                   // =PATH
// Run once by the daemon before it fills its store: exits 0 when the worker
// can serve the model, else prints why (one line on stderr) and exits
// kWorkerCheckModelRefused.
inline constexpr std::string_view kWorkerFlagCheckModel = "--check-model";  // =PATH
inline constexpr int kWorkerCheckModelRefused = 2;

// "MTWH" / "MTDW" as little-endian u32.
inline constexpr uint32_t kWorkerHelloMagic = 0x4857544Du;
inline constexpr uint32_t kDaemonWelcomeMagic = 0x5744544Du;

struct WorkerHello {
  uint32_t magic;           // kWorkerHelloMagic
  uint32_t layout_version;  // kLayoutVersion the worker was built with
  int32_t pid;
  uint32_t worker_index;
  char device[kDeviceNameBytes];
  uint64_t reserved[4];
};
static_assert(sizeof(WorkerHello) == 80);

struct DaemonWelcome {
  uint32_t magic;  // kDaemonWelcomeMagic
  uint32_t layout_version;
  uint32_t worker_index;
  uint32_t epoch;
  uint64_t segment_bytes;
  uint64_t model_fingerprint;
  int32_t error;            // 0: admitted, the segment fd is attached; else an errno value
  uint32_t reserved0;
  char message[128];        // why the worker was refused, NUL-terminated
};
static_assert(sizeof(DaemonWelcome) == 168);

// Sends exactly `bytes` as one message, with `pass_fd` attached when >= 0.
absl::Status SendChannelMessage(int socket_fd, std::span<const uint8_t> bytes, int pass_fd);

// Receives one message of exactly out.size() bytes within timeout_ms
// (< 0: no limit). Returns the attached fd (close-on-exec) or -1 if none.
absl::StatusOr<int> ReceiveChannelMessage(int socket_fd, std::span<uint8_t> out,
                                          int64_t timeout_ms);

struct DaemonAdmission {
  int control_fd = -1;  // the open control channel; the caller owns it
  int segment_fd = -1;  // the store segment; the caller owns it
  DaemonWelcome welcome{};
};

// Worker side of the handshake: connect to `socket_path`, introduce
// ourselves as `worker_index` on `device`, receive the segment.
absl::StatusOr<DaemonAdmission> JoinDaemon(const std::string& socket_path,
                                           uint32_t worker_index, std::string_view device,
                                           int64_t timeout_ms);

}  // namespace moetier::store

// Sending and receiving the control protocol (moetier/worker/v1/control.proto)
// on a worker's control channel: one serialized message per SOCK_SEQPACKET
// datagram, so no framing is needed and a half-written message can never be
// read. The socket buffers are raised so a datagram of the maximum size fits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"

namespace moetier::control {

// The largest datagram either side sends. Logits are chunked to stay below.
inline constexpr size_t kMaxControlMessageBytes = size_t{64} << 10;
// Floats per LogitsChunk: leaves room for the message's other fields.
inline constexpr size_t kLogitsChunkFloats = (kMaxControlMessageBytes - 256) / sizeof(float);

// Raises SO_SNDBUF/SO_RCVBUF so that several maximum-size datagrams can be
// queued (best effort: the kernel may cap it).
void ConfigureControlSocket(int socket_fd);

// Sends `message` as one datagram. InvalidArgument when it serializes to more
// than kMaxControlMessageBytes; Unavailable when the peer has gone.
absl::Status SendControlMessage(int socket_fd, const google::protobuf::MessageLite& message);

// Waits up to timeout_ms (< 0: forever; 0: only what is queued) for one
// datagram and parses it into `message`. DeadlineExceeded when none came,
// Unavailable when the peer closed the channel, DataLoss when the datagram
// is not a valid message (or was truncated).
absl::Status ReceiveControlMessage(int socket_fd, google::protobuf::MessageLite* message,
                                   int64_t timeout_ms);

}  // namespace moetier::control

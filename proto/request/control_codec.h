// The request settings of request/ on the worker control protocol
// (moetier/worker/v1/control.proto): the daemon encodes, the worker decodes,
// and a value comes out exactly as it went in. Decoding checks the message's
// shape (every field present, an enum value this build knows), never the
// values: those were checked where the request entered the system.
#pragma once

#include "absl/status/statusor.h"
#include "moetier/worker/v1/control.pb.h"
#include "request/sampling_params.h"
#include "request/stop_reason.h"

namespace moetier {

namespace control_v1 = ::moetier::worker::v1;

// Every field set, to exactly the value in `params`.
control_v1::Sampling SamplingToControl(const SamplingParams& params);

// The values as sent; INVALID_ARGUMENT naming the first field the message
// lacks.
absl::StatusOr<SamplingParams> SamplingFromControl(const control_v1::Sampling& sampling);

control_v1::StopReason StopReasonToControl(StopReason reason);

// INVALID_ARGUMENT for STOP_UNSPECIFIED and for values this build does not
// know.
absl::StatusOr<StopReason> StopReasonFromControl(control_v1::StopReason reason);

}  // namespace moetier

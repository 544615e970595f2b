// Why a request ended, as every process holds it: the worker's generate
// loop and control server produce it, the daemon's scheduler and front door
// read it. The two wire enums (moetier.worker.v1.StopReason and
// moetier.v1.StopReason) are converted to and from it at their protocol
// boundaries only (request/control_codec.h; the front door for the API).
#pragma once

#include <cstdint>

namespace moetier {

enum class StopReason : uint8_t {
  kEndOfGeneration,  // a stop token was sampled (and reported)
  kMaxTokens,        // max_new_tokens were generated
  kContextFull,      // prompt + generated tokens filled the sequence
  kCancelled,        // cancelled (a Cancel, a closed channel, a client gone)
  kError,            // failed; the error says why
  kComplete,         // a Score or an expert-cache resize finished
};

}  // namespace moetier

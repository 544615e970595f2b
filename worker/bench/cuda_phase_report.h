// How the CUDA benchmarks say where a run's device time went, from the
// engine's phase timers (blocks/cuda/phase_timeline.h).
#pragma once

#include <string>

#include "blocks/cuda/phase_timeline.h"

namespace moetier {

// "<what> device time by phase (...): experts 41.2% (0.512 ms/token), ...":
// the phases with any time, largest first, each as a share of the timed
// calls' wall time and per token, then what the phases leave of the wall
// time (the host between passes: launches, sampling, bookkeeping).
std::string CudaPhaseLine(const char* what, const CudaPhaseSeconds& seconds, double wall_s,
                          int tokens);

}  // namespace moetier

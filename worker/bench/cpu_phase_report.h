// How the CPU engine's benchmarks say where a run's time went, from the
// engine's per-phase timers (blocks/cpu/mat_runner.h, CpuPhase).
#pragma once

#include <string>

#include "blocks/cpu/mat_runner.h"

namespace moetier {

// Where a run's time went: every phase ("<what> time by phase: name x%,
// ..."), then by the blocks of the architecture: each mixer (its projections
// and its own work), the routed experts (router, fetch and projections), the
// shared expert and the output projection; blocks the model lacks are left
// out of that line.
void PrintPhases(const char* what, const CpuPhaseSeconds& seconds, const std::string& label);

}  // namespace moetier

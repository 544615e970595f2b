// Linked only when the build has no cpu engine library, so that asking for
// the cpu backend gives a clear error rather than a link failure.
#include "engine/forward_engine.h"

namespace moetier {

absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCpuEngine(const Qwen3MoeModel& /*model*/,
                                                               const EngineOptions& /*options*/) {
  return absl::UnimplementedError(
      "the cpu backend is not built into this moetier-worker; use --backend reference");
}

}  // namespace moetier

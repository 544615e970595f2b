// moetier-worker --standalone: load a GGUF file, build one engine and score,
// tokenize or generate without the daemon.
#pragma once

#include <cstdio>

#include "absl/status/status.h"
#include "standalone/options.h"

namespace moetier {

// Runs the command `options` describes (options.standalone is set and the
// mode is complete). Results go to `out` (token ids, generated text) or the
// --logits-out file; progress notes go to `err`.
absl::Status RunStandalone(const WorkerOptions& options, std::FILE* out, std::FILE* err);

}  // namespace moetier

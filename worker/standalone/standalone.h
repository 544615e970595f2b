// moetier-worker --standalone: load a GGUF file, build one engine and score,
// tokenize or generate without the daemon.
#pragma once

#include <cstdio>

#include "absl/status/status.h"
#include "standalone/options.h"

namespace moetier {

// Runs the command `options` describes, as ParseWorkerArgs returned it
// (options.standalone is set, the mode is complete, the sampling settings
// are checked). Token ids and the context length depend on the model and
// are checked here, once, before any engine call. Results go to `out`
// (token ids, generated text) or the --logits-out file; progress notes go
// to `err`.
absl::Status RunStandalone(const WorkerOptions& options, std::FILE* out, std::FILE* err);

}  // namespace moetier

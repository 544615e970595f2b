// The small synthetic model `moetier run` uses when given none: written once
// by moetier-synth into the user's cache directory, then reused.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/statusor.h"

namespace moetier::client {

// $XDG_CACHE_HOME/moetier, else $HOME/.cache/moetier; "" when neither is set.
std::string CacheDirectory(const char* xdg_cache_home, const char* home);

// The file name inside the cache directory.
inline constexpr const char* kSyntheticModelName = "synthetic-small-q4_k_m-seed1.gguf";

// Returns the cached model's path, writing it with `synth_path` first if it
// is not there (to a temporary name, renamed when complete, so an
// interrupted run never leaves half a model behind).
absl::StatusOr<std::string> EnsureSyntheticModel(const std::string& synth_path,
                                                 const std::string& cache_dir, std::ostream& err);

}  // namespace moetier::client

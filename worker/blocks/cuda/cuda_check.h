// CUDA runtime errors as absl::Status, for the CUDA engine's own .cc files
// (blocks/cuda/*.cc, engine/cuda_engine.cc, cuda_engine_factory.cc). Not a
// public header: it includes the CUDA runtime API, which the engine's
// public headers keep out of their users.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"

namespace moetier {

// OK for cudaSuccess; otherwise an Internal error "<context><what> failed:
// <CUDA's message>". Clears a non-sticky error, so that the next call starts
// clean (a sticky one, a kernel fault, stays and fails every later call).
inline absl::Status CudaCall(cudaError_t err, absl::string_view what,
                             absl::string_view context = {}) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(context, what, " failed: ", cudaGetErrorString(err)));
}

}  // namespace moetier

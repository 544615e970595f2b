// The tensor types moetier can run, checked over a whole file at once so
// that a file in an unsupported quantization is refused with one message
// listing every offending type, instead of at its first tensor.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "gguf/gguf_reader.h"

namespace moetier {

// "F32, F16, Q4_0, ..." — the types with a codec, in ggml id order.
std::string SupportedTypeNames();

// Unimplemented when any tensor of `gguf` has a type without a codec: the
// message names the file, each such type with its tensor count and one
// tensor of it, the supported types and how to convert the file. Also
// Unimplemented when any tensor is a separate scale of another
// ("blk.N.ffn_up_exps.scale" and the like), which llama.cpp multiplies into
// that tensor's products: the message names the count and one of them.
absl::Status CheckDecodableTypes(const GgufModel& gguf);

}  // namespace moetier

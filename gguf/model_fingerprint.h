// A 64-bit identity of a model's files, stored in the segment header so a
// worker can tell it is attached to the store of the model it expects.
// Covers each shard's size and every tensor's name, type, shape, shard and
// file offset; it does not read tensor bytes (cheap on a 20 GB model).
#pragma once

#include <cstdint>

#include "gguf/gguf_reader.h"

namespace moetier::store {

uint64_t ModelFingerprint(const GgufModel& model);

}  // namespace moetier::store

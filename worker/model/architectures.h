// The registry of architectures: general.architecture -> the file that
// reads it (model/<arch>.cc). Adding an architecture is one file with one
// Load function, listed in architectures.cc.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"

namespace moetier {

class ModelLoader;

struct Architecture {
  std::string_view name;         // general.architecture
  std::string_view description;  // the models it covers, for messages and docs
  absl::StatusOr<Model> (*load)(const ModelLoader& loader);
};

// Every architecture this build reads, in the order they are listed to users.
std::span<const Architecture> SupportedArchitectures();
// "qwen3moe (Qwen3-30B-A3B, ...), olmoe (...), ..." for error messages.
std::string SupportedArchitectureList();

// Reads the hyperparameters, the layer plan and every tensor of the file's
// architecture, checking names, shapes and that each type has a codec. An
// unknown general.architecture is refused with the list of supported ones,
// a file holding any undecodable type with all of them at once
// (CheckDecodableTypes).
// Errors name the key or tensor and what is wrong. The returned pointers are
// valid while `gguf` lives.
absl::StatusOr<Model> LoadModel(const GgufModel& gguf);

// Opens `path` and runs LoadModel over it, which reads the header and
// tensor table only: the verdict on whether this build can serve the file,
// in the time it takes to map it, whatever its size.
absl::Status CheckModelFile(const std::string& path);

}  // namespace moetier

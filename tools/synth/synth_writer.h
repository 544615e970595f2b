// Plans and streams a synthetic GGUF (one file or a split set) with
// bounded memory: each tensor is generated in chunks of rows from its own
// counter-based random stream, quantized by several threads, and appended
// while the next chunk is being computed. Output bytes depend only on the
// options that shape the model and the seed, never on chunking or threads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor/tensor_type.h"
#include "synth/synth_model.h"

namespace moetier {

inline constexpr int64_t kSynthDefaultChunkElems = int64_t{1} << 22;
inline constexpr int kSynthMaxThreads = 256;
inline constexpr int64_t kSynthMaxShards = 65535;  // split.count is UINT16

struct SynthOptions {
  SynthShape shape;
  SynthQuant quant = SynthQuant::kF32;
  // When set, every tensor the mix writes in a block type becomes this type
  // instead, where its rows are whole blocks of it (the others keep the
  // mix's type): one file per quantization moetier decodes, for tests.
  // general.file_type stays the mix's. Must be a block type with a codec.
  std::optional<TensorType> matrix_type;
  // Then, per tensor, the first rule whose name_part occurs in its name sets
  // its type (llama-quantize's --tensor-type): any type with a codec whose
  // block divides the tensor's rows. A rule that matches no tensor, or a
  // tensor whose rows do not fit, is an error.
  struct TensorTypeRule {
    std::string name_part;
    TensorType type;
  };
  std::vector<TensorTypeRule> tensor_types;
  uint64_t seed = 0;
  std::string name;      // general.name; a descriptive default when empty
  std::string out_path;  // the file, or "<prefix>.gguf" of a split set
  int64_t split_max_tensors = 0;  // > 0: at most this many tensors per shard
  int64_t split_count = 0;        // > 0: exactly this many shards, balanced by bytes
  int threads = 1;                // threads that generate and quantize
  int64_t chunk_elems = kSynthDefaultChunkElems;  // elements per unit of work
};

struct SynthShardPlan {
  std::string path;
  size_t first_tensor = 0;
  size_t tensor_count = 0;
  uint64_t file_bytes = 0;  // exact size of the finished file
};

struct SynthPlan {
  std::vector<GgufKeyValue> metadata;  // model metadata, without split.* keys
  std::vector<SynthTensor> tensors;    // file order across all shards
  std::vector<SynthShardPlan> shards;
  bool split = false;                  // shards carry split.* keys and -0000i-of-0000N names
  uint64_t total_file_bytes = 0;       // sum over shards
  uint64_t tensor_bytes = 0;           // sum of tensor sizes, padding excluded
  std::vector<std::pair<TensorType, uint64_t>> bytes_by_type;  // ascending type id
};

// Validates the options and lays out the files; writes nothing.
absl::StatusOr<SynthPlan> PlanSynthModel(const SynthOptions& options);

// Fails with RESOURCE_EXHAUSTED, naming both numbers, when the file system of
// `directory` has fewer than `needed_bytes` available to this user.
// `reclaimable_bytes` (files about to be overwritten) count as available.
absl::Status CheckFreeSpace(const std::string& directory, uint64_t needed_bytes,
                            uint64_t reclaimable_bytes = 0);

// Called after every appended chunk with tensor bytes done and in total.
using SynthProgressFn = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

// Checks free space, then writes every shard of `plan`. On failure the files
// written so far are removed. `options` must be the ones `plan` came from.
absl::Status WriteSynthModel(const SynthPlan& plan, const SynthOptions& options,
                             const SynthProgressFn& progress = nullptr);

// Encodes rows [first_row, first_row + n_rows) of `tensor` (rows of ne[0]
// elements, counted across all higher dimensions) into `dst`, which holds
// n_rows * TensorRowBytes(tensor.type, ne[0]) bytes. `scratch` is resized
// as needed. Exposed so tests can recompute any slice of a tensor.
void EncodeSynthRows(const SynthTensor& tensor, uint64_t seed, int64_t first_row, int64_t n_rows,
                     uint8_t* dst, std::vector<float>& scratch);

}  // namespace moetier

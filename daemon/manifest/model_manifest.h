// What the daemon needs to know about a model to build its store: the
// hyperparameters, the dense tensors, and for every (layer, expert) the file
// ranges of its gate, up and down matrices (SPEC.md §1.7: expert e of a
// {K, N, n_expert} tensor starts at e·N·row_bytes; a fused ffn_gate_up_exps
// holds gate in its first n_ff_exp rows and up in the next n_ff_exp).
//
// Where those bytes go in memory is the store's business
// (store/expert_placement.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gguf/gguf_reader.h"
#include "store/store_layout.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {

struct FileRange {
  uint32_t shard = 0;   // index into ModelManifest::shard_paths
  uint64_t offset = 0;  // absolute, in that shard's file
  uint64_t size = 0;
};

// Where one matrix (gate, up or down) of an expert lies within a read.
struct SliceInRead {
  uint32_t read_index = 0;  // which of ExpertReadPlan::reads
  uint64_t offset_in_read = 0;
  uint64_t size = 0;
};

// The file ranges holding one expert (2 with a fused gate_up tensor, else
// 3) and where its gate, up and down matrices lie in them.
struct ExpertReadPlan {
  std::array<FileRange, 3> reads;
  uint32_t n_reads = 0;
  std::array<SliceInRead, 3> slices;  // gate, up, down
};

// Where one tensor's per-expert matrices live: expert e's bytes of this
// source start at expert0_offset + e * expert_stride.
struct ExpertSource {
  uint32_t shard = 0;
  uint64_t expert0_offset = 0;
  uint64_t expert_stride = 0;
  uint64_t size = 0;  // bytes read per expert
};

struct ManifestLayer {
  store::LayerDesc desc{};             // shapes; expert_bytes == 0: no routed experts
  std::vector<ExpertSource> sources;   // 2 or 3 (gate_up + down, or gate + up + down)
  std::array<uint32_t, 3> slice_source{};        // gate, up, down: index into sources
  std::array<uint64_t, 3> slice_offset_in_source{};
};

struct DenseTensor {
  std::string name;
  TensorType type = TensorType::kF32;
  uint32_t n_dims = 0;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};
  uint32_t shard = 0;
  uint64_t file_offset = 0;
  uint64_t size_bytes = 0;
};

struct ModelManifest {
  store::ModelHparams hparams{};
  uint64_t fingerprint = 0;
  std::vector<std::string> shard_paths;
  std::vector<uint64_t> shard_sizes;
  uint32_t n_layer = 0;  // layers of the expert table (block_count less nextn_predict_layers)
  uint32_t n_expert = 0;
  std::vector<ManifestLayer> layers;
  std::vector<DenseTensor> dense;
  uint64_t total_expert_bytes = 0;   // every expert of every layer
  uint64_t max_expert_bytes = 0;
  uint64_t dense_bytes = 0;          // sum of dense tensor sizes
  uint64_t expert_count = 0;         // experts that have bytes

  bool HasExperts(uint32_t layer) const { return layers[layer].desc.expert_bytes != 0; }
  // Precondition: layer < n_layer, expert < n_expert, HasExperts(layer).
  ExpertReadPlan PlanExpertReads(uint32_t layer, uint32_t expert) const;
};

// Builds the manifest of an opened model (a single file or a split set).
// Errors name the tensor or key and what is wrong with it.
absl::StatusOr<ModelManifest> BuildModelManifest(const GgufModel& model);

}  // namespace moetier

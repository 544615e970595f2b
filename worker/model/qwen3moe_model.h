// qwen3moe (Qwen3-30B-A3B and kin): hyperparameters and the weight table,
// read from a GGUF model (SPEC.md §3.0–3.1). The weights stay in the file's
// own encoding; WeightRef points into the read-only mapping (or, in a worker
// fed by the daemon, into the shared expert store).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gguf/gguf_reader.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {

struct Qwen3MoeHparams {
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;        // attention.key_length (== value_length)
  int n_expert = 0;
  int n_expert_used = 0;   // top-k
  int n_ff_exp = 0;        // expert_feed_forward_length
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-6f;
};

// One weight tensor as stored: ne[0] is the input dimension (contiguous),
// ne[1] the output rows, ne[2] the expert index for 3-D expert tensors.
struct WeightRef {
  std::string name;
  TensorType type = TensorType::kF32;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};
  const uint8_t* data = nullptr;
  uint64_t row_bytes = 0;            // bytes of one ne[0] row
  uint64_t expert_stride_bytes = 0;  // bytes from expert e to e+1 (3-D tensors)

  int64_t rows() const { return ne[1]; }
  int64_t cols() const { return ne[0]; }
  // Start of expert e's [rows x cols] matrix.
  const uint8_t* expert(int64_t e) const { return data + e * expert_stride_bytes; }
  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
};

struct Qwen3MoeLayerWeights {
  WeightRef attn_norm;      // {n_embd}
  WeightRef attn_q;         // {n_embd, n_head*head_dim}
  WeightRef attn_k;         // {n_embd, n_head_kv*head_dim}
  WeightRef attn_v;         // {n_embd, n_head_kv*head_dim}
  WeightRef attn_output;    // {n_head*head_dim, n_embd}
  WeightRef attn_q_norm;    // {head_dim}
  WeightRef attn_k_norm;    // {head_dim}
  WeightRef ffn_norm;       // {n_embd}
  WeightRef ffn_gate_inp;   // router {n_embd, n_expert}
  // Expert matrices; for a fused ffn_gate_up_exps tensor, gate and up refer
  // to the two halves of each expert's rows (same data, offset rows).
  WeightRef ffn_gate_exps;  // {n_embd, n_ff_exp, n_expert}
  WeightRef ffn_up_exps;    // {n_embd, n_ff_exp, n_expert}
  WeightRef ffn_down_exps;  // {n_ff_exp, n_embd, n_expert}
};

struct Qwen3MoeWeights {
  WeightRef token_embd;   // {n_embd, n_vocab}
  WeightRef output_norm;  // {n_embd}
  WeightRef output;       // {n_embd, n_vocab}; == token_embd when tied
  bool output_tied = false;
  std::vector<Qwen3MoeLayerWeights> layers;
};

struct Qwen3MoeModel {
  Qwen3MoeHparams hparams;
  Qwen3MoeWeights weights;
};

// Reads hyperparameters and resolves every tensor, checking names, shapes and
// that each type has a codec. Errors name the key or tensor and what is wrong.
// The returned pointers are valid while `gguf` lives.
absl::StatusOr<Qwen3MoeModel> LoadQwen3Moe(const GgufModel& gguf);

}  // namespace moetier

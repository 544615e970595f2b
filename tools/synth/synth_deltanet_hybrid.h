// What the two hybrid architectures, qwen35moe (Qwen3.6-35B-A3B) and
// qwen3next (Qwen3-Next-80B-A3B), share (SPEC.md §3.3-3.4): layer i is gated
// full attention when (i + 1) % full_attention_interval == 0 and a Gated
// DeltaNet layer otherwise, every layer with a routed-expert FFN plus a
// sigmoid-gated shared expert. Their files differ in the DeltaNet input
// projections, the rope keys and the tokenizer; each architecture file
// passes its own.
//
// Norm weights the converter stores as 1 + w (attn_norm,
// post_attention_norm, output_norm, attn_q_norm, attn_k_norm) and ssm_norm,
// stored raw but initialised to ones in HF, are all drawn near 1; ssm_a is
// stored negated, -exp(A_log), and is drawn as -exp(U(0, ln 16)), the range
// of HF's A initialisation.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gguf/tensor/tensor_type.h"
#include "synth/synth_arch.h"
#include "synth/synth_model.h"

namespace moetier {

// How a file lays out a DeltaNet layer's input projections.
enum class SynthDeltaNetProjections {
  kSeparate,        // qwen35moe: attn_qkv, attn_gate, ssm_beta, ssm_alpha
  kFusedBetaAlpha,  // qwen3next: attn_qkv, attn_gate, ssm_ba
  kLegacySsmIn,     // early qwen3next files: ssm_in (q, k, v, z per key head), ssm_ba
};

bool SynthIsFullAttentionLayer(const SynthShape& s, int64_t layer);

// The checks both share (interval, shared ffn, rope dims, DeltaNet sizes).
absl::Status ValidateSynthDeltaNetHybrid(const SynthShape& s);

// The type of one tensor. q4_k_m follows llama-quantize (SynthLlamaQ4KMType):
// attn_qkv, ssm_in and attn_v are attention-v-like, one per layer,
// ffn_down_exps and ffn_down_shexp are ffn_down. q8_0-f32 reproduces the
// tensor-type shares of a dynamic ("UD") 4-bit file: F32 for everything
// llama-quantize leaves alone plus ssm_alpha, ssm_beta and ssm_ba; Q8_0 for
// token_embd, output and every non-expert matrix; experts Q4_K (gate/up) and
// Q5_K (down), with layer 0's three expert tensors and the last layer's
// ffn_down_exps at Q6_K.
TensorType SynthDeltaNetHybridType(const SynthShape& s, SynthQuant quant, const SynthTensor& t);

// The tensor table in the converter's order.
std::vector<SynthTensor> PlanSynthDeltaNetHybrid(const SynthShape& s, SynthQuant quant,
                                                 SynthDeltaNetProjections projections);

// The architecture keys from block_count to full_attention_interval, with
// rope.dimension_sections when `rope_sections` (qwen35moe's IMROPE).
void AddSynthDeltaNetHybridKeys(const SynthShape& s, bool rope_sections, SynthMetadata& md);

}  // namespace moetier

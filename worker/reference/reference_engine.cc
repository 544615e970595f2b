#include "reference/reference_engine.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

namespace moetier {
namespace {

uint64_t MatrixBytes(const WeightRef& ref) {
  return static_cast<uint64_t>(ref.ne[0] * ref.ne[1] * ref.ne[2]) * sizeof(float);
}

}  // namespace

uint64_t ReferenceWeightBytes(const Model& model) {
  uint64_t bytes = 0;
  for (const WeightRef* ref : WeightRefs(model.weights, /*include_experts=*/true)) {
    bytes += MatrixBytes(*ref);
  }
  return bytes;
}

absl::StatusOr<std::unique_ptr<ReferenceEngine>> ReferenceEngine::Create(const Model& model,
                                                                         int max_ctx) {
  const ModelHparams& hp = model.hparams;
  if (max_ctx < 1 || max_ctx > hp.n_ctx_train) {
    return absl::InvalidArgumentError(
        absl::StrFormat("context length %d is outside 1..%d (the model's training context)",
                        max_ctx, hp.n_ctx_train));
  }
  uint64_t kv_bytes = 0;
  for (const LayerWeights& l : model.weights.layers) {
    if (IsAttention(l.mixer)) {
      kv_bytes += 2ull * static_cast<uint64_t>(max_ctx) * hp.n_head_kv * hp.head_dim * sizeof(float);
    }
  }
  const uint64_t need = ReferenceWeightBytes(model) + kv_bytes;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    const uint64_t have = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
    if (need > have) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the fp32 reference needs %.1f GiB for this model (weights as fp32 plus a %d-token "
          "KV cache) but the machine has %.1f GiB; use a smaller model or another backend",
          need / 1073741824.0, max_ctx, have / 1073741824.0));
    }
  }
  return std::unique_ptr<ReferenceEngine>(new ReferenceEngine(model, max_ctx));
}

ReferenceEngine::ReferenceEngine(const Model& model, int max_ctx)
    : hp_(model.hparams), max_ctx_(max_ctx), slots_(this, 1, max_ctx) {
  const ModelWeights& w = model.weights;
  token_embd_ = reference::DequantizeMatrix(w.token_embd);
  output_norm_ = reference::DequantizeVector(w.output_norm);
  output_ = reference::DequantizeMatrix(w.output);
  for (const LayerWeights& src : w.layers) {
    Layer l;
    l.attn_norm = reference::DequantizeVector(src.attn_norm);
    l.ffn_norm = reference::DequantizeVector(src.ffn_norm);
    switch (src.mixer) {
      case MixerKind::kAttention:
      case MixerKind::kGatedAttention:
        l.attention = std::make_unique<reference::Attention>(hp_, src, max_ctx);
        break;
      case MixerKind::kGatedDeltaNet:
        l.deltanet = std::make_unique<reference::GatedDeltaNet>(hp_, src);
        break;
    }
    if (HasRoutedExperts(src.ffn)) {
      l.moe = std::make_unique<reference::Moe>(hp_, src);
    } else {
      l.dense =
          std::make_unique<reference::SwigluFfn>(src.dense.gate, src.dense.up, src.dense.down);
    }
    layers_.push_back(std::move(l));
  }
  x_.resize(hp_.n_embd);
  xn_.resize(hp_.n_embd);
  sub_out_.resize(hp_.n_embd);
  logits_.resize(hp_.n_vocab);
}

absl::Status ReferenceEngine::Forward(Sequence& seq, std::span<const int32_t> tokens,
                                      LogitRows host_rows, float* host_logits) {
  have_logits_ = false;
  if (absl::Status s = slots_.CheckTokens(seq, tokens, hp_.n_vocab); !s.ok()) return s;
  if (host_rows != LogitRows::kNone && host_logits == nullptr) {
    return absl::InvalidArgumentError("no logits buffer");
  }
  const size_t n = tokens.size();
  const size_t row_bytes = static_cast<size_t>(hp_.n_vocab) * sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    ForwardToken(tokens[i], seq.length(), host_rows == LogitRows::kAll || i + 1 == n);
    // The cache now holds exactly positions 0..length.
    slots_.SetLength(seq, seq.length() + 1);
    if (host_rows == LogitRows::kAll) {
      std::memcpy(host_logits + i * static_cast<size_t>(hp_.n_vocab), logits_.data(), row_bytes);
    }
  }
  if (host_rows == LogitRows::kLast) std::memcpy(host_logits, logits_.data(), row_bytes);
  have_logits_ = true;
  return absl::OkStatus();
}

absl::Status ReferenceEngine::SkipPositions(Sequence& seq, int n) {
  if (n < 0) return absl::InvalidArgumentError("a negative number of positions to skip");
  if (absl::Status s = slots_.CheckAppend(seq, static_cast<size_t>(n)); !s.ok()) return s;
  have_logits_ = false;
  slots_.SetLength(seq, seq.length() + n);
  return absl::OkStatus();
}

absl::Status ReferenceEngine::SaveCheckpoint(Sequence& seq) {
  if (absl::Status s = slots_.CheckAppend(seq, 0); !s.ok()) return s;
  for (Layer& l : layers_) {
    if (l.deltanet != nullptr) l.deltanet->SaveState();
  }
  slots_.SetCheckpoint(seq, seq.length());
  return absl::OkStatus();
}

absl::Status ReferenceEngine::RestoreCheckpoint(Sequence& seq) {
  if (absl::Status s = slots_.CheckAppend(seq, 0); !s.ok()) return s;
  if (seq.checkpoint_length() < 0) {
    return absl::FailedPreconditionError("the sequence has no checkpoint to restore");
  }
  for (Layer& l : layers_) {
    if (l.deltanet != nullptr) l.deltanet->RestoreState();
  }
  slots_.SetLength(seq, seq.checkpoint_length());
  have_logits_ = false;
  return absl::OkStatus();
}

absl::StatusOr<int32_t> ReferenceEngine::Sample(Sampler& sampler) {
  if (!have_logits_) {
    return absl::FailedPreconditionError("no logits to sample from: run Forward first");
  }
  return sampler.Sample(logits_);
}

absl::StatusOr<std::span<const float>> ReferenceEngine::LastLogitsRow() {
  if (!have_logits_) {
    return absl::FailedPreconditionError("no logits kept: run Forward first");
  }
  return std::span<const float>(logits_);
}

void ReferenceEngine::ForwardToken(int32_t token, int pos, bool logits) {
  const int64_t n_embd = hp_.n_embd;
  std::copy_n(token_embd_.row(token), n_embd, x_.data());
  for (Layer& layer : layers_) {
    reference::RmsNorm(x_.data(), layer.attn_norm.data(), n_embd, hp_.rms_eps, xn_.data());
    if (layer.deltanet != nullptr) {
      layer.deltanet->Forward(xn_.data(), pos, sub_out_.data());
    } else {
      layer.attention->Forward(xn_.data(), pos, sub_out_.data());
    }
    for (int64_t i = 0; i < n_embd; ++i) x_[i] += sub_out_[i];
    reference::RmsNorm(x_.data(), layer.ffn_norm.data(), n_embd, hp_.rms_eps, xn_.data());
    if (layer.dense != nullptr) {
      layer.dense->Forward(xn_.data(), sub_out_.data());
    } else {
      layer.moe->Forward(xn_.data(), sub_out_.data());
    }
    for (int64_t i = 0; i < n_embd; ++i) x_[i] += sub_out_[i];
  }
  if (!logits) return;
  reference::RmsNorm(x_.data(), output_norm_.data(), n_embd, hp_.rms_eps, xn_.data());
  reference::MatVec(output_, xn_.data(), logits_.data());
}

}  // namespace moetier

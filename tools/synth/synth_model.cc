#include "synth/synth_model.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_tokenizer.h"

namespace moetier {

absl::StatusOr<SynthArch> ParseSynthArch(std::string_view name) {
  for (const SynthArch arch : kAllSynthArchs) {
    if (name == SynthArchName(arch)) return arch;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown architecture '", std::string(name),
      "' (expected qwen3moe, olmoe, llama, qwen35moe, qwen3next, qwen2moe, qwen3vlmoe, "
      "glm4moe, ernie4_5-moe or gpt-oss)"));
}

std::string_view SynthArchName(SynthArch arch) {
  switch (arch) {
    case SynthArch::kQwen3Moe:
      return "qwen3moe";
    case SynthArch::kOlmoe:
      return "olmoe";
    case SynthArch::kLlama:
      return "llama";
    case SynthArch::kQwen35Moe:
      return "qwen35moe";
    case SynthArch::kQwen3Next:
      return "qwen3next";
    case SynthArch::kQwen2Moe:
      return "qwen2moe";
    case SynthArch::kQwen3VlMoe:
      return "qwen3vlmoe";
    case SynthArch::kGlm4Moe:
      return "glm4moe";
    case SynthArch::kErnie45Moe:
      return "ernie4_5-moe";
    case SynthArch::kGptOss:
      return "gpt-oss";
  }
  std::abort();
}

absl::StatusOr<SynthShape> SynthPreset(std::string_view name) {
  return SynthPreset(SynthArch::kQwen3Moe, name);
}

absl::StatusOr<SynthShape> SynthPreset(SynthArch arch, std::string_view name) {
  absl::StatusOr<SynthShape> shape = SynthArchitectureFor(arch).Preset(name);
  if (!shape.ok()) return shape.status();
  shape->arch = arch;
  return shape;
}

absl::StatusOr<SynthQuant> ParseSynthQuant(std::string_view name) {
  if (name == "f32") return SynthQuant::kF32;
  if (name == "q8_0") return SynthQuant::kQ8_0;
  if (name == "q4_k_m") return SynthQuant::kQ4_K_M;
  if (name == "q8_0-f32") return SynthQuant::kQ8_0F32;
  if (name == "mxfp4") return SynthQuant::kMxfp4;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown quant mix '", std::string(name),
                   "' (expected f32, q8_0, q4_k_m, q8_0-f32 or mxfp4)"));
}

std::string_view SynthQuantName(SynthQuant quant) {
  switch (quant) {
    case SynthQuant::kF32:
      return "f32";
    case SynthQuant::kQ8_0:
      return "q8_0";
    case SynthQuant::kQ4_K_M:
      return "q4_k_m";
    case SynthQuant::kQ8_0F32:
      return "q8_0-f32";
    case SynthQuant::kMxfp4:
      return "mxfp4";
  }
  std::abort();
}

uint32_t SynthFileType(SynthQuant quant) {
  switch (quant) {
    case SynthQuant::kF32:
      return 0;
    case SynthQuant::kQ8_0:
      return 7;
    case SynthQuant::kQ4_K_M:
    case SynthQuant::kQ8_0F32:
      return 15;
    case SynthQuant::kMxfp4:
      return 38;
  }
  std::abort();
}

// The rope.scaling.* fields: a known type, and no factor or original context
// without one.
absl::Status ValidateRopeScaling(const SynthShape& s) {
  if (s.rope_scaling_type.empty()) {
    if (s.rope_scaling_factor != 0.0f || s.rope_scaling_original_ctx != 0) {
      return absl::InvalidArgumentError(
          "--rope-scaling-factor and --rope-original-context need --rope-scaling");
    }
    return absl::OkStatus();
  }
  if (s.rope_scaling_type != "none" && s.rope_scaling_type != "linear" &&
      s.rope_scaling_type != "yarn") {
    return absl::InvalidArgumentError(absl::StrCat("--rope-scaling '", s.rope_scaling_type,
                                                   "' is not one of none, linear, yarn"));
  }
  if (!(std::isfinite(s.rope_scaling_factor) && s.rope_scaling_factor >= 0.0f &&
        s.rope_scaling_factor <= 1e6f)) {
    return absl::InvalidArgumentError(absl::StrCat("--rope-scaling-factor ", s.rope_scaling_factor,
                                                   " must be in [0, 1e6] (0: not written)"));
  }
  return CheckSynthRange("rope-original-context", s.rope_scaling_original_ctx, 0, kSynthMaxCtx);
}

absl::Status ValidateSynthShape(const SynthShape& s) {
  for (absl::Status status : {
           CheckSynthRange("layers", s.n_layer, 1, kSynthMaxLayers),
           CheckSynthRange("embd", s.n_embd, 1, kSynthMaxEmbd),
           CheckSynthRange("experts", s.n_expert, 1, kSynthMaxExperts),
           CheckSynthRange("experts-used", s.n_expert_used, 1, s.n_expert),
           CheckSynthRange("expert-ffn", s.n_ff_exp, 1, kSynthMaxFf),
           CheckSynthRange("heads", s.n_head, 1, kSynthMaxHeads),
           CheckSynthRange("heads-kv", s.n_head_kv, 1, s.n_head),
           CheckSynthRange("head-dim", s.head_dim, 2, kSynthMaxHeadDim),
           CheckSynthRange("vocab", s.n_vocab, kSynthMinVocab, kSynthMaxVocab),
           CheckSynthRange("ctx", s.n_ctx, 1, kSynthMaxCtx),
       }) {
    if (!status.ok()) return status;
  }
  if (s.n_head % s.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--heads ", s.n_head,
                                                   " must be a multiple of --heads-kv ", s.n_head_kv));
  }
  if (s.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--head-dim ", s.head_dim, " must be even (RoPE rotates pairs)"));
  }
  if (!(std::isfinite(s.rope_base) && s.rope_base > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rope-base ", s.rope_base, " must be a finite positive number"));
  }
  if (!(std::isfinite(s.rms_eps) && s.rms_eps > 0.0f && s.rms_eps < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rms-eps ", s.rms_eps, " must be in (0, 1)"));
  }
  if (absl::Status st = ValidateRopeScaling(s); !st.ok()) return st;
  return SynthArchitectureFor(s.arch).Validate(s);
}

absl::Status ValidateSynthQuant(SynthArch arch, SynthQuant quant) {
  if (SynthArchitectureFor(arch).SupportsQuant(quant)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--quant ", std::string(SynthQuantName(quant)),
                                                 " is not defined for ", std::string(SynthArchName(arch))));
}

int64_t SynthTensor::rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < ne.size(); ++i) r *= ne[i];
  return r;
}

int64_t SynthTensor::element_count() const { return ne[0] * rows(); }

uint64_t SynthTensor::size_bytes() const {
  return static_cast<uint64_t>(TensorRowBytes(type, ne[0])) * static_cast<uint64_t>(rows());
}

std::vector<SynthTensor> PlanSynthTensors(const SynthShape& shape, SynthQuant quant) {
  return SynthArchitectureFor(shape.arch).PlanTensors(shape, quant);
}

absl::StatusOr<std::vector<GgufKeyValue>> BuildSynthMetadata(const SynthShape& shape,
                                                             SynthQuant quant,
                                                             std::string_view model_name) {
  absl::StatusOr<std::vector<GgufKeyValue>> kv =
      SynthArchitectureFor(shape.arch).BuildMetadata(shape, quant, model_name);
  if (!kv.ok() || shape.rope_scaling_type.empty()) return kv;
  const std::string prefix = absl::StrCat(std::string(SynthArchName(shape.arch)), ".rope.scaling.");
  kv->push_back({prefix + "type", GgufValue::String(shape.rope_scaling_type)});
  if (shape.rope_scaling_factor > 0.0f) {
    kv->push_back({prefix + "factor", GgufValue::Float32(shape.rope_scaling_factor)});
  }
  if (shape.rope_scaling_original_ctx > 0) {
    kv->push_back({prefix + "original_context_length",
                   GgufValue::Uint32(static_cast<uint32_t>(shape.rope_scaling_original_ctx))});
  }
  return kv;
}

}  // namespace moetier

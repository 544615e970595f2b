// The synthetic architectures beyond qwen3moe as the tests expect them,
// restated from the real converter's and llama-quantize's rules
// independently of moetier-synth: every tensor with its shape and type, and
// every metadata key a file carries. Shared by the synth_arch tests.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor/tensor_type.h"
#include "synth/synth_model.h"

namespace moetier::synth_arch_expected {

inline constexpr SynthArch kNewArchs[] = {
    SynthArch::kOlmoe,    SynthArch::kLlama,   SynthArch::kQwen35Moe,  SynthArch::kQwen3Next,
    SynthArch::kQwen2Moe, SynthArch::kGlm4Moe, SynthArch::kErnie45Moe, SynthArch::kGptOss};

std::string ArchName(SynthArch arch);
std::string QuantName(SynthQuant quant);
// The mixes `arch` supports.
std::vector<SynthQuant> QuantsOf(SynthArch arch);
// The mix of `arch` that quantizes most: q4_k_m, or gpt-oss's mxfp4.
SynthQuant LowBitQuantOf(SynthArch arch);
bool IsFullAttention(const SynthShape& s, int64_t layer);

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> ne;
  int64_t layer;
};

// The tensors of a file of shape `s` in file order, and with their types.
std::vector<ExpectedTensor> ExpectedTensors(const SynthShape& s);
std::vector<std::pair<ExpectedTensor, TensorType>> ExpectedTable(const SynthShape& s,
                                                                 SynthQuant quant);

// Every key the file has is expected, with its type and value, and the
// tokenizer's arrays and ids fit the architecture's vocabulary (gtest
// assertions).
void CheckMetadata(const GgufMetadata& md, const SynthShape& s, SynthQuant quant);
// The file's tensor table is ExpectedTable's (gtest assertions).
void CheckTensors(const GgufModel& model, const SynthShape& s, SynthQuant quant);

}  // namespace moetier::synth_arch_expected

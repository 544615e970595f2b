// A real byte-level BPE vocabulary for synthetic Qwen3 models (SPEC.md
// §4.1–4.3, §4.7): the 256 byte tokens, merges learned from the built-in
// corpus, Qwen3's special tokens, and a Qwen3 ChatML chat template.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moetier {

// tokenizer.ggml.token_type values.
enum class SynthTokenType : int32_t {
  kNormal = 1,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
};

// The vocabulary size of Qwen2/Qwen3 and the ids its special tokens have
// there. Vocabularies of at least kQwenMinVocab use these exact ids.
inline constexpr int64_t kQwenVocab = 151936;
inline constexpr int64_t kQwenEndOfTextId = 151643;
inline constexpr int64_t kQwenImStartId = 151644;
inline constexpr int64_t kQwenImEndId = 151645;
inline constexpr int64_t kQwenThinkId = 151667;
inline constexpr int64_t kQwenThinkEndId = 151668;
inline constexpr int64_t kQwenMinVocab = kQwenThinkEndId + 1;

inline constexpr int64_t kSynthByteTokens = 256;
inline constexpr int64_t kSynthSpecialTokens = 5;
inline constexpr int64_t kSynthMinVocab = kSynthByteTokens + kSynthSpecialTokens;

struct SynthVocabulary {
  std::vector<std::string> tokens;  // byte-level mapped form; size = n_vocab
  std::vector<int32_t> token_types;  // SynthTokenType values; size = n_vocab
  std::vector<std::string> merges;  // "left right"; merge i produced token 256 + i
  uint32_t bos_id = 0;  // <|endoftext|>, as in Qwen3
  uint32_t eos_id = 0;  // <|im_end|>
  uint32_t pad_id = 0;  // <|endoftext|>
  uint32_t im_start_id = 0;
  uint32_t think_id = 0;
  uint32_t think_end_id = 0;
};

// Layout. Ids [0, 256) are the byte tokens in byte order and ids 256.. the
// merge results, all NORMAL. The text region ends at 151643 when n_vocab is
// at least kQwenMinVocab, where the specials take their Qwen3 ids; otherwise
// it ends at n_vocab - 5 and the specials follow in the order <|endoftext|>,
// <|im_start|>, <|im_end|>, <think>, </think>. As many merges are learned as
// the corpus supports and the text region holds; every id left over is
// "[PAD<id>]" of type UNUSED. <|...|> tokens are CONTROL, <think> and
// </think> USER_DEFINED. Fails when n_vocab < kSynthMinVocab or the trainer
// breaks its contract.
absl::StatusOr<SynthVocabulary> BuildSynthVocabulary(int64_t n_vocab);

// The tokenizer.chat_template text: Qwen3 ChatML. A system message, when
// given, comes first; each turn is "<|im_start|>{role}\n{content}<|im_end|>\n";
// reasoning before "</think>" is dropped from earlier assistant turns; the
// generation prompt is "<|im_start|>assistant\n", followed by
// "<think>\n\n</think>\n\n" when enable_thinking is false.
std::string_view SynthChatTemplate();

}  // namespace moetier

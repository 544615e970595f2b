// Real vocabularies for synthetic models (SPEC.md §4): byte-level BPE ones
// laid out like the Qwen3, Qwen3.5 and OLMoE vocabularies, a SentencePiece
// one laid out like Llama/Mixtral's, all trained on the built-in corpus, and
// the chat templates the real models ship.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "synth/bpe_trainer.h"

namespace moetier {

// tokenizer.ggml.token_type values.
enum class SynthTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
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

// Qwen3.5 / Qwen3.6 (qwen35moe): the same special tokens, 96401 ids later.
inline constexpr int64_t kQwen35Vocab = 248320;
inline constexpr int64_t kQwen35EndOfTextId = 248044;
inline constexpr int64_t kQwen35ImStartId = 248045;
inline constexpr int64_t kQwen35ImEndId = 248046;
inline constexpr int64_t kQwen35ThinkId = 248068;
inline constexpr int64_t kQwen35ThinkEndId = 248069;

// OLMoE-1B-7B (the OLMo GPT-NeoX vocabulary): 50280 tokens in a 50304-row
// embedding; <|padding|> is 1 and <|endoftext|> 50279.
inline constexpr int64_t kOlmoeVocab = 50304;
inline constexpr int64_t kOlmoePaddingId = 1;
inline constexpr int64_t kOlmoeEndOfTextId = 50279;

// gpt-oss (o200k_harmony): 201088 rows, of which 199998 ordinary tokens, then
// the 21 special tokens the released tokenizer lists (harmony's, the
// reserved ones between them and <|endofprompt|>), then [PAD<id>].
inline constexpr int64_t kGptOssVocab = 201088;
inline constexpr int64_t kGptOssStartOfTextId = 199998;
inline constexpr int64_t kGptOssEndOfTextId = 199999;
inline constexpr int64_t kGptOssReturnId = 200002;
inline constexpr int64_t kGptOssConstrainId = 200003;
inline constexpr int64_t kGptOssChannelId = 200005;
inline constexpr int64_t kGptOssStartId = 200006;
inline constexpr int64_t kGptOssEndId = 200007;
inline constexpr int64_t kGptOssMessageId = 200008;
inline constexpr int64_t kGptOssCallId = 200012;
inline constexpr int64_t kGptOssEndOfPromptId = 200018;

// Mixtral-8x7B (SentencePiece): <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258.
inline constexpr int64_t kMixtralVocab = 32000;
inline constexpr int64_t kSpmUnknownId = 0;
inline constexpr int64_t kSpmBosId = 1;
inline constexpr int64_t kSpmEosId = 2;
inline constexpr int64_t kSpmFirstByteId = 3;
inline constexpr int64_t kSpmFixedTokens = kSpmFirstByteId + 256;
// The score the converter gives [PAD<id>] tokens of a SentencePiece vocabulary.
inline constexpr float kSpmPadScore = -10000.0f;

inline constexpr int64_t kSynthByteTokens = 256;
inline constexpr int64_t kSynthSpecialTokens = 5;
inline constexpr int64_t kSynthMinVocab = kSynthByteTokens + kSynthSpecialTokens;

struct SynthVocabulary {
  std::vector<std::string> tokens;   // byte-level mapped form (BPE) or SentencePiece pieces
  std::vector<int32_t> token_types;  // SynthTokenType values; size = n_vocab
  std::vector<std::string> merges;   // BPE: "left right"; merges[i] made token first_merge_id + i
  std::vector<float> scores;         // SentencePiece: one per token, higher = preferred
  int64_t first_merge_id = kSynthByteTokens;
  // The special tokens (CONTROL, USER_DEFINED, UNKNOWN) and their ids.
  std::vector<std::pair<std::string, int64_t>> specials;
  // Set by BuildSynthVocabulary (the Qwen3 layout).
  uint32_t bos_id = 0;  // <|endoftext|>, as in Qwen3
  uint32_t eos_id = 0;  // <|im_end|>
  uint32_t pad_id = 0;  // <|endoftext|>
  uint32_t im_start_id = 0;
  uint32_t think_id = 0;
  uint32_t think_end_id = 0;
};

// A special token of a byte-level BPE vocabulary and its id in the real one.
struct SynthSpecialToken {
  std::string_view text;
  SynthTokenType type;
  int64_t real_id;
};

// Where a byte-level BPE vocabulary puts its tokens. `leading` specials take
// ids 0.. in order, then come the 256 byte tokens in byte order, then the
// merge results (NORMAL). `trailing` specials take their real ids when the
// vocabulary reaches past the largest of them (the text region then ends at
// real_text_end), otherwise the last ids in order. Every id left over is
// "[PAD<id>]" of type UNUSED, as llama.cpp's converter pads a vocabulary to
// the embedding's row count.
struct SynthBpeLayout {
  BpeWordSplit split = BpeWordSplit::kQwen2;
  std::vector<SynthSpecialToken> leading;
  std::vector<SynthSpecialToken> trailing;
  int64_t real_text_end = 0;

  int64_t min_vocab() const;  // leading + 256 + trailing
  int64_t real_min_vocab() const;  // 1 + the largest trailing real id
};

// Builds a vocabulary of n_vocab tokens in `layout`, with as many merges as
// the corpus supports and the text region holds. Fails when n_vocab <
// layout.min_vocab() or the trainer breaks its contract.
absl::StatusOr<SynthVocabulary> BuildSynthBpeVocabulary(const SynthBpeLayout& layout, int64_t n_vocab);

// The layouts of the real vocabularies: Qwen3 (pre "qwen2"): trailing
// <|endoftext|>, <|im_start|>, <|im_end|> (CONTROL), <think>, </think>
// (USER_DEFINED) at 151643..151645, 151667, 151668. Qwen3.5 (pre "qwen35"):
// the same at 248044..248046, 248068, 248069. OLMoE (pre "olmo", GPT-2
// splitting): leading |||IP_ADDRESS||| and <|padding|>, trailing
// |||EMAIL_ADDRESS|||, |||PHONE_NUMBER|||, <|endoftext|> at 50277..50279,
// all CONTROL. gpt-oss (pre "gpt-4o"): trailing, all CONTROL, ids
// 199998..200018: <|startoftext|>, <|endoftext|>, <|reserved_200000|>,
// <|reserved_200001|>, <|return|>, <|constrain|>, <|reserved_200004|>,
// <|channel|>, <|start|>, <|end|>, <|message|>, <|reserved_200009|> ..
// <|reserved_200011|>, <|call|>, <|reserved_200013|> .. <|reserved_200017|>,
// <|endofprompt|>.
const SynthBpeLayout& Qwen3BpeLayout();
const SynthBpeLayout& Qwen35BpeLayout();
const SynthBpeLayout& OlmoeBpeLayout();
const SynthBpeLayout& GptOssBpeLayout();

// The Qwen3 layout with the named ids filled in. Ids [0, 256) are the byte
// tokens in byte order and ids 256.. the merge results, all NORMAL. The text
// region ends at 151643 when n_vocab is at least kQwenMinVocab, where the
// specials take their Qwen3 ids; otherwise it ends at n_vocab - 5 and the
// specials follow in the order <|endoftext|>, <|im_start|>, <|im_end|>,
// <think>, </think>. Fails when n_vocab < kSynthMinVocab.
absl::StatusOr<SynthVocabulary> BuildSynthVocabulary(int64_t n_vocab);

// A SentencePiece vocabulary laid out like Llama's and Mixtral's: <unk>
// (UNKNOWN) 0, <s> 1 and </s> 2 (CONTROL), <0x00>..<0xFF> (BYTE) 3..258,
// all with score 0; then the merged pieces of TrainSentencePieceBpe and
// after them its single characters (NORMAL), piece k of these with score -k,
// as SentencePiece's BPE trainer scores them; then "[PAD<id>]" (UNUSED,
// score -10000) up to n_vocab. Fails when n_vocab <= kSpmFixedTokens.
absl::StatusOr<SynthVocabulary> BuildSynthSpmVocabulary(int64_t n_vocab);

// The id of the special token `text`, else of the first token whose text is
// `text`; -1 if there is none.
int64_t SynthTokenId(const SynthVocabulary& vocab, std::string_view text);

// The tokenizer.chat_template text: Qwen3 ChatML. A system message, when
// given, comes first; each turn is "<|im_start|>{role}\n{content}<|im_end|>\n";
// reasoning before "</think>" is dropped from earlier assistant turns; the
// generation prompt is "<|im_start|>assistant\n", followed by
// "<think>\n\n</think>\n\n" when enable_thinking is false.
std::string_view SynthChatTemplate();

// The chat template of Qwen3.5, verbatim as Qwen ships it: ChatML whose generation
// prompt is "<|im_start|>assistant\n<think>\n", or "...<think>\n\n</think>\n\n"
// when enable_thinking is false; XML tool calls.
std::string_view SynthQwen35ChatTemplate();

// Mixtral-8x7B-Instruct-v0.1's template: "<s>[INST] {user} [/INST]{assistant}</s>"
// with strictly alternating user and assistant turns and no system role.
std::string_view SynthMixtralChatTemplate();

// The Tulu-style template of the OLMoE Instruct models: "<|user|>\n{content}\n",
// "<|assistant|>\n{content}<|endoftext|>\n", generation prompt "<|assistant|>\n".
std::string_view SynthOlmoeChatTemplate();

}  // namespace moetier

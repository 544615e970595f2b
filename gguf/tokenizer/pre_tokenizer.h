// Pre-tokenizers of byte-level BPE vocabularies (SPEC.md §4.4): split text
// into the pieces that BPE then encodes one by one. These are hand-written
// scanners equivalent to the regexes, as in llama.cpp's unicode.cpp.
// SentencePiece vocabularies have no pre-tokenizer.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moetier {

enum class PreTokenizer {
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,
  // The same with \p{L} widened to [\p{L}\p{M}] (letter runs absorb marks).
  kQwen35,
  // GPT-2 (OLMoE and other GPT-NeoX-style vocabularies), case-sensitive:
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // kQwen2 with \p{N} widened to \p{N}{1,3}, so a run of digits splits into
  // groups of three from its start ("12345" is "123", "45"). Llama 3, DBRX,
  // Smaug and GLM-4 vocabularies.
  kLlama3,
  // tiktoken's o200k pattern (gpt-oss, Llama 4, GPT-4o) as llama.cpp runs it:
  //   [^\r\n\p{L}\p{N}]?((?=\p{L})[^a-z])*((?=\p{L})[^A-Z])+C?|
  //   [^\r\n\p{L}\p{N}]?((?=\p{L})[^a-z])+((?=\p{L})[^A-Z])*C?|
  //   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  // with C = (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]). A word
  // splits where its case turns from lower to upper ("HelloWorld" is "Hello",
  // "World") and takes a contraction as its tail ("DON'T" is one piece).
  // The tokenizer.json pattern uses [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] for
  // upper and [\p{Ll}\p{Lm}\p{Lo}\p{M}] for lower; llama.cpp's form differs
  // from it in two ways, which moetier follows:
  //  - Only ASCII letters have a case; every other letter is both upper and
  //    lower. "ПриветМир" stays one piece (Hugging Face: "Привет", "Мир"), and
  //    a word of capitals that is not all ASCII ends after its last non-ASCII
  //    letter ("ÉT" is "É", "T"; Hugging Face keeps "ÉT").
  //  - Marks are not letters but punctuation, as in kQwen2: "e" + U+0301 is
  //    "e", U+0301.
  kGpt4o,
};

// What llama.cpp (llama-vocab.cpp) derives from one tokenizer.ggml.pre name.
struct PreTokenizerInfo {
  PreTokenizer kind;
  // llama.cpp's clean_spaces: detokenizing removes the space before ? ! . ,
  // and some contractions (Tokenizer::Detokenize).
  bool clean_up_spaces;
  // llama.cpp's ignore_merges: a piece that is itself a token is encoded as
  // that token without running the merges. Llama 3's vocabulary holds words
  // its merges do not build, and Hugging Face's tokenizer takes them whole.
  bool ignore_merges = false;
  // Whether BOS is added when tokenizer.ggml.add_bos_token is absent; the
  // key, when present, decides. llama.cpp turns it on for the Llama 3 names.
  bool add_bos_by_default = false;
};

// Maps tokenizer.ggml.pre to a scanner: "qwen2" and "deepseek-r1-qwen";
// "qwen35"; the names llama.cpp gives the GPT-2 pattern with no other
// special handling ("olmo", "gpt-2", "mpt", "jais", "phi-2", ...); and those
// it gives the Llama 3 pattern ("llama-bpe", "llama3", "dbrx", "smaug-bpe",
// "glm4", ...); and those it gives the o200k pattern ("gpt-4o", "llama4",
// "kanana2", "talkie", "minimax-m2"). SupportedPreTokenizerNames lists them
// all. "default" is not among them: llama.cpp runs a different chain of
// regexes for it.
absl::StatusOr<PreTokenizerInfo> LookUpPreTokenizer(std::string_view name);
absl::StatusOr<PreTokenizer> PreTokenizerFromName(std::string_view name);
std::string_view PreTokenizerName(PreTokenizer kind);
// For error messages: the names PreTokenizerFromName accepts.
const char* SupportedPreTokenizerNames();

// Appends the pieces of `text` to `pieces`; they are views into `text`, in
// order, non-empty, and concatenate to exactly `text`. Invalid UTF-8 bytes are
// single units of no character class (see tokenizer/unicode.h).
void PreTokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>* pieces);
std::vector<std::string_view> PreTokenize(PreTokenizer kind, std::string_view text);

}  // namespace moetier

// Pre-tokenizers of byte-level BPE vocabularies (SPEC.md §4.4): split text
// into the pieces that BPE then encodes one by one. These are hand-written
// scanners equivalent to the regexes, as in llama.cpp's unicode.cpp.
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
};

// Maps tokenizer.ggml.pre to a scanner. Accepts "qwen2" and the ids that
// llama.cpp gives the same pattern ("deepseek-r1-qwen"), and "qwen35".
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

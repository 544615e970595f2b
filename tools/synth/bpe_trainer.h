// Small vocabulary trainers, so that synthetic models carry real tokenizers:
// byte-level BPE (GPT-2 byte map, rank-ordered merges) for the gpt2-model
// families, and a SentencePiece-style BPE over characters for the llama
// (SentencePiece) family.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moetier {

// How the byte-level trainer cuts the corpus into words before counting
// pairs: the pre-tokenizer the vocabulary will be used with (SPEC.md §4.4).
enum class BpeWordSplit {
  kQwen2,   // tokenizer.ggml.pre "qwen2" (Qwen2, Qwen3)
  kQwen35,  // "qwen35": letter runs also absorb combining marks
  kGpt2,    // GPT-2's pattern, which llama.cpp's "olmo" pre-tokenizer uses
  kGpt4o,   // "gpt-4o": tiktoken's o200k pattern (gpt-oss)
};

struct BpeVocabulary {
  // Byte-level mapped form. tokens[0..255] are the 256 byte tokens in byte
  // order; tokens[256 + i] is the result of merges[i].
  std::vector<std::string> tokens;
  // "left right", in rank order.
  std::vector<std::string> merges;
};

// Pre-tokenizes `corpus` with `split`, counts the words, and repeatedly
// merges the most frequent adjacent pair (ties: the pair of lower token ids,
// left first), until max_merges merges exist or no pair occurs twice. A pair
// whose concatenation is already a token is never merged, so tokens are
// unique. Deterministic: the same input gives the same output.
BpeVocabulary TrainByteLevelBpe(std::string_view corpus, int max_merges,
                                BpeWordSplit split = BpeWordSplit::kQwen2);

// The pieces of `text` under GPT-2's pre-tokenizer pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// as views into `text` that concatenate to it.
std::vector<std::string_view> PreTokenizeGpt2(std::string_view text);

// U+2581, SentencePiece's stand-in for a space.
inline constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";

struct SentencePieceBpeVocabulary {
  // The merged pieces in merge order (the first is the most preferred),
  // UTF-8 with kSentencePieceSpace for spaces. A piece starts with at most
  // one kSentencePieceSpace and contains no other.
  std::vector<std::string> pieces;
  // The single characters the pieces are built from, most frequent first.
  std::vector<std::string> characters;
};

// SentencePiece's BPE trainer, simplified: every line of `corpus` gets a
// leading space, spaces become U+2581, and words start at each U+2581 and
// wherever the script changes (CJK, other letters, digits, punctuation and
// symbols; a leading U+2581 joins any of them). The
// alphabet is the most frequent characters covering 99.95% of the
// occurrences (control characters excluded), at most half of `max_pieces`;
// other characters split words (a tokenizer encodes them as <0xXX> bytes).
// Then pairs of symbols are merged as in TrainByteLevelBpe until
// characters + pieces reach `max_pieces` or no pair occurs twice.
// Deterministic.
SentencePieceBpeVocabulary TrainSentencePieceBpe(std::string_view corpus, int max_pieces);

// About 52 KB of English prose, C++ and Python code and Chinese text; it
// supports about 3000 merges before no pair occurs twice.
std::string_view BuiltinTrainingCorpus();

}  // namespace moetier

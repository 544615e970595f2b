// A small byte-level BPE trainer, so that synthetic models carry a real
// tokenizer (qwen2 pre-tokenization, GPT-2 byte map, rank-ordered merges).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moetier {

struct BpeVocabulary {
  // Byte-level mapped form. tokens[0..255] are the 256 byte tokens in byte
  // order; tokens[256 + i] is the result of merges[i].
  std::vector<std::string> tokens;
  // "left right", in rank order.
  std::vector<std::string> merges;
};

// Pre-tokenizes `corpus` with the qwen2 rules, counts the words, and
// repeatedly merges the most frequent adjacent pair (ties: the pair of lower
// token ids, left first), until max_merges merges exist or no pair occurs
// twice. A pair whose concatenation is already a token is never merged, so
// tokens are unique. Deterministic: the same input gives the same output.
BpeVocabulary TrainByteLevelBpe(std::string_view corpus, int max_merges);

// About 52 KB of English prose, C++ and Python code and Chinese text; it
// supports about 3000 merges before no pair occurs twice.
std::string_view BuiltinTrainingCorpus();

}  // namespace moetier

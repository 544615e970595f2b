#include "synth/bpe_trainer.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "gguf/tokenizer/byte_level.h"
#include "gguf/tokenizer/pre_tokenizer.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
int32_t PairLeft(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t PairRight(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
  int64_t last_visit;  // merge step that last rewrote it, to skip repeats
};

struct HeapEntry {
  int64_t count;
  uint64_t pair;
  // The heap pops the largest: the highest count, then the lowest ids.
  bool operator<(const HeapEntry& other) const {
    if (count != other.count) return count < other.count;
    return pair > other.pair;
  }
};

// Counts of distinct words, each a sequence of symbol ids into the initial
// tokens.
using WordCounts = std::vector<std::pair<std::vector<int32_t>, int64_t>>;

class Trainer {
 public:
  Trainer(const WordCounts& words, std::vector<std::string> initial_tokens) {
    for (const auto& [symbols, count] : words) words_.push_back(Word{symbols, count, -1});
    for (std::string& token : initial_tokens) {
      token_set_.insert(token);
      vocab_.tokens.push_back(std::move(token));
    }
    for (size_t w = 0; w < words_.size(); ++w) AddPairs(static_cast<int32_t>(w), +1);
    FlushChangedPairs();
  }

  BpeVocabulary Run(int max_merges) {
    std::string joined;
    for (int64_t step = 0; step < max_merges && !heap_.empty();) {
      std::pop_heap(heap_.begin(), heap_.end());
      const HeapEntry top = heap_.back();
      heap_.pop_back();
      const auto it = pair_counts_.find(top.pair);
      if (it == pair_counts_.end() || it->second != top.count) continue;  // stale entry
      if (top.count < 2) break;
      const int32_t left = PairLeft(top.pair);
      const int32_t right = PairRight(top.pair);
      joined = vocab_.tokens[left] + vocab_.tokens[right];
      if (token_set_.contains(joined)) continue;  // never again: its count stays as is

      const auto new_id = static_cast<int32_t>(vocab_.tokens.size());
      vocab_.merges.push_back(vocab_.tokens[left] + " " + vocab_.tokens[right]);
      vocab_.tokens.push_back(joined);
      token_set_.insert(joined);
      ApplyMerge(top.pair, new_id, step);
      FlushChangedPairs();
      ++step;
    }
    return std::move(vocab_);
  }

 private:
  void AddPairs(int32_t w, int64_t sign) {
    const Word& word = words_[w];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const uint64_t key = PairKey(word.symbols[i], word.symbols[i + 1]);
      pair_counts_[key] += sign * word.count;
      changed_.insert(key);
      if (sign > 0) occurrences_[key].push_back(w);
    }
  }

  void ApplyMerge(uint64_t pair, int32_t new_id, int64_t step) {
    const int32_t left = PairLeft(pair);
    const int32_t right = PairRight(pair);
    // Adding pairs below may grow occurrences_, so walk a copy.
    const std::vector<int32_t> word_ids = std::move(occurrences_[pair]);
    occurrences_.erase(pair);
    for (const int32_t w : word_ids) {
      Word& word = words_[w];
      if (word.last_visit == step) continue;
      word.last_visit = step;
      AddPairs(w, -1);
      std::vector<int32_t>& s = word.symbols;
      size_t out = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          s[out++] = new_id;
          ++i;
        } else {
          s[out++] = s[i];
        }
      }
      s.resize(out);
      AddPairs(w, +1);
    }
  }

  void FlushChangedPairs() {
    for (const uint64_t key : changed_) {
      const auto it = pair_counts_.find(key);
      if (it->second <= 0) {
        pair_counts_.erase(it);
        occurrences_.erase(key);
        continue;
      }
      heap_.push_back({it->second, key});
      std::push_heap(heap_.begin(), heap_.end());
    }
    changed_.clear();
  }

  std::vector<Word> words_;
  BpeVocabulary vocab_;
  absl::flat_hash_set<std::string> token_set_;
  absl::flat_hash_map<uint64_t, int64_t> pair_counts_;
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> occurrences_;
  absl::flat_hash_set<uint64_t> changed_;
  std::vector<HeapEntry> heap_;
};

// Distinct words of `pieces`, sorted by text, as byte sequences.
WordCounts CountByteWords(const std::vector<std::string_view>& pieces) {
  absl::flat_hash_map<std::string_view, int64_t> word_counts;
  for (const std::string_view piece : pieces) ++word_counts[piece];
  std::vector<std::pair<std::string_view, int64_t>> sorted(word_counts.begin(), word_counts.end());
  std::sort(sorted.begin(), sorted.end());
  WordCounts words;
  words.reserve(sorted.size());
  for (const auto& [text, count] : sorted) {
    std::vector<int32_t> symbols;
    symbols.reserve(text.size());
    for (const char c : text) symbols.push_back(static_cast<uint8_t>(c));
    words.emplace_back(std::move(symbols), count);
  }
  return words;
}

bool IsGpt2Letter(uint32_t cp) { return IsLetter(cp); }
bool IsGpt2Number(uint32_t cp) { return IsNumber(cp); }
bool IsGpt2Other(uint32_t cp) { return !IsWhitespace(cp) && !IsLetter(cp) && !IsNumber(cp); }

bool IsControlCharacter(uint32_t cp) { return cp < 0x20 || (cp >= 0x7F && cp < 0xA0); }

// SentencePiece's script classes, coarsely: CJK (Han and kana), other
// letters and marks, numbers, and everything else ("Common": punctuation,
// symbols).
enum class Script { kCjk, kLetter, kNumber, kCommon };

Script SentencePieceScript(uint32_t cp) {
  if ((cp >= 0x2E80 && cp <= 0x9FFF) || (cp >= 0xF900 && cp <= 0xFAFF) ||
      (cp >= 0x20000 && cp <= 0x3FFFF)) {
    return IsLetter(cp) ? Script::kCjk : Script::kCommon;
  }
  if (IsNumber(cp)) return Script::kNumber;
  if (IsLetter(cp) || IsMark(cp)) return Script::kLetter;
  return Script::kCommon;
}

}  // namespace

std::vector<std::string_view> PreTokenizeGpt2(std::string_view text) {
  // Decode once; units[i] starts at offsets[i], with a sentinel at the end.
  std::vector<uint32_t> cps;
  std::vector<size_t> offsets;
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Unit unit = DecodeUtf8(text, pos);
    cps.push_back(unit.codepoint);
    offsets.push_back(pos);
    pos += unit.length;
  }
  const size_t n = cps.size();
  offsets.push_back(text.size());
  auto cp_at = [&](size_t i) -> uint32_t { return i < n ? cps[i] : 0xFFFFFFFFu; };
  auto run_end = [&](size_t i, bool (*in_class)(uint32_t)) {
    while (i < n && in_class(cps[i])) ++i;
    return i;
  };

  std::vector<std::string_view> pieces;
  for (size_t pos = 0; pos < n;) {
    size_t end = pos + 1;
    const uint32_t cp = cps[pos];
    const uint32_t next = cp_at(pos + 1);
    if (cp == '\'' && (next == 's' || next == 't' || next == 'm' || next == 'd')) {
      end = pos + 2;
    } else if (cp == '\'' && pos + 2 < n &&
               ((next == 'r' && cp_at(pos + 2) == 'e') || (next == 'v' && cp_at(pos + 2) == 'e') ||
                (next == 'l' && cp_at(pos + 2) == 'l'))) {
      end = pos + 3;
    } else {
      // " ?X+" for the three classes: an optional single space, then a run.
      const size_t start = (cp == ' ' && pos + 1 < n && !IsWhitespace(next)) ? pos + 1 : pos;
      const uint32_t first = cps[start];
      if (IsGpt2Letter(first)) {
        end = run_end(start, IsGpt2Letter);
      } else if (IsGpt2Number(first)) {
        end = run_end(start, IsGpt2Number);
      } else if (IsGpt2Other(first)) {
        end = run_end(start, IsGpt2Other);
      } else {
        // Whitespace: \s+(?!\S) leaves the last space of a run that precedes
        // a non-space to the next piece; otherwise \s+ takes the run.
        const size_t ws_end = run_end(pos, [](uint32_t c) { return IsWhitespace(c); });
        end = (ws_end < n && ws_end - pos > 1) ? ws_end - 1 : ws_end;
      }
    }
    pieces.push_back(text.substr(offsets[pos], offsets[end] - offsets[pos]));
    pos = end;
  }
  return pieces;
}

BpeVocabulary TrainByteLevelBpe(std::string_view corpus, int max_merges, BpeWordSplit split) {
  std::vector<std::string_view> pieces;
  switch (split) {
    case BpeWordSplit::kQwen2:
      pieces = PreTokenize(PreTokenizer::kQwen2, corpus);
      break;
    case BpeWordSplit::kQwen35:
      pieces = PreTokenize(PreTokenizer::kQwen35, corpus);
      break;
    case BpeWordSplit::kGpt2:
      pieces = PreTokenizeGpt2(corpus);
      break;
    case BpeWordSplit::kGpt4o:
      pieces = PreTokenize(PreTokenizer::kGpt4o, corpus);
      break;
  }
  std::vector<std::string> byte_tokens;
  byte_tokens.reserve(256);
  for (int b = 0; b < 256; ++b) byte_tokens.emplace_back(ByteToMappedUtf8(static_cast<uint8_t>(b)));
  return Trainer(CountByteWords(pieces), std::move(byte_tokens)).Run(max_merges);
}

SentencePieceBpeVocabulary TrainSentencePieceBpe(std::string_view corpus, int max_pieces) {
  // Words as codepoint sequences: each line gets a leading space, spaces are
  // U+2581, every U+2581 starts a word, and so does every change of script
  // (SentencePiece's split_by_unicode_script and split_by_number).
  constexpr uint32_t kSpace = 0x2581;
  std::map<std::vector<uint32_t>, int64_t> word_counts;
  absl::flat_hash_map<uint32_t, int64_t> char_counts;
  std::vector<uint32_t> word;
  auto flush = [&] {
    if (!word.empty()) ++word_counts[word];
    word.clear();
  };
  for (size_t line_start = 0; line_start <= corpus.size();) {
    size_t line_end = corpus.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = corpus.size();
    const std::string_view line = corpus.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    word.push_back(kSpace);
    for (size_t pos = 0; pos < line.size();) {
      const Utf8Unit unit = DecodeUtf8(line, pos);
      pos += unit.length;
      uint32_t cp = unit.codepoint;
      if (!unit.valid || IsControlCharacter(cp)) {
        flush();
        continue;
      }
      if (cp == ' ') {
        cp = kSpace;
        flush();
      } else if (!word.empty() && word.back() != kSpace &&
                 SentencePieceScript(word.back()) != SentencePieceScript(cp)) {
        flush();  // a piece never mixes scripts, letters and digits
      }
      word.push_back(cp);
    }
    flush();
  }
  for (const auto& [w, count] : word_counts) {
    for (const uint32_t cp : w) char_counts[cp] += count;
  }

  // The alphabet: most frequent first (ties: lower codepoint), up to 99.95%
  // coverage and at most half the pieces.
  std::vector<std::pair<uint32_t, int64_t>> chars(char_counts.begin(), char_counts.end());
  std::sort(chars.begin(), chars.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  int64_t total = 0;
  for (const auto& [cp, count] : chars) total += count;
  const size_t max_chars = static_cast<size_t>(std::max(0, max_pieces / 2));
  absl::flat_hash_map<uint32_t, int32_t> symbol_of;
  std::vector<std::string> alphabet;
  int64_t covered = 0;
  for (const auto& [cp, count] : chars) {
    if (alphabet.size() >= max_chars || covered * 10000 >= total * 9995) break;
    symbol_of[cp] = static_cast<int32_t>(alphabet.size());
    alphabet.push_back(EncodeUtf8(cp));
    covered += count;
  }

  // Words over the alphabet; a character outside it splits its word.
  std::map<std::vector<int32_t>, int64_t> symbol_words;
  for (const auto& [w, count] : word_counts) {
    std::vector<int32_t> symbols;
    for (const uint32_t cp : w) {
      const auto it = symbol_of.find(cp);
      if (it == symbol_of.end()) {
        if (symbols.size() > 1) symbol_words[symbols] += count;
        symbols.clear();
        continue;
      }
      symbols.push_back(it->second);
    }
    if (symbols.size() > 1) symbol_words[symbols] += count;
  }
  const WordCounts words(symbol_words.begin(), symbol_words.end());

  const int max_merges = std::max(0, max_pieces - static_cast<int>(alphabet.size()));
  BpeVocabulary merged = Trainer(words, alphabet).Run(max_merges);
  SentencePieceBpeVocabulary vocab;
  vocab.pieces.assign(std::make_move_iterator(merged.tokens.begin() + static_cast<ptrdiff_t>(alphabet.size())),
                      std::make_move_iterator(merged.tokens.end()));
  vocab.characters = std::move(alphabet);
  return vocab;
}

}  // namespace moetier

#include "synth/bpe_trainer.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "gguf/tokenizer/byte_level.h"
#include "gguf/tokenizer/pre_tokenizer.h"

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

class Trainer {
 public:
  explicit Trainer(std::string_view corpus) {
    absl::flat_hash_map<std::string_view, int64_t> word_counts;
    for (const std::string_view piece : PreTokenize(PreTokenizer::kQwen2, corpus)) {
      ++word_counts[piece];
    }
    std::vector<std::pair<std::string_view, int64_t>> sorted(word_counts.begin(),
                                                             word_counts.end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [text, count] : sorted) {
      Word word{{}, count, -1};
      for (char c : text) word.symbols.push_back(static_cast<uint8_t>(c));
      words_.push_back(std::move(word));
    }
    for (int b = 0; b < 256; ++b) {
      vocab_.tokens.emplace_back(ByteToMappedUtf8(static_cast<uint8_t>(b)));
      token_set_.insert(vocab_.tokens.back());
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

}  // namespace

BpeVocabulary TrainByteLevelBpe(std::string_view corpus, int max_merges) {
  return Trainer(corpus).Run(max_merges);
}

}  // namespace moetier

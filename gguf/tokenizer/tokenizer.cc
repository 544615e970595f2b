#include "gguf/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gguf/tokenizer/byte_level.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier {
namespace {

absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

[[noreturn]] void DieBadId(const char* where, int32_t id, int32_t vocab_size, int line) {
  std::fprintf(stderr, "%s:%d: %s: token id %d outside [0, %d)\n", __FILE__, line, where, id,
               vocab_size);
  std::abort();
}

// Texts that end generation whatever the special-id keys say (SPEC.md §4.3).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|im_end|>", "<|endoftext|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
};

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

bool IsSpecialType(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined ||
         type == TokenType::kUnknown;
}

std::string Printable(std::string_view text) {
  constexpr size_t kMaxShown = 40;
  std::string shown = SanitizeUtf8(text.substr(0, kMaxShown));
  if (text.size() > kMaxShown) shown += "...";
  return shown;
}

}  // namespace

// One symbol of the word being merged: a byte range of the word, linked to
// its live neighbours.
struct Tokenizer::BpeScratch {
  struct Symbol {
    int32_t symbol;  // interned symbol id; -1 once merged into its left neighbour
    int32_t prev;
    int32_t next;
    uint32_t begin;
    uint32_t end;
  };
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t right;
    int32_t left_symbol;
    int32_t right_symbol;
    int32_t result_symbol;
    // The heap pops the largest; the "largest" here is the lowest rank, then
    // the leftmost position.
    bool operator<(const Candidate& other) const {
      if (rank != other.rank) return rank > other.rank;
      return left > other.left;
    }
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> queue;  // a heap
};

absl::StatusOr<Tokenizer> Tokenizer::Create(TokenizerConfig config) {
  const size_t n = config.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer vocabulary is empty");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer vocabulary has ", n, " tokens, more than int32 ids can address"));
  }
  const auto vocab_size = static_cast<int32_t>(n);
  if (config.token_types.empty()) {
    config.token_types.assign(n, TokenType::kNormal);
  } else if (config.token_types.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.token_type has ",
                                                   config.token_types.size(),
                                                   " entries but tokenizer.ggml.tokens has ", n));
  }
  for (size_t i = 0; i < n; ++i) {
    const auto type = static_cast<int32_t>(config.token_types[i]);
    if (type < 0 || type > static_cast<int32_t>(TokenType::kByte)) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.token_type[", i, "] = ", type,
                                                     " is not a token type (0..6)"));
    }
  }
  const std::pair<const char*, int32_t> special_ids[] = {
      {"bos_token_id", config.bos_id},     {"eos_token_id", config.eos_id},
      {"padding_token_id", config.pad_id}, {"eot_token_id", config.eot_id},
      {"eom_token_id", config.eom_id},     {"unknown_token_id", config.unknown_id},
  };
  for (const auto& [name, id] : special_ids) {
    if (id != kNoToken && (id < 0 || id >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.ggml.", name, " = ", id, " is outside the vocabulary of ", n, " tokens"));
    }
  }

  Tokenizer t;
  t.tokens_ = std::move(config.tokens);
  t.types_ = std::move(config.token_types);
  t.pre_tokenizer_ = config.pre_tokenizer;
  t.bos_id_ = config.bos_id;
  t.eos_id_ = config.eos_id;
  t.pad_id_ = config.pad_id;
  t.eot_id_ = config.eot_id;
  t.eom_id_ = config.eom_id;
  t.unknown_id_ = config.unknown_id;
  t.add_bos_ = config.add_bos;
  t.add_eos_ = config.add_eos;
  t.chat_template_ = std::move(config.chat_template);

  // A text stored twice resolves to the later id, as in llama.cpp.
  t.token_ids_.reserve(n);
  for (int32_t id = 0; id < vocab_size; ++id) t.token_ids_[t.tokens_[id]] = id;

  t.pieces_.resize(n);
  for (int32_t id = 0; id < vocab_size; ++id) {
    switch (t.types_[id]) {
      case TokenType::kNormal:
        ByteLevelDecode(t.tokens_[id], &t.pieces_[id]);
        break;
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        t.pieces_[id] = t.tokens_[id];
        break;
      case TokenType::kUndefined:
      case TokenType::kUnused:
      case TokenType::kByte:
        break;
    }
    if (IsSpecialType(t.types_[id]) && !t.tokens_[id].empty()) t.special_ids_.push_back(id);
  }
  std::stable_sort(t.special_ids_.begin(), t.special_ids_.end(), [&t](int32_t a, int32_t b) {
    return t.tokens_[a].size() > t.tokens_[b].size();
  });

  for (int b = 0; b < 256; ++b) {
    const std::string_view mapped = ByteToMappedUtf8(static_cast<uint8_t>(b));
    t.byte_symbols_[b] = t.InternSymbol(mapped);
    t.byte_tokens_[b] = t.TokenId(mapped);
  }

  t.merge_count_ = config.merges.size();
  t.merges_.reserve(config.merges.size());
  t.symbol_ids_.reserve(config.merges.size() + 256);
  std::string joined;
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const std::string& merge = config.merges[rank];
    // llama.cpp splits at the first space from index 1, so a left side may
    // itself start with a space.
    const size_t split = merge.size() < 2 ? std::string::npos : merge.find(' ', 1);
    if (split == std::string::npos || split + 1 >= merge.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.merges[", rank, "] = \"",
                                                     Printable(merge),
                                                     "\" is not of the form \"left right\""));
    }
    if (rank > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return absl::InvalidArgumentError("tokenizer.ggml.merges has more entries than int32 ranks");
    }
    const std::string_view left(merge.data(), split);
    const std::string_view right(merge.data() + split + 1, merge.size() - split - 1);
    joined.assign(left);
    joined.append(right);
    const int32_t left_symbol = t.InternSymbol(left);
    const int32_t right_symbol = t.InternSymbol(right);
    const int32_t result_symbol = t.InternSymbol(joined);
    // A repeated pair keeps its first (lowest) rank.
    t.merges_.try_emplace(PairKey(left_symbol, right_symbol),
                          MergeEntry{static_cast<int32_t>(rank), result_symbol});
  }

  for (int32_t id = 0; id < vocab_size; ++id) {
    const std::string& text = t.tokens_[id];
    const bool is_eog_text =
        std::find(std::begin(kEndOfGenerationTexts), std::end(kEndOfGenerationTexts), text) !=
        std::end(kEndOfGenerationTexts);
    if (is_eog_text || id == t.eos_id_ || id == t.eot_id_ || id == t.eom_id_) {
      t.eog_ids_.push_back(id);
    }
  }
  return t;
}

int32_t Tokenizer::InternSymbol(std::string_view text) {
  const auto [it, inserted] =
      symbol_ids_.try_emplace(AsAbsl(text), static_cast<int32_t>(symbol_tokens_.size()));
  if (inserted) symbol_tokens_.push_back(TokenId(text));
  return it->second;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= vocab_size()) DieBadId("token_text", id, vocab_size(), __LINE__);
  return tokens_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= vocab_size()) DieBadId("token_type", id, vocab_size(), __LINE__);
  return types_[id];
}

int32_t Tokenizer::TokenId(std::string_view text) const {
  const auto it = token_ids_.find(AsAbsl(text));
  return it == token_ids_.end() ? kNoToken : it->second;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

std::string_view Tokenizer::TokenPiece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_size()) DieBadId("TokenPiece", id, vocab_size(), __LINE__);
  const TokenType type = types_[id];
  if (!render_special && (type == TokenType::kControl || type == TokenType::kUnknown)) return {};
  return pieces_[id];
}

void Tokenizer::SplitSpecial(std::string_view text, bool parse_special,
                             std::vector<Fragment>* out) const {
  out->clear();
  out->push_back({text, kNoToken});
  std::vector<Fragment> next;
  // Each special token in turn cuts every remaining text fragment at all its
  // occurrences; longer tokens go first, so they win over their substrings.
  for (const int32_t id : special_ids_) {
    const TokenType type = types_[id];
    if (!parse_special && (type == TokenType::kControl || type == TokenType::kUnknown)) continue;
    const std::string& special = tokens_[id];
    if (text.find(special) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& fragment : *out) {
      if (fragment.token != kNoToken) {
        next.push_back(fragment);
        continue;
      }
      size_t pos = 0;
      for (size_t hit; (hit = fragment.text.find(special, pos)) != std::string_view::npos;) {
        if (hit > pos) next.push_back({fragment.text.substr(pos, hit - pos), kNoToken});
        next.push_back({std::string_view(special), id});
        pos = hit + special.size();
      }
      if (pos < fragment.text.size()) next.push_back({fragment.text.substr(pos), kNoToken});
    }
    out->swap(next);
  }
}

absl::Status Tokenizer::EncodeWord(std::string_view word, BpeScratch* scratch,
                                   std::vector<int32_t>* ids) const {
  using Symbol = BpeScratch::Symbol;
  using Candidate = BpeScratch::Candidate;
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol>& symbols = scratch->symbols;
  symbols.clear();
  for (int32_t i = 0; i < n; ++i) {
    symbols.push_back({byte_symbols_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1,
                       static_cast<uint32_t>(i), static_cast<uint32_t>(i + 1)});
  }

  std::vector<Candidate>& queue = scratch->queue;
  queue.clear();
  const auto try_queue = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const auto it = merges_.find(PairKey(symbols[left].symbol, symbols[right].symbol));
    if (it == merges_.end()) return;
    queue.push_back({it->second.rank, left, right, symbols[left].symbol, symbols[right].symbol,
                     it->second.result_symbol});
    std::push_heap(queue.begin(), queue.end());
  };
  for (int32_t i = 0; i + 1 < n; ++i) try_queue(i);

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const Candidate c = queue.back();
    queue.pop_back();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    // Skip pairs that a merge on either side has made stale.
    if (left.symbol != c.left_symbol || left.next != c.right || right.symbol != c.right_symbol) {
      continue;
    }
    left.symbol = c.result_symbol;
    left.end = right.end;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.symbol = -1;
    try_queue(left.prev);
    try_queue(c.left);
  }

  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const int32_t token = symbol_tokens_[s.symbol];
    if (token != kNoToken) {
      ids->push_back(token);
      continue;
    }
    // Byte-level fallback: the merged text is not a token, so emit its bytes.
    for (uint32_t b = s.begin; b < s.end; ++b) {
      const auto byte = static_cast<uint8_t>(word[b]);
      if (byte_tokens_[byte] == kNoToken) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "the vocabulary has no token for byte 0x%02X (mapped \"%s\"), needed to encode \"%s\"",
            byte, std::string(ByteToMappedUtf8(byte)), Printable(word)));
      }
      ids->push_back(byte_tokens_[byte]);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool parse_special,
                                                       bool add_special) const {
  // EncodeWord indexes bytes with int32.
  if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("text of ", text.size(), " bytes is too long to tokenize (limit 2 GiB)"));
  }
  std::vector<int32_t> ids;
  if (add_special && add_bos_ && bos_id_ != kNoToken) ids.push_back(bos_id_);
  std::vector<Fragment> fragments;
  SplitSpecial(text, parse_special, &fragments);
  std::vector<std::string_view> words;
  BpeScratch scratch;
  for (const Fragment& fragment : fragments) {
    if (fragment.token != kNoToken) {
      ids.push_back(fragment.token);
      continue;
    }
    words.clear();
    PreTokenize(pre_tokenizer_, fragment.text, &words);
    for (const std::string_view word : words) {
      if (absl::Status s = EncodeWord(word, &scratch, &ids); !s.ok()) return s;
    }
  }
  if (add_special && add_eos_ && eos_id_ != kNoToken) ids.push_back(eos_id_);
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Detokenize(std::span<const int32_t> ids,
                                                  bool render_special) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " at position ", i,
                                                     " is outside the vocabulary of ", vocab_size(),
                                                     " tokens"));
    }
    text.append(TokenPiece(id, render_special));
  }
  return text;
}

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(&tokenizer), render_special_(render_special) {}

absl::Status StreamingDecoder::Push(int32_t id, std::string* text) {
  if (id < 0 || id >= tokenizer_->vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token id ", id, " is outside the vocabulary of ", tokenizer_->vocab_size(), " tokens"));
  }
  pending_.append(tokenizer_->TokenPiece(id, render_special_));
  const size_t complete = pending_.size() - IncompleteUtf8SuffixLength(pending_);
  text->append(pending_, 0, complete);
  pending_.erase(0, complete);
  return absl::OkStatus();
}

void StreamingDecoder::Flush(std::string* text) {
  text->append(pending_);
  pending_.clear();
}

}  // namespace moetier

#include "gguf/tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
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
    "<|im_end|>", "<|endoftext|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "</s>",
};

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// "<0x0A>" -> 0x0A; -1 unless the text is "<0x" + two hex digits + ">".
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (const char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

void AppendUnescapedSpaces(std::string_view text, std::string* out) {
  for (size_t pos = 0; pos < text.size();) {
    if (text.substr(pos, kEscapedSpace.size()) == kEscapedSpace) {
      out->push_back(' ');
      pos += kEscapedSpace.size();
    } else {
      out->push_back(text[pos++]);
    }
  }
}

// llama.cpp's clean_spaces passes (llama_vocab::impl::detokenize), run in
// place with the same index arithmetic so that odd inputs come out the same.
void CleanUpSpaces(std::string* buffer) {
  std::string& text = *buffer;
  const int64_t total1 = static_cast<int64_t>(text.size());
  int64_t total = total1 > 0 ? 1 : 0;
  // " ?", " !", " .", " ," lose the space.
  for (int64_t i = 1; i < total1; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
    text[total++] = x;
  }
  // " ' " loses both spaces.
  const int64_t total2 = total;
  total = total2 > 0 ? 1 : 0;
  for (int64_t i = 1; i < total2; ++i) {
    const char x = text[i];
    if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
      --total;
      text[++i] = '\0';
    }
    text[total++] = x;
  }
  // " 's", " 'm", " 're", " 've" lose the space (" 't", " 'd", " 'll" keep it).
  const int64_t total3 = total;
  total = total3 > 0 ? 1 : 0;
  for (int64_t i = 1; i < total3; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
      const char x1 = text[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --total;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
        const char x2 = text[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
      }
    }
    text[total++] = x;
  }
  text.resize(static_cast<size_t>(total));
}

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
  std::string mapped;            // the word in byte-level form, for ignore_merges
};

absl::StatusOr<TokenizerModel> TokenizerModelFromName(std::string_view name) {
  if (name == "gpt2") return TokenizerModel::kByteLevelBpe;
  if (name == "llama") return TokenizerModel::kSentencePiece;
  return absl::UnimplementedError(absl::StrCat(
      "unsupported tokenizer model \"", Printable(name),
      "\" (tokenizer.ggml.model); supported: gpt2 (byte-level BPE), llama (SentencePiece)"));
}

std::string_view TokenizerModelName(TokenizerModel model) {
  switch (model) {
    case TokenizerModel::kByteLevelBpe:
      return "gpt2";
    case TokenizerModel::kSentencePiece:
      return "llama";
  }
  return "?";
}

absl::StatusOr<Tokenizer> Tokenizer::Create(TokenizerConfig config) {
  const size_t n = config.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer vocabulary is empty");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer vocabulary has ", n, " tokens, more than int32 ids can address"));
  }
  const auto vocab_size = static_cast<int32_t>(n);
  const bool spm = config.model == TokenizerModel::kSentencePiece;
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
  if (spm && config.scores.empty()) {
    return absl::InvalidArgumentError(
        "a SentencePiece (llama) vocabulary needs one score per token (tokenizer.ggml.scores)");
  }
  if (!config.scores.empty() && config.scores.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.scores has ",
                                                   config.scores.size(),
                                                   " entries but tokenizer.ggml.tokens has ", n));
  }
  if (spm) {
    for (size_t i = 0; i < n; ++i) {
      // NaN has no order, and the merge queue needs one.
      if (std::isnan(config.scores[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.ggml.scores[", i, "] is NaN; scores must be ordered"));
      }
    }
    if (!config.merges.empty() || config.ignore_merges) {
      return absl::InvalidArgumentError(
          "a SentencePiece (llama) vocabulary merges by score; it takes no merges and no "
          "ignore_merges");
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
  // llama.cpp refuses these at load time rather than at the first prompt.
  if (config.add_bos && config.bos_id == kNoToken) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
  }
  if (config.add_eos && config.eos_id == kNoToken) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
  }

  Tokenizer t;
  t.model_ = config.model;
  t.tokens_ = std::move(config.tokens);
  t.types_ = std::move(config.token_types);
  if (spm) t.scores_ = std::move(config.scores);
  t.pre_tokenizer_ = config.pre_tokenizer;
  t.bos_id_ = config.bos_id;
  t.eos_id_ = config.eos_id;
  t.pad_id_ = config.pad_id;
  t.eot_id_ = config.eot_id;
  t.eom_id_ = config.eom_id;
  t.unknown_id_ = config.unknown_id;
  t.add_bos_ = config.add_bos;
  t.add_eos_ = config.add_eos;
  t.add_space_prefix_ = config.add_space_prefix;
  t.clean_up_spaces_ = config.clean_up_spaces;
  t.ignore_merges_ = config.ignore_merges;
  t.chat_template_ = std::move(config.chat_template);

  // A text stored twice resolves to the later id.
  t.token_ids_.reserve(n);
  for (int32_t id = 0; id < vocab_size; ++id) t.token_ids_[t.tokens_[id]] = id;

  t.pieces_.resize(n);
  for (int32_t id = 0; id < vocab_size; ++id) {
    const std::string& text = t.tokens_[id];
    switch (t.types_[id]) {
      case TokenType::kNormal:
        if (spm) {
          AppendUnescapedSpaces(text, &t.pieces_[id]);
        } else {
          ByteLevelDecode(text, &t.pieces_[id]);
        }
        break;
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        t.pieces_[id] = text;
        break;
      case TokenType::kByte:
        if (spm) {
          const int byte = ParseByteToken(text);
          if (byte < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("tokenizer.ggml.tokens[", id, "] = \"", Printable(text),
                             "\" has token type BYTE (6) but is not of the form <0xXX>"));
          }
          t.pieces_[id].assign(1, static_cast<char>(byte));
        }
        break;
      case TokenType::kUndefined:
      case TokenType::kUnused:
        break;
    }
    if (IsSpecialType(t.types_[id]) && !text.empty()) t.special_ids_.push_back(id);
  }
  std::stable_sort(t.special_ids_.begin(), t.special_ids_.end(), [&t](int32_t a, int32_t b) {
    return t.tokens_[a].size() > t.tokens_[b].size();
  });

  if (absl::Status s = spm ? t.BuildSentencePiece() : t.BuildByteLevelBpe(config.merges); !s.ok()) {
    return s;
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

absl::Status Tokenizer::BuildByteLevelBpe(const std::vector<std::string>& merges) {
  for (int b = 0; b < 256; ++b) {
    const std::string_view mapped = ByteToMappedUtf8(static_cast<uint8_t>(b));
    byte_symbols_[b] = InternSymbol(mapped);
    byte_tokens_[b] = TokenId(mapped);
  }

  merge_count_ = merges.size();
  merges_.reserve(merges.size());
  symbol_ids_.reserve(merges.size() + 256);
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
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
    const int32_t left_symbol = InternSymbol(left);
    const int32_t right_symbol = InternSymbol(right);
    const int32_t result_symbol = InternSymbol(joined);
    // A repeated pair keeps its first (lowest) rank.
    merges_.try_emplace(PairKey(left_symbol, right_symbol),
                        MergeEntry{static_cast<int32_t>(rank), result_symbol});
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::BuildSentencePiece() {
  for (int b = 0; b < 256; ++b) {
    const int32_t byte_token = TokenId(absl::StrFormat("<0x%02X>", b));
    byte_tokens_[b] =
        byte_token != kNoToken ? byte_token : TokenId(std::string(1, static_cast<char>(b)));
  }
  return absl::OkStatus();
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

float Tokenizer::score(int32_t id) const {
  if (id < 0 || id >= vocab_size()) DieBadId("score", id, vocab_size(), __LINE__);
  return scores_.empty() ? 0.0f : scores_[id];
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
  // As llama.cpp: the whole word is looked up before any merge, among all
  // tokens, special ones included.
  if (ignore_merges_) {
    scratch->mapped.clear();
    ByteLevelEncode(word, &scratch->mapped);
    if (const auto it = token_ids_.find(scratch->mapped); it != token_ids_.end()) {
      ids->push_back(it->second);
      return absl::OkStatus();
    }
  }
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
  // Create made sure that add_bos / add_eos come with their tokens.
  if (add_special && add_bos_) ids.push_back(bos_id_);
  std::vector<Fragment> fragments;
  if (!text.empty()) SplitSpecial(text, parse_special, &fragments);
  if (model_ == TokenizerModel::kSentencePiece) {
    if (absl::Status s = EncodeSentencePiece(fragments, &ids); !s.ok()) return s;
  } else {
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
  }
  if (add_special && add_eos_) ids.push_back(eos_id_);
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
    std::string_view piece = TokenPiece(id, render_special);
    // Only the first token loses a leading space, even when it renders as
    // nothing (a bos that is not rendered), as in llama.cpp.
    if (i == 0 && add_space_prefix_ && !piece.empty() && piece.front() == ' ') {
      piece.remove_prefix(1);
    }
    text.append(piece);
  }
  if (clean_up_spaces_) CleanUpSpaces(&text);
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

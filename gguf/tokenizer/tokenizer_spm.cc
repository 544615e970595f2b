// SentencePiece encoding (tokenizer.ggml.model "llama"), as llama.cpp's
// llm_tokenizer_spm_session: spaces become "▁", the text is cut into UTF-8
// characters, and adjacent symbols are merged while their concatenation is
// a token, highest score first and leftmost first among equal scores. A
// symbol left over that is not a token is emitted as its <0xXX> byte tokens.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier {
namespace {

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581

// llama.cpp's unicode_len_utf8: the length a lead byte announces, taken at
// face value (a stray continuation byte counts 1, 0xF8..0xFF count 4).
size_t Utf8LengthFromLeadByte(char c) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[static_cast<uint8_t>(c) >> 4];
}

}  // namespace

struct Tokenizer::SpmScratch {
  struct Symbol {
    int32_t prev;
    int32_t next;
    uint32_t begin;   // byte offset into `text`
    uint32_t length;  // bytes; 0 once merged into the left neighbour
  };
  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t length;  // left + right length when queued
    // The heap pops the largest: the highest score, then the leftmost.
    bool operator<(const Bigram& other) const {
      if (score != other.score) return score < other.score;
      return left > other.left;
    }
  };
  std::string text;  // the fragment with spaces escaped
  std::vector<Symbol> symbols;
  std::vector<Bigram> queue;  // a heap
};

absl::Status Tokenizer::EncodeSentencePiece(const std::vector<Fragment>& fragments,
                                            std::vector<int32_t>* ids) const {
  SpmScratch scratch;
  // Text that starts the input or follows a special token gets the space
  // prefix, as llama.cpp decides it.
  bool after_special = true;
  for (const Fragment& fragment : fragments) {
    if (fragment.token != kNoToken) {
      ids->push_back(fragment.token);
      after_special = true;
      continue;
    }
    if (absl::Status s =
            EncodeSpmFragment(fragment.text, add_space_prefix_ && after_special, &scratch, ids);
        !s.ok()) {
      return s;
    }
    after_special = false;
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::EncodeSpmFragment(std::string_view fragment, bool space_prefix,
                                          SpmScratch* scratch, std::vector<int32_t>* ids) const {
  using Symbol = SpmScratch::Symbol;
  using Bigram = SpmScratch::Bigram;
  std::string& text = scratch->text;
  text.clear();
  if (space_prefix) text.append(kEscapedSpace);
  for (const char c : fragment) {
    if (c == ' ') {
      text.append(kEscapedSpace);
    } else {
      text.push_back(c);
    }
  }
  // Encode checked that the input fits int32 offsets; escaping at most
  // triples it, so check again.
  if (text.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("text is too long to tokenize once spaces are escaped");
  }

  std::vector<Symbol>& symbols = scratch->symbols;
  symbols.clear();
  for (size_t offset = 0; offset < text.size();) {
    const auto length =
        static_cast<uint32_t>(std::min(Utf8LengthFromLeadByte(text[offset]), text.size() - offset));
    const auto index = static_cast<int32_t>(symbols.size());
    offset += length;
    symbols.push_back({index - 1, offset == text.size() ? -1 : index + 1,
                       static_cast<uint32_t>(offset - length), length});
  }
  if (symbols.empty()) return absl::OkStatus();

  std::vector<Bigram>& queue = scratch->queue;
  queue.clear();
  const auto try_add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    const int32_t token = TokenId(std::string_view(text).substr(symbols[left].begin, length));
    if (token == kNoToken) return;
    queue.push_back({scores_[token], left, right, length});
    std::push_heap(queue.begin(), queue.end());
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const Bigram bigram = queue.back();
    queue.pop_back();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // A side already merged, or grown by another merge, makes the pair stale.
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  // Every merged symbol is a token; only a single character can be missing
  // from the vocabulary. (llama.cpp's resegment also consults the pairs it
  // merged, but only for texts that are not tokens, which no merge makes.)
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece =
        std::string_view(text).substr(symbols[i].begin, symbols[i].length);
    const int32_t token = TokenId(piece);
    if (token != kNoToken) {
      ids->push_back(token);
      continue;
    }
    const bool bytes_known = std::all_of(piece.begin(), piece.end(), [this](char c) {
      return byte_tokens_[static_cast<uint8_t>(c)] != kNoToken;
    });
    if (bytes_known) {
      for (const char c : piece) ids->push_back(byte_tokens_[static_cast<uint8_t>(c)]);
    } else if (unknown_id_ != kNoToken) {
      ids->push_back(unknown_id_);
    } else {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the vocabulary has no token for \"%s\", no byte tokens (<0xXX>) for all its bytes "
          "and no unknown token",
          SanitizeUtf8(piece)));
    }
  }
  return absl::OkStatus();
}

}  // namespace moetier

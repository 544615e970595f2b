// Byte-level BPE tokenizer of the Qwen family (SPEC.md §4): special-token
// splitting, qwen2/qwen35 pre-tokenization, the GPT-2 byte map and rank-ordered
// merges, with decoding that reproduces the input bytes exactly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gguf/tokenizer/pre_tokenizer.h"

namespace moetier {

class GgufMetadata;

inline constexpr int32_t kNoToken = -1;

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct TokenizerConfig {
  // Index = token id. Normal tokens are in byte-level mapped form; control
  // and user-defined tokens are their literal text.
  std::vector<std::string> tokens;
  // Empty means every token is kNormal; otherwise one entry per token.
  std::vector<TokenType> token_types;
  // "left right" in mapped form; the rank of a merge is its index.
  std::vector<std::string> merges;
  PreTokenizer pre_tokenizer = PreTokenizer::kQwen2;
  int32_t bos_id = kNoToken;
  int32_t eos_id = kNoToken;
  int32_t pad_id = kNoToken;
  int32_t eot_id = kNoToken;
  int32_t eom_id = kNoToken;
  int32_t unknown_id = kNoToken;
  bool add_bos = false;       // Encode(..., add_special=true) prepends bos_id
  bool add_eos = false;       // Encode(..., add_special=true) appends eos_id
  std::string chat_template;  // tokenizer.chat_template, kept for the caller
};

class Tokenizer {
 public:
  // Validates `config` (token types, merges, special ids) and builds the
  // lookup tables.
  static absl::StatusOr<Tokenizer> Create(TokenizerConfig config);
  // Reads the tokenizer.* keys of a GGUF file (SPEC.md §4.1). Only
  // tokenizer.ggml.model "gpt2" with a pre-tokenizer that
  // PreTokenizerFromName accepts is supported.
  static absl::StatusOr<Tokenizer> FromGgufMetadata(const GgufMetadata& metadata);

  // Text to token ids. Special tokens (control, user-defined, unknown) are cut
  // out first, longest first; with parse_special = false control and unknown
  // tokens are left as text but user-defined ones are still matched. With
  // add_special, bos/eos are added as add_bos/add_eos say. Fails only when
  // the vocabulary lacks the token for a byte that the input needs.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool parse_special,
                                              bool add_special = false) const;

  // Token ids to bytes, exactly the bytes that were encoded. Control and
  // unknown tokens are rendered only with render_special; unused tokens
  // render as nothing. Fails on an id outside the vocabulary.
  absl::StatusOr<std::string> Detokenize(std::span<const int32_t> ids, bool render_special) const;
  // The bytes one token renders as. Precondition: 0 <= id < vocab_size().
  std::string_view TokenPiece(int32_t id, bool render_special) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  // Stored form of a token. Precondition: 0 <= id < vocab_size().
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // Id of the token whose stored form is `text`, or kNoToken.
  int32_t TokenId(std::string_view text) const;

  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t eot_id() const { return eot_id_; }
  int32_t eom_id() const { return eom_id_; }
  int32_t unknown_id() const { return unknown_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  PreTokenizer pre_tokenizer() const { return pre_tokenizer_; }
  const std::string& chat_template() const { return chat_template_; }
  size_t merge_count() const { return merge_count_; }

  // End of generation (SPEC.md §4.3): eos, eot, eom, and every token whose
  // text is <|im_end|>, <|endoftext|>, <|fim_pad|>, <|repo_name|> or
  // <|file_sep|>. Sorted ascending.
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_ids_; }
  bool IsEndOfGeneration(int32_t id) const;

 private:
  struct MergeEntry {
    int32_t rank;
    int32_t result_symbol;
  };
  struct Fragment {
    std::string_view text;  // raw text when token == kNoToken
    int32_t token;
  };

  struct BpeScratch;

  Tokenizer() = default;
  int32_t InternSymbol(std::string_view text);
  void SplitSpecial(std::string_view text, bool parse_special, std::vector<Fragment>* out) const;
  absl::Status EncodeWord(std::string_view word, BpeScratch* scratch,
                          std::vector<int32_t>* ids) const;

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<std::string> pieces_;  // rendered bytes of each token
  absl::flat_hash_map<std::string, int32_t> token_ids_;
  // Special tokens to cut out before pre-tokenization, longest text first.
  std::vector<int32_t> special_ids_;

  // BPE works on interned symbols: the 256 mapped bytes and every merge side
  // and result, so the merge loop compares integers, not strings.
  std::vector<int32_t> symbol_tokens_;  // symbol -> token id or kNoToken
  absl::flat_hash_map<std::string, int32_t> symbol_ids_;
  int32_t byte_symbols_[256] = {};
  int32_t byte_tokens_[256] = {};                     // token of each mapped byte, or kNoToken
  absl::flat_hash_map<uint64_t, MergeEntry> merges_;  // key: left << 32 | right
  size_t merge_count_ = 0;

  PreTokenizer pre_tokenizer_ = PreTokenizer::kQwen2;
  int32_t bos_id_ = kNoToken;
  int32_t eos_id_ = kNoToken;
  int32_t pad_id_ = kNoToken;
  int32_t eot_id_ = kNoToken;
  int32_t eom_id_ = kNoToken;
  int32_t unknown_id_ = kNoToken;
  bool add_bos_ = false;
  bool add_eos_ = false;
  std::string chat_template_;
  std::vector<int32_t> eog_ids_;
};

// Turns a stream of token ids into text pieces that never split a UTF-8
// character: bytes of an incomplete sequence are held back until the token
// that completes it arrives (at most 3 bytes). Reuse `text` buffers in the
// token loop; nothing else allocates once the held-back buffer has grown.
class StreamingDecoder {
 public:
  StreamingDecoder(const Tokenizer& tokenizer, bool render_special);

  // Appends to *text the bytes that are complete after token `id`.
  absl::Status Push(int32_t id, std::string* text);
  // Appends whatever is still held back (an incomplete sequence at the end
  // of generation) and resets.
  void Flush(std::string* text);

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace moetier

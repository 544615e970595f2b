// The tokenizers of GGUF vocabularies (SPEC.md §4), matching llama.cpp's
// llama_tokenize / llama_detokenize:
//  - byte-level BPE (tokenizer.ggml.model "gpt2": Qwen, OLMoE, Llama 3,
//    GLM-4): special-token splitting, a pre-tokenizer (pre_tokenizer.h), the
//    GPT-2 byte map and rank-ordered merges;
//  - SentencePiece (tokenizer.ggml.model "llama": Mixtral and other llama
//    vocabularies): "▁" for spaces, score-ordered merges and <0xXX> byte
//    tokens for what the vocabulary lacks (tokenizer_spm.cc).
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

// The vocabulary models moetier implements (tokenizer.ggml.model).
enum class TokenizerModel {
  kByteLevelBpe,   // "gpt2"
  kSentencePiece,  // "llama"
};

// Maps tokenizer.ggml.model to a model; the error lists the supported names.
absl::StatusOr<TokenizerModel> TokenizerModelFromName(std::string_view name);
std::string_view TokenizerModelName(TokenizerModel model);  // "gpt2" or "llama"

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
  TokenizerModel model = TokenizerModel::kByteLevelBpe;
  // Index = token id. Normal tokens are in byte-level mapped form (BPE) or
  // spell a space as "▁" (SentencePiece); SentencePiece byte tokens are
  // "<0x00>".."<0xFF>"; control and user-defined tokens are their literal text.
  std::vector<std::string> tokens;
  // Empty means every token is kNormal; otherwise one entry per token.
  std::vector<TokenType> token_types;
  // SentencePiece: one score per token (tokenizer.ggml.scores), required.
  // Byte-level BPE does not use them: empty or one per token.
  std::vector<float> scores;
  // Byte-level BPE: "left right" in mapped form; the rank of a merge is its
  // index. SentencePiece merges by score and takes none.
  std::vector<std::string> merges;
  PreTokenizer pre_tokenizer = PreTokenizer::kQwen2;  // byte-level BPE only
  // Byte-level BPE only: a pre-tokenized piece that is itself a token is
  // encoded as that token, merges or not (PreTokenizerInfo::ignore_merges).
  bool ignore_merges = false;
  int32_t bos_id = kNoToken;
  int32_t eos_id = kNoToken;
  int32_t pad_id = kNoToken;
  int32_t eot_id = kNoToken;
  int32_t eom_id = kNoToken;
  int32_t unknown_id = kNoToken;
  bool add_bos = false;  // Encode(..., add_special=true) prepends bos_id, which must be set
  bool add_eos = false;  // Encode(..., add_special=true) appends eos_id, which must be set
  // tokenizer.ggml.add_space_prefix (llama.cpp: true for SentencePiece unless
  // the key says otherwise, false for BPE). SentencePiece encoding puts a
  // space before each text fragment that starts the input or follows a
  // special token; Detokenize drops one leading space of the first token.
  bool add_space_prefix = false;
  // llama.cpp's clean_spaces, which it sets from tokenizer.ggml.pre
  // (PreTokenizerInfo): Detokenize removes the space before ? ! . , and
  // before 's 'm 're 've, and the spaces around a lone apostrophe.
  bool clean_up_spaces = false;
  std::string chat_template;  // tokenizer.chat_template, kept for the caller
};

class Tokenizer {
 public:
  // Validates `config` (token types, scores, merges, special ids) and builds
  // the lookup tables.
  static absl::StatusOr<Tokenizer> Create(TokenizerConfig config);
  // Reads the tokenizer.* keys of a GGUF file (SPEC.md §4.1) with llama.cpp's
  // defaults: tokenizer.ggml.model "gpt2" with a pre-tokenizer that
  // LookUpPreTokenizer accepts (which also sets clean_up_spaces,
  // ignore_merges and, for the Llama 3 names, add_bos_token's default of
  // true), or "llama" (SentencePiece, which needs tokenizer.ggml.scores;
  // bos/eos/unknown default to 1/2/0 and add_bos_token and add_space_prefix
  // to true).
  static absl::StatusOr<Tokenizer> FromGgufMetadata(const GgufMetadata& metadata);

  // Text to token ids. Special tokens (control, user-defined, unknown) are cut
  // out first, longest first; with parse_special = false control and unknown
  // tokens are left as text but user-defined ones are still matched. With
  // add_special, bos/eos are added as add_bos/add_eos say. Fails only when
  // the vocabulary lacks the token for a byte that the input needs (and,
  // for SentencePiece, has no unknown token to stand in).
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool parse_special,
                                              bool add_special = false) const;

  // Token ids to text, as llama.cpp's llama_detokenize with remove_special =
  // false: the concatenated TokenPiece()s, less one leading space of the
  // first piece when add_space_prefix, then the clean_up_spaces pass if set.
  // Byte-level BPE without clean_up_spaces gives back exactly the bytes that
  // were encoded; SentencePiece gives back Encode's input when that was
  // encoded without bos (with bos, the bos piece takes the space removal and
  // the text keeps the leading space Encode added). Fails on an id outside
  // the vocabulary.
  absl::StatusOr<std::string> Detokenize(std::span<const int32_t> ids, bool render_special) const;
  // The bytes one token renders as (llama.cpp's token_to_piece): control and
  // unknown tokens only with render_special, their text; user-defined tokens
  // their text; normal tokens their bytes (byte-level map undone, or "▁" as
  // a space); SentencePiece byte tokens their byte; unused and undefined
  // tokens nothing. Precondition: 0 <= id < vocab_size().
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
  bool add_space_prefix() const { return add_space_prefix_; }
  bool clean_up_spaces() const { return clean_up_spaces_; }
  bool ignore_merges() const { return ignore_merges_; }
  TokenizerModel model() const { return model_; }
  // Meaningful for byte-level BPE only.
  PreTokenizer pre_tokenizer() const { return pre_tokenizer_; }
  // SentencePiece merge score; 0 for byte-level BPE. Precondition:
  // 0 <= id < vocab_size().
  float score(int32_t id) const;
  const std::string& chat_template() const { return chat_template_; }
  size_t merge_count() const { return merge_count_; }

  // End of generation (SPEC.md §4.3): eos, eot, eom, and every token whose
  // text is <|im_end|>, <|endoftext|>, <|fim_pad|>, <|repo_name|>,
  // <|file_sep|> or </s>. Sorted ascending.
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
  struct SpmScratch;

  Tokenizer() = default;
  absl::Status BuildByteLevelBpe(const std::vector<std::string>& merges);
  absl::Status BuildSentencePiece();
  int32_t InternSymbol(std::string_view text);
  void SplitSpecial(std::string_view text, bool parse_special, std::vector<Fragment>* out) const;
  absl::Status EncodeWord(std::string_view word, BpeScratch* scratch,
                          std::vector<int32_t>* ids) const;
  // SentencePiece encoding of the fragments SplitSpecial made
  // (tokenizer_spm.cc).
  absl::Status EncodeSentencePiece(const std::vector<Fragment>& fragments,
                                   std::vector<int32_t>* ids) const;
  absl::Status EncodeSpmFragment(std::string_view text, bool space_prefix, SpmScratch* scratch,
                                 std::vector<int32_t>* ids) const;

  TokenizerModel model_ = TokenizerModel::kByteLevelBpe;
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<float> scores_;        // SentencePiece only
  std::vector<std::string> pieces_;  // rendered bytes of each token
  absl::flat_hash_map<std::string, int32_t> token_ids_;
  // Special tokens to cut out before pre-tokenization, longest text first.
  std::vector<int32_t> special_ids_;

  // BPE works on interned symbols: the 256 mapped bytes and every merge side
  // and result, so the merge loop compares integers, not strings.
  std::vector<int32_t> symbol_tokens_;  // symbol -> token id or kNoToken
  absl::flat_hash_map<std::string, int32_t> symbol_ids_;
  int32_t byte_symbols_[256] = {};
  // Token of each byte, or kNoToken: its mapped form (BPE), or <0xXX> and
  // else the one-byte text (SentencePiece, as llama.cpp's byte_to_token).
  int32_t byte_tokens_[256] = {};
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
  bool add_space_prefix_ = false;
  bool clean_up_spaces_ = false;
  bool ignore_merges_ = false;
  std::string chat_template_;
  std::vector<int32_t> eog_ids_;
};

// Turns a stream of token ids into text pieces that never split a UTF-8
// character: bytes of an incomplete sequence are held back until the token
// that completes it arrives (at most 3 bytes). The pieces are TokenPiece()s
// as they come, as llama.cpp's server streams them: no leading space is
// removed and clean_up_spaces does not apply. Reuse `text` buffers in the
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

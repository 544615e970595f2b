// Tokenizer::FromGgufMetadata lives apart from tokenizer.cc so that users of
// the tokenizer that never read GGUF files do not pull in the GGUF reader.
#include <utility>

#include "absl/strings/str_cat.h"
#include "gguf/gguf_reader.h"
#include "gguf/tokenizer/tokenizer.h"

namespace moetier {
namespace {

constexpr char kModelKey[] = "tokenizer.ggml.model";
constexpr char kPreKey[] = "tokenizer.ggml.pre";
constexpr char kTokensKey[] = "tokenizer.ggml.tokens";
constexpr char kTokenTypeKey[] = "tokenizer.ggml.token_type";
constexpr char kMergesKey[] = "tokenizer.ggml.merges";
constexpr char kScoresKey[] = "tokenizer.ggml.scores";

// Reads an optional token-id key into *id; an absent key leaves kNoToken.
absl::Status ReadTokenId(const GgufMetadata& metadata, const char* key, size_t vocab_size,
                         int32_t* id) {
  *id = kNoToken;
  if (!metadata.Has(key)) return absl::OkStatus();
  absl::StatusOr<uint64_t> value = metadata.GetUint(key);
  if (!value.ok()) return value.status();
  if (*value >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " = ", *value, " is outside the vocabulary of ", vocab_size, " tokens"));
  }
  *id = static_cast<int32_t>(*value);
  return absl::OkStatus();
}

// tokenizer.ggml.scores, one per token. llama.cpp takes FLOAT32 or INT32.
absl::Status ReadScores(const GgufMetadata& metadata, size_t vocab_size,
                        std::vector<float>* scores) {
  if (!metadata.Has(kScoresKey)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kScoresKey, " is missing; a llama (SentencePiece) tokenizer merges by these scores"));
  }
  std::vector<double> values;
  if (absl::StatusOr<std::vector<double>> floats = metadata.GetFloatArray(kScoresKey);
      floats.ok()) {
    values = *std::move(floats);
  } else if (absl::StatusOr<std::vector<int64_t>> ints = metadata.GetIntArray(kScoresKey);
             ints.ok()) {
    values.assign(ints->begin(), ints->end());
  } else {
    return floats.status();
  }
  if (values.size() != vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        kScoresKey, " has ", values.size(), " entries but ", kTokensKey, " has ", vocab_size));
  }
  scores->assign(values.begin(), values.end());
  return absl::OkStatus();
}

absl::StatusOr<bool> ReadBool(const GgufMetadata& metadata, std::string_view key, bool fallback) {
  if (!metadata.Has(key)) return fallback;
  return metadata.GetBool(key);
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::FromGgufMetadata(const GgufMetadata& metadata) {
  if (!metadata.Has(kModelKey)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has no tokenizer: ", kModelKey, " is missing"));
  }
  absl::StatusOr<std::string> model_name = metadata.GetString(kModelKey);
  if (!model_name.ok()) return model_name.status();
  absl::StatusOr<TokenizerModel> model = TokenizerModelFromName(*model_name);
  if (!model.ok()) return model.status();
  const bool spm = *model == TokenizerModel::kSentencePiece;

  TokenizerConfig config;
  config.model = *model;
  bool add_bos_by_default = spm;
  // llama.cpp gives SentencePiece no pre-tokenizer and ignores the key.
  if (!spm) {
    if (!metadata.Has(kPreKey)) {
      return absl::UnimplementedError(absl::StrCat(kPreKey,
                                                   " is missing, so the pre-tokenizer is unknown; "
                                                   "supported: ",
                                                   SupportedPreTokenizerNames()));
    }
    absl::StatusOr<std::string> pre = metadata.GetString(kPreKey);
    if (!pre.ok()) return pre.status();
    absl::StatusOr<PreTokenizerInfo> pre_tokenizer = LookUpPreTokenizer(*pre);
    if (!pre_tokenizer.ok()) return pre_tokenizer.status();
    config.pre_tokenizer = pre_tokenizer->kind;
    config.clean_up_spaces = pre_tokenizer->clean_up_spaces;
    config.ignore_merges = pre_tokenizer->ignore_merges;
    add_bos_by_default = pre_tokenizer->add_bos_by_default;
  }

  absl::StatusOr<std::vector<std::string>> tokens = metadata.GetStringArray(kTokensKey);
  if (!tokens.ok()) return tokens.status();
  config.tokens = *std::move(tokens);
  const size_t n = config.tokens.size();
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat(kTokensKey, " is empty"));

  // llama.cpp treats a missing type array as all-normal.
  if (metadata.Has(kTokenTypeKey)) {
    absl::StatusOr<std::vector<int64_t>> types = metadata.GetIntArray(kTokenTypeKey);
    if (!types.ok()) return types.status();
    if (types->size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(kTokenTypeKey, " has ", types->size(),
                                                     " entries but ", kTokensKey, " has ", n));
    }
    config.token_types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t type = (*types)[i];
      if (type < 0 || type > static_cast<int64_t>(TokenType::kByte)) {
        return absl::InvalidArgumentError(
            absl::StrCat(kTokenTypeKey, "[", i, "] = ", type, " is not a token type (0..6)"));
      }
      config.token_types.push_back(static_cast<TokenType>(type));
    }
  }

  if (spm) {
    // Merges, which converters from tokenizer.json may add, are not used.
    absl::Status s = ReadScores(metadata, n, &config.scores);
    if (!s.ok()) return s;
  } else {
    if (!metadata.Has(kMergesKey)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kMergesKey, " is missing; a gpt2 (byte-level BPE) tokenizer needs it"));
    }
    absl::StatusOr<std::vector<std::string>> merges = metadata.GetStringArray(kMergesKey);
    if (!merges.ok()) return merges.status();
    config.merges = *std::move(merges);
  }

  const std::pair<const char*, int32_t*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &config.bos_id},
      {"tokenizer.ggml.eos_token_id", &config.eos_id},
      {"tokenizer.ggml.padding_token_id", &config.pad_id},
      {"tokenizer.ggml.eot_token_id", &config.eot_id},
      {"tokenizer.ggml.eom_token_id", &config.eom_id},
      {"tokenizer.ggml.unknown_token_id", &config.unknown_id},
  };
  for (const auto& [key, id] : ids) {
    if (absl::Status s = ReadTokenId(metadata, key, n, id); !s.ok()) return s;
  }
  if (spm) {
    // llama.cpp's defaults for llama vocabularies when the keys are absent
    // (dropped when the vocabulary is too small to hold them).
    const std::pair<int32_t*, int32_t> defaults[] = {
        {&config.bos_id, 1}, {&config.eos_id, 2}, {&config.unknown_id, 0}};
    for (const auto& [id, fallback] : defaults) {
      if (*id == kNoToken && static_cast<size_t>(fallback) < n) *id = fallback;
    }
  }

  absl::StatusOr<bool> add_bos =
      ReadBool(metadata, "tokenizer.ggml.add_bos_token", add_bos_by_default);
  if (!add_bos.ok()) return add_bos.status();
  config.add_bos = *add_bos;
  absl::StatusOr<bool> add_eos = ReadBool(metadata, "tokenizer.ggml.add_eos_token", false);
  if (!add_eos.ok()) return add_eos.status();
  config.add_eos = *add_eos;
  absl::StatusOr<bool> add_space_prefix =
      ReadBool(metadata, "tokenizer.ggml.add_space_prefix", spm);
  if (!add_space_prefix.ok()) return add_space_prefix.status();
  config.add_space_prefix = *add_space_prefix;

  if (metadata.Has("tokenizer.chat_template")) {
    absl::StatusOr<std::string> chat_template = metadata.GetString("tokenizer.chat_template");
    if (!chat_template.ok()) return chat_template.status();
    config.chat_template = *std::move(chat_template);
  }
  return Create(std::move(config));
}

}  // namespace moetier

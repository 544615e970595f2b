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
  absl::StatusOr<std::string> model = metadata.GetString(kModelKey);
  if (!model.ok()) return model.status();
  if (*model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat("unsupported tokenizer model \"", *model, "\" (",
                                                 kModelKey,
                                                 "); only \"gpt2\" (byte-level BPE) is supported"));
  }

  TokenizerConfig config;
  if (!metadata.Has(kPreKey)) {
    return absl::UnimplementedError(absl::StrCat(kPreKey,
                                                 " is missing, so the pre-tokenizer is unknown; "
                                                 "supported: ",
                                                 SupportedPreTokenizerNames()));
  }
  absl::StatusOr<std::string> pre = metadata.GetString(kPreKey);
  if (!pre.ok()) return pre.status();
  absl::StatusOr<PreTokenizer> pre_tokenizer = PreTokenizerFromName(*pre);
  if (!pre_tokenizer.ok()) return pre_tokenizer.status();
  config.pre_tokenizer = *pre_tokenizer;

  absl::StatusOr<std::vector<std::string>> tokens = metadata.GetStringArray(kTokensKey);
  if (!tokens.ok()) return tokens.status();
  config.tokens = *std::move(tokens);
  const size_t n = config.tokens.size();

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

  if (!metadata.Has(kMergesKey)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kMergesKey, " is missing; a gpt2 (byte-level BPE) tokenizer needs it"));
  }
  absl::StatusOr<std::vector<std::string>> merges = metadata.GetStringArray(kMergesKey);
  if (!merges.ok()) return merges.status();
  config.merges = *std::move(merges);

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

  absl::StatusOr<bool> add_bos = ReadBool(metadata, "tokenizer.ggml.add_bos_token", false);
  if (!add_bos.ok()) return add_bos.status();
  config.add_bos = *add_bos;
  absl::StatusOr<bool> add_eos = ReadBool(metadata, "tokenizer.ggml.add_eos_token", false);
  if (!add_eos.ok()) return add_eos.status();
  config.add_eos = *add_eos;

  if (metadata.Has("tokenizer.chat_template")) {
    absl::StatusOr<std::string> chat_template = metadata.GetString("tokenizer.chat_template");
    if (!chat_template.ok()) return chat_template.status();
    config.chat_template = *std::move(chat_template);
  }
  return Create(std::move(config));
}

}  // namespace moetier

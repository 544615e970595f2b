#include "synth/synth_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moetier {
namespace {

int32_t TypeValue(SynthTokenType type) { return static_cast<int32_t>(type); }

SynthBpeLayout MakeQwenLayout(BpeWordSplit split, int64_t end_of_text, int64_t im_start,
                              int64_t im_end, int64_t think, int64_t think_end) {
  // Qwen marks <|...|> tokens special (CONTROL) and adds <think> / </think>
  // with special = false (USER_DEFINED), SPEC.md §4.2.
  SynthBpeLayout layout;
  layout.split = split;
  layout.trailing = {
      {"<|endoftext|>", SynthTokenType::kControl, end_of_text},
      {"<|im_start|>", SynthTokenType::kControl, im_start},
      {"<|im_end|>", SynthTokenType::kControl, im_end},
      {"<think>", SynthTokenType::kUserDefined, think},
      {"</think>", SynthTokenType::kUserDefined, think_end},
  };
  layout.real_text_end = end_of_text;
  return layout;
}

}  // namespace

int64_t SynthBpeLayout::min_vocab() const {
  return static_cast<int64_t>(leading.size()) + kSynthByteTokens + static_cast<int64_t>(trailing.size());
}

int64_t SynthBpeLayout::real_min_vocab() const {
  int64_t largest = -1;
  for (const SynthSpecialToken& t : trailing) largest = std::max(largest, t.real_id);
  return largest + 1;
}

const SynthBpeLayout& Qwen3BpeLayout() {
  static const SynthBpeLayout* layout = new SynthBpeLayout(
      MakeQwenLayout(BpeWordSplit::kQwen2, kQwenEndOfTextId, kQwenImStartId, kQwenImEndId,
                     kQwenThinkId, kQwenThinkEndId));
  return *layout;
}

const SynthBpeLayout& Qwen35BpeLayout() {
  static const SynthBpeLayout* layout = new SynthBpeLayout(
      MakeQwenLayout(BpeWordSplit::kQwen35, kQwen35EndOfTextId, kQwen35ImStartId, kQwen35ImEndId,
                     kQwen35ThinkId, kQwen35ThinkEndId));
  return *layout;
}

const SynthBpeLayout& OlmoeBpeLayout() {
  static const SynthBpeLayout* layout = [] {
    auto* l = new SynthBpeLayout;
    l->split = BpeWordSplit::kGpt2;
    // The OLMo GPT-NeoX vocabulary: the PII placeholders Dolma's cleaning
    // writes, the padding token at 1 and <|endoftext|> last.
    l->leading = {
        {"|||IP_ADDRESS|||", SynthTokenType::kControl, 0},
        {"<|padding|>", SynthTokenType::kControl, kOlmoePaddingId},
    };
    l->trailing = {
        {"|||EMAIL_ADDRESS|||", SynthTokenType::kControl, kOlmoeEndOfTextId - 2},
        {"|||PHONE_NUMBER|||", SynthTokenType::kControl, kOlmoeEndOfTextId - 1},
        {"<|endoftext|>", SynthTokenType::kControl, kOlmoeEndOfTextId},
    };
    l->real_text_end = kOlmoeEndOfTextId - 2;
    return l;
  }();
  return *layout;
}

const SynthBpeLayout& GptOssBpeLayout() {
  static const SynthBpeLayout* layout = [] {
    // The added tokens of gpt-oss's tokenizer, every one special (CONTROL):
    // o200k_harmony's, <|reserved_<id>|> at the ids between them, and
    // o200k_base's <|endofprompt|>. The 1069 rows after them are padding.
    struct Named {
      int64_t id;
      std::string_view text;
    };
    static constexpr Named kNamed[] = {{kGptOssStartOfTextId, "<|startoftext|>"},
                                       {kGptOssEndOfTextId, "<|endoftext|>"},
                                       {kGptOssReturnId, "<|return|>"},
                                       {kGptOssConstrainId, "<|constrain|>"},
                                       {kGptOssChannelId, "<|channel|>"},
                                       {kGptOssStartId, "<|start|>"},
                                       {kGptOssEndId, "<|end|>"},
                                       {kGptOssMessageId, "<|message|>"},
                                       {kGptOssCallId, "<|call|>"},
                                       {kGptOssEndOfPromptId, "<|endofprompt|>"}};
    // Owns the texts the layout's views point into.
    auto* texts = new std::vector<std::string>;
    for (int64_t id = kGptOssStartOfTextId; id <= kGptOssEndOfPromptId; ++id) {
      const auto named = std::find_if(std::begin(kNamed), std::end(kNamed),
                                      [id](const Named& n) { return n.id == id; });
      texts->push_back(named != std::end(kNamed) ? std::string(named->text)
                                                 : absl::StrCat("<|reserved_", id, "|>"));
    }
    auto* l = new SynthBpeLayout;
    l->split = BpeWordSplit::kGpt4o;
    for (size_t i = 0; i < texts->size(); ++i) {
      l->trailing.push_back(
          {(*texts)[i], SynthTokenType::kControl, kGptOssStartOfTextId + static_cast<int64_t>(i)});
    }
    l->real_text_end = kGptOssStartOfTextId;
    return l;
  }();
  return *layout;
}

absl::StatusOr<SynthVocabulary> BuildSynthBpeVocabulary(const SynthBpeLayout& layout, int64_t n_vocab) {
  if (n_vocab < layout.min_vocab()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocabulary of ", n_vocab, " tokens is too small: it needs at least ", layout.min_vocab(),
        " (", kSynthByteTokens, " byte tokens and ", layout.leading.size() + layout.trailing.size(),
        " special tokens)"));
  }
  const bool real_layout = n_vocab >= layout.real_min_vocab();
  const auto n_trailing = static_cast<int64_t>(layout.trailing.size());
  const int64_t first_byte = static_cast<int64_t>(layout.leading.size());
  const int64_t first_merge = first_byte + kSynthByteTokens;
  const int64_t text_end = real_layout ? layout.real_text_end : n_vocab - n_trailing;
  const int64_t max_merges = text_end - first_merge;

  BpeVocabulary bpe = TrainByteLevelBpe(BuiltinTrainingCorpus(), static_cast<int>(max_merges), layout.split);
  if (bpe.merges.size() > static_cast<size_t>(max_merges) ||
      bpe.tokens.size() != kSynthByteTokens + bpe.merges.size()) {
    return absl::InternalError(absl::StrCat(
        "BPE trainer returned ", bpe.tokens.size(), " tokens and ", bpe.merges.size(),
        " merges for at most ", max_merges, " merges; expected 256 + merges tokens"));
  }

  SynthVocabulary vocab;
  vocab.tokens.resize(static_cast<size_t>(n_vocab));
  vocab.token_types.assign(static_cast<size_t>(n_vocab), TypeValue(SynthTokenType::kUnused));
  vocab.first_merge_id = first_merge;
  for (int64_t s = 0; s < first_byte; ++s) {
    const SynthSpecialToken& special = layout.leading[static_cast<size_t>(s)];
    vocab.tokens[static_cast<size_t>(s)] = std::string(special.text);
    vocab.token_types[static_cast<size_t>(s)] = TypeValue(special.type);
    vocab.specials.emplace_back(std::string(special.text), s);
  }
  for (size_t i = 0; i < bpe.tokens.size(); ++i) {
    vocab.tokens[static_cast<size_t>(first_byte) + i] = std::move(bpe.tokens[i]);
    vocab.token_types[static_cast<size_t>(first_byte) + i] = TypeValue(SynthTokenType::kNormal);
  }
  vocab.merges = std::move(bpe.merges);
  for (int64_t s = 0; s < n_trailing; ++s) {
    const SynthSpecialToken& special = layout.trailing[static_cast<size_t>(s)];
    const int64_t id = real_layout ? special.real_id : text_end + s;
    vocab.tokens[static_cast<size_t>(id)] = std::string(special.text);
    vocab.token_types[static_cast<size_t>(id)] = TypeValue(special.type);
    vocab.specials.emplace_back(std::string(special.text), id);
  }
  for (int64_t id = 0; id < n_vocab; ++id) {
    if (vocab.token_types[static_cast<size_t>(id)] == TypeValue(SynthTokenType::kUnused)) {
      vocab.tokens[static_cast<size_t>(id)] = absl::StrCat("[PAD", id, "]");
    }
  }
  return vocab;
}

absl::StatusOr<SynthVocabulary> BuildSynthVocabulary(int64_t n_vocab) {
  absl::StatusOr<SynthVocabulary> vocab = BuildSynthBpeVocabulary(Qwen3BpeLayout(), n_vocab);
  if (!vocab.ok()) return vocab.status();
  auto id = [&](std::string_view text) { return static_cast<uint32_t>(SynthTokenId(*vocab, text)); };
  vocab->pad_id = vocab->bos_id = id("<|endoftext|>");
  vocab->im_start_id = id("<|im_start|>");
  vocab->eos_id = id("<|im_end|>");
  vocab->think_id = id("<think>");
  vocab->think_end_id = id("</think>");
  return vocab;
}

absl::StatusOr<SynthVocabulary> BuildSynthSpmVocabulary(int64_t n_vocab) {
  if (n_vocab <= kSpmFixedTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocabulary of ", n_vocab, " tokens is too small: a SentencePiece vocabulary needs more than ",
        kSpmFixedTokens, " (<unk>, <s>, </s> and 256 byte tokens)"));
  }
  const int64_t max_pieces = n_vocab - kSpmFixedTokens;
  SentencePieceBpeVocabulary spm = TrainSentencePieceBpe(BuiltinTrainingCorpus(), static_cast<int>(max_pieces));
  const int64_t learned = static_cast<int64_t>(spm.pieces.size() + spm.characters.size());
  if (learned > max_pieces) {
    return absl::InternalError(absl::StrCat("SentencePiece trainer returned ", learned,
                                            " pieces for at most ", max_pieces));
  }

  SynthVocabulary vocab;
  vocab.tokens.reserve(static_cast<size_t>(n_vocab));
  vocab.first_merge_id = kSpmFixedTokens;
  auto add = [&](std::string text, SynthTokenType type, float score) {
    vocab.tokens.push_back(std::move(text));
    vocab.token_types.push_back(TypeValue(type));
    vocab.scores.push_back(score);
  };
  add("<unk>", SynthTokenType::kUnknown, 0.0f);
  add("<s>", SynthTokenType::kControl, 0.0f);
  add("</s>", SynthTokenType::kControl, 0.0f);
  vocab.specials = {{"<unk>", kSpmUnknownId}, {"<s>", kSpmBosId}, {"</s>", kSpmEosId}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, SynthTokenType::kByte, 0.0f);
  }
  float rank = 0.0f;
  for (std::string& piece : spm.pieces) add(std::move(piece), SynthTokenType::kNormal, 0.0f - rank++);
  for (std::string& c : spm.characters) add(std::move(c), SynthTokenType::kNormal, 0.0f - rank++);
  while (static_cast<int64_t>(vocab.tokens.size()) < n_vocab) {
    add(absl::StrCat("[PAD", vocab.tokens.size(), "]"), SynthTokenType::kUnused, kSpmPadScore);
  }
  return vocab;
}

int64_t SynthTokenId(const SynthVocabulary& vocab, std::string_view text) {
  for (const auto& [special, id] : vocab.specials) {
    if (special == text) return id;
  }
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    if (vocab.tokens[i] == text) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace moetier

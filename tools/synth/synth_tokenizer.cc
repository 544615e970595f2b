#include "synth/synth_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "synth/bpe_trainer.h"

namespace moetier {
namespace {

struct SpecialToken {
  std::string_view text;
  SynthTokenType type;
  int64_t qwen_id;
};

// Qwen3 marks <|...|> tokens special (CONTROL) and adds <think> / </think>
// with special = false (USER_DEFINED), SPEC.md §4.2.
constexpr SpecialToken kSpecials[kSynthSpecialTokens] = {
    {"<|endoftext|>", SynthTokenType::kControl, kQwenEndOfTextId},
    {"<|im_start|>", SynthTokenType::kControl, kQwenImStartId},
    {"<|im_end|>", SynthTokenType::kControl, kQwenImEndId},
    {"<think>", SynthTokenType::kUserDefined, kQwenThinkId},
    {"</think>", SynthTokenType::kUserDefined, kQwenThinkEndId},
};

constexpr std::string_view kChatTemplate =
    "{%- for message in messages %}\n"
    "    {%- if message['role'] == 'assistant' %}\n"
    "        {%- set content = message['content'] %}\n"
    "        {%- if not loop.last and '</think>' in content %}\n"
    "            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n";

}  // namespace

absl::StatusOr<SynthVocabulary> BuildSynthVocabulary(int64_t n_vocab) {
  if (n_vocab < kSynthMinVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary of ", n_vocab, " tokens is too small: it needs at least ",
                     kSynthMinVocab, " (", kSynthByteTokens, " byte tokens and ",
                     kSynthSpecialTokens, " special tokens)"));
  }
  const bool qwen_layout = n_vocab >= kQwenMinVocab;
  const int64_t text_end = qwen_layout ? kQwenEndOfTextId : n_vocab - kSynthSpecialTokens;
  const int64_t max_merges = text_end - kSynthByteTokens;

  BpeVocabulary bpe = TrainByteLevelBpe(BuiltinTrainingCorpus(), static_cast<int>(max_merges));
  if (bpe.merges.size() > static_cast<size_t>(max_merges) ||
      bpe.tokens.size() != kSynthByteTokens + bpe.merges.size()) {
    return absl::InternalError(absl::StrCat(
        "BPE trainer returned ", bpe.tokens.size(), " tokens and ", bpe.merges.size(),
        " merges for at most ", max_merges, " merges; expected 256 + merges tokens"));
  }

  SynthVocabulary vocab;
  vocab.tokens.resize(static_cast<size_t>(n_vocab));
  vocab.token_types.assign(static_cast<size_t>(n_vocab), static_cast<int32_t>(SynthTokenType::kUnused));
  for (size_t i = 0; i < bpe.tokens.size(); ++i) {
    vocab.tokens[i] = std::move(bpe.tokens[i]);
    vocab.token_types[i] = static_cast<int32_t>(SynthTokenType::kNormal);
  }
  vocab.merges = std::move(bpe.merges);

  int64_t special_ids[kSynthSpecialTokens];
  for (int64_t s = 0; s < kSynthSpecialTokens; ++s) {
    special_ids[s] = qwen_layout ? kSpecials[s].qwen_id : text_end + s;
    vocab.tokens[static_cast<size_t>(special_ids[s])] = std::string(kSpecials[s].text);
    vocab.token_types[static_cast<size_t>(special_ids[s])] = static_cast<int32_t>(kSpecials[s].type);
  }
  for (int64_t id = 0; id < n_vocab; ++id) {
    if (vocab.token_types[static_cast<size_t>(id)] == static_cast<int32_t>(SynthTokenType::kUnused)) {
      vocab.tokens[static_cast<size_t>(id)] = absl::StrCat("[PAD", id, "]");
    }
  }
  vocab.pad_id = vocab.bos_id = static_cast<uint32_t>(special_ids[0]);
  vocab.im_start_id = static_cast<uint32_t>(special_ids[1]);
  vocab.eos_id = static_cast<uint32_t>(special_ids[2]);
  vocab.think_id = static_cast<uint32_t>(special_ids[3]);
  vocab.think_end_id = static_cast<uint32_t>(special_ids[4]);
  return vocab;
}

std::string_view SynthChatTemplate() { return kChatTemplate; }

}  // namespace moetier

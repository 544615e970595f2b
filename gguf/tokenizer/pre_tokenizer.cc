#include "gguf/tokenizer/pre_tokenizer.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier {
namespace {

enum ClassBits : uint8_t {
  kLetter = 1,  // \p{L}, or [\p{L}\p{M}] for qwen35
  kNumber = 2,
  kSpace = 4,
  kLineBreak = 8,  // CR or LF (also kSpace)
};

struct Unit {
  size_t offset;  // byte offset into the text
  uint32_t codepoint;
  uint8_t classes;
};

bool IsAsciiUpper(uint32_t cp) { return cp >= 'A' && cp <= 'Z'; }
bool IsAsciiLower(uint32_t cp) { return cp >= 'a' && cp <= 'z'; }
uint32_t AsciiLower(uint32_t cp) { return IsAsciiUpper(cp) ? cp + ('a' - 'A') : cp; }

// The scanners of SPEC.md §4.4, over `units` (one sentinel past the end whose
// classes are 0 and codepoint is out of range). Emits piece ends as unit
// indices.
class Scanner {
 public:
  Scanner(const std::vector<Unit>& units, PreTokenizer kind)
      : units_(units),
        n_(units.size() - 1),
        kind_(kind),
        digits_max_(kind == PreTokenizer::kLlama3 || kind == PreTokenizer::kGpt4o ? 3 : 1) {}

  template <typename Emit>
  void Run(Emit&& emit) {
    size_t pos = 0;
    while (pos < n_) {
      const size_t end = NextEnd(pos);
      emit(pos, end);
      pos = end;
    }
  }

 private:
  static constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

  uint32_t Cp(size_t i) const { return i < n_ ? units_[i].codepoint : kOutOfRange; }
  uint8_t Cls(size_t i) const { return i < n_ ? units_[i].classes : 0; }

  size_t NextEnd(size_t pos) const {
    switch (kind_) {
      case PreTokenizer::kQwen2:
      case PreTokenizer::kQwen35:
      case PreTokenizer::kLlama3:
        return NextPieceEnd(pos);
      case PreTokenizer::kGpt2:
        return NextGpt2PieceEnd(pos);
      case PreTokenizer::kGpt4o:
        return NextGpt4oPieceEnd(pos);
    }
    return pos + 1;
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d) at `pos`: the end of the contraction, or
  // `pos` when there is none.
  size_t ContractionEnd(size_t pos) const {
    if (Cp(pos) != '\'' || pos + 1 >= n_) return pos;
    const uint32_t next = AsciiLower(Cp(pos + 1));
    if (next == 's' || next == 't' || next == 'm' || next == 'd') return pos + 2;
    if (pos + 2 < n_) {
      const uint32_t next2 = AsciiLower(Cp(pos + 2));
      if ((next == 'r' && next2 == 'e') || (next == 'v' && next2 == 'e') ||
          (next == 'l' && next2 == 'l')) {
        return pos + 3;
      }
    }
    return pos;
  }

  size_t NextPieceEnd(size_t pos) const {
    const uint8_t cls = Cls(pos);

    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (const size_t end = ContractionEnd(pos); end > pos) return end;

    // [^\r\n\p{L}\p{N}]?\p{L}+
    if ((cls & (kLineBreak | kNumber)) == 0 && ((cls & kLetter) || (Cls(pos + 1) & kLetter))) {
      size_t end = pos + 1;
      while (Cls(end) & kLetter) ++end;
      return end;
    }

    // \p{N}, or \p{N}{1,3} for llama3 (llama.cpp's
    // unicode_regex_split_custom_llama3): the regex is greedy, so a run is
    // cut into groups of digits_max_ from its start.
    if (cls & kNumber) return NumberGroupEnd(pos);

    return PunctuationOrWhitespaceEnd(pos);
  }

  size_t NumberGroupEnd(size_t pos) const {
    size_t end = pos + 1;
    while (end - pos < digits_max_ && (Cls(end) & kNumber)) ++end;
    return end;
  }

  //  ?[^\s\p{L}\p{N}]+[\r\n]* (gpt4o: [\r\n/]*), else the whitespace
  // alternatives \s*[\r\n]+ | \s+(?!\S) | \s+, which end every pattern but
  // GPT-2's.
  size_t PunctuationOrWhitespaceEnd(size_t pos) const {
    constexpr uint8_t kWordOrSpace = kLetter | kNumber | kSpace;
    const size_t run_start = (Cp(pos) == ' ') ? pos + 1 : pos;
    if (run_start < n_ && (Cls(run_start) & kWordOrSpace) == 0) {
      const bool slashes_trail = kind_ == PreTokenizer::kGpt4o;
      size_t end = run_start;
      while (end < n_ && (Cls(end) & kWordOrSpace) == 0) ++end;
      while ((Cls(end) & kLineBreak) || (slashes_trail && Cp(end) == '/')) ++end;
      return end;
    }

    // Whitespace runs: \s*[\r\n]+ | \s+(?!\S) | \s+
    size_t run_end = pos;
    size_t after_last_line_break = 0;
    while (Cls(run_end) & kSpace) {
      if (Cls(run_end) & kLineBreak) after_last_line_break = run_end + 1;
      ++run_end;
    }
    if (after_last_line_break > 0) return after_last_line_break;
    const size_t run_length = run_end - pos;
    if (run_length > 1 && run_end < n_) return run_end - 1;
    if (run_length > 0) return run_end;

    return pos + 1;
  }

  // llama.cpp's unicode_regex_split_custom_gpt2. Every unit before the end
  // has some class in llama.cpp (unassigned codepoints are "undefined", an
  // invalid byte is U+FFFD), so "not whitespace, letter or number" holds for
  // every unit short of the end that is none of the three.
  size_t NextGpt2PieceEnd(size_t pos) const {
    const uint32_t cp = Cp(pos);

    // 's|'t|'re|'ve|'m|'ll|'d, case-sensitive
    if (cp == '\'' && pos + 1 < n_) {
      const uint32_t next = Cp(pos + 1);
      if (next == 's' || next == 't' || next == 'm' || next == 'd') return pos + 2;
      if (pos + 2 < n_) {
        const uint32_t next2 = Cp(pos + 2);
        if ((next == 'r' && next2 == 'e') || (next == 'v' && next2 == 'e') ||
            (next == 'l' && next2 == 'l')) {
          return pos + 3;
        }
      }
    }

    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
    const size_t run_start = (cp == ' ') ? pos + 1 : pos;
    const uint8_t run_class = Cls(run_start);
    for (const uint8_t kind : {uint8_t{kLetter}, uint8_t{kNumber}}) {
      if (run_class & kind) {
        size_t end = run_start;
        while (Cls(end) & kind) ++end;
        return end;
      }
    }
    constexpr uint8_t kWordOrSpace = kLetter | kNumber | kSpace;
    if (run_start < n_ && (run_class & kWordOrSpace) == 0) {
      size_t end = run_start;
      while (end < n_ && (Cls(end) & kWordOrSpace) == 0) ++end;
      return end;
    }

    // \s+(?!\S) leaves the last whitespace of a run to the next piece when
    // one follows; otherwise \s+ takes the whole run.
    size_t run_end = pos;
    while (Cls(run_end) & kSpace) ++run_end;
    const size_t run_length = run_end - pos;
    if (run_length > 1 && run_end < n_) return run_end - 1;
    if (run_length > 0) return run_end;

    return pos + 1;
  }

  // llama.cpp's form of the o200k pattern (see pre_tokenizer.h),
  //   P?U*L+C? | P?U+L*C? | \p{N}{1,3} |  ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | ...
  // with P = [^\r\n\p{L}\p{N}], U = a letter but a-z, L = a letter but A-Z
  // and C = (?:'[sS]|'[tT]|...). Its std::regex sees every letter beyond
  // ASCII as one placeholder byte, so only ASCII letters have a case and any
  // other letter is both U and L.
  size_t NextGpt4oPieceEnd(size_t pos) const {
    const uint8_t cls = Cls(pos);
    const size_t word_start = (cls & (kLetter | kNumber | kLineBreak)) == 0 ? pos + 1 : pos;
    if (Cls(word_start) & kLetter) return ContractionEnd(CasedWordEnd(word_start));
    if (cls & kNumber) return NumberGroupEnd(pos);
    return PunctuationOrWhitespaceEnd(pos);
  }

  // Where U*L+, else U+L*, ends in the letter run from `start`, as the
  // backtracking engine finds it. U* takes the letters up to the first a-z and
  // L+ continues from there up to the next A-Z ("HTTPServer" is one piece,
  // "HelloWorld" two). A run without a-z makes U* give letters back from its
  // end until L+ can take one, which is the last letter beyond ASCII: "ÉTÉ"
  // stays whole but "ÉT" is "É", "T". A run of A-Z alone is U+ whole.
  size_t CasedWordEnd(size_t start) const {
    size_t run_end = start;
    while (Cls(run_end) & kLetter) ++run_end;
    size_t first_lower = start;
    while (first_lower < run_end && !IsAsciiLower(Cp(first_lower))) ++first_lower;
    if (first_lower < run_end) {
      size_t end = first_lower + 1;
      while (end < run_end && !IsAsciiUpper(Cp(end))) ++end;
      return end;
    }
    for (size_t end = run_end; end > start; --end) {
      if (!IsAsciiUpper(Cp(end - 1))) return end;
    }
    return run_end;
  }

  const std::vector<Unit>& units_;
  const size_t n_;
  const PreTokenizer kind_;
  const size_t digits_max_;  // codepoints in one \p{N} piece, at most
};

struct NamedPreTokenizer {
  std::string_view name;
  PreTokenizerInfo info;
};

constexpr PreTokenizerInfo kLlama3Info = {
    .kind = PreTokenizer::kLlama3,
    .clean_up_spaces = true,
    .ignore_merges = true,
    .add_bos_by_default = true,
};

// llama.cpp sets only clean_spaces = false for LLAMA_VOCAB_PRE_TYPE_GPT4O and
// _MINIMAX_M2, which run one regex.
constexpr PreTokenizerInfo kGpt4oInfo = {
    .kind = PreTokenizer::kGpt4o,
    .clean_up_spaces = false,
};

// tokenizer.ggml.pre names and what llama.cpp's llama_vocab::impl::load sets
// for each. The GPT-2 names are those llama.cpp maps to
// LLAMA_VOCAB_PRE_TYPE_GPT2, _MPT, _OLMO, _JAIS, _TRILLION or
// _GRANITE_DOCLING (all one regex) without adding a separator token or
// per-token strip attributes. The Llama 3 names are those it maps to
// LLAMA_VOCAB_PRE_TYPE_LLAMA3 (which also sets ignore_merges and add_bos),
// _DBRX, _SMAUG or _CHATGLM4, all one regex. For "glm4" and "chatglm-bpe"
// llama.cpp also drops the default bos id of gpt2 vocabularies (11); moetier
// assumes no such default, so only tokenizer.ggml.bos_token_id sets one, as
// in llama.cpp, and tokenizer.ggml.add_bos_token still decides whether it is
// added. GLM files name [gMASK] there and leave add_bos_token unset or false:
// their chat template writes "[gMASK]<sop>" itself.
constexpr NamedPreTokenizer kPreTokenizerNames[] = {
    {"qwen2", {PreTokenizer::kQwen2, false}},
    {"deepseek-r1-qwen", {PreTokenizer::kQwen2, false}},
    {"qwen35", {PreTokenizer::kQwen35, false}},
    {"olmo", {PreTokenizer::kGpt2, true}},
    {"gpt-2", {PreTokenizer::kGpt2, true}},
    {"mpt", {PreTokenizer::kGpt2, true}},
    {"jais", {PreTokenizer::kGpt2, true}},
    {"phi-2", {PreTokenizer::kGpt2, true}},
    {"jina-es", {PreTokenizer::kGpt2, true}},
    {"jina-de", {PreTokenizer::kGpt2, true}},
    {"gigachat", {PreTokenizer::kGpt2, true}},
    {"a.x-4.0", {PreTokenizer::kGpt2, true}},
    {"mellum", {PreTokenizer::kGpt2, true}},
    {"exaone4", {PreTokenizer::kGpt2, true}},
    {"trillion", {PreTokenizer::kGpt2, false}},
    {"granite-docling", {PreTokenizer::kGpt2, false}},
    {"llama3", kLlama3Info},
    {"llama-v3", kLlama3Info},
    {"llama-bpe", kLlama3Info},
    {"falcon3", kLlama3Info},
    {"falcon-h1", kLlama3Info},
    {"pixtral", kLlama3Info},
    {"midm-2.0", kLlama3Info},
    {"lfm2", kLlama3Info},
    {"jina-v5-nano", kLlama3Info},
    {"dbrx", {PreTokenizer::kLlama3, true}},
    {"smaug-bpe", {PreTokenizer::kLlama3, true}},
    {"glm4", {PreTokenizer::kLlama3, true}},
    {"chatglm-bpe", {PreTokenizer::kLlama3, true}},
    {"gpt-4o", kGpt4oInfo},
    {"llama4", kGpt4oInfo},
    {"kanana2", kGpt4oInfo},
    {"talkie", kGpt4oInfo},
    {"minimax-m2", kGpt4oInfo},
};

}  // namespace

absl::StatusOr<PreTokenizerInfo> LookUpPreTokenizer(std::string_view name) {
  for (const NamedPreTokenizer& entry : kPreTokenizerNames) {
    if (entry.name == name) return entry.info;
  }
  return absl::UnimplementedError(
      absl::StrCat("unsupported pre-tokenizer \"", std::string(name),
                   "\" (tokenizer.ggml.pre); supported: ", SupportedPreTokenizerNames()));
}

absl::StatusOr<PreTokenizer> PreTokenizerFromName(std::string_view name) {
  absl::StatusOr<PreTokenizerInfo> info = LookUpPreTokenizer(name);
  if (!info.ok()) return info.status();
  return info->kind;
}

std::string_view PreTokenizerName(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kQwen2:
      return "qwen2";
    case PreTokenizer::kQwen35:
      return "qwen35";
    case PreTokenizer::kGpt2:
      return "gpt2";
    case PreTokenizer::kLlama3:
      return "llama3";
    case PreTokenizer::kGpt4o:
      return "gpt-4o";
  }
  return "?";
}

const char* SupportedPreTokenizerNames() {
  static const std::string* const names = [] {
    auto* joined = new std::string();
    for (const NamedPreTokenizer& entry : kPreTokenizerNames) {
      if (!joined->empty()) joined->append(", ");
      joined->append(entry.name);
    }
    return joined;
  }();
  return names->c_str();
}

void PreTokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>* pieces) {
  if (text.empty()) return;
  const bool marks_are_letters = kind == PreTokenizer::kQwen35;
  std::vector<Unit> units;
  units.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Unit u = DecodeUtf8(text, pos);
    uint8_t classes = 0;
    if (u.valid) {
      const uint32_t cp = u.codepoint;
      if (IsLetter(cp) || (marks_are_letters && IsMark(cp))) classes |= kLetter;
      if (IsNumber(cp)) classes |= kNumber;
      if (IsWhitespace(cp)) classes |= kSpace;
      if (cp == '\r' || cp == '\n') classes |= kLineBreak;
    }
    units.push_back({pos, u.codepoint, classes});
    pos += u.length;
  }
  units.push_back({text.size(), 0, 0});

  Scanner scanner(units, kind);
  scanner.Run([&](size_t first, size_t end) {
    pieces->push_back(text.substr(units[first].offset, units[end].offset - units[first].offset));
  });
}

std::vector<std::string_view> PreTokenize(PreTokenizer kind, std::string_view text) {
  std::vector<std::string_view> pieces;
  PreTokenize(kind, text, &pieces);
  return pieces;
}

}  // namespace moetier

#include "gguf/tokenizer/pre_tokenizer.h"

#include <cstdint>

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

uint32_t AsciiLower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + ('a' - 'A') : cp; }

// The scanner of SPEC.md §4.4, over `units` (one sentinel past the end whose
// classes are 0 and codepoint is out of range). Emits piece ends as unit
// indices.
class Scanner {
 public:
  explicit Scanner(const std::vector<Unit>& units) : units_(units), n_(units.size() - 1) {}

  template <typename Emit>
  void Run(Emit&& emit) {
    size_t pos = 0;
    while (pos < n_) {
      const size_t end = NextPieceEnd(pos);
      emit(pos, end);
      pos = end;
    }
  }

 private:
  static constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

  uint32_t Cp(size_t i) const { return i < n_ ? units_[i].codepoint : kOutOfRange; }
  uint8_t Cls(size_t i) const { return i < n_ ? units_[i].classes : 0; }

  size_t NextPieceEnd(size_t pos) const {
    const uint32_t cp = Cp(pos);
    const uint8_t cls = Cls(pos);

    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (cp == '\'' && pos + 1 < n_) {
      const uint32_t next = AsciiLower(Cp(pos + 1));
      if (next == 's' || next == 't' || next == 'm' || next == 'd') return pos + 2;
      if (pos + 2 < n_) {
        const uint32_t next2 = AsciiLower(Cp(pos + 2));
        if ((next == 'r' && next2 == 'e') || (next == 'v' && next2 == 'e') ||
            (next == 'l' && next2 == 'l')) {
          return pos + 3;
        }
      }
    }

    // [^\r\n\p{L}\p{N}]?\p{L}+
    if ((cls & (kLineBreak | kNumber)) == 0 && ((cls & kLetter) || (Cls(pos + 1) & kLetter))) {
      size_t end = pos + 1;
      while (Cls(end) & kLetter) ++end;
      return end;
    }

    // \p{N}, one codepoint at a time
    if (cls & kNumber) return pos + 1;

    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    constexpr uint8_t kWordOrSpace = kLetter | kNumber | kSpace;
    const size_t run_start = (cp == ' ') ? pos + 1 : pos;
    if (run_start < n_ && (Cls(run_start) & kWordOrSpace) == 0) {
      size_t end = run_start;
      while (end < n_ && (Cls(end) & kWordOrSpace) == 0) ++end;
      while (Cls(end) & kLineBreak) ++end;
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

  const std::vector<Unit>& units_;
  const size_t n_;
};

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizerFromName(std::string_view name) {
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer::kQwen2;
  if (name == "qwen35") return PreTokenizer::kQwen35;
  return absl::UnimplementedError(
      absl::StrCat("unsupported pre-tokenizer \"", std::string(name),
                   "\" (tokenizer.ggml.pre); supported: ", SupportedPreTokenizerNames()));
}

std::string_view PreTokenizerName(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kQwen2:
      return "qwen2";
    case PreTokenizer::kQwen35:
      return "qwen35";
  }
  return "?";
}

const char* SupportedPreTokenizerNames() { return "qwen2, deepseek-r1-qwen, qwen35"; }

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

  Scanner scanner(units);
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

#include "gguf/tokenizer/chat_template_text.h"

namespace moetier {
namespace {

constexpr char kStringMark = '\x01';
constexpr char kTextStart = '\x02';
constexpr char kTextEnd = '\x03';

// Python's str.isspace() for ASCII, as Jinja's \s.
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void TrimRight(std::string* s) {
  while (!s->empty() && IsSpace(s->back())) s->pop_back();
}

// lstrip_blocks: whitespace between the start of a line and a block or
// comment tag goes. `at_line_start` says whether the text itself starts a
// line (the start of the template).
void StripToLineStart(std::string* text, bool at_line_start) {
  const size_t newline = text->rfind('\n');
  const size_t from = newline == std::string::npos ? 0 : newline + 1;
  if (newline == std::string::npos && !at_line_start) return;
  for (size_t i = from; i < text->size(); ++i) {
    if (!IsSpace((*text)[i])) return;
  }
  text->resize(from);
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The inside of a tag without its whitespace-control markers: whitespace
// outside string literals dropped, except one space where it separates two
// names ("not loop.last" stays apart from "notloop.last"), each literal as
// \x01 raw-content \x01.
void AppendCanonicalTag(std::string_view inner, std::string* out) {
  const size_t tag_start = out->size();
  char quote = 0;
  bool spaced = false;
  for (size_t i = 0; i < inner.size(); ++i) {
    const char c = inner[i];
    if (quote == 0 && spaced && !IsSpace(c) && IsNameChar(c) && out->size() > tag_start &&
        IsNameChar(out->back())) {
      out->push_back(' ');
    }
    spaced = quote == 0 && IsSpace(c);
    if (quote != 0) {
      if (c == '\\' && i + 1 < inner.size()) {
        out->push_back(c);
        out->push_back(inner[++i]);
      } else if (c == quote) {
        out->push_back(kStringMark);
        quote = 0;
      } else {
        out->push_back(c);
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      out->push_back(kStringMark);
    } else if (!IsSpace(c)) {
      out->push_back(c);
    }
  }
}

// Where the tag whose inside starts at `from` closes (the index of
// `closing`), skipping string literals; npos if it never does.
size_t FindTagEnd(std::string_view text, size_t from, std::string_view closing, bool literals) {
  char quote = 0;
  for (size_t i = from; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (literals && (c == '\'' || c == '"')) {
      quote = c;
      continue;
    }
    if (text.substr(i, closing.size()) == closing) return i;
  }
  return std::string_view::npos;
}

}  // namespace

std::string CanonicalTemplateText(std::string_view text) {
  // keep_trailing_newline = False: one trailing newline of the source goes.
  if (!text.empty() && text.back() == '\n') {
    text.remove_suffix(1);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  }
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  bool strip_leading = false;  // the previous tag ended with "-"
  bool drop_newline = false;   // the previous tag was a block or comment (trim_blocks)
  while (true) {
    size_t open = std::string_view::npos;
    for (size_t i = pos; i + 1 < text.size(); ++i) {
      if (text[i] == '{' && (text[i + 1] == '{' || text[i + 1] == '%' || text[i + 1] == '#')) {
        open = i;
        break;
      }
    }
    std::string literal(text.substr(pos, open == std::string_view::npos ? text.npos : open - pos));
    const char kind = open == std::string_view::npos ? 0 : text[open + 1];
    size_t inner_begin = open == std::string_view::npos ? 0 : open + 2;
    const char sign = kind != 0 && inner_begin < text.size() ? text[inner_begin] : 0;
    // Whitespace control on this literal from the tag that follows it...
    if (sign == '-') {
      TrimRight(&literal);
    } else if ((kind == '%' || kind == '#') && sign != '+') {
      StripToLineStart(&literal, pos == 0);
    }
    // ...and from the tag before it.
    if (strip_leading) {
      size_t n = 0;
      while (n < literal.size() && IsSpace(literal[n])) ++n;
      literal.erase(0, n);
    } else if (drop_newline && !literal.empty() && literal[0] == '\n') {
      literal.erase(0, 1);
    } else if (drop_newline && literal.size() >= 2 && literal[0] == '\r' && literal[1] == '\n') {
      literal.erase(0, 2);
    }
    if (!literal.empty()) {
      out.push_back(kTextStart);
      out += literal;
      out.push_back(kTextEnd);
    }
    if (kind == 0) break;

    if (sign == '-' || sign == '+') ++inner_begin;
    const std::string_view closing = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t close = FindTagEnd(text, inner_begin, closing, kind != '#');
    if (close == std::string_view::npos) {
      out += "\x04unterminated";
      break;
    }
    std::string_view inner = text.substr(inner_begin, close - inner_begin);
    const char end_sign = inner.empty() ? 0 : inner.back();
    if (end_sign == '-' || end_sign == '+') inner.remove_suffix(1);
    if (kind != '#') {
      out.push_back('{');
      out.push_back(kind);
      AppendCanonicalTag(inner, &out);
      out.push_back(kind == '{' ? '}' : kind);
      out.push_back('}');
    }
    strip_leading = end_sign == '-';
    drop_newline = !strip_leading && end_sign != '+' && kind != '{';
    pos = close + 2;
  }
  return out;
}

}  // namespace moetier

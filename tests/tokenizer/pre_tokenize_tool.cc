// Runs moetier's pre-tokenizer scanners for the regex oracle
// (tests/interop/check_pre_tokenizers.py), which compares them with the
// regexes themselves.
//
//   tokenizer_pre_tokenize NAME    NAME: a tokenizer.ggml.pre name (qwen2, gpt-2, llama3, ...)
//     stdin:  one text per line, its UTF-8 bytes in hex
//     stdout: per text, the byte lengths of its pieces, space-separated
//   tokenizer_pre_tokenize --classes
//     stdin:  one codepoint per line, in hex
//     stdout: per codepoint the classes the scanners see, of L (letter),
//             N (number), M (mark) and S (whitespace), or "-" for none
//
// Hex keeps line breaks and NUL inside texts out of the line framing.
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gguf/tokenizer/pre_tokenizer.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> HexToBytes(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string bytes;
  bytes.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int high = HexDigit(hex[i]);
    const int low = HexDigit(hex[i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(high * 16 + low));
  }
  return bytes;
}

std::optional<uint32_t> HexToCodepoint(std::string_view hex) {
  if (hex.empty() || hex.size() > 6) return std::nullopt;
  uint32_t cp = 0;
  for (const char c : hex) {
    const int digit = HexDigit(c);
    if (digit < 0) return std::nullopt;
    cp = cp * 16 + static_cast<uint32_t>(digit);
  }
  if (cp > kMaxCodepoint) return std::nullopt;
  return cp;
}

int Fail(const std::string& message) {
  std::cerr << "tokenizer_pre_tokenize: " << message << "\n";
  return 2;
}

int PrintClasses() {
  std::string line;
  while (std::getline(std::cin, line)) {
    const std::optional<uint32_t> cp = HexToCodepoint(line);
    if (!cp) return Fail("not a codepoint in hex: \"" + line + "\"");
    std::string classes;
    if (IsLetter(*cp)) classes += 'L';
    if (IsNumber(*cp)) classes += 'N';
    if (IsMark(*cp)) classes += 'M';
    if (IsWhitespace(*cp)) classes += 'S';
    std::cout << (classes.empty() ? "-" : classes) << "\n";
  }
  return 0;
}

int PrintPieces(std::string_view name) {
  const absl::StatusOr<PreTokenizer> kind = PreTokenizerFromName(name);
  if (!kind.ok()) return Fail(std::string(kind.status().message()));
  std::string line;
  std::vector<std::string_view> pieces;
  while (std::getline(std::cin, line)) {
    const std::optional<std::string> text = HexToBytes(line);
    if (!text) return Fail("not hex: \"" + line + "\"");
    pieces.clear();
    PreTokenize(*kind, *text, &pieces);
    std::string lengths;
    for (const std::string_view piece : pieces) {
      if (!lengths.empty()) lengths += ' ';
      lengths += std::to_string(piece.size());
    }
    std::cout << lengths << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tokenizer_pre_tokenize NAME | --classes (see the source for the format)\n";
    return 2;
  }
  const std::string_view arg = argv[1];
  return arg == "--classes" ? moetier::PrintClasses() : moetier::PrintPieces(arg);
}

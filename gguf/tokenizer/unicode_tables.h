// Unicode character classes as sorted, disjoint, inclusive codepoint ranges.
// The tables are generated (tools/unicode/gen_unicode_tables.py); use the
// predicates in tokenizer/unicode.h rather than these arrays.
#pragma once

#include <cstdint>
#include <span>

namespace moetier::unicode_tables {

struct CodepointRange {
  uint32_t first;
  uint32_t last;  // inclusive
};

extern const char kUnicodeVersion[];
extern const std::span<const CodepointRange> kLetterRanges;      // \p{L}
extern const std::span<const CodepointRange> kNumberRanges;      // \p{N}
extern const std::span<const CodepointRange> kMarkRanges;        // \p{M}
extern const std::span<const CodepointRange> kWhitespaceRanges;  // White_Space

}  // namespace moetier::unicode_tables

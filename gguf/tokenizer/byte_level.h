// The GPT-2 byte-level map (SPEC.md §4.5): every byte value stands for one
// printable codepoint, so any byte string becomes a text without spaces or
// control characters. Vocabularies store their tokens and merges in this form.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace moetier {

// The codepoint byte `b` maps to: itself for 0x21-0x7E, 0xA1-0xAC and
// 0xAE-0xFF; U+0100 upwards, in byte order, for the other 68 bytes.
uint32_t ByteToCodepoint(uint8_t b);
// UTF-8 of ByteToCodepoint(b).
std::string_view ByteToMappedUtf8(uint8_t b);
// The byte that maps to `cp`, or -1 if none does.
int CodepointToByte(uint32_t cp);

// Appends the mapped form of `bytes` (each byte as its mapped codepoint).
void ByteLevelEncode(std::string_view bytes, std::string* out);
std::string ByteLevelEncode(std::string_view bytes);

// Appends the bytes that `mapped` stands for. A codepoint outside the map
// (or an invalid UTF-8 byte) is copied through unchanged; returns false if
// any such unit was present.
bool ByteLevelDecode(std::string_view mapped, std::string* out);

}  // namespace moetier

#include "gguf/tokenizer/byte_level.h"

#include <array>

#include "gguf/tokenizer/unicode.h"

namespace moetier {
namespace {

constexpr bool MapsToItself(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<uint32_t, 256> MakeByteToCodepoint() {
  std::array<uint32_t, 256> map{};
  uint32_t next_shifted = 0x100;
  for (uint32_t b = 0; b < 256; ++b) map[b] = MapsToItself(b) ? b : next_shifted++;
  return map;
}

constexpr std::array<uint32_t, 256> kByteToCodepoint = MakeByteToCodepoint();
// The 68 shifted bytes end at U+0143, so every mapped codepoint is < 0x144.
constexpr uint32_t kMappedLimit = 0x144;
static_assert(kByteToCodepoint[0x20] == 0x120);
static_assert(kByteToCodepoint[0x0A] == 0x10A);
static_assert(kByteToCodepoint[0xAD] == 0x143);

constexpr std::array<int16_t, kMappedLimit> MakeCodepointToByte() {
  std::array<int16_t, kMappedLimit> map{};
  for (auto& v : map) v = -1;
  for (uint32_t b = 0; b < 256; ++b) map[kByteToCodepoint[b]] = static_cast<int16_t>(b);
  return map;
}

constexpr std::array<int16_t, kMappedLimit> kCodepointToByte = MakeCodepointToByte();

struct MappedUtf8Table {
  MappedUtf8Table() {
    for (int b = 0; b < 256; ++b) {
      std::string utf8 = EncodeUtf8(kByteToCodepoint[b]);
      length[b] = static_cast<uint8_t>(utf8.size());
      for (size_t i = 0; i < utf8.size(); ++i) bytes[b][i] = utf8[i];
    }
  }
  char bytes[256][2] = {};
  uint8_t length[256] = {};
};

const MappedUtf8Table& MappedUtf8() {
  static const MappedUtf8Table table;
  return table;
}

}  // namespace

uint32_t ByteToCodepoint(uint8_t b) { return kByteToCodepoint[b]; }

std::string_view ByteToMappedUtf8(uint8_t b) {
  const MappedUtf8Table& table = MappedUtf8();
  return std::string_view(table.bytes[b], table.length[b]);
}

int CodepointToByte(uint32_t cp) { return cp < kMappedLimit ? kCodepointToByte[cp] : -1; }

void ByteLevelEncode(std::string_view bytes, std::string* out) {
  const MappedUtf8Table& table = MappedUtf8();
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    out->append(table.bytes[b], table.length[b]);
  }
}

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  ByteLevelEncode(bytes, &out);
  return out;
}

bool ByteLevelDecode(std::string_view mapped, std::string* out) {
  bool all_mapped = true;
  for (size_t pos = 0; pos < mapped.size();) {
    const Utf8Unit unit = DecodeUtf8(mapped, pos);
    const int b = unit.valid ? CodepointToByte(unit.codepoint) : -1;
    if (b >= 0) {
      out->push_back(static_cast<char>(b));
    } else {
      out->append(mapped.substr(pos, unit.length));
      all_mapped = false;
    }
    pos += unit.length;
  }
  return all_mapped;
}

}  // namespace moetier

// Helpers shared by the GGUF tests: temporary folders, file I/O and a
// byte-level GGUF builder that can write what GgufWriter refuses to.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace moetier::gguf_test {

// A fresh folder under the test temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "moetier_gguf_XXXXXX";
    char* made = mkdtemp(pattern.data());
    if (made == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << pattern;
      return;
    }
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

inline std::vector<uint8_t> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void WriteFileBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline uint64_t AlignUp(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

// Deterministic bytes for tensor contents.
inline std::vector<uint8_t> PatternBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out[i] = static_cast<uint8_t>(x);
  }
  return out;
}

// Little-endian byte appender.
class ByteBuf {
 public:
  template <typename T>
  ByteBuf& Put(T v) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    bytes_.insert(bytes_.end(), raw, raw + sizeof(T));
    return *this;
  }
  ByteBuf& U8(uint8_t v) { return Put(v); }
  ByteBuf& U16(uint16_t v) { return Put(v); }
  ByteBuf& U32(uint32_t v) { return Put(v); }
  ByteBuf& U64(uint64_t v) { return Put(v); }
  ByteBuf& I32(int32_t v) { return Put(v); }
  ByteBuf& I64(int64_t v) { return Put(v); }
  ByteBuf& Raw(std::string_view s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteBuf& Raw(const std::vector<uint8_t>& b) {
    bytes_.insert(bytes_.end(), b.begin(), b.end());
    return *this;
  }
  // GGUF string: u64 length then the bytes.
  ByteBuf& Str(std::string_view s) { return U64(s.size()).Raw(s); }
  ByteBuf& Zeros(size_t n) {
    bytes_.insert(bytes_.end(), n, 0);
    return *this;
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// One KV pair: the key and the already encoded value (u32 type, then payload).
struct RawKv {
  std::string key;
  std::vector<uint8_t> typed_value;
};

inline RawKv KvU32(std::string key, uint32_t v) {
  return {std::move(key), ByteBuf().U32(4).U32(v).bytes()};
}
inline RawKv KvStr(std::string key, std::string_view v) {
  return {std::move(key), ByteBuf().U32(8).Str(v).bytes()};
}

struct RawTensor {
  std::string name;
  std::vector<uint64_t> dims;  // ne[0] first
  uint32_t type = 0;           // ggml type id
  uint64_t offset = 0;         // relative to the data blob
};

// Where the fields of a raw image are; used to predict error offsets.
struct RawImage {
  std::vector<uint8_t> bytes;
  std::vector<size_t> kv_offsets;            // start of each KV pair
  std::vector<size_t> kv_type_offsets;       // each KV's u32 value type
  std::vector<size_t> tensor_offsets;        // start of each tensor info
  std::vector<size_t> tensor_ndims_offsets;  // each tensor's n_dims field
  std::vector<size_t> tensor_type_offsets;   // each tensor's type field
  std::vector<size_t> tensor_offset_fields;  // each tensor's data offset field
  size_t infos_end = 0;
  size_t data_offset = 0;
};

struct RawOptions {
  uint32_t version = 3;
  uint32_t alignment = 32;  // used only to place the data blob
  uint64_t data_bytes = 0;  // size of the data blob appended after padding
  std::optional<uint64_t> tensor_count;  // header override
  std::optional<uint64_t> kv_count;      // header override
};

inline RawImage BuildRaw(const std::vector<RawKv>& kvs, const std::vector<RawTensor>& tensors,
                         const RawOptions& opt = {}) {
  RawImage img;
  ByteBuf b;
  b.Raw("GGUF").U32(opt.version);
  b.U64(opt.tensor_count.value_or(tensors.size()));
  b.U64(opt.kv_count.value_or(kvs.size()));
  for (const RawKv& kv : kvs) {
    img.kv_offsets.push_back(b.size());
    b.Str(kv.key);
    img.kv_type_offsets.push_back(b.size());
    b.Raw(kv.typed_value);
  }
  for (const RawTensor& t : tensors) {
    img.tensor_offsets.push_back(b.size());
    b.Str(t.name);
    img.tensor_ndims_offsets.push_back(b.size());
    b.U32(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) b.U64(d);
    img.tensor_type_offsets.push_back(b.size());
    b.U32(t.type);
    img.tensor_offset_fields.push_back(b.size());
    b.U64(t.offset);
  }
  img.infos_end = b.size();
  img.data_offset = AlignUp(b.size(), opt.alignment);
  b.Zeros(img.data_offset - b.size());
  b.Zeros(opt.data_bytes);
  img.bytes = std::move(b.bytes());
  return img;
}

inline std::string OffsetText(size_t offset) {
  return "at byte offset " + std::to_string(offset) + ":";
}

}  // namespace moetier::gguf_test

// Cross-check against an independent GGUF parser: @huggingface/gguf (npm),
// run through tests/interop/gguf_dump.mjs, must see the same tensors (dims,
// type, placement, SHA-256 of the bytes) and keys as moetier's reader, both
// for files our writer made and for the gguf-py test vectors.
//
// Needs node and `npm install` in tests/interop; skips without them.
#include <sys/wait.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf/writer/gguf_writer.h"
#include "gguf_test_util.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using gguf_test::PatternBytes;
using gguf_test::TempDir;

// --- SHA-256 (FIPS 180-4) ----------------------------------------------------

class Sha256 {
 public:
  void Update(const uint8_t* data, size_t n) {
    total_bytes_ += n;
    while (n > 0) {
      const size_t take = std::min(n, sizeof(block_) - fill_);
      std::memcpy(block_ + fill_, data, take);
      fill_ += take;
      data += take;
      n -= take;
      if (fill_ == sizeof(block_)) {
        Compress(block_);
        fill_ = 0;
      }
    }
  }

  std::string HexDigest() {
    const uint64_t bits = total_bytes_ * 8;
    const uint8_t one = 0x80;
    Update(&one, 1);
    const uint8_t zero = 0;
    while (fill_ != 56) Update(&zero, 1);
    uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    Update(length, 8);
    std::string hex;
    for (uint32_t word : h_) {
      char buf[9];
      std::snprintf(buf, sizeof(buf), "%08x", word);
      hex += buf;
    }
    return hex;
  }

 private:
  static uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  void Compress(const uint8_t* p) {
    static constexpr uint32_t kK[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t{p[4 * i]} << 24) | (uint32_t{p[4 * i + 1]} << 16) |
             (uint32_t{p[4 * i + 2]} << 8) | uint32_t{p[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6],
             h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                          kK[i] + w[i];
      const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64] = {};
  size_t fill_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string Sha256Hex(std::span<const uint8_t> data) {
  Sha256 h;
  h.Update(data.data(), data.size());
  return h.HexDigest();
}

// --- a small JSON reader, enough for gguf_dump.mjs output --------------------

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  const Json& operator[](const std::string& key) const {
    static const Json kNull;
    const auto it = object.find(key);
    return it == object.end() ? kNull : it->second;
  }
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : s_(text) {}

  bool Parse(Json* out) {
    if (!Value(out)) return false;
    Space();
    return pos_ == s_.size();
  }

 private:
  void Space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' ||
                                s_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Eat(char c) {
    Space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool Hex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return false;
    *out = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      *out <<= 4;
      if (c >= '0' && c <= '9') {
        *out |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        *out |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        *out |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return false;
      }
    }
    return true;
  }
  bool String(std::string* out) {
    if (!Eat('"')) return false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= s_.size()) return false;
      const char e = s_[pos_++];
      switch (e) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00 && Literal("\\u")) {
            uint32_t low = 0;
            if (!Hex4(&low)) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  bool Value(Json* out) {
    Space();
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      out->kind = Json::Kind::kObject;
      if (Eat('}')) return true;
      do {
        std::string key;
        if (!String(&key) || !Eat(':') || !Value(&out->object[key])) return false;
      } while (Eat(','));
      return Eat('}');
    }
    if (c == '[') {
      ++pos_;
      out->kind = Json::Kind::kArray;
      if (Eat(']')) return true;
      do {
        if (!Value(&out->array.emplace_back())) return false;
      } while (Eat(','));
      return Eat(']');
    }
    if (c == '"') {
      out->kind = Json::Kind::kString;
      return String(&out->string);
    }
    if (Literal("true")) {
      out->kind = Json::Kind::kBool;
      out->boolean = true;
      return true;
    }
    if (Literal("false")) {
      out->kind = Json::Kind::kBool;
      return true;
    }
    if (Literal("null")) return true;
    const std::string rest(s_.substr(pos_, 64));
    char* end = nullptr;
    out->number = std::strtod(rest.c_str(), &end);
    if (end == rest.c_str()) return false;
    out->kind = Json::Kind::kNumber;
    pos_ += static_cast<size_t>(end - rest.c_str());
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// --- running the independent parser ------------------------------------------

std::string InteropDir() { return std::string(MOETIER_TEST_DATA_DIR) + "/../interop"; }

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Why the independent parser cannot run here, or empty when it can.
std::string InteropUnavailable() {
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    return "node is not installed; install Node.js 20 to run this cross-check";
  }
  if (!std::filesystem::exists(InteropDir() + "/node_modules/@huggingface/gguf")) {
    return "tests/interop/node_modules is missing; run `cd tests/interop && npm install "
           "--no-audit --no-fund`";
  }
  return "";
}

// Runs gguf_dump.mjs on `path` and parses its JSON.
void DumpWithNode(const std::string& path, Json* out) {
  TempDir dir;
  const std::string err_path = dir.File("stderr.txt");
  const std::string cmd = "node " + ShellQuote(InteropDir() + "/gguf_dump.mjs") + " " +
                          ShellQuote(path) + " 2>" + ShellQuote(err_path);
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << cmd;
  std::string text;
  std::array<char, 65536> buf;
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) text.append(buf.data(), n);
  const int status = pclose(pipe);
  const std::vector<uint8_t> err = gguf_test::ReadFileBytes(err_path);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "gguf_dump.mjs failed on " << path << ":\n"
      << text << std::string(err.begin(), err.end());
  ASSERT_TRUE(JsonParser(text).Parse(out)) << "not JSON:\n" << text.substr(0, 2000);
}

// Compares the independent view of `path` with moetier's reader.
void ExpectSameView(const std::string& path) {
  SCOPED_TRACE(path);
  Json dump;
  ASSERT_NO_FATAL_FAILURE(DumpWithNode(path, &dump));
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;

  EXPECT_EQ(dump["version"].number, f.version());
  EXPECT_EQ(dump["tensor_count"].number, static_cast<double>(f.tensors().size()));
  EXPECT_EQ(dump["kv_count"].number, static_cast<double>(f.metadata().entries().size()));
  EXPECT_EQ(dump["data_offset"].number, static_cast<double>(f.data_offset()));
  const Json& keys = dump["metadata_keys"];
  ASSERT_EQ(keys.array.size(), f.metadata().entries().size());
  for (size_t i = 0; i < keys.array.size(); ++i) {
    EXPECT_EQ(keys.array[i].string, f.metadata().entries()[i].key);
  }

  const Json& tensors = dump["tensors"];
  ASSERT_EQ(tensors.array.size(), f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo& ours = f.tensors()[i];
    const Json& theirs = tensors.array[i];
    SCOPED_TRACE(ours.name);
    EXPECT_EQ(theirs["name"].string, ours.name);
    ASSERT_EQ(theirs["dims"].array.size(), ours.n_dims);
    for (uint32_t d = 0; d < ours.n_dims; ++d) {
      EXPECT_EQ(theirs["dims"].array[d].number, static_cast<double>(ours.ne[d]));
    }
    EXPECT_EQ(theirs["dtype"].number, static_cast<double>(static_cast<uint32_t>(ours.type)));
    EXPECT_EQ(theirs["file_offset"].number, static_cast<double>(ours.file_offset));
    EXPECT_EQ(theirs["size"].number, static_cast<double>(ours.size_bytes));
    EXPECT_EQ(theirs["sha256"].string, Sha256Hex(f.bytes().subspan(ours.file_offset,
                                                                    ours.size_bytes)));
  }
}

TEST(GgufInterop, Sha256KnownAnswers) {
  EXPECT_EQ(Sha256Hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(Sha256Hex({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()}),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Two blocks of padding.
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(Sha256Hex({reinterpret_cast<const uint8_t*>(two.data()), two.size()}),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(GgufInterop, JsonReader) {
  Json j;
  ASSERT_TRUE(JsonParser(R"({"a":[1,-2.5e3,"x\u00e9\"",true,null],"b":{}})").Parse(&j));
  EXPECT_EQ(j["a"].array[1].number, -2500);
  EXPECT_EQ(j["a"].array[2].string, "x\xc3\xa9\"");
  EXPECT_TRUE(j["a"].array[3].boolean);
  EXPECT_EQ(j["b"].kind, Json::Kind::kObject);
  EXPECT_FALSE(JsonParser("{\"a\":").Parse(&j));
}

struct WriterCase {
  uint32_t version;
  uint32_t alignment;  // 0: leave general.alignment unset
};

class GgufInteropWriter : public ::testing::TestWithParam<WriterCase> {};

TEST_P(GgufInteropWriter, IndependentParserAgreesWithOurWriterAndReader) {
  if (const std::string why = InteropUnavailable(); !why.empty()) GTEST_SKIP() << why;
  const WriterCase c = GetParam();
  TempDir dir;
  const std::string path = dir.File("multi.gguf");
  GgufWriter w;
  ASSERT_TRUE(w.AddKeyValue("general.architecture", GgufValue::String("qwen3moe")).ok());
  if (c.alignment != 0) {
    ASSERT_TRUE(w.AddKeyValue("general.alignment", GgufValue::Uint32(c.alignment)).ok());
  }
  ASSERT_TRUE(w.AddKeyValue("qwen3moe.block_count", GgufValue::Uint32(2)).ok());
  ASSERT_TRUE(w.AddKeyValue("qwen3moe.rope.freq_base", GgufValue::Float32(1e6f)).ok());
  ASSERT_TRUE(w.AddKeyValue("x.i64", GgufValue::Int64(-5)).ok());
  ASSERT_TRUE(w.AddKeyValue("x.f64", GgufValue::Float64(0.5)).ok());
  ASSERT_TRUE(w.AddKeyValue("x.flag", GgufValue::Bool(true)).ok());
  ASSERT_TRUE(w.AddKeyValue("tokenizer.ggml.tokens",
                            GgufValue::StringArray({"a", "\xc4\xa0the", "", "\xe4\xb8\x96"}))
                  .ok());
  ASSERT_TRUE(w.AddKeyValue("tokenizer.ggml.token_type", GgufValue::Int32Array({1, 1, 3, 1})).ok());
  ASSERT_TRUE(w.AddKeyValue("x.u16s", GgufValue::Array({GgufValueType::kUint16,
                                                        std::vector<uint64_t>{1, 65535}}))
                  .ok());
  struct T {
    const char* name;
    TensorType type;
    std::vector<int64_t> ne;
  };
  const std::vector<T> tensors = {
      {"output_norm.weight", TensorType::kF32, {17}},
      {"blk.0.attn_k.weight", TensorType::kF16, {8, 3}},
      {"blk.0.attn_v.weight", TensorType::kBF16, {5, 2}},
      {"blk.0.attn_q.weight", TensorType::kQ4_0, {64, 3}},
      {"token_embd.weight", TensorType::kQ8_0, {32, 7}},
      {"blk.0.ffn_gate_exps.weight", TensorType::kQ4_K, {256, 2, 3}},
      {"blk.0.ffn_up_exps.weight", TensorType::kQ5_K, {512, 1, 2}},
      {"blk.0.ffn_down_exps.weight", TensorType::kQ6_K, {256, 3, 2, 1}},
  };
  for (const T& t : tensors) ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne).ok()) << t.name;
  ASSERT_TRUE(w.Open(path, c.version).ok());
  for (size_t i = 0; i < tensors.size(); ++i) {
    ASSERT_TRUE(w.AppendTensorData(tensors[i].name, PatternBytes(w.TensorSizeBytes(i),
                                                                  static_cast<uint32_t>(i + 11)))
                    .ok());
  }
  ASSERT_TRUE(w.Finish().ok());
  ASSERT_NO_FATAL_FAILURE(ExpectSameView(path));
}

INSTANTIATE_TEST_SUITE_P(Layouts, GgufInteropWriter,
                         ::testing::Values(WriterCase{3, 0}, WriterCase{2, 64},
                                           WriterCase{3, 8}));

TEST(GgufInterop, IndependentParserAgreesOnTestVectors) {
  if (const std::string why = InteropUnavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char* file : {"tiny-f32.gguf", "tiny-q8_0.gguf", "small-q4_k_m.gguf"}) {
    ASSERT_NO_FATAL_FAILURE(ExpectSameView(std::string(MOETIER_TEST_DATA_DIR) + "/vectors/" + file));
  }
}

}  // namespace
}  // namespace moetier

#include "gguf/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gguf/gguf_format.h"

namespace moetier {
namespace {

using gguf_internal::kMaxStringBytes;

// The fewest bytes one KV pair can take: key length, a 1-byte key, the value
// type and a 1-byte value. Counts are checked against this before any loop.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
// The fewest bytes one tensor info can take: name length, n_dims, type, offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
// Enough of a hostile name to recognise it in a message.
constexpr size_t kNameQuoteBytes = 80;

std::string Quote(std::string_view s) {
  std::string out;
  const std::string_view shown = s.substr(0, kNameQuoteBytes);
  out.reserve(shown.size() + 8);
  out += '\'';
  for (char c : shown) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\'' || c == '\\') {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    } else {
      out += c;
    }
  }
  out += '\'';
  if (shown.size() < s.size()) absl::StrAppend(&out, "... (", s.size(), " bytes)");
  return out;
}

// A bounds-checked cursor over the file image. Every error names the file and
// the byte offset where the offending field starts.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  absl::Status ErrorAt(uint64_t offset, std::string_view problem) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: at byte offset %d: %s", name_, offset, problem));
  }

  template <typename T>
  absl::Status Read(T* out, std::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(sizeof(T), what);
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadBytes(void* out, uint64_t n, std::string_view what) {
    if (remaining() < n) return Truncated(n, what);
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string* out, std::string_view what) {
    const uint64_t start = pos_;
    uint64_t length = 0;
    if (absl::Status s = Read(&length, absl::StrFormat("%s length", what)); !s.ok()) return s;
    if (length > kMaxStringBytes) {
      return ErrorAt(start, absl::StrFormat("%s length %d exceeds the 1 GiB limit", what, length));
    }
    if (length > remaining()) {
      return ErrorAt(start, absl::StrFormat(
                                "%s length %d is larger than the %d bytes left in the file "
                                "(truncated file or corrupt length)",
                                what, length, remaining()));
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return absl::OkStatus();
  }

 private:
  absl::Status Truncated(uint64_t need, std::string_view what) const {
    return ErrorAt(pos_, absl::StrFormat("truncated: %s needs %d bytes but the file ends after "
                                         "%d more (file size %d)",
                                         what, need, remaining(), bytes_.size()));
  }

  std::span<const uint8_t> bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
};

template <typename Disk, typename Stored>
absl::Status ReadScalarInto(Cursor& in, Stored* out, std::string_view what) {
  Disk v{};
  if (absl::Status s = in.Read(&v, what); !s.ok()) return s;
  *out = static_cast<Stored>(v);
  return absl::OkStatus();
}

absl::Status ReadScalar(Cursor& in, GgufValueType type, GgufValue* value, std::string_view what) {
  value->type = type;
  switch (type) {
    case GgufValueType::kUint8:
      return ReadScalarInto<uint8_t>(in, &value->data.emplace<uint64_t>(), what);
    case GgufValueType::kInt8:
      return ReadScalarInto<int8_t>(in, &value->data.emplace<int64_t>(), what);
    case GgufValueType::kUint16:
      return ReadScalarInto<uint16_t>(in, &value->data.emplace<uint64_t>(), what);
    case GgufValueType::kInt16:
      return ReadScalarInto<int16_t>(in, &value->data.emplace<int64_t>(), what);
    case GgufValueType::kUint32:
      return ReadScalarInto<uint32_t>(in, &value->data.emplace<uint64_t>(), what);
    case GgufValueType::kInt32:
      return ReadScalarInto<int32_t>(in, &value->data.emplace<int64_t>(), what);
    case GgufValueType::kUint64:
      return ReadScalarInto<uint64_t>(in, &value->data.emplace<uint64_t>(), what);
    case GgufValueType::kInt64:
      return ReadScalarInto<int64_t>(in, &value->data.emplace<int64_t>(), what);
    case GgufValueType::kFloat32:
      return ReadScalarInto<float>(in, &value->data.emplace<double>(), what);
    case GgufValueType::kFloat64:
      return ReadScalarInto<double>(in, &value->data.emplace<double>(), what);
    case GgufValueType::kBool: {
      // llama.cpp reads an int8 and takes any nonzero value as true.
      int8_t b = 0;
      if (absl::Status s = in.Read(&b, what); !s.ok()) return s;
      value->data = b != 0;
      return absl::OkStatus();
    }
    case GgufValueType::kString:
      return in.ReadString(&value->data.emplace<std::string>(), what);
    case GgufValueType::kArray:
      break;
  }
  MOETIER_CHECK(false && "ReadScalar called with ARRAY");
  return absl::OkStatus();
}

template <typename Disk, typename Stored>
absl::Status ReadElements(Cursor& in, uint64_t count, std::vector<Stored>* out,
                          std::string_view what) {
  // The caller checked count * sizeof(Disk) against the bytes left.
  out->reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    Disk v{};
    if (absl::Status s = in.Read(&v, what); !s.ok()) return s;
    out->push_back(static_cast<Stored>(v));
  }
  return absl::OkStatus();
}

absl::Status ReadArray(Cursor& in, const std::string& key, GgufValue* value) {
  const uint64_t start = in.pos();
  uint32_t element_type_id = 0;
  if (absl::Status s = in.Read(&element_type_id, "array element type"); !s.ok()) return s;
  if (element_type_id == static_cast<uint32_t>(GgufValueType::kArray)) {
    return in.ErrorAt(start, absl::StrFormat("metadata key %s is an array of arrays, which is "
                                             "not supported (llama.cpp rejects it too)",
                                             Quote(key)));
  }
  if (!gguf_internal::IsValidValueType(element_type_id)) {
    return in.ErrorAt(start, absl::StrFormat("metadata key %s: unknown array element type id %d",
                                             Quote(key), element_type_id));
  }
  const auto element_type = static_cast<GgufValueType>(element_type_id);
  const uint64_t count_offset = in.pos();
  uint64_t count = 0;
  if (absl::Status s = in.Read(&count, "array element count"); !s.ok()) return s;
  const uint64_t min_bytes = gguf_internal::MinElementBytes(element_type);
  if (count > in.remaining() / min_bytes) {
    return in.ErrorAt(
        count_offset,
        absl::StrFormat("metadata key %s: array of %d %s elements needs at least %d bytes each, "
                        "but only %d bytes are left in the file",
                        Quote(key), count, GgufValueTypeName(element_type), min_bytes,
                        in.remaining()));
  }

  GgufArray array;
  array.element_type = element_type;
  absl::Status s;
  switch (element_type) {
    case GgufValueType::kUint8:
      s = ReadElements<uint8_t>(in, count, &array.elements.emplace<std::vector<uint64_t>>(),
                                "array element");
      break;
    case GgufValueType::kInt8:
      s = ReadElements<int8_t>(in, count, &array.elements.emplace<std::vector<int64_t>>(),
                               "array element");
      break;
    case GgufValueType::kUint16:
      s = ReadElements<uint16_t>(in, count, &array.elements.emplace<std::vector<uint64_t>>(),
                                 "array element");
      break;
    case GgufValueType::kInt16:
      s = ReadElements<int16_t>(in, count, &array.elements.emplace<std::vector<int64_t>>(),
                                "array element");
      break;
    case GgufValueType::kUint32:
      s = ReadElements<uint32_t>(in, count, &array.elements.emplace<std::vector<uint64_t>>(),
                                 "array element");
      break;
    case GgufValueType::kInt32:
      s = ReadElements<int32_t>(in, count, &array.elements.emplace<std::vector<int64_t>>(),
                                "array element");
      break;
    case GgufValueType::kUint64:
      s = ReadElements<uint64_t>(in, count, &array.elements.emplace<std::vector<uint64_t>>(),
                                 "array element");
      break;
    case GgufValueType::kInt64:
      s = ReadElements<int64_t>(in, count, &array.elements.emplace<std::vector<int64_t>>(),
                                "array element");
      break;
    case GgufValueType::kFloat32:
      s = ReadElements<float>(in, count, &array.elements.emplace<std::vector<double>>(),
                              "array element");
      break;
    case GgufValueType::kFloat64:
      s = ReadElements<double>(in, count, &array.elements.emplace<std::vector<double>>(),
                               "array element");
      break;
    case GgufValueType::kBool: {
      auto& out = array.elements.emplace<std::vector<bool>>();
      out.reserve(count);
      for (uint64_t i = 0; i < count && s.ok(); ++i) {
        int8_t b = 0;
        s = in.Read(&b, "array element");
        out.push_back(b != 0);
      }
      break;
    }
    case GgufValueType::kString: {
      // Not reserved: a std::string is far larger than the 8 bytes that
      // bound the count, and real string arrays are read once.
      auto& out = array.elements.emplace<std::vector<std::string>>();
      for (uint64_t i = 0; i < count && s.ok(); ++i) {
        s = in.ReadString(&out.emplace_back(), "array string element");
      }
      break;
    }
    case GgufValueType::kArray:
      MOETIER_CHECK(false && "nested arrays were rejected above");
      break;
  }
  if (!s.ok()) return s;
  value->type = GgufValueType::kArray;
  value->data = std::move(array);
  return absl::OkStatus();
}

struct ParsedTensor {
  GgufTensorInfo info;
  uint64_t info_offset = 0;    // where its tensor info starts
  uint64_t offset_field = 0;   // where its offset field is
};

absl::Status ParseTensorInfo(Cursor& in, uint32_t alignment, ParsedTensor* out) {
  GgufTensorInfo& info = out->info;
  out->info_offset = in.pos();
  if (absl::Status s = in.ReadString(&info.name, "tensor name"); !s.ok()) return s;
  if (info.name.size() > kGgufMaxTensorNameBytes) {
    return in.ErrorAt(out->info_offset,
                      absl::StrFormat("tensor name %s is %d bytes; names must be shorter than "
                                      "64 bytes (llama.cpp's GGML_MAX_NAME)",
                                      Quote(info.name), info.name.size()));
  }
  const uint64_t dims_offset = in.pos();
  if (absl::Status s = in.Read(&info.n_dims, "tensor n_dims"); !s.ok()) return s;
  if (info.n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
    return in.ErrorAt(dims_offset, absl::StrFormat("tensor %s has %d dimensions; at most %d "
                                                   "are supported",
                                                   Quote(info.name), info.n_dims, kGgufMaxDims));
  }
  for (uint32_t d = 0; d < info.n_dims; ++d) {
    const uint64_t dim_offset = in.pos();
    uint64_t dim = 0;
    if (absl::Status s = in.Read(&dim, "tensor dimension"); !s.ok()) return s;
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return in.ErrorAt(dim_offset,
                        absl::StrFormat("tensor %s: dimension ne[%d] is negative as int64 (%d)",
                                        Quote(info.name), d, static_cast<int64_t>(dim)));
    }
    info.ne[d] = static_cast<int64_t>(dim);
  }
  const uint64_t type_offset = in.pos();
  uint32_t type_id = 0;
  if (absl::Status s = in.Read(&type_id, "tensor type"); !s.ok()) return s;
  absl::StatusOr<uint64_t> size =
      gguf_internal::TensorSizeBytes(type_id, std::span<const int64_t>(info.ne.data(), info.n_dims));
  if (!size.ok()) {
    return in.ErrorAt(type_offset, absl::StrCat("tensor ", Quote(info.name), ": ",
                                                size.status().message()));
  }
  info.type = static_cast<TensorType>(type_id);
  info.size_bytes = *size;
  out->offset_field = in.pos();
  if (absl::Status s = in.Read(&info.offset_in_data, "tensor data offset"); !s.ok()) return s;
  if (info.offset_in_data % alignment != 0) {
    return in.ErrorAt(out->offset_field,
                      absl::StrFormat("tensor %s: data offset %d is not a multiple of the "
                                      "alignment %d",
                                      Quote(info.name), info.offset_in_data, alignment));
  }
  return absl::OkStatus();
}

absl::Status ErrnoError(int err, std::string_view path, std::string_view action) {
  return absl::ErrnoToStatus(err, absl::StrFormat("%s: %s", path, action));
}

}  // namespace

uint64_t GgufTensorInfo::row_bytes() const {
  return static_cast<uint64_t>(TensorRowBytes(type, ne[0]));
}

// --- GgufMetadata ------------------------------------------------------------

namespace {

std::string TypeDescription(const GgufValue& v) {
  if (v.type == GgufValueType::kArray) {
    const auto& a = std::get<GgufArray>(v.data);
    return absl::StrFormat("ARRAY of %s", GgufValueTypeName(a.element_type));
  }
  return std::string(GgufValueTypeName(v.type));
}

absl::Status WrongType(std::string_view key, const GgufValue& v, std::string_view expected) {
  return absl::InvalidArgumentError(absl::StrFormat("metadata key '%s' is %s, expected %s", key,
                                                    TypeDescription(v), expected));
}

absl::Status Missing(std::string_view key) {
  return absl::NotFoundError(absl::StrFormat("metadata key '%s' is missing", key));
}

// An integer value as uint64, or an error when it is negative or not an integer.
absl::StatusOr<uint64_t> AsUint(std::string_view key, const std::variant<int64_t, uint64_t>& v) {
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  const int64_t i = std::get<int64_t>(v);
  if (i < 0) {
    return absl::OutOfRangeError(
        absl::StrFormat("metadata key '%s' is %d, expected a value >= 0", key, i));
  }
  return static_cast<uint64_t>(i);
}

absl::StatusOr<int64_t> AsInt(std::string_view key, const std::variant<int64_t, uint64_t>& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  const uint64_t u = std::get<uint64_t>(v);
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::OutOfRangeError(
        absl::StrFormat("metadata key '%s' is %d, which does not fit int64", key, u));
  }
  return static_cast<int64_t>(u);
}

// The scalar integer stored in `v`, when it is one.
std::optional<std::variant<int64_t, uint64_t>> ScalarInteger(const GgufValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
  return std::nullopt;
}

}  // namespace

void GgufMetadata::Add(GgufKeyValue kv) {
  const bool inserted = index_.emplace(kv.key, entries_.size()).second;
  MOETIER_CHECK(inserted && "duplicate metadata key");
  entries_.push_back(std::move(kv));
}

bool GgufMetadata::Has(std::string_view key) const { return Find(key) != nullptr; }

const GgufValue* GgufMetadata::Find(std::string_view key) const {
  // absl::string_view is not std::string_view on this toolchain, so look up by std::string.
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].value;
}

absl::StatusOr<uint64_t> GgufMetadata::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  const auto i = ScalarInteger(*v);
  if (!i.has_value()) return WrongType(key, *v, "an unsigned integer");
  return AsUint(key, *i);
}

absl::StatusOr<int64_t> GgufMetadata::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  const auto i = ScalarInteger(*v);
  if (!i.has_value()) return WrongType(key, *v, "an integer");
  return AsInt(key, *i);
}

absl::StatusOr<double> GgufMetadata::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const auto* d = std::get_if<double>(&v->data)) return *d;
  return WrongType(key, *v, "FLOAT32 or FLOAT64");
}

absl::StatusOr<bool> GgufMetadata::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const auto* b = std::get_if<bool>(&v->data)) return *b;
  return WrongType(key, *v, "BOOL");
}

absl::StatusOr<std::string> GgufMetadata::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const auto* s = std::get_if<std::string>(&v->data)) return *s;
  return WrongType(key, *v, "STRING");
}

absl::StatusOr<const GgufArray*> GgufMetadata::GetArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const auto* a = std::get_if<GgufArray>(&v->data)) return a;
  return WrongType(key, *v, "ARRAY");
}

absl::StatusOr<std::vector<std::string>> GgufMetadata::GetStringArray(std::string_view key) const {
  absl::StatusOr<const GgufArray*> a = GetArray(key);
  if (!a.ok()) return a.status();
  if (const auto* s = std::get_if<std::vector<std::string>>(&(*a)->elements)) return *s;
  return WrongType(key, *Find(key), "ARRAY of STRING");
}

absl::StatusOr<std::vector<int64_t>> GgufMetadata::GetIntArray(std::string_view key) const {
  absl::StatusOr<const GgufArray*> a = GetArray(key);
  if (!a.ok()) return a.status();
  if (const auto* i = std::get_if<std::vector<int64_t>>(&(*a)->elements)) return *i;
  if (const auto* u = std::get_if<std::vector<uint64_t>>(&(*a)->elements)) {
    std::vector<int64_t> out;
    out.reserve(u->size());
    for (uint64_t x : *u) {
      absl::StatusOr<int64_t> i = AsInt(key, x);
      if (!i.ok()) return i.status();
      out.push_back(*i);
    }
    return out;
  }
  return WrongType(key, *Find(key), "ARRAY of an integer type");
}

absl::StatusOr<std::vector<double>> GgufMetadata::GetFloatArray(std::string_view key) const {
  absl::StatusOr<const GgufArray*> a = GetArray(key);
  if (!a.ok()) return a.status();
  if (const auto* d = std::get_if<std::vector<double>>(&(*a)->elements)) return *d;
  return WrongType(key, *Find(key), "ARRAY of FLOAT32 or FLOAT64");
}

absl::StatusOr<std::vector<uint64_t>> GgufMetadata::GetUintOrArray(std::string_view key,
                                                                    size_t n_layer) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const auto i = ScalarInteger(*v); i.has_value()) {
    absl::StatusOr<uint64_t> u = AsUint(key, *i);
    if (!u.ok()) return u.status();
    return std::vector<uint64_t>(n_layer, *u);
  }
  const auto* a = std::get_if<GgufArray>(&v->data);
  if (a == nullptr) return WrongType(key, *v, "an unsigned integer or an array of them");
  if (a->size() != n_layer) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metadata key '%s' has %d per-layer values, expected %d", key, a->size(), n_layer));
  }
  std::vector<uint64_t> out;
  out.reserve(n_layer);
  if (const auto* u = std::get_if<std::vector<uint64_t>>(&a->elements)) return *u;
  if (const auto* s = std::get_if<std::vector<int64_t>>(&a->elements)) {
    for (int64_t x : *s) {
      absl::StatusOr<uint64_t> u = AsUint(key, x);
      if (!u.ok()) return u.status();
      out.push_back(*u);
    }
    return out;
  }
  return WrongType(key, *v, "an unsigned integer or an array of them");
}

uint64_t GgufMetadata::GetUintOr(std::string_view key, uint64_t fallback) const {
  absl::StatusOr<uint64_t> v = GetUint(key);
  return v.ok() ? *v : fallback;
}

double GgufMetadata::GetFloatOr(std::string_view key, double fallback) const {
  absl::StatusOr<double> v = GetFloat(key);
  return v.ok() ? *v : fallback;
}

std::string GgufMetadata::GetStringOr(std::string_view key, std::string_view fallback) const {
  absl::StatusOr<std::string> v = GetString(key);
  return v.ok() ? *std::move(v) : std::string(fallback);
}

// --- GgufFile ----------------------------------------------------------------

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes,
                                                          std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(name);
  file->bytes_ = bytes;
  Cursor in(bytes, file->path_);

  uint8_t magic[4] = {};
  if (absl::Status s = in.ReadBytes(magic, sizeof(magic), "magic"); !s.ok()) return s;
  if (std::memcmp(magic, gguf_internal::kMagic, sizeof(magic)) != 0) {
    return in.ErrorAt(0, absl::StrFormat("bad magic %02x %02x %02x %02x: not a GGUF file "
                                         "(expected 47 47 55 46, \"GGUF\")",
                                         magic[0], magic[1], magic[2], magic[3]));
  }
  if (absl::Status s = in.Read(&file->version_, "version"); !s.ok()) return s;
  const uint32_t version = file->version_;
  if (version < gguf_internal::kMinVersion || version > gguf_internal::kMaxVersion) {
    std::string problem;
    if (version != 0 && (version & 0xFFFFu) == 0) {
      problem = absl::StrFormat("unsupported GGUF version %d (0x%08x): the low 16 bits are zero, "
                                "so this is likely a big-endian file (byte-order mismatch); "
                                "only little-endian files are supported",
                                version, version);
    } else if (version == 1) {
      problem = "unsupported GGUF version 1 (32-bit counts, rejected by llama.cpp); "
                "convert the file to version 3";
    } else {
      problem = absl::StrFormat("unsupported GGUF version %d; versions 2 and 3 are supported",
                                version);
    }
    return in.ErrorAt(4, problem);
  }

  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  if (absl::Status s = in.Read(&tensor_count, "tensor count"); !s.ok()) return s;
  if (absl::Status s = in.Read(&kv_count, "metadata key-value count"); !s.ok()) return s;
  if (tensor_count > in.remaining() / kMinTensorInfoBytes) {
    return in.ErrorAt(8, absl::StrFormat("tensor count %d cannot fit: each tensor info takes at "
                                         "least %d bytes and only %d bytes follow the header",
                                         tensor_count, kMinTensorInfoBytes, in.remaining()));
  }
  if (kv_count > in.remaining() / kMinKvBytes) {
    return in.ErrorAt(16, absl::StrFormat("metadata key-value count %d cannot fit: each pair "
                                          "takes at least %d bytes and only %d bytes follow the "
                                          "header",
                                          kv_count, kMinKvBytes, in.remaining()));
  }

  for (uint64_t i = 0; i < kv_count; ++i) {
    const uint64_t kv_offset = in.pos();
    GgufKeyValue kv;
    if (absl::Status s = in.ReadString(&kv.key, "metadata key"); !s.ok()) return s;
    if (kv.key.empty()) {
      return in.ErrorAt(kv_offset, absl::StrFormat("metadata key %d of %d is empty", i + 1,
                                                   kv_count));
    }
    if (file->metadata_.Has(kv.key)) {
      return in.ErrorAt(kv_offset, absl::StrFormat("duplicate metadata key %s", Quote(kv.key)));
    }
    const uint64_t type_offset = in.pos();
    uint32_t type_id = 0;
    if (absl::Status s = in.Read(&type_id, "metadata value type"); !s.ok()) return s;
    if (!gguf_internal::IsValidValueType(type_id)) {
      return in.ErrorAt(type_offset, absl::StrFormat("metadata key %s has unknown value type id "
                                                     "%d",
                                                     Quote(kv.key), type_id));
    }
    const auto type = static_cast<GgufValueType>(type_id);
    absl::Status s = type == GgufValueType::kArray
                         ? ReadArray(in, kv.key, &kv.value)
                         : ReadScalar(in, type, &kv.value, "metadata value");
    if (!s.ok()) return s;
    if (kv.key == gguf_internal::kAlignmentKey) {
      if (type != GgufValueType::kUint32) {
        return in.ErrorAt(type_offset, absl::StrFormat("general.alignment is %s; it must be "
                                                       "UINT32",
                                                       TypeDescription(kv.value)));
      }
      const uint64_t alignment = std::get<uint64_t>(kv.value.data);
      if (!gguf_internal::IsPowerOfTwo(alignment)) {
        return in.ErrorAt(type_offset, absl::StrFormat("general.alignment is %d; it must be a "
                                                       "nonzero power of two",
                                                       alignment));
      }
      file->alignment_ = static_cast<uint32_t>(alignment);
    }
    file->metadata_.Add(std::move(kv));
  }

  std::vector<ParsedTensor> parsed;
  absl::flat_hash_map<std::string, size_t> by_name;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    ParsedTensor t;
    if (absl::Status s = ParseTensorInfo(in, file->alignment_, &t); !s.ok()) return s;
    if (const auto [it, inserted] = by_name.emplace(t.info.name, parsed.size()); !inserted) {
      return in.ErrorAt(t.info_offset, absl::StrFormat("duplicate tensor name %s (also tensor "
                                                       "%d)",
                                                       Quote(t.info.name), it->second));
    }
    parsed.push_back(std::move(t));
  }

  file->data_offset_ = gguf_internal::AlignUp(in.pos(), file->alignment_);
  const uint64_t file_size = bytes.size();
  for (ParsedTensor& t : parsed) {
    GgufTensorInfo& info = t.info;
    const uint64_t start = file->data_offset_ + info.offset_in_data;
    if (start < info.offset_in_data || start > file_size ||
        info.size_bytes > file_size - start) {
      return in.ErrorAt(t.offset_field,
                        absl::StrFormat("tensor %s: data (offset %d in the data blob at %d, %d "
                                        "bytes) lies outside the file of %d bytes",
                                        Quote(info.name), info.offset_in_data,
                                        file->data_offset_, info.size_bytes, file_size));
    }
    info.file_offset = start;
  }

  // Tensors may be stored in any order, but no two may share bytes.
  std::vector<const ParsedTensor*> by_offset;
  by_offset.reserve(parsed.size());
  for (const ParsedTensor& t : parsed) {
    if (t.info.size_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const ParsedTensor* a, const ParsedTensor* b) {
    return a->info.file_offset < b->info.file_offset;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = by_offset[i - 1]->info;
    const GgufTensorInfo& cur = by_offset[i]->info;
    if (cur.file_offset < prev.file_offset + prev.size_bytes) {
      return in.ErrorAt(by_offset[i]->offset_field,
                        absl::StrFormat("tensor %s (bytes %d..%d) overlaps tensor %s (bytes "
                                        "%d..%d)",
                                        Quote(cur.name), cur.file_offset,
                                        cur.file_offset + cur.size_bytes, Quote(prev.name),
                                        prev.file_offset, prev.file_offset + prev.size_bytes));
    }
  }

  file->tensors_.reserve(parsed.size());
  for (ParsedTensor& t : parsed) file->tensors_.push_back(std::move(t.info));
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, path, "cannot open GGUF file");
  struct stat st = {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoError(err, path, "cannot stat GGUF file");
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  void* mapping = nullptr;
  if (size > 0) {
    mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      const int err = errno;
      close(fd);
      return ErrnoError(err, path, absl::StrFormat("cannot mmap %d bytes", size));
    }
  }
  close(fd);  // the mapping keeps the file alive
  std::span<const uint8_t> bytes(static_cast<const uint8_t*>(mapping), size);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = Parse(bytes, path);
  if (!file.ok()) {
    if (mapping != nullptr) munmap(mapping, size);
    return file.status();
  }
  (*file)->mapping_ = mapping;
  (*file)->mapping_size_ = size;
  return file;
}

// --- GgufModel ---------------------------------------------------------------

namespace {

constexpr std::string_view kSplitNoKey = "split.no";
constexpr std::string_view kSplitCountKey = "split.count";
constexpr std::string_view kSplitTensorsKey = "split.tensors.count";
constexpr uint64_t kMaxSplitCount = 99999;  // five digits in the file name

absl::Status SplitError(const std::string& path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, problem));
}

}  // namespace

std::string GgufSplitPath(std::string_view prefix, uint32_t index, uint32_t count) {
  return absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, index + 1, count);
}

absl::StatusOr<std::unique_ptr<GgufModel>> GgufModel::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufFile>> first = GgufFile::Open(path);
  if (!first.ok()) return first.status();
  const GgufMetadata& md = (*first)->metadata();
  std::vector<std::unique_ptr<GgufFile>> shards;
  if (!md.Has(kSplitCountKey)) {
    shards.push_back(*std::move(first));
    return FromFiles(std::move(shards));
  }
  absl::StatusOr<uint64_t> count = md.GetUint(kSplitCountKey);
  if (!count.ok()) return SplitError(path, count.status().message());
  if (*count == 0 || *count > kMaxSplitCount) {
    return SplitError(path, absl::StrFormat("split.count is %d; it must be 1..%d", *count,
                                            kMaxSplitCount));
  }
  absl::StatusOr<uint64_t> no = md.GetUint(kSplitNoKey);
  if (!no.ok()) return SplitError(path, no.status().message());
  const auto n = static_cast<uint32_t>(*count);
  if (*no != 0) {
    return SplitError(path, absl::StrFormat("this is shard %d of a %d-file split model (split.no "
                                            "= %d); open the first shard, -00001-of-%05d.gguf",
                                            *no + 1, n, *no, n));
  }
  if (n > 1) {
    const std::string suffix = absl::StrFormat("-00001-of-%05d.gguf", n);
    if (path.size() < suffix.size() ||
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
      return SplitError(path, absl::StrFormat("split.count is %d but the file name does not end "
                                              "in %s, so the other shards cannot be found",
                                              n, suffix));
    }
    const std::string_view prefix = std::string_view(path).substr(0, path.size() - suffix.size());
    shards.push_back(*std::move(first));
    for (uint32_t i = 1; i < n; ++i) {
      const std::string shard_path = GgufSplitPath(prefix, i, n);
      absl::StatusOr<std::unique_ptr<GgufFile>> shard = GgufFile::Open(shard_path);
      if (!shard.ok()) {
        if (absl::IsNotFound(shard.status())) {
          return absl::NotFoundError(absl::StrFormat("%s: shard %d of %d is missing: %s", path,
                                                     i + 1, n, shard_path));
        }
        return shard.status();
      }
      shards.push_back(*std::move(shard));
    }
    return FromFiles(std::move(shards));
  }
  shards.push_back(*std::move(first));
  return FromFiles(std::move(shards));
}

absl::StatusOr<std::unique_ptr<GgufModel>> GgufModel::FromFiles(
    std::vector<std::unique_ptr<GgufFile>> shards) {
  if (shards.empty()) return absl::InvalidArgumentError("GgufModel: no files given");
  for (const auto& shard : shards) MOETIER_CHECK(shard != nullptr);
  const size_t n = shards.size();
  uint64_t total_tensors = 0;
  for (const auto& shard : shards) total_tensors += shard->tensors().size();

  for (size_t i = 0; i < n; ++i) {
    const GgufMetadata& md = shards[i]->metadata();
    const std::string& path = shards[i]->path();
    const bool split = n > 1 || md.Has(kSplitCountKey) || md.Has(kSplitNoKey);
    if (!split) continue;
    absl::StatusOr<uint64_t> no = md.GetUint(kSplitNoKey);
    if (!no.ok()) return SplitError(path, no.status().message());
    if (*no != i) {
      return SplitError(path, absl::StrFormat("split.no is %d but this file is shard %d of %d "
                                              "(split.no is 0-based); the split set is "
                                              "inconsistent",
                                              *no, i + 1, n));
    }
    absl::StatusOr<uint64_t> count = md.GetUint(kSplitCountKey);
    if (!count.ok()) return SplitError(path, count.status().message());
    if (*count != n) {
      return SplitError(path, absl::StrFormat("split.count is %d but the set has %d files", *count,
                                              n));
    }
    if (md.Has(kSplitTensorsKey)) {
      absl::StatusOr<int64_t> declared = md.GetInt(kSplitTensorsKey);
      if (!declared.ok()) return SplitError(path, declared.status().message());
      if (*declared < 0 || static_cast<uint64_t>(*declared) != total_tensors) {
        return SplitError(path, absl::StrFormat("split.tensors.count is %d but the %d shards hold "
                                                "%d tensors",
                                                *declared, n, total_tensors));
      }
    }
  }

  auto model = std::unique_ptr<GgufModel>(new GgufModel());
  model->tensors_.reserve(total_tensors);
  for (size_t i = 0; i < n; ++i) {
    for (const GgufTensorInfo& t : shards[i]->tensors()) {
      const auto [it, inserted] = model->tensor_index_.emplace(t.name, model->tensors_.size());
      if (!inserted) {
        const GgufTensorInfo& other = model->tensors_[it->second];
        return SplitError(shards[i]->path(),
                          absl::StrFormat("tensor %s is also in %s; tensor names must be unique "
                                          "across the shards",
                                          Quote(t.name), shards[other.shard]->path()));
      }
      model->tensors_.push_back(t);
      model->tensors_.back().shard = static_cast<uint32_t>(i);
    }
  }
  model->shards_ = std::move(shards);
  return model;
}

const GgufTensorInfo* GgufModel::FindTensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const GgufTensorInfo*> GgufModel::GetTensor(std::string_view name) const {
  if (const GgufTensorInfo* t = FindTensor(name)) return t;
  return absl::NotFoundError(absl::StrFormat("%s: tensor '%s' not found", shards_.front()->path(),
                                             name));
}

std::span<const uint8_t> GgufModel::TensorData(const GgufTensorInfo& tensor) const {
  MOETIER_CHECK(tensor.shard < shards_.size());
  return shards_[tensor.shard]->bytes().subspan(tensor.file_offset, tensor.size_bytes);
}

uint64_t GgufModel::TouchTensorPages() const {
  uint64_t sum = 0;
  for (const GgufTensorInfo& t : tensors_) {
    const std::span<const uint8_t> data = TensorData(t);
    for (size_t i = 0; i < data.size(); i += 4096) sum += data[i];
  }
  return sum;
}

const std::string& GgufModel::ShardPath(const GgufTensorInfo& tensor) const {
  MOETIER_CHECK(tensor.shard < shards_.size());
  return shards_[tensor.shard]->path();
}

}  // namespace moetier

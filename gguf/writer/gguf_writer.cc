#include "gguf/writer/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "gguf/gguf_format.h"

namespace moetier {
namespace {

using gguf_internal::kMaxStringBytes;

constexpr size_t kFileBufferBytes = size_t{1} << 20;
constexpr size_t kZeroChunkBytes = 4096;

absl::Status Invalid(const std::string& what) { return absl::InvalidArgumentError(what); }

template <typename T>
bool Fits(uint64_t v) {
  return v <= static_cast<uint64_t>(std::numeric_limits<T>::max());
}

template <typename T>
bool Fits(int64_t v) {
  return v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
         v <= static_cast<int64_t>(std::numeric_limits<T>::max());
}

// Whether `v` fits the on-disk integer type `type` (the variant alternative
// already matched the type's signedness).
bool UnsignedFits(GgufValueType type, uint64_t v) {
  switch (type) {
    case GgufValueType::kUint8:
      return Fits<uint8_t>(v);
    case GgufValueType::kUint16:
      return Fits<uint16_t>(v);
    case GgufValueType::kUint32:
      return Fits<uint32_t>(v);
    default:
      return true;
  }
}

bool SignedFits(GgufValueType type, int64_t v) {
  switch (type) {
    case GgufValueType::kInt8:
      return Fits<int8_t>(v);
    case GgufValueType::kInt16:
      return Fits<int16_t>(v);
    case GgufValueType::kInt32:
      return Fits<int32_t>(v);
    default:
      return true;
  }
}

bool IsUnsigned(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kUint16 ||
         t == GgufValueType::kUint32 || t == GgufValueType::kUint64;
}

bool IsSigned(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}

bool IsFloat(GgufValueType t) {
  return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64;
}

// Checks that a value can be written as its declared type: the variant holds
// the alternative the type maps to and integers fit the on-disk width.
absl::Status ValidateValue(std::string_view key, const GgufValue& v) {
  const auto bad = [&](std::string_view problem) {
    return Invalid(absl::StrFormat("metadata key '%s' (%s): %s", key,
                                   gguf_internal::IsValidValueType(static_cast<uint32_t>(v.type))
                                       ? GgufValueTypeName(v.type)
                                       : "unknown type",
                                   problem));
  };
  if (!gguf_internal::IsValidValueType(static_cast<uint32_t>(v.type))) {
    return bad(absl::StrFormat("value type id %d is not a GGUF type",
                               static_cast<uint32_t>(v.type)));
  }
  if (IsUnsigned(v.type)) {
    const auto* u = std::get_if<uint64_t>(&v.data);
    if (u == nullptr) return bad("value does not hold an unsigned integer");
    if (!UnsignedFits(v.type, *u)) return bad(absl::StrFormat("value %d does not fit", *u));
    return absl::OkStatus();
  }
  if (IsSigned(v.type)) {
    const auto* i = std::get_if<int64_t>(&v.data);
    if (i == nullptr) return bad("value does not hold a signed integer");
    if (!SignedFits(v.type, *i)) return bad(absl::StrFormat("value %d does not fit", *i));
    return absl::OkStatus();
  }
  if (IsFloat(v.type)) {
    return std::holds_alternative<double>(v.data) ? absl::OkStatus()
                                                  : bad("value does not hold a float");
  }
  if (v.type == GgufValueType::kBool) {
    return std::holds_alternative<bool>(v.data) ? absl::OkStatus() : bad("value is not a bool");
  }
  if (v.type == GgufValueType::kString) {
    const auto* s = std::get_if<std::string>(&v.data);
    if (s == nullptr) return bad("value is not a string");
    if (s->size() > kMaxStringBytes) return bad("string is longer than 1 GiB");
    return absl::OkStatus();
  }
  const auto* a = std::get_if<GgufArray>(&v.data);
  if (a == nullptr) return bad("value is not an array");
  const GgufValueType et = a->element_type;
  if (!gguf_internal::IsValidValueType(static_cast<uint32_t>(et))) {
    return bad(absl::StrFormat("array element type id %d is not a GGUF type",
                               static_cast<uint32_t>(et)));
  }
  if (et == GgufValueType::kArray) return bad("arrays of arrays are not supported");
  if (IsUnsigned(et)) {
    const auto* u = std::get_if<std::vector<uint64_t>>(&a->elements);
    if (u == nullptr) return bad("array elements are not unsigned integers");
    for (size_t i = 0; i < u->size(); ++i) {
      if (!UnsignedFits(et, (*u)[i])) {
        return bad(absl::StrFormat("element %d = %d does not fit %s", i, (*u)[i],
                                   GgufValueTypeName(et)));
      }
    }
  } else if (IsSigned(et)) {
    const auto* s = std::get_if<std::vector<int64_t>>(&a->elements);
    if (s == nullptr) return bad("array elements are not signed integers");
    for (size_t i = 0; i < s->size(); ++i) {
      if (!SignedFits(et, (*s)[i])) {
        return bad(absl::StrFormat("element %d = %d does not fit %s", i, (*s)[i],
                                   GgufValueTypeName(et)));
      }
    }
  } else if (IsFloat(et)) {
    if (!std::holds_alternative<std::vector<double>>(a->elements)) {
      return bad("array elements are not floats");
    }
  } else if (et == GgufValueType::kBool) {
    if (!std::holds_alternative<std::vector<bool>>(a->elements)) {
      return bad("array elements are not bools");
    }
  } else {
    const auto* s = std::get_if<std::vector<std::string>>(&a->elements);
    if (s == nullptr) return bad("array elements are not strings");
    for (const std::string& e : *s) {
      if (e.size() > kMaxStringBytes) return bad("a string element is longer than 1 GiB");
    }
  }
  return absl::OkStatus();
}

}  // namespace

GgufWriter::~GgufWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status GgufWriter::AddKeyValue(std::string key, GgufValue value) {
  if (opened_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("GgufWriter: metadata key '%s' added after Open(%s)", key, path_));
  }
  if (key.empty()) return Invalid("GgufWriter: metadata key is empty");
  if (key.size() > kMaxStringBytes) return Invalid("GgufWriter: metadata key is longer than 1 GiB");
  for (const GgufKeyValue& kv : kvs_) {
    if (kv.key == key) {
      return Invalid(absl::StrFormat("GgufWriter: duplicate metadata key '%s'", key));
    }
  }
  if (absl::Status s = ValidateValue(key, value); !s.ok()) return s;
  if (key == gguf_internal::kAlignmentKey) {
    if (value.type != GgufValueType::kUint32) {
      return Invalid(absl::StrFormat("GgufWriter: general.alignment must be UINT32, not %s",
                                     GgufValueTypeName(value.type)));
    }
    const uint64_t alignment = std::get<uint64_t>(value.data);
    if (!gguf_internal::IsPowerOfTwo(alignment)) {
      return Invalid(absl::StrFormat(
          "GgufWriter: general.alignment %d is not a nonzero power of two", alignment));
    }
    alignment_ = static_cast<uint32_t>(alignment);
  }
  kvs_.push_back({std::move(key), std::move(value)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(std::string name, TensorType type, std::vector<int64_t> ne) {
  if (opened_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("GgufWriter: tensor '%s' added after Open(%s)", name, path_));
  }
  if (name.empty()) return Invalid("GgufWriter: tensor name is empty");
  if (name.size() > 63) {
    return Invalid(absl::StrFormat("GgufWriter: tensor name '%s' is %d bytes; names must be "
                                   "shorter than 64 bytes",
                                   name, name.size()));
  }
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) {
      return Invalid(absl::StrFormat("GgufWriter: duplicate tensor name '%s'", name));
    }
  }
  if (ne.empty() || ne.size() > 4) {
    return Invalid(absl::StrFormat("GgufWriter: tensor '%s' has %d dimensions; 1 to 4 are "
                                   "supported",
                                   name, ne.size()));
  }
  absl::StatusOr<uint64_t> size =
      gguf_internal::TensorSizeBytes(static_cast<uint32_t>(type), ne);
  if (!size.ok()) {
    return Invalid(absl::StrFormat("GgufWriter: tensor '%s': %s", name, size.status().message()));
  }
  if (data_bytes_total_ + *size < data_bytes_total_) {
    return Invalid(absl::StrFormat("GgufWriter: tensor '%s' makes the data blob overflow", name));
  }
  data_bytes_total_ += *size;
  tensors_.push_back({std::move(name), type, std::move(ne), *size, 0});
  return absl::OkStatus();
}

absl::Status GgufWriter::Fail(absl::Status status) {
  if (error_.ok()) error_ = status;
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
  }
  return error_;
}

absl::Status GgufWriter::Write(const void* data, size_t size) {
  if (!error_.ok()) return error_;
  if (size == 0) return absl::OkStatus();
  if (std::fwrite(data, 1, size, file_) != size) {
    const int err = errno;
    return Fail(absl::ErrnoToStatus(
        err, absl::StrFormat("%s: write failed at byte offset %d%s", path_, bytes_written_,
                             err == ENOSPC ? " (disk full)" : "")));
  }
  bytes_written_ += size;
  return absl::OkStatus();
}

absl::Status GgufWriter::WritePadding(uint64_t alignment) {
  static constexpr uint8_t kZeros[kZeroChunkBytes] = {};
  uint64_t pad = gguf_internal::AlignUp(bytes_written_, alignment) - bytes_written_;
  while (pad > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(kZeros)));
    if (absl::Status s = Write(kZeros, n); !s.ok()) return s;
    pad -= n;
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::WriteString(std::string_view s) {
  const uint64_t length = s.size();
  if (absl::Status st = Write(&length, sizeof(length)); !st.ok()) return st;
  return Write(s.data(), s.size());
}

namespace {

template <typename Disk, typename Stored, typename WriteFn>
absl::Status WriteScalarAs(Stored v, WriteFn&& write) {
  const auto disk = static_cast<Disk>(v);
  return write(&disk, sizeof(disk));
}

// Writes one scalar of on-disk type `type` from the widened value in `v`.
template <typename WriteFn>
absl::Status WriteUnsigned(GgufValueType type, uint64_t v, WriteFn&& write) {
  switch (type) {
    case GgufValueType::kUint8:
      return WriteScalarAs<uint8_t>(v, write);
    case GgufValueType::kUint16:
      return WriteScalarAs<uint16_t>(v, write);
    case GgufValueType::kUint32:
      return WriteScalarAs<uint32_t>(v, write);
    default:
      return WriteScalarAs<uint64_t>(v, write);
  }
}

template <typename WriteFn>
absl::Status WriteSigned(GgufValueType type, int64_t v, WriteFn&& write) {
  switch (type) {
    case GgufValueType::kInt8:
      return WriteScalarAs<int8_t>(v, write);
    case GgufValueType::kInt16:
      return WriteScalarAs<int16_t>(v, write);
    case GgufValueType::kInt32:
      return WriteScalarAs<int32_t>(v, write);
    default:
      return WriteScalarAs<int64_t>(v, write);
  }
}

template <typename WriteFn>
absl::Status WriteFloat(GgufValueType type, double v, WriteFn&& write) {
  if (type == GgufValueType::kFloat32) return WriteScalarAs<float>(v, write);
  return WriteScalarAs<double>(v, write);
}

}  // namespace

absl::Status GgufWriter::WriteValue(const GgufValue& value) {
  const auto write = [this](const void* p, size_t n) { return Write(p, n); };
  const GgufValueType type = value.type;
  if (IsUnsigned(type)) return WriteUnsigned(type, std::get<uint64_t>(value.data), write);
  if (IsSigned(type)) return WriteSigned(type, std::get<int64_t>(value.data), write);
  if (IsFloat(type)) return WriteFloat(type, std::get<double>(value.data), write);
  if (type == GgufValueType::kBool) {
    const uint8_t b = std::get<bool>(value.data) ? 1 : 0;
    return Write(&b, 1);
  }
  if (type == GgufValueType::kString) return WriteString(std::get<std::string>(value.data));

  const GgufArray& array = std::get<GgufArray>(value.data);
  const auto element_type = static_cast<uint32_t>(array.element_type);
  const uint64_t count = array.size();
  if (absl::Status s = Write(&element_type, sizeof(element_type)); !s.ok()) return s;
  if (absl::Status s = Write(&count, sizeof(count)); !s.ok()) return s;
  absl::Status s;
  std::visit(
      [&](const auto& elements) {
        using Element = typename std::decay_t<decltype(elements)>::value_type;
        for (const auto& e : elements) {
          if constexpr (std::is_same_v<Element, uint64_t>) {
            s = WriteUnsigned(array.element_type, e, write);
          } else if constexpr (std::is_same_v<Element, int64_t>) {
            s = WriteSigned(array.element_type, e, write);
          } else if constexpr (std::is_same_v<Element, double>) {
            s = WriteFloat(array.element_type, e, write);
          } else if constexpr (std::is_same_v<Element, bool>) {
            const uint8_t b = e ? 1 : 0;
            s = Write(&b, 1);
          } else {
            s = WriteString(e);
          }
          if (!s.ok()) return;
        }
      },
      array.elements);
  return s;
}

absl::Status GgufWriter::Open(const std::string& path, uint32_t version) {
  if (opened_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("GgufWriter: Open(%s) called twice (already writing %s)", path, path_));
  }
  if (version < gguf_internal::kMinVersion || version > gguf_internal::kMaxVersion) {
    return Invalid(absl::StrFormat("GgufWriter: cannot write GGUF version %d; 2 and 3 are "
                                   "supported",
                                   version));
  }
  uint64_t offset = 0;
  for (PendingTensor& t : tensors_) {
    t.offset = offset;
    const uint64_t padded = gguf_internal::AlignUp(t.size_bytes, alignment_);
    if (padded < t.size_bytes || offset + padded < offset) {
      return Invalid(absl::StrFormat("GgufWriter: the data blob overflows at tensor '%s'", t.name));
    }
    offset += padded;
  }

  path_ = path;
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("%s: cannot create GGUF file", path));
  }
  opened_ = true;
  std::setvbuf(file_, nullptr, _IOFBF, kFileBufferBytes);

  const uint64_t tensor_count = tensors_.size();
  const uint64_t kv_count = kvs_.size();
  if (absl::Status s = Write(gguf_internal::kMagic, sizeof(gguf_internal::kMagic)); !s.ok()) {
    return s;
  }
  if (absl::Status s = Write(&version, sizeof(version)); !s.ok()) return s;
  if (absl::Status s = Write(&tensor_count, sizeof(tensor_count)); !s.ok()) return s;
  if (absl::Status s = Write(&kv_count, sizeof(kv_count)); !s.ok()) return s;
  for (const GgufKeyValue& kv : kvs_) {
    if (absl::Status s = WriteString(kv.key); !s.ok()) return s;
    const auto type = static_cast<uint32_t>(kv.value.type);
    if (absl::Status s = Write(&type, sizeof(type)); !s.ok()) return s;
    if (absl::Status s = WriteValue(kv.value); !s.ok()) return s;
  }
  for (const PendingTensor& t : tensors_) {
    if (absl::Status s = WriteString(t.name); !s.ok()) return s;
    const auto n_dims = static_cast<uint32_t>(t.ne.size());
    if (absl::Status s = Write(&n_dims, sizeof(n_dims)); !s.ok()) return s;
    for (int64_t d : t.ne) {
      const auto dim = static_cast<uint64_t>(d);
      if (absl::Status s = Write(&dim, sizeof(dim)); !s.ok()) return s;
    }
    const auto type = static_cast<uint32_t>(t.type);
    if (absl::Status s = Write(&type, sizeof(type)); !s.ok()) return s;
    if (absl::Status s = Write(&t.offset, sizeof(t.offset)); !s.ok()) return s;
  }
  // llama.cpp pads after the tensor infos even when there are no tensors.
  if (absl::Status s = WritePadding(alignment_); !s.ok()) return s;
  data_start_ = bytes_written_;
  return AdvancePastFullTensors();
}

absl::Status GgufWriter::CheckDataPhase() const {
  if (!opened_) {
    return absl::FailedPreconditionError("GgufWriter: tensor data appended before Open()");
  }
  if (finished_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("GgufWriter: %s: tensor data appended after Finish()", path_));
  }
  return error_;
}

absl::Status GgufWriter::AdvancePastFullTensors() {
  while (current_tensor_ < tensors_.size() &&
         current_tensor_filled_ == tensors_[current_tensor_].size_bytes) {
    if (absl::Status s = WritePadding(alignment_); !s.ok()) return s;
    ++current_tensor_;
    current_tensor_filled_ = 0;
    // The layout computed in Open() and the bytes written must agree.
    MOETIER_CHECK(current_tensor_ == tensors_.size() ||
                       bytes_written_ == data_start_ + tensors_[current_tensor_].offset);
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::AppendTensorData(std::span<const uint8_t> bytes) {
  if (absl::Status s = CheckDataPhase(); !s.ok()) return s;
  const uint64_t left = data_bytes_total_ - data_bytes_done_;
  if (bytes.size() > left) {
    return Fail(Invalid(absl::StrFormat(
        "GgufWriter: %s: %d bytes of tensor data appended but only %d bytes of the %d declared "
        "tensors remain",
        path_, bytes.size(), left, tensors_.size())));
  }
  while (!bytes.empty()) {
    MOETIER_CHECK(current_tensor_ < tensors_.size());
    const PendingTensor& t = tensors_[current_tensor_];
    const size_t n = static_cast<size_t>(
        std::min<uint64_t>(bytes.size(), t.size_bytes - current_tensor_filled_));
    if (absl::Status s = Write(bytes.data(), n); !s.ok()) return s;
    current_tensor_filled_ += n;
    data_bytes_done_ += n;
    bytes = bytes.subspan(n);
    if (absl::Status s = AdvancePastFullTensors(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::AppendTensorData(std::string_view name, std::span<const uint8_t> bytes) {
  if (absl::Status s = CheckDataPhase(); !s.ok()) return s;
  if (current_tensor_ < tensors_.size() && tensors_[current_tensor_].name == name) {
    const PendingTensor& t = tensors_[current_tensor_];
    const uint64_t left = t.size_bytes - current_tensor_filled_;
    if (bytes.size() > left) {
      return Fail(Invalid(absl::StrFormat(
          "GgufWriter: %s: %d bytes appended to tensor '%s', which has only %d of its %d bytes "
          "left",
          path_, bytes.size(), name, left, t.size_bytes)));
    }
    return AppendTensorData(bytes);
  }
  // Empty tensors are complete as soon as the tensor before them is.
  for (size_t i = 0; i < current_tensor_; ++i) {
    if (tensors_[i].name == name && tensors_[i].size_bytes == 0 && bytes.empty()) {
      return absl::OkStatus();
    }
  }
  const std::string expected = current_tensor_ < tensors_.size()
                                   ? absl::StrFormat("'%s' (tensor %d of %d)",
                                                     tensors_[current_tensor_].name,
                                                     current_tensor_ + 1, tensors_.size())
                                   : std::string("none (every tensor is complete)");
  return Fail(Invalid(absl::StrFormat(
      "GgufWriter: %s: data for tensor '%s' is out of order; the tensor being written is %s",
      path_, name, expected)));
}

absl::Status GgufWriter::Finish() {
  if (!opened_) return absl::FailedPreconditionError("GgufWriter: Finish() called before Open()");
  if (finished_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("GgufWriter: %s: Finish() called twice", path_));
  }
  if (!error_.ok()) return error_;
  if (current_tensor_ < tensors_.size()) {
    const PendingTensor& t = tensors_[current_tensor_];
    return Fail(Invalid(absl::StrFormat(
        "GgufWriter: %s: short tensor data: tensor '%s' (%d of %d) got %d of its %d bytes; %d "
        "bytes of tensor data are missing in all",
        path_, t.name, current_tensor_ + 1, tensors_.size(), current_tensor_filled_,
        t.size_bytes, data_bytes_total_ - data_bytes_done_)));
  }
  std::FILE* file = file_;
  file_ = nullptr;
  const bool flushed = std::fflush(file) == 0;
  const int flush_err = errno;
  const bool closed = std::fclose(file) == 0;
  const int close_err = errno;
  if (!flushed || !closed) {
    const int err = !flushed ? flush_err : close_err;
    return Fail(absl::ErrnoToStatus(
        err, absl::StrFormat("%s: flushing the file (%d bytes) failed%s", path_, bytes_written_,
                             err == ENOSPC ? " (disk full)" : "")));
  }
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace moetier

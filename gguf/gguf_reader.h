// GGUF reader (SPEC.md §1): versions 2 and 3, split models, every metadata
// type, read-only mmap of the tensor data. Hostile input is rejected with a
// Status that names the file, the byte offset and the problem; the reader
// never crashes, hangs or allocates more than the file size justifies.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;
inline constexpr size_t kGgufMaxTensorNameBytes = 63;  // llama.cpp: < GGML_MAX_NAME (64)

struct GgufTensorInfo {
  std::string name;
  TensorType type = TensorType::kF32;
  uint32_t n_dims = 0;
  std::array<int64_t, kGgufMaxDims> ne = {1, 1, 1, 1};  // ne[0] is contiguous
  uint64_t offset_in_data = 0;  // relative to the shard's data blob, as stored
  uint64_t file_offset = 0;     // absolute byte offset in its shard file
  uint64_t size_bytes = 0;      // exact, without the alignment padding
  uint32_t shard = 0;           // index into GgufModel::shards()

  int64_t element_count() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  uint64_t row_bytes() const;  // bytes of one ne[0] row
};

// Typed access to metadata with lenient integer widths: any integer type
// whose value fits is accepted by GetUint/GetInt, any float type by GetFloat.
// Errors name the key and what was found.
class GgufMetadata {
 public:
  void Add(GgufKeyValue kv);  // precondition: key not yet present
  bool Has(std::string_view key) const;
  const GgufValue* Find(std::string_view key) const;
  const std::vector<GgufKeyValue>& entries() const { return entries_; }

  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<const GgufArray*> GetArray(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;
  // A scalar, or an array with one value per layer (head_count and friends).
  absl::StatusOr<std::vector<uint64_t>> GetUintOrArray(std::string_view key, size_t n_layer) const;

  uint64_t GetUintOr(std::string_view key, uint64_t fallback) const;
  double GetFloatOr(std::string_view key, double fallback) const;
  std::string GetStringOr(std::string_view key, std::string_view fallback) const;

 private:
  std::vector<GgufKeyValue> entries_;
  absl::flat_hash_map<std::string, size_t> index_;
};

// One parsed .gguf file. The tensor data stays in a read-only mapping.
class GgufFile {
 public:
  // Maps and validates `path`.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Validates an in-memory image (tests, fuzzing); `bytes` must outlive the
  // result. `name` is used in error messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes,
                                                          std::string name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data blob
  uint64_t file_size() const { return bytes_.size(); }
  const GgufMetadata& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  std::span<const uint8_t> bytes() const { return bytes_; }

 private:
  GgufFile() = default;
  std::string path_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  GgufMetadata metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::span<const uint8_t> bytes_;
  void* mapping_ = nullptr;  // munmap'ed on destruction when non-null
  size_t mapping_size_ = 0;
};

// A whole model: one file, or every shard of a `-00001-of-0000N.gguf` set,
// checked for consistency. Metadata comes from the first shard; tensors from
// all shards, by name.
class GgufModel {
 public:
  // `path` is a single file or the first shard of a split set.
  static absl::StatusOr<std::unique_ptr<GgufModel>> Open(const std::string& path);
  static absl::StatusOr<std::unique_ptr<GgufModel>> FromFiles(
      std::vector<std::unique_ptr<GgufFile>> shards);

  const GgufMetadata& metadata() const { return shards_.front()->metadata(); }
  const std::vector<std::unique_ptr<GgufFile>>& shards() const { return shards_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  absl::StatusOr<const GgufTensorInfo*> GetTensor(std::string_view name) const;
  // The tensor's bytes inside the read-only mapping of its shard.
  std::span<const uint8_t> TensorData(const GgufTensorInfo& tensor) const;
  const std::string& ShardPath(const GgufTensorInfo& tensor) const;
  // Reads one byte per 4 KiB page of every tensor, so that later reads (a
  // benchmark's timed runs) find the mapping's pages present instead of
  // faulting them in; returns their sum, for the caller to use.
  uint64_t TouchTensorPages() const;

 private:
  std::vector<std::unique_ptr<GgufFile>> shards_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

// "<prefix>-%05d-of-%05d.gguf" for shard `index` (0-based) of `count`.
std::string GgufSplitPath(std::string_view prefix, uint32_t index, uint32_t count);

}  // namespace moetier

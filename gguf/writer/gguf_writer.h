// GGUF writer laid out exactly as llama.cpp's writers lay files out: header,
// metadata, tensor infos, zero padding to the alignment, then each tensor's
// bytes in declaration order, each zero-padded to the alignment. Tensor data
// is streamed, so files far larger than memory can be written.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {

class GgufWriter {
 public:
  GgufWriter() = default;
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Declaration phase. `general.alignment` (UINT32) may be set as a key; the
  // default alignment is 32. ne has n_dims = ne.size() entries, 1..4.
  absl::Status AddKeyValue(std::string key, GgufValue value);
  absl::Status AddTensor(std::string name, TensorType type, std::vector<int64_t> ne);

  // Writes header, metadata and tensor infos to `path` (truncating it).
  absl::Status Open(const std::string& path, uint32_t version = 3);

  // Data phase: append bytes of the tensors in declaration order, in as many
  // calls as convenient; the writer pads each tensor when it is complete.
  absl::Status AppendTensorData(std::span<const uint8_t> bytes);
  // The same, checked: every byte must belong to tensor `name`, which must be
  // the tensor now being filled (out-of-order or oversized data is an error).
  absl::Status AppendTensorData(std::string_view name, std::span<const uint8_t> bytes);

  // Checks every tensor got exactly its size, flushes and closes.
  // After any failure (a write error such as a full disk, or bad data) every
  // later call returns that same error; the partial file is left for the
  // caller to remove.
  absl::Status Finish();

  uint64_t bytes_written() const { return bytes_written_; }
  size_t tensor_count() const { return tensors_.size(); }
  uint64_t TensorSizeBytes(size_t index) const { return tensors_[index].size_bytes; }

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> ne;
    uint64_t size_bytes;
    uint64_t offset;
  };
  absl::Status Write(const void* data, size_t size);
  absl::Status WritePadding(uint64_t alignment);
  absl::Status WriteString(std::string_view s);
  absl::Status WriteValue(const GgufValue& value);
  absl::Status CheckDataPhase() const;
  absl::Status AdvancePastFullTensors();
  absl::Status Fail(absl::Status status);

  std::vector<GgufKeyValue> kvs_;
  std::vector<PendingTensor> tensors_;
  uint32_t alignment_ = 32;
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t bytes_written_ = 0;
  size_t current_tensor_ = 0;
  uint64_t current_tensor_filled_ = 0;
  uint64_t data_start_ = 0;         // file offset of the data blob
  uint64_t data_bytes_total_ = 0;   // sum of the tensor sizes, without padding
  uint64_t data_bytes_done_ = 0;
  absl::Status error_;              // sticky: the first failure ends the file
  bool opened_ = false;
  bool finished_ = false;
};

}  // namespace moetier

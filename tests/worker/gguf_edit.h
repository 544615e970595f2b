// Test helper: read a GGUF file into memory, change metadata or tensors, and
// write it back out, to make variants of the test-vector models.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier::testing {

struct EditableTensor {
  std::string name;
  TensorType type = TensorType::kF32;
  std::vector<int64_t> ne;
  std::vector<uint8_t> data;
};

struct EditableGguf {
  std::vector<GgufKeyValue> kvs;
  std::vector<EditableTensor> tensors;

  static absl::StatusOr<EditableGguf> Read(const std::string& path);
  absl::Status Write(const std::string& path) const;

  // Replaces the value of `key`, or appends it.
  void Set(std::string_view key, GgufValue value);
  void Remove(std::string_view key);
  // nullptr when absent.
  EditableTensor* Find(std::string_view name);
  void RemoveTensor(std::string_view name);
};

// An F32 tensor of n zeros, {n}: a norm, bias or scale for a file to carry.
EditableTensor ZeroF32Vector(std::string name, int64_t n);

// A fresh path under the test's temporary directory.
std::string TempPath(std::string_view file_name);

std::string TestDataPath(std::string_view relative);

}  // namespace moetier::testing

#include "gguf_edit.h"

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gguf/gguf_reader.h"
#include "gguf/writer/gguf_writer.h"
#include "gtest/gtest.h"

namespace moetier::testing {

EditableTensor ZeroF32Vector(std::string name, int64_t n) {
  return {.name = std::move(name),
          .type = TensorType::kF32,
          .ne = {n},
          .data = std::vector<uint8_t>(static_cast<size_t>(n) * sizeof(float), 0)};
}

absl::StatusOr<EditableGguf> EditableGguf::Read(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::Open(path);
  if (!model.ok()) return model.status();
  EditableGguf out;
  out.kvs = (*model)->metadata().entries();
  for (const GgufTensorInfo& info : (*model)->tensors()) {
    EditableTensor t;
    t.name = info.name;
    t.type = info.type;
    t.ne.assign(info.ne.begin(), info.ne.begin() + info.n_dims);
    const std::span<const uint8_t> bytes = (*model)->TensorData(info);
    t.data.assign(bytes.begin(), bytes.end());
    out.tensors.push_back(std::move(t));
  }
  return out;
}

absl::Status EditableGguf::Write(const std::string& path) const {
  GgufWriter writer;
  for (const GgufKeyValue& kv : kvs) {
    if (absl::Status s = writer.AddKeyValue(kv.key, kv.value); !s.ok()) return s;
  }
  for (const EditableTensor& t : tensors) {
    if (absl::Status s = writer.AddTensor(t.name, t.type, t.ne); !s.ok()) return s;
  }
  if (absl::Status s = writer.Open(path); !s.ok()) return s;
  for (const EditableTensor& t : tensors) {
    if (absl::Status s = writer.AppendTensorData(t.data); !s.ok()) return s;
  }
  return writer.Finish();
}

void EditableGguf::Set(std::string_view key, GgufValue value) {
  for (GgufKeyValue& kv : kvs) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kvs.push_back({std::string(key), std::move(value)});
}

void EditableGguf::Remove(std::string_view key) {
  std::erase_if(kvs, [&](const GgufKeyValue& kv) { return kv.key == key; });
}

EditableTensor* EditableGguf::Find(std::string_view name) {
  for (EditableTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void EditableGguf::RemoveTensor(std::string_view name) {
  std::erase_if(tensors, [&](const EditableTensor& t) { return t.name == name; });
}

std::string TempPath(std::string_view file_name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test_name = info != nullptr ? info->name() : "global";
  std::replace(test_name.begin(), test_name.end(), '/', '_');
  return absl::StrCat(::testing::TempDir(), "moetier_", getpid(), "_", test_name, "_",
                      std::string(file_name));
}

std::string TestDataPath(std::string_view relative) {
  return absl::StrCat(MOETIER_TEST_DATA_DIR, "/", std::string(relative));
}

}  // namespace moetier::testing

// Test fixture for the loader: read a test vector's GGUF into memory, edit
// its metadata or tensors, write it under the test's temporary directory
// and load the model from it.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gguf/gguf_reader.h"
#include "gguf_edit.h"
#include "gtest/gtest.h"
#include "model/architectures.h"

namespace moetier::testing {

class EditedModelTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& path : written_) std::remove(path.c_str());
  }

  // tests/data/vectors/<name>.gguf, to edit (empty, with a failure, if it
  // cannot be read).
  static EditableGguf Vector(const std::string& name) {
    absl::StatusOr<EditableGguf> g = EditableGguf::Read(TestDataPath("vectors/" + name + ".gguf"));
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *std::move(g) : EditableGguf{};
  }

  // Writes `g` and loads it; the GgufModel stays open for the test.
  absl::StatusOr<Model> Load(const EditableGguf& g) {
    const std::string path = TempPath(std::to_string(written_.size()) + ".gguf");
    written_.push_back(path);
    if (absl::Status s = g.Write(path); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
    if (!gguf.ok()) return gguf.status();
    gguf_ = *std::move(gguf);
    return LoadModel(*gguf_);
  }

  std::unique_ptr<GgufModel> gguf_;

 private:
  std::vector<std::string> written_;
};

}  // namespace moetier::testing

// Test helper: a file of tests/data/vectors loaded as every engine test
// loads it (the GGUF mapping, the model, the input ids).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gtest/gtest.h"
#include "model/architectures.h"
#include "vectors.h"

namespace moetier::testing {

struct VectorsModel {
  std::unique_ptr<GgufModel> gguf;  // the mapping the model's weights point into
  Model model;
  std::vector<int32_t> ids;  // M.ids
};

// tests/data/vectors/<name>.gguf and <name>.ids; a test failure and null
// when either does not load.
inline std::unique_ptr<VectorsModel> LoadVectorsModel(const std::string& name) {
  const std::string base = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/" + name;
  auto out = std::make_unique<VectorsModel>();
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(base + ".gguf");
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  if (!gguf.ok()) return nullptr;
  out->gguf = *std::move(gguf);
  absl::StatusOr<Model> model = LoadModel(*out->gguf);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  out->model = *std::move(model);
  out->ids = ReadIds(base + ".ids");
  EXPECT_FALSE(out->ids.empty());
  return out;
}

}  // namespace moetier::testing

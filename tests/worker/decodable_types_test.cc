// A file in a quantization moetier cannot decode is refused once, with every
// offending type, before the architecture reads any tensor.
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gguf/gguf_reader.h"
#include "gguf/tensor/tensor_type.h"
#include "gguf_edit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/architectures.h"
#include "model/decodable_types.h"

namespace moetier {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::EditableGguf;
using testing::EditableTensor;
using testing::TempPath;
using testing::TestDataPath;

class DecodableTypesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<EditableGguf> gguf =
        EditableGguf::Read(TestDataPath("vectors/small-q4_k_m.gguf"));
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    small_ = *std::move(gguf);
  }
  void TearDown() override { std::remove(path_.c_str()); }

  absl::StatusOr<Model> Load() {
    if (absl::Status s = small_.Write(path_); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path_);
    if (!gguf.ok()) return gguf.status();
    gguf_ = *std::move(gguf);
    return LoadModel(*gguf_);
  }

  // Gives the next `count` tensors whose rows are whole K-quant blocks the
  // type `type`, with raw bytes of the right size; returns their names.
  std::vector<std::string> Retype(TensorType type, int count) {
    std::vector<std::string> names;
    for (EditableTensor& t : small_.tensors) {
      if (static_cast<int>(names.size()) == count) break;
      if (retyped_.count(t.name) != 0 || t.ne[0] % kQK_K != 0) continue;
      int64_t rows = 1;
      for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
      t.type = type;
      t.data.assign(static_cast<size_t>(TensorRowBytes(type, t.ne[0]) * rows), 0x11);
      retyped_.insert(t.name);
      names.push_back(t.name);
    }
    EXPECT_EQ(static_cast<int>(names.size()), count) << "too few K-quant tensors in the file";
    return names;
  }

  EditableGguf small_;
  std::string path_ = TempPath("retyped.gguf");
  std::unique_ptr<GgufModel> gguf_;
  std::set<std::string> retyped_;
};

TEST_F(DecodableTypesTest, EveryUndecodableTypeIsNamedWithItsCountAndAnExample) {
  const std::vector<std::string> tq1 = Retype(TensorType::kTQ1_0, 3);
  const std::vector<std::string> q8k = Retype(TensorType::kQ8_K, 2);
  const std::vector<std::string> tq2 = Retype(TensorType::kTQ2_0, 1);
  absl::StatusOr<Model> model = Load();
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(
      model.status().message(),
      AllOf(HasSubstr(path_ + ": "), HasSubstr("TQ1_0 (3 tensors, e.g. '" + tq1.front() + "')"),
            HasSubstr("Q8_K (2 tensors, e.g. '" + q8k.front() + "')"),
            HasSubstr("TQ2_0 (1 tensor, e.g. '" + tq2.front() + "')"),
            HasSubstr("supported types: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, "
                      "Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, "
                      "IQ2_S, IQ4_XS, IQ1_M, BF16, MXFP4"),
            HasSubstr("llama-quantize"), HasSubstr("Q4_K_M")));
  // The tensors left as they were are not blamed.
  EXPECT_THAT(model.status().message(), AllOf(Not(HasSubstr("Q4_K (")), Not(HasSubstr("Q6_K ("))));
}

TEST_F(DecodableTypesTest, AnUnknownArchitectureIsReportedBeforeTheTypes) {
  Retype(TensorType::kTQ1_0, 1);
  small_.Set("general.architecture", GgufValue::String("qwen9moe"));
  absl::StatusOr<Model> model = Load();
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("'qwen9moe'"), HasSubstr("qwen3moe ("), HasSubstr("qwen35moe ("),
                    HasSubstr("llama ("), HasSubstr("olmoe (")));
}

// llama.cpp multiplies a ".scale" tensor into its weight's products (NVFP4
// files carry them); ignoring one would give wrong logits without a word.
TEST_F(DecodableTypesTest, SeparateWeightScalesAreRefused) {
  small_.tensors.push_back(testing::ZeroF32Vector("blk.0.ffn_up_exps.scale", 16));
  absl::StatusOr<Model> model = Load();
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr(path_ + ": 1 tensor such as 'blk.0.ffn_up_exps.scale'"),
                    HasSubstr("refuses the file")));
}

TEST_F(DecodableTypesTest, DecodableFilesPassTheCheck) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf =
      GgufModel::Open(TestDataPath("vectors/small-q4_k_m.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  EXPECT_TRUE(CheckDecodableTypes(**gguf).ok());
  EXPECT_TRUE(CheckModelFile(TestDataPath("vectors/small-q4_k_m.gguf")).ok());
}

TEST_F(DecodableTypesTest, CheckModelFileNamesAFileItCannotOpen) {
  const absl::Status status = CheckModelFile("/nonexistent/model.gguf");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("/nonexistent/model.gguf"));
}

}  // namespace
}  // namespace moetier

// --rope-scaling, --rope-scale and --yarn-orig-ctx: a file without
// rope.scaling keys, run with the flags, computes what the file with the keys
// computes (llama.cpp's logits), and the stretch raises the context limit.
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "gguf/gguf_reader.h"
#include "gguf_edit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "setup/worker_engine.h"
#include "support/subprocess.h"
#include "vectors.h"

namespace moetier {
namespace {

using testing::EditableGguf;
using ::testing::HasSubstr;
using testing::ReadFloats;
using testing::ReadIds;
using testing::TempPath;
using testing::TestDataPath;
using testing::WorstRowError;

const char kWorker[] = MOETIER_BINARY_DIR "/worker/moetier-worker";

class RopeScalingFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // yarn-tiny-f32 without its rope.scaling keys.
    absl::StatusOr<EditableGguf> g = EditableGguf::Read(TestDataPath("vectors/yarn-tiny-f32.gguf"));
    ASSERT_TRUE(g.ok()) << g.status();
    for (const char* key : {"type", "factor", "original_context_length"}) {
      g->Remove(std::string("qwen3moe.rope.scaling.") + key);
    }
    ASSERT_TRUE(g->Write(unscaled_).ok());
  }
  void TearDown() override {
    std::remove(unscaled_.c_str());
    std::remove(out_.c_str());
  }

  std::vector<float> Logits(std::vector<std::string> flags) {
    const std::vector<int32_t> ids = ReadIds(TestDataPath("vectors/yarn-tiny-f32.ids"));
    std::vector<std::string> args = {"--standalone",          "--model",      unscaled_, "--tokens",
                                     absl::StrJoin(ids, ","), "--logits-out", out_};
    args.insert(args.end(), flags.begin(), flags.end());
    const testing::ProgramResult r = testing::RunProgram(kWorker, args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ReadFloats(out_);
  }

  std::string unscaled_ = TempPath("unscaled-yarn.gguf");
  std::string out_ = TempPath("rope-flags.f32");
};

TEST_F(RopeScalingFlagsTest, FlagsGiveTheLogitsOfTheFileWithTheKeys) {
  const std::vector<float> llamacpp =
      ReadFloats(TestDataPath("vectors/yarn-tiny-f32.llamacpp.f32"));
  const std::vector<float> plain = Logits({});
  ASSERT_EQ(plain.size(), llamacpp.size());
  EXPECT_GT(WorstRowError(plain, llamacpp, 512), 1e-2);  // the keys matter
  const std::vector<float> flagged =
      Logits({"--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "16"});
  ASSERT_EQ(flagged.size(), llamacpp.size());
  EXPECT_LT(WorstRowError(flagged, llamacpp, 512), 1e-4);
}

TEST_F(RopeScalingFlagsTest, AStretchRaisesTheContextLimitToOriginalTimesFactor) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(unscaled_);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  WorkerOptions options;
  absl::StatusOr<Model> plain = LoadWorkerModel(**gguf, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const int trained = plain->hparams.n_ctx_train;
  EXPECT_FALSE(plain->hparams.rope_scaling.scaled());

  options.rope_scaling.type = "linear";
  options.rope_scaling.factor = 2.0;
  absl::StatusOr<Model> linear = LoadWorkerModel(**gguf, options);
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ(linear->hparams.n_ctx_train, 2 * trained);
  EXPECT_FLOAT_EQ(linear->hparams.rope_scaling.freq_scale, 0.5f);
  options.ctx = 2 * trained;
  EXPECT_TRUE(ResolveContextLength(options, linear->hparams.n_ctx_train, 0).ok());
  options.ctx = 2 * trained + 1;
  EXPECT_FALSE(ResolveContextLength(options, linear->hparams.n_ctx_train, 0).ok());

  // YaRN stretches from its own original context; one shorter than the
  // file's context leaves the limit where the file put it.
  options.rope_scaling.type = "yarn";
  options.rope_scaling.factor = 4.0;
  options.rope_scaling.original_context = trained / 8;
  absl::StatusOr<Model> yarn = LoadWorkerModel(**gguf, options);
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  EXPECT_EQ(yarn->hparams.n_ctx_train, trained);
  EXPECT_EQ(yarn->hparams.rope_scaling.ext_factor, 1.0f);

  // Type none turns a file's scaling off and stretches nothing.
  options.rope_scaling.type = "none";
  absl::StatusOr<Model> none = LoadWorkerModel(**gguf, options);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->hparams.n_ctx_train, trained);
  EXPECT_FALSE(none->hparams.rope_scaling.scaled());
}

TEST(RopeScalingFlagErrorsTest, BadValuesNameTheFlag) {
  const std::string model = TestDataPath("vectors/tiny-f32.gguf");
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--rope-scaling", "dynamic"}, {"--rope-scale", "0"}, {"--yarn-orig-ctx", "-5"}}) {
    const testing::ProgramResult r = testing::RunProgram(
        kWorker, {"--standalone", "--model", model, "--tokenize", "x", flag, value});
    EXPECT_EQ(r.exit_code, 2) << flag;
    EXPECT_THAT(r.err, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace moetier

// moetier-inspect, run as a user would run it.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "support/subprocess.h"

namespace {

using moetier::testing::CommandResult;

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

CommandResult RunInspect(const std::string& args) {
  return moetier::testing::RunBuiltProgram("tools/inspect/moetier-inspect", args);
}

const std::string kTinyF32 = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/tiny-f32.gguf";

TEST(InspectTest, SummarisesHyperparametersAndTensors) {
  const CommandResult r = RunInspect(kTinyF32);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("architecture:  qwen3moe"));
  // tests/data/vectors/README.md: 4 layers, hidden 64, 8 experts top-2, vocab 512.
  EXPECT_THAT(r.output, HasSubstr("block_count                          4\n"));
  EXPECT_THAT(r.output, HasSubstr("embedding_length                     64\n"));
  EXPECT_THAT(r.output, HasSubstr("expert_count                         8\n"));
  EXPECT_THAT(r.output, HasSubstr("expert_used_count                    2\n"));
  EXPECT_THAT(r.output, HasSubstr("512 tokens"));
  EXPECT_THAT(r.output, HasSubstr("F32 "));
  EXPECT_THAT(r.output, Not(HasSubstr("rope.scaling")));
}

TEST(InspectTest, ShowsRopeScaling) {
  const CommandResult r =
      RunInspect(std::string(MOETIER_TEST_DATA_DIR) + "/vectors/yarn-tiny-f32.gguf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("rope.scaling.type                    \"yarn\"\n"));
  EXPECT_THAT(r.output, HasSubstr("rope.scaling.factor                  4\n"));
  EXPECT_THAT(r.output, HasSubstr("rope.scaling.original_context_length 16\n"));
}

// The keys that set qwen2moe's shared expert and qwen3vlmoe's rope apart.
TEST(InspectTest, ShowsSharedExpertWidthAndRopeSections) {
  CommandResult r =
      RunInspect(std::string(MOETIER_TEST_DATA_DIR) + "/vectors/qwen2moe-tiny-f32.gguf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("expert_shared_feed_forward_length    256\n"));
  r = RunInspect(std::string(MOETIER_TEST_DATA_DIR) + "/vectors/qwen3vlmoe-tiny-f32.gguf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("rope.dimension_sections              [1, 6, 6, 0]\n"));
  EXPECT_THAT(r.output, EndsWith("verdict:       supported by this build\n"));
}

// glm4moe's router and layer plan: the dense lead, the shared experts, the
// gating, the routing scale and the MTP block.
TEST(InspectTest, ShowsTheDenseLeadAndTheRouterKeys) {
  const CommandResult r =
      RunInspect(std::string(MOETIER_TEST_DATA_DIR) + "/vectors/glm4moe-tiny-f32.gguf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("leading_dense_block_count            1\n"));
  EXPECT_THAT(r.output, HasSubstr("expert_shared_count                  1\n"));
  EXPECT_THAT(r.output, HasSubstr("expert_gating_func                   2\n"));
  EXPECT_THAT(r.output, HasSubstr("expert_weights_scale                 1.8\n"));
  EXPECT_THAT(r.output, HasSubstr("nextn_predict_layers                 1\n"));
  EXPECT_THAT(r.output, EndsWith("verdict:       supported by this build\n"));
}

TEST(InspectTest, EndsWithTheVerdictOfTheWorkersCheck) {
  CommandResult r = RunInspect(kTinyF32);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, EndsWith("verdict:       supported by this build\n"));

  // The same file with its architecture (and key prefix) renamed.
  std::ifstream in(kTinyF32, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t at = bytes.find("qwen3moe"); at != std::string::npos; at = bytes.find("qwen3moe", at)) {
    bytes[at + 4] = '9';
  }
  const std::string renamed = ::testing::TempDir() + "inspect-qwen9moe.gguf";
  std::ofstream(renamed, std::ios::binary) << bytes;
  r = RunInspect(renamed);
  std::remove(renamed.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("architecture:  qwen9moe"));
  EXPECT_THAT(r.output, HasSubstr("verdict:       not supported: " + renamed +
                                  ": unsupported model architecture 'qwen9moe'"));
  EXPECT_THAT(r.output, HasSubstr("qwen3moe ("));
}

TEST(InspectTest, ListsTensorsWithOffsetsAndSizes) {
  const CommandResult r = RunInspect("--tensors " + kTinyF32);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 64 x 32 x 8 F32 values = 65536 bytes.
  EXPECT_THAT(r.output, HasSubstr("blk.3.ffn_down_exps.weight F32 32x64x8 " + kTinyF32));
  EXPECT_THAT(r.output, HasSubstr(" 65536\n"));
}

TEST(InspectTest, ListsMetadataWithTypes) {
  const CommandResult r = RunInspect("--all-keys " + kTinyF32);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("general.architecture"));
  EXPECT_THAT(r.output, HasSubstr("[STRING x 512]"));
}

TEST(InspectTest, RejectsBadInputWithOneLine) {
  CommandResult r = RunInspect("--no-such-flag " + kTinyF32);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown flag '--no-such-flag'"));
  r = RunInspect("/nonexistent/model.gguf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/model.gguf"));
  r = RunInspect("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("no FILE given"));
}

}  // namespace

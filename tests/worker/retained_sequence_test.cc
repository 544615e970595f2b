// PlanPrefixReuse: which part of a new prompt a kept sequence supplies.
// Continue when the kept positions are a prefix of the prompt (leaving at
// least its last token to compute), rewind to the checkpoint when only the
// checkpoint's positions are, and otherwise start over.
#include "generation/retained_sequence.h"

#include <vector>

#include "gtest/gtest.h"

namespace moetier {
namespace {

using Kind = PrefixReuse::Kind;

TEST(PlanPrefixReuseTest, ANextTurnContinuesTheKeptSequence) {
  // Prompt 1 2 3, generated 7 8 9 (9 sampled last, never fed back: the
  // sequence holds 5 positions).
  const std::vector<int32_t> kept = {1, 2, 3, 7, 8, 9};
  const std::vector<int32_t> next = {1, 2, 3, 7, 8, 9, 4, 5};
  const PrefixReuse plan = PlanPrefixReuse(kept, 5, 3, next);
  EXPECT_EQ(plan.kind, Kind::kContinue);
  EXPECT_EQ(plan.reused_tokens, 5);
}

TEST(PlanPrefixReuseTest, AHistoryThatDiffersInTheReplyRewindsToTheCheckpoint) {
  const std::vector<int32_t> kept = {1, 2, 3, 7, 8, 9};
  const std::vector<int32_t> next = {1, 2, 3, 7, 6, 4};
  const PrefixReuse plan = PlanPrefixReuse(kept, 5, 3, next);
  EXPECT_EQ(plan.kind, Kind::kRestore);
  EXPECT_EQ(plan.reused_tokens, 3);
}

TEST(PlanPrefixReuseTest, TheSamePromptRestoresACheckpointBeforeItsLastToken) {
  const std::vector<int32_t> kept = {1, 2, 3, 7, 8};
  const std::vector<int32_t> same = {1, 2, 3};
  const PrefixReuse before_last = PlanPrefixReuse(kept, 4, 2, same);
  EXPECT_EQ(before_last.kind, Kind::kRestore);
  EXPECT_EQ(before_last.reused_tokens, 2);
  // A checkpoint at the prompt's end would leave nothing to compute.
  EXPECT_EQ(PlanPrefixReuse(kept, 4, 3, same).kind, Kind::kNone);
}

TEST(PlanPrefixReuseTest, ThePromptsLastTokenIsAlwaysComputed) {
  // The new prompt is exactly what the sequence holds: continuing would
  // leave no token to produce logits from.
  const std::vector<int32_t> kept = {1, 2, 3, 7};
  const std::vector<int32_t> next = {1, 2, 3, 7};
  EXPECT_EQ(PlanPrefixReuse(kept, 4, -1, next).kind, Kind::kNone);
  EXPECT_EQ(PlanPrefixReuse(kept, 3, -1, next).kind, Kind::kContinue);
}

TEST(PlanPrefixReuseTest, AnUnrelatedOrShorterPromptStartsOver) {
  const std::vector<int32_t> kept = {1, 2, 3, 7, 8};
  EXPECT_EQ(PlanPrefixReuse(kept, 4, 2, std::vector<int32_t>{5, 2, 3, 7, 8}).kind, Kind::kNone);
  EXPECT_EQ(PlanPrefixReuse(kept, 4, 2, std::vector<int32_t>{1}).kind, Kind::kNone);
  EXPECT_EQ(PlanPrefixReuse({}, 0, -1, std::vector<int32_t>{1, 2}).kind, Kind::kNone);
  // Tokens past the kept length are not in the state, even if they match.
  EXPECT_EQ(PlanPrefixReuse(kept, 2, -1, std::vector<int32_t>{1, 2, 3, 7, 8, 9}).reused_tokens, 2);
}

}  // namespace
}  // namespace moetier

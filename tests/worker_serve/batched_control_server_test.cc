// The control server with an engine of several sequences: Generates are
// computed together (one ForwardMany per step), each still produces what
// the engine and its own sampler produce for it alone, one joins as another
// leaves, a Cancel ends only its own request, and a Score waits for the
// batch to finish, the queue staying in arrival order.
#include <map>
#include <vector>

#include "control_server_fixture.h"

namespace moetier {
namespace {

using namespace control_server_test;

class BatchedControlServerTest : public ControlServerTest {
 protected:
  int MaxSequences() const override { return 4; }

  // Replies of the requests in `ids`, read until each has its Done, with
  // the order of arrival: reply index of each request's first token and of
  // its Done.
  struct Served {
    std::map<uint64_t, Generation> by_id;
    std::map<uint64_t, size_t> first_token_at, done_at;
  };
  Served ReceiveAll(const std::vector<uint64_t>& ids) {
    Served out;
    for (size_t index = 0; out.done_at.size() < ids.size(); ++index) {
      const WorkerReply reply = Receive();
      if (std::find(ids.begin(), ids.end(), reply.id()) == ids.end()) {
        ADD_FAILURE() << "a reply to request " << reply.id();
        return out;
      }
      Generation& g = out.by_id[reply.id()];
      if (reply.kind_case() == WorkerReply::kDone) {
        g.done = reply.done();
        out.done_at[reply.id()] = index;
        continue;
      }
      EXPECT_EQ(reply.kind_case(), WorkerReply::kToken);
      if (g.tokens.empty()) out.first_token_at[reply.id()] = index;
      g.tokens.push_back(reply.token().token_id());
      g.stop_flags.push_back(reply.token().is_stop_token());
    }
    return out;
  }

  // Six requests on four sequences: prompts of 3 to 18 tokens, 5 to 15 new
  // tokens, greedy but one seeded.
  void ExpectSixRequestsGetTheirSoloTokens() {
    ReceiveReady();
    struct Ask {
      std::vector<int32_t> prompt;
      int max_new;
      SamplingParams params;
    };
    std::vector<Ask> asks;
    for (int i = 0; i < 6; ++i) {
      Ask a{Prompt(3 + 3 * i), 5 + (i * 4) % 11, {}};
      for (int32_t& t : a.prompt) t = (t + 13 * i) % 512;
      if (i == 2) a.params = {.temperature = 0.9f, .top_k = 40, .seed = 99};
      asks.push_back(a);
    }
    // The first request's first decode step waits until all six are
    // queued, so the others join it rather than follow it.
    gated_->Gate(true);
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < asks.size(); ++i) {
      ids.push_back(100 + i);
      Send(GenerateRequest(ids.back(), asks[i].prompt, asks[i].max_new, asks[i].params));
    }
    ASSERT_TRUE(gated_->WaitUntilBlocked());
    gated_->Gate(false);
    const Served served = ReceiveAll(ids);
    for (size_t i = 0; i < asks.size(); ++i) {
      SCOPED_TRACE(i);
      const Generation& g = served.by_id.at(ids[i]);
      EXPECT_EQ(g.tokens, DirectGeneration(model(), asks[i].prompt, asks[i].max_new,
                                           asks[i].params));
      EXPECT_EQ(g.done.stop_reason(), control_v1::STOP_MAX_TOKENS);
      EXPECT_EQ(g.done.prompt_tokens(), static_cast<int>(asks[i].prompt.size()));
      EXPECT_EQ(g.done.generated_tokens(), asks[i].max_new);
    }
    // Computed together: the second request's first token came before the
    // first one's Done, and engine passes carried several sequences.
    EXPECT_LT(served.first_token_at.at(ids[1]), served.done_at.at(ids[0]));
    EXPECT_GE(gated_->widest(), 3);
    EXPECT_LE(gated_->widest(), 4);
    EXPECT_EQ(server_->requests_finished(), asks.size());
  }
};

TEST_F(BatchedControlServerTest, EachOfABatchGetsTheTokensItGetsAlone) {
  ExpectSixRequestsGetTheirSoloTokens();
}

TEST_F(BatchedControlServerTest, ACancelEndsOnlyItsOwnRequest) {
  ReceiveReady();
  gated_->Gate(true);
  Send(GenerateRequest(1, Prompt(10), 30));
  Send(GenerateRequest(2, Prompt(7), 30));
  // Passes with a prompt in them are not gated; the first pass of decode
  // steps only is, with both requests past their prompts.
  ASSERT_TRUE(gated_->WaitUntilBlocked());
  Send(CancelRequest(3, 1));
  gated_->Permit(1);
  ASSERT_TRUE(gated_->WaitUntilBlocked());
  gated_->Gate(false);
  const Served served = ReceiveAll({1, 2});
  const Generation& cancelled = served.by_id.at(1);
  EXPECT_EQ(cancelled.done.stop_reason(), control_v1::STOP_CANCELLED);
  // At most: its prompt's token, the one from the step it shared with
  // request 2's prompt, and the one from the permitted step.
  EXPECT_LE(cancelled.done.generated_tokens(), 3);
  EXPECT_EQ(cancelled.done.generated_tokens(), static_cast<int>(cancelled.tokens.size()));
  const Generation& kept = served.by_id.at(2);
  EXPECT_EQ(kept.done.stop_reason(), control_v1::STOP_MAX_TOKENS);
  EXPECT_EQ(kept.tokens, DirectGeneration(model(), Prompt(7), 30, {}));
}

TEST_F(BatchedControlServerTest, AScoreWaitsForTheBatchAndKeepsTheQueuesOrder) {
  ReceiveReady();
  Send(GenerateRequest(1, Prompt(9), 12));
  Send(ScoreRequest(2, Prompt(20)));
  Send(GenerateRequest(3, Prompt(5), 4));
  // The Score's replies come only after request 1's Done, and request 3,
  // queued behind it, starts only after the Score's.
  const Generation first = ReceiveGeneration(1);
  EXPECT_EQ(first.tokens.size(), 12u);
  DoneReply score_done;
  const std::vector<float> logits = ReceiveScore(2, &score_done);
  EXPECT_EQ(score_done.stop_reason(), control_v1::STOP_COMPLETE);
  EXPECT_TRUE(serve_test::SameBits(logits, EngineLogits(Prompt(20))));
  const Generation third = ReceiveGeneration(3);
  EXPECT_EQ(third.tokens, DirectGeneration(model(), Prompt(5), 4, {}));
}

class HybridBatchedControlServerTest : public BatchedControlServerTest {
 protected:
  const char* ModelStem() const override { return "qwen35moe-tiny-f32"; }
};

TEST_F(HybridBatchedControlServerTest, EachOfABatchGetsTheTokensItGetsAlone) {
  ExpectSixRequestsGetTheirSoloTokens();
}

}  // namespace
}  // namespace moetier

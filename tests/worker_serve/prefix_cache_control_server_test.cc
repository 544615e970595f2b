// The control server with a prefix cache (generation/prefix_pool.h):
// requests that begin with the same tokens as an earlier one compute only
// the rest, also several at once in one batch, say how many prompt tokens
// they reused, and still get the tokens they get alone. An attention-only
// model reuses the shared start from the first request on; a model with
// recurrent layers keeps the state where the second request forks from the
// first, and the requests after it reuse that.
#include <map>
#include <mutex>
#include <vector>

#include "control_server_fixture.h"

namespace moetier {
namespace {

using namespace control_server_test;

constexpr int kShared = 24;

class PrefixCacheControlServerTest : public ControlServerTest {
 protected:
  int MaxSequences() const override { return 4; }
  void Prepare(ControlServerOptions& options) override {
    options.prefix_cache_bytes = 64 << 20;
    options.prefix_cache_changed = [this](const PrefixCacheReport& report) {
      std::lock_guard<std::mutex> lock(report_mutex_);
      last_report_ = report;
    };
  }
  PrefixCacheReport LastReport() {
    std::lock_guard<std::mutex> lock(report_mutex_);
    return last_report_;
  }
  virtual bool Recurrent() const { return false; }

  // The shared start, then `n` tokens of their own for request `i`.
  std::vector<int32_t> PromptOf(int i, int n) const {
    std::vector<int32_t> prompt = Prompt(kShared);
    for (int j = 0; j < n; ++j) prompt.push_back((400 + 29 * i + 7 * j) % 512);
    return prompt;
  }

  // Replies until each of `ids` has its Done.
  std::map<uint64_t, Generation> ReceiveAll(const std::vector<uint64_t>& ids) {
    std::map<uint64_t, Generation> out;
    size_t done = 0;
    while (done < ids.size()) {
      const WorkerReply reply = Receive();
      Generation& g = out[reply.id()];
      if (reply.kind_case() == WorkerReply::kDone) {
        g.done = reply.done();
        ++done;
      } else {
        EXPECT_EQ(reply.kind_case(), WorkerReply::kToken);
        g.tokens.push_back(reply.token().token_id());
      }
    }
    return out;
  }

  void ExpectSharedStartsAreReused() {
    ReceiveReady();
    const std::vector<int32_t> first = PromptOf(0, 6);
    Send(GenerateRequest(1, first, 4));
    const Generation g1 = ReceiveGeneration(1);
    EXPECT_EQ(g1.done.cached_prompt_tokens(), 0);
    EXPECT_EQ(g1.tokens, DirectGeneration(model(), first, 4, {}));

    const std::vector<int32_t> second = PromptOf(1, 5);
    Send(GenerateRequest(2, second, 4));
    const Generation g2 = ReceiveGeneration(2);
    // Recurrent layers have no state at the fork yet: the second request
    // computes it, and keeps it for the rest.
    EXPECT_EQ(g2.done.cached_prompt_tokens(), Recurrent() ? 0 : kShared);
    EXPECT_EQ(g2.tokens, DirectGeneration(model(), second, 4, {}));

    // Three at once, all from the kept start, next to a stranger.
    std::vector<std::vector<int32_t>> prompts = {PromptOf(2, 3), PromptOf(3, 9), PromptOf(4, 1)};
    std::vector<int32_t> stranger = Prompt(13);
    for (int32_t& t : stranger) t = (t + 101) % 512;
    prompts.push_back(stranger);
    gated_->Gate(true);
    const std::vector<uint64_t> ids = {3, 4, 5, 6};
    for (size_t i = 0; i < ids.size(); ++i) Send(GenerateRequest(ids[i], prompts[i], 5));
    ASSERT_TRUE(gated_->WaitUntilBlocked());
    gated_->Gate(false);
    const std::map<uint64_t, Generation> served = ReceiveAll(ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      SCOPED_TRACE(ids[i]);
      const Generation& g = served.at(ids[i]);
      EXPECT_EQ(g.done.cached_prompt_tokens(), i < 3 ? kShared : 0);
      EXPECT_EQ(g.done.prompt_tokens(), static_cast<int>(prompts[i].size()));
      EXPECT_EQ(g.tokens, DirectGeneration(model(), prompts[i], 5, {}));
    }
    EXPECT_GE(gated_->widest(), 3) << "the hits ran together";
    // What the status page shows: every reused prompt token, and the
    // states kept (the 64 MiB budget holds all of these).
    const PrefixCacheReport report = LastReport();
    EXPECT_EQ(report.prompt_tokens_reused,
              static_cast<uint64_t>((Recurrent() ? 3 : 4) * kShared));
    EXPECT_GE(report.states, 1u);
    EXPECT_GT(report.bytes, 0u);
  }

  std::mutex report_mutex_;
  PrefixCacheReport last_report_;
};

TEST_F(PrefixCacheControlServerTest, SharedStartsAreReusedAndTheTokensAreTheSoloOnes) {
  ExpectSharedStartsAreReused();
}

class HybridPrefixCacheControlServerTest : public PrefixCacheControlServerTest {
 protected:
  const char* ModelStem() const override { return "qwen35moe-tiny-f32"; }
  bool Recurrent() const override { return true; }
};

TEST_F(HybridPrefixCacheControlServerTest, SharedStartsAreReusedAndTheTokensAreTheSoloOnes) {
  ExpectSharedStartsAreReused();
}

// Without a budget nothing is kept: the same requests reuse nothing.
class NoPrefixCacheControlServerTest : public PrefixCacheControlServerTest {
 protected:
  void Prepare(ControlServerOptions& options) override { options.prefix_cache_bytes = 0; }
};

TEST_F(NoPrefixCacheControlServerTest, NothingIsReusedWithoutABudget) {
  ReceiveReady();
  Send(GenerateRequest(1, PromptOf(0, 6), 3));
  EXPECT_EQ(ReceiveGeneration(1).done.cached_prompt_tokens(), 0);
  Send(GenerateRequest(2, PromptOf(1, 6), 3));
  EXPECT_EQ(ReceiveGeneration(2).done.cached_prompt_tokens(), 0);
}

}  // namespace
}  // namespace moetier

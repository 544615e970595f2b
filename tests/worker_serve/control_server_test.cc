// The control server over a SOCK_SEQPACKET socketpair, driven by the test
// as a fake daemon: Ready first; Score's logits bit-identical to the engine;
// Generate equal to a direct engine + sampler loop (greedy and seeded, the
// sampling settings used exactly as sent); stop tokens, max_new_tokens and a
// full context end a generation; Cancel of the running and of a queued
// request; malformed requests answered with STOP_ERROR while serving goes
// on (the values themselves are the daemon's to check, tests/daemon);
// closing the channel ends the server;
// ResizeExpertCache waits for the running request, resizes the engine's slot
// cache, tells the status page and answers with the size in effect.
#include "serve/control_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/expert_cache_control.h"
#include "control/control_channel.h"
#include "engine/cpu_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "request/control_codec.h"
#include "sampling/sampler.h"
#include "engine_run.h"
#include "serve_test_util.h"
#include "control_server_fixture.h"

namespace moetier {
namespace {

using namespace control_server_test;
using ::testing::HasSubstr;

TEST_F(ControlServerTest, ReadyComesFirst) {
  const WorkerReply ready = ReceiveReady();
  EXPECT_EQ(ready.ready().n_vocab(), 512);
  EXPECT_EQ(ready.ready().max_ctx(), kMaxCtx);
  EXPECT_EQ(ready.ready().backend(), "cpu");
  EXPECT_EQ(ready.ready().threads(), 1);
  EXPECT_EQ(ready.ready().model_fingerprint(), 0x1234u);
}

TEST_F(ControlServerTest, ScoreBytesEqualTheEngine) {
  ReceiveReady();
  // 40 rows of 512 floats: more than one chunk, and the chunk boundary falls
  // inside a row and inside a batch of the server.
  const std::vector<int32_t> tokens = Prompt(40);
  Send(ScoreRequest(7, tokens));
  DoneReply done;
  const std::vector<float> got = ReceiveScore(7, &done);
  EXPECT_EQ(done.stop_reason(), control_v1::STOP_COMPLETE);
  EXPECT_EQ(done.prompt_tokens(), 40);
  EXPECT_EQ(done.error_code(), 0);
  ASSERT_EQ(got.size(), tokens.size() * 512);
  EXPECT_TRUE(serve_test::SameBits(got, EngineLogits(tokens)));
  EXPECT_EQ(server_->requests_finished(), 1u);
}

TEST_F(ControlServerTest, GreedyGenerateEqualsTheEngineAndSampler) {
  ReceiveReady();
  const std::vector<int32_t> prompt = Prompt(10);
  Send(GenerateRequest(3, prompt, 12));  // SamplingParams{}: temperature 0, greedy
  const Generation g = ReceiveGeneration(3);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(g.tokens, DirectGeneration(model(), prompt, 12, greedy));
  EXPECT_EQ(g.done.stop_reason(), control_v1::STOP_MAX_TOKENS);
  EXPECT_EQ(g.done.prompt_tokens(), 10);
  EXPECT_EQ(g.done.generated_tokens(), 12);
  EXPECT_GT(g.done.prefill_seconds(), 0.0);
  EXPECT_GE(g.done.decode_seconds(), 0.0);
  EXPECT_EQ(std::count(g.stop_flags.begin(), g.stop_flags.end(), true), 0);
}

// With top_logprobs, each token comes with log_softmax of the engine's own
// logits at that position: the prompt plus the tokens so far, scored anew.
TEST_F(ControlServerTest, LogprobsAreTheLogSoftmaxOfTheModelsLogits) {
  ReceiveReady();
  const std::vector<int32_t> prompt = Prompt(6);
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.seed = 5;
  WorkerRequest request = GenerateRequest(4, prompt, 4, sampled);
  request.mutable_generate()->set_top_logprobs(3);
  Send(request);
  std::vector<control_v1::TokenReply> tokens;
  while (true) {
    const WorkerReply reply = Receive();
    ASSERT_EQ(reply.id(), 4u);
    if (reply.kind_case() == WorkerReply::kDone) break;
    ASSERT_EQ(reply.kind_case(), WorkerReply::kToken);
    tokens.push_back(reply.token());
  }
  ASSERT_EQ(tokens.size(), 4u);
  std::vector<int32_t> so_far = prompt;
  for (const control_v1::TokenReply& t : tokens) {
    const std::vector<float> all = EngineLogits(so_far);
    const std::span<const float> row(all.data() + all.size() - 512, 512);
    const float max_logit = *std::max_element(row.begin(), row.end());
    double sum = 0.0;
    for (float l : row) sum += std::exp(static_cast<double>(l) - max_logit);
    const double log_norm = max_logit + std::log(sum);
    ASSERT_TRUE(t.has_logprob());
    EXPECT_NEAR(t.logprob(), row[t.token_id()] - log_norm, 1e-4);
    ASSERT_EQ(t.top_logprobs_size(), 3);
    const int32_t best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    EXPECT_EQ(t.top_logprobs(0).token_id(), best);
    EXPECT_NEAR(t.top_logprobs(0).logprob(), max_logit - log_norm, 1e-4);
    EXPECT_GE(t.top_logprobs(0).logprob(), t.top_logprobs(1).logprob());
    EXPECT_GE(t.top_logprobs(1).logprob(), t.top_logprobs(2).logprob());
    so_far.push_back(t.token_id());
  }

  // Without top_logprobs none are sent, and a value out of range is refused.
  Send(GenerateRequest(5, prompt, 2));
  const WorkerReply plain = Receive();
  ASSERT_EQ(plain.kind_case(), WorkerReply::kToken);
  EXPECT_FALSE(plain.token().has_logprob());
  EXPECT_EQ(plain.token().top_logprobs_size(), 0);
  ReceiveGeneration(5);
  WorkerRequest too_many = GenerateRequest(6, prompt, 2);
  too_many.mutable_generate()->set_top_logprobs(21);
  Send(too_many);
  const Generation refused = ReceiveGeneration(6);
  EXPECT_EQ(refused.done.stop_reason(), control_v1::STOP_ERROR);
  EXPECT_NE(refused.done.error_message().find("top_logprobs 21"), std::string::npos)
      << refused.done.error_message();
}

// A chat's next turn: the last prompt, the reply and a new message.
std::vector<int32_t> NextTurn(const std::vector<int32_t>& prompt,
                              const std::vector<int32_t>& reply) {
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), reply.begin(), reply.end());
  for (int32_t t : {5, 77, 301}) next.push_back(t);
  return next;
}

TEST_F(ControlServerTest, ReadyAnnouncesTheSequenceStateSize) {
  const WorkerReply ready = ReceiveReady();
  const SequenceStateSize size = SequenceStateSizeOf(model());
  EXPECT_GT(size.kv_bytes_per_token, 0u);
  EXPECT_EQ(ready.ready().kv_bytes_per_token(), size.kv_bytes_per_token);
  EXPECT_EQ(ready.ready().recurrent_state_bytes(), 0u) << "qwen3moe has no recurrent layer";
  EXPECT_EQ(ready.ready().kv_type_k(), "f32");
  EXPECT_EQ(ready.ready().kv_type_v(), "f32");
}

TEST_F(ControlServerTest, ANextTurnComputesOnlyItsNewTokens) {
  ReceiveReady();
  ExpectANextTurnComputesOnlyItsNewTokens();
}

TEST_F(ControlServerTest, AHistoryDifferentFromTheReplyRewindsToThePromptEnd) {
  ReceiveReady();
  const std::vector<int32_t> prompt = Prompt(10);
  Send(GenerateRequest(1, prompt, 6));
  const Generation first = ReceiveGeneration(1);
  std::vector<int32_t> other_reply = first.tokens;
  other_reply[1] = (other_reply[1] + 1) % 512;
  const std::vector<int32_t> next = NextTurn(prompt, other_reply);
  Send(GenerateRequest(2, next, 6));
  const Generation second = ReceiveGeneration(2);
  EXPECT_EQ(second.done.cached_prompt_tokens(), 10);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(second.tokens, DirectGeneration(model(), next, 6, greedy));
}

TEST_F(ControlServerTest, AScoreTakesTheKeptSequencesSlot) {
  ReceiveReady();
  ASSERT_EQ(engine_->max_sequences(), 1);
  const std::vector<int32_t> prompt = Prompt(10);
  Send(GenerateRequest(1, prompt, 4));
  const Generation first = ReceiveGeneration(1);
  ExpectScoreServed(2, Prompt(12));
  Send(GenerateRequest(3, NextTurn(prompt, first.tokens), 4));
  EXPECT_EQ(ReceiveGeneration(3).done.cached_prompt_tokens(), 0);
}

// The same on a hybrid model (Gated DeltaNet layers with recurrent state),
// where a rewind needs the checkpoint saved before the prompt's last token.
class HybridControlServerTest : public ControlServerTest {
 protected:
  const char* ModelStem() const override { return "qwen35moe-tiny-f32"; }
};

TEST_F(HybridControlServerTest, ANextTurnComputesOnlyItsNewTokens) {
  const WorkerReply ready = ReceiveReady();
  EXPECT_EQ(ready.ready().recurrent_state_bytes(), SequenceStateSizeOf(model()).recurrent_bytes);
  EXPECT_GT(ready.ready().recurrent_state_bytes(), 0u);
  ExpectANextTurnComputesOnlyItsNewTokens();
}

TEST_F(HybridControlServerTest, ARegenerationRestoresTheCheckpointAndComputesOneToken) {
  ReceiveReady();
  const std::vector<int32_t> prompt = Prompt(10);
  Send(GenerateRequest(1, prompt, 6));
  const Generation first = ReceiveGeneration(1);
  Send(GenerateRequest(2, prompt, 6));
  const Generation again = ReceiveGeneration(2);
  EXPECT_EQ(again.done.cached_prompt_tokens(), 9);
  // The very computation of the first time from the checkpoint on.
  EXPECT_EQ(again.tokens, first.tokens);
  // And a history that departs from the reply rewinds there too.
  std::vector<int32_t> other_reply = first.tokens;
  other_reply[0] = (other_reply[0] + 1) % 512;
  const std::vector<int32_t> next = NextTurn(prompt, other_reply);
  Send(GenerateRequest(3, next, 6));
  const Generation third = ReceiveGeneration(3);
  EXPECT_EQ(third.done.cached_prompt_tokens(), 9);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(third.tokens, DirectGeneration(model(), next, 6, greedy));
}

TEST_F(ControlServerTest, SeededSamplingIsReproducible) {
  ReceiveReady();
  const std::vector<int32_t> prompt = Prompt(8);
  const SamplingParams params{.temperature = 0.9f,
                              .top_k = 40,
                              .top_p = 0.95f,
                              .min_p = 0.02f,
                              .repeat_penalty = 1.1f,
                              .repeat_last_n = 16,
                              .seed = 1234};
  WorkerRequest request = GenerateRequest(1, prompt, 16, params);
  Send(request);
  const Generation first = ReceiveGeneration(1);
  request.set_id(2);
  Send(request);
  const Generation second = ReceiveGeneration(2);
  EXPECT_EQ(first.tokens.size(), 16u);
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_EQ(first.tokens, DirectGeneration(model(), prompt, 16, params));
}

TEST_F(ControlServerTest, SamplingSettingsAreUsedExactlyAsSent) {
  ReceiveReady();
  const std::vector<int32_t> prompt = Prompt(8);
  // top_p 0.5 and a penalty of 1.3 reach the sampler unchanged.
  const SamplingParams params{.temperature = 1.0f,
                              .top_p = 0.5f,
                              .repeat_penalty = 1.3f,
                              .repeat_last_n = 8,
                              .seed = 77};
  Send(GenerateRequest(1, prompt, 16, params));
  const Generation g = ReceiveGeneration(1);
  EXPECT_EQ(g.done.stop_reason(), control_v1::STOP_MAX_TOKENS);
  EXPECT_EQ(g.tokens, DirectGeneration(model(), prompt, 16, params));
  // No "0 means off" in the worker: top_p 0 keeps the likeliest token only,
  // so a hot temperature still decodes greedily.
  Send(GenerateRequest(2, prompt, 12, {.temperature = 5.0f, .top_p = 0.0f, .seed = 3}));
  const Generation top_only = ReceiveGeneration(2);
  EXPECT_EQ(top_only.tokens, DirectGeneration(model(), prompt, 12, SamplingParams{}));
}

TEST_F(ControlServerTest, StopTokenIsSentFlaggedAndEndsGeneration) {
  ReceiveReady();
  const std::vector<int32_t> prompt = Prompt(6);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<int32_t> free_run = DirectGeneration(model(), prompt, 12, greedy);
  ASSERT_EQ(free_run.size(), 12u);
  // The first token that did not occur before it, past the first one.
  size_t k = 1;
  while (k < free_run.size() &&
         std::find(free_run.begin(), free_run.begin() + k, free_run[k]) != free_run.begin() + k) {
    ++k;
  }
  ASSERT_LT(k, free_run.size()) << "greedy run repeats one token";
  WorkerRequest request = GenerateRequest(4, prompt, 12);
  request.mutable_generate()->add_stop_token_ids(free_run[k]);
  request.mutable_generate()->add_stop_token_ids(511 == free_run[k] ? 510 : 511);
  Send(request);
  const Generation g = ReceiveGeneration(4);
  EXPECT_EQ(g.done.stop_reason(), control_v1::STOP_END_OF_GENERATION);
  ASSERT_EQ(g.tokens.size(), k + 1);
  EXPECT_EQ(g.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + k + 1));
  EXPECT_TRUE(g.stop_flags.back());
  EXPECT_EQ(std::count(g.stop_flags.begin(), g.stop_flags.end(), true), 1);
  EXPECT_EQ(g.done.generated_tokens(), static_cast<int>(k + 1));
}

TEST_F(ControlServerTest, FullContextEndsGeneration) {
  ReceiveReady();
  Send(GenerateRequest(1, Prompt(kMaxCtx - 4), 100));
  Generation g = ReceiveGeneration(1);
  EXPECT_EQ(g.done.stop_reason(), control_v1::STOP_CONTEXT_FULL);
  EXPECT_EQ(g.tokens.size(), 4u);  // prompt + generated == max_ctx
  EXPECT_EQ(g.done.generated_tokens(), 4);

  Send(GenerateRequest(2, Prompt(kMaxCtx), 100));
  g = ReceiveGeneration(2);
  EXPECT_EQ(g.done.stop_reason(), control_v1::STOP_CONTEXT_FULL);
  EXPECT_TRUE(g.tokens.empty());
}

TEST_F(ControlServerTest, CancelStopsTheRunningGenerationAndTheNextIsServed) {
  ReceiveReady();
  gated_->Gate(true);
  Send(GenerateRequest(5, Prompt(10), 50));
  WorkerReply first = Receive();
  ASSERT_EQ(first.kind_case(), WorkerReply::kToken);
  // The server has looked for a Cancel and now waits to compute token 2.
  ASSERT_TRUE(gated_->WaitUntilBlocked());
  Send(CancelRequest(6, 5));
  gated_->Permit(1);
  const Generation rest = ReceiveGeneration(5);
  EXPECT_EQ(rest.tokens.size(), 1u);  // token 2, computed before the Cancel was seen
  EXPECT_EQ(rest.done.stop_reason(), control_v1::STOP_CANCELLED);
  EXPECT_EQ(rest.done.generated_tokens(), 2);
  gated_->Gate(false);
  ExpectScoreServed(7, Prompt(5));
  // Cancelling a finished request does nothing: the next reply is Score's.
  Send(CancelRequest(8, 5));
  ExpectScoreServed(9, Prompt(3));
}

TEST_F(ControlServerTest, CancelOfAQueuedRequestDropsIt) {
  ReceiveReady();
  gated_->Gate(true);
  Send(GenerateRequest(10, Prompt(10), 3));
  WorkerReply first = Receive();
  ASSERT_EQ(first.kind_case(), WorkerReply::kToken);
  ASSERT_EQ(first.id(), 10u);
  ASSERT_TRUE(gated_->WaitUntilBlocked());
  Send(GenerateRequest(11, Prompt(4), 5));
  Send(CancelRequest(12, 11));
  Send(ScoreRequest(13, Prompt(2)));
  gated_->Permit(2);
  // Token 2 of request 10, then (polled between tokens) 11's Done, then
  // token 3 of 10 and its Done; 11 never runs.
  WorkerReply reply = Receive();
  EXPECT_EQ(reply.id(), 10u);
  EXPECT_EQ(reply.kind_case(), WorkerReply::kToken);
  reply = Receive();
  EXPECT_EQ(reply.id(), 11u);
  ASSERT_EQ(reply.kind_case(), WorkerReply::kDone);
  EXPECT_EQ(reply.done().stop_reason(), control_v1::STOP_CANCELLED);
  EXPECT_EQ(reply.done().generated_tokens(), 0);
  const Generation rest = ReceiveGeneration(10);
  EXPECT_EQ(rest.tokens.size(), 1u);
  EXPECT_EQ(rest.done.stop_reason(), control_v1::STOP_MAX_TOKENS);
  EXPECT_EQ(rest.done.generated_tokens(), 3);
  DoneReply done;
  const std::vector<float> logits = ReceiveScore(13, &done);
  EXPECT_EQ(done.stop_reason(), control_v1::STOP_COMPLETE);
  EXPECT_TRUE(serve_test::SameBits(logits, EngineLogits(Prompt(2))));
  EXPECT_EQ(server_->requests_finished(), 3u);
}

TEST_F(ControlServerTest, BadRequestsGetErrorsAndServingGoesOn) {
  ReceiveReady();
  struct Case {
    WorkerRequest request;
    const char* mentions;
  };
  std::vector<Case> cases;
  cases.push_back({ScoreRequest(1, {}), "no token ids"});
  cases.push_back({GenerateRequest(5, {}, 4), "the prompt is empty"});
  cases.push_back({GenerateRequest(8, {5}, 0), "max_new_tokens"});
  WorkerRequest no_sampling = GenerateRequest(9, {5}, 4);
  no_sampling.mutable_generate()->clear_sampling();
  cases.push_back({no_sampling, "no sampling settings"});
  WorkerRequest partial_sampling = GenerateRequest(10, {5}, 4);
  partial_sampling.mutable_generate()->mutable_sampling()->clear_top_p();
  cases.push_back({partial_sampling, "lack top_p"});
  WorkerRequest no_kind;
  no_kind.set_id(11);
  cases.push_back({no_kind, "no kind"});
  // The daemon's front door checks token ids; ids it would never send are
  // still refused by the engine's own guard, and serving goes on.
  cases.push_back({ScoreRequest(2, {1, 512, 3}), "outside the vocabulary"});
  cases.push_back({GenerateRequest(6, {5, 600}, 4), "outside the vocabulary"});
  for (const Case& c : cases) {
    Send(c.request);
    const WorkerReply reply = Receive();
    EXPECT_EQ(reply.id(), c.request.id());
    ASSERT_EQ(reply.kind_case(), WorkerReply::kDone) << c.mentions;
    EXPECT_EQ(reply.done().stop_reason(), control_v1::STOP_ERROR) << c.mentions;
    EXPECT_EQ(reply.done().error_code(), static_cast<int>(absl::StatusCode::kInvalidArgument))
        << c.mentions;
    EXPECT_THAT(reply.done().error_message(), HasSubstr(c.mentions));
    if (c.request.id() == 2) ExpectScoreServed(100, Prompt(4));
  }
  // A datagram that is no WorkerRequest has no id to answer: it is skipped.
  const char garbage[] = "\xff\xff\xff";
  ASSERT_EQ(send(daemon_fd_, garbage, 3, MSG_NOSIGNAL), 3);
  ExpectScoreServed(101, Prompt(9));
}

TEST_F(ControlServerTest, ResizeWithoutACacheSaysHowToGetOneAndServingGoesOn) {
  ReceiveReady();
  Send(ResizeRequest(1, uint64_t{64} << 20));
  const WorkerReply reply = Receive();
  EXPECT_EQ(reply.id(), 1u);
  ASSERT_EQ(reply.kind_case(), WorkerReply::kDone);
  EXPECT_EQ(reply.done().stop_reason(), control_v1::STOP_ERROR);
  EXPECT_EQ(reply.done().error_code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(reply.done().error_message(),
              HasSubstr("started without an expert cache; give it --expert-cache-mib through "
                        "worker_extra_args"));
  ExpectScoreServed(2, Prompt(5));
}

// A worker with an expert cache.
class CachedControlServerTest : public ControlServerTest {
 protected:
  void Prepare(ControlServerOptions& options) override {
    cache_ = std::make_unique<FakeCacheControl>(gated_.get());
    options.expert_cache = cache_.get();
    options.expert_cache_resized = [this] {
      ++published_;
      published_bytes_ = cache_->bytes();
    };
  }
  void TearDown() override {
    // The server and its thread go before the cache they use.
    ControlServerTest::TearDown();
    server_.reset();
  }

  std::unique_ptr<FakeCacheControl> cache_;
  // Written by the server's thread before each Done, read after it.
  std::atomic<int> published_{0};
  std::atomic<uint64_t> published_bytes_{0};
};

TEST_F(CachedControlServerTest, AResizeWaitsForTheRunningRequestThenTakesEffect) {
  ReceiveReady();
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<int32_t> prompt = Prompt(6);
  const std::vector<int32_t> expected = DirectGeneration(model(), prompt, 8, greedy);

  gated_->Gate(true);
  Send(GenerateRequest(1, prompt, 8));
  const WorkerReply first = Receive();
  ASSERT_EQ(first.kind_case(), WorkerReply::kToken);
  ASSERT_TRUE(gated_->WaitUntilBlocked());
  Send(ResizeRequest(2, 123456));
  Send(GenerateRequest(3, prompt, 8));
  // Let the generation read both requests at a token boundary, then pause
  // it again: the resize waits for it.
  gated_->Permit(2);
  ASSERT_TRUE(gated_->WaitUntilBlocked());
  EXPECT_EQ(cache_->calls(), 0) << "resized in the middle of a generation";
  gated_->Gate(false);

  Generation running = ReceiveGeneration(1);
  running.tokens.insert(running.tokens.begin(), first.token().token_id());
  EXPECT_EQ(running.tokens, expected);
  EXPECT_EQ(running.done.stop_reason(), control_v1::STOP_MAX_TOKENS);
  const WorkerReply resized = Receive();
  EXPECT_EQ(resized.id(), 2u);
  ASSERT_EQ(resized.kind_case(), WorkerReply::kDone);
  EXPECT_EQ(resized.done().stop_reason(), control_v1::STOP_COMPLETE)
      << resized.done().error_message();
  EXPECT_EQ(resized.done().expert_cache_bytes(), 123000u);  // whole slots
  EXPECT_EQ(cache_->calls(), 1);
  EXPECT_FALSE(cache_->called_during_forward());
  // The status page was told before the Done went out.
  EXPECT_EQ(published_.load(), 1);
  EXPECT_EQ(published_bytes_.load(), 123000u);
  const Generation after = ReceiveGeneration(3);
  EXPECT_EQ(after.tokens, expected);
  EXPECT_EQ(server_->requests_finished(), 3u);
}

TEST_F(CachedControlServerTest, ARefusedResizeIsAnErrorAndServingGoesOn) {
  ReceiveReady();
  Send(ResizeRequest(1, FakeCacheControl::kMinPoolBytes - 1));
  const WorkerReply reply = Receive();
  EXPECT_EQ(reply.id(), 1u);
  ASSERT_EQ(reply.kind_case(), WorkerReply::kDone);
  EXPECT_EQ(reply.done().stop_reason(), control_v1::STOP_ERROR);
  EXPECT_EQ(reply.done().error_code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(reply.done().error_message(), HasSubstr("give at least 1 MiB"));
  EXPECT_EQ(reply.done().expert_cache_bytes(), 0u);
  EXPECT_EQ(published_.load(), 0);
  ExpectScoreServed(2, Prompt(5));
}

TEST_F(ControlServerTest, ClosingTheChannelEndsTheServer) {
  ReceiveReady();
  ExpectScoreServed(1, Prompt(3));
  CloseChannel();
  thread_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_;
}

TEST_F(ControlServerTest, ClosingTheChannelMidGenerationEndsTheServer) {
  ReceiveReady();
  gated_->Gate(true);
  Send(GenerateRequest(1, Prompt(4), 40));
  Send(ScoreRequest(2, Prompt(4)));  // queued; abandoned with the channel
  WorkerReply first = Receive();
  ASSERT_EQ(first.kind_case(), WorkerReply::kToken);
  ASSERT_TRUE(gated_->WaitUntilBlocked());
  CloseChannel();  // also opens the gate
  thread_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_;
}

}  // namespace
}  // namespace moetier
